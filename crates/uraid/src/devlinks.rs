//! Stable names for the block devices of a served array:
//! `/dev/uraid/NAME -> ../ublkbN` and `/dev/disk/by-id/uraid-UUID ->
//! ../../ublkbN`, so that fstab and systemd mount units can name the
//! array whichever ublk device number it got.
//!
//! A Matrix array has a device per volume: the first volume's is
//! `/dev/uraid/NAME` (and `uraid-<array UUID>`), every further volume's
//! `/dev/uraid/NAME:VOLUME` (md names an IMSM volume `/dev/md/VOLUME`;
//! the array's name in front keeps two arrays' volumes apart, and `:` is
//! in no array or volume name); every volume's device of a Matrix array
//! is also `/dev/disk/by-id/uraid-<volume UUID>` (`uraid status --json`
//! lists the volumes' UUIDs).
//!
//! Two makers, one result (as mdadm has): the udev rule
//! `contrib/udev/60-uraid.rules` asks `uraid udev-id ublkbN` ([`udev_id`])
//! for the array's name and UUID and adds the links itself (systemd then
//! knows `dev-uraid-NAME.device`, which a mount waits for); and `uraid
//! serve` makes the same links through [`link_volume`] (so they exist without
//! udev, and at once) and removes them through [`unlink_volume`]. Both read the
//! record `uraid serve --ublk` keeps of its device in the run directory,
//! `RUN_DIR/NAME.ublk` ([`records`]).
//!
//! Safety: a link is made, replaced or removed only when what is at its
//! path is missing or is a symbolic link of ours (its target
//! `../ublkbN`, `../../ublkbN`, the shape udev writes too); a file, a
//! directory or another link there is left alone and reported. Nothing
//! is followed: directories on the way are checked not to be links.

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

/// The directory of device nodes the links are made in.
const DEV: &str = "/dev";

/// The largest record file read, bytes (one is about 120).
const MAX_RECORD_BYTES: u64 = 4096;

/// Makes `/dev/uraid/LINK` and `/dev/disk/by-id/uraid-UUID` (for each
/// of `uuids`; empty ones skipped) point at `bdev` (a ublk block device,
/// `/dev/ublkbN`), replacing links of ours that point elsewhere (a
/// device of before), then asks udev, when it runs, to look at `bdev`
/// again so that its rule adds the same links and systemd learns the
/// name.
///
/// `link` is the array's name (`uraid create --name`) for its first
/// volume's device, `NAME:VOLUME` for a further volume's; `uuids` the
/// array's UUID as `uraid examine` prints it (first volume only) and the
/// volume's (none for a temporary `mem:` array: no by-id link).
///
/// Errors: `link`, a UUID or `bdev` is not valid (the message says
/// which), `bdev` is not a block device, or a link's path holds
/// something that is not a link of ours (left alone; the message names
/// it), or a directory cannot be made.
pub(crate) fn link_volume(link: &str, uuids: &[String], bdev: &Path) -> Result<()> {
    link_in(Path::new(DEV), link, uuids, bdev)?;
    udev_change(bdev);
    Ok(())
}

/// Removes `/dev/uraid/LINK` and `/dev/disk/by-id/uraid-UUID` (each of
/// `uuids`) when they are links of ours (to any ublk device), and
/// `/dev/uraid` when it is left empty. Anything else at those paths is
/// left alone; an invalid name or UUID removes nothing.
pub(crate) fn unlink_volume(link: &str, uuids: &[String]) {
    unlink_in(Path::new(DEV), link, "", None);
    for uuid in uuids {
        unlink_in(Path::new(DEV), "", uuid, None);
    }
}

/// As [`unlink_volume`] with one UUID, but only the links that point at `bdev`
/// (`/dev/ublkbN`): those of another device of the array are kept.
pub(crate) fn unlink_device(name: &str, uuid: &str, bdev: &Path) {
    if let Some(file) = bdev.file_name().and_then(|f| f.to_str()) {
        unlink_in(Path::new(DEV), name, uuid, Some(file));
    }
}

/// Checks an array name for use as a file name: the array name rules
/// (letters, digits, `-`, `_`, `.`; 1 to 32) and not `.` or `..`.
fn check_name(name: &str) -> Result<()> {
    uraid_core::control::superblock::check_name(name).map_err(|e| anyhow!("{e}"))?;
    if name == "." || name == ".." {
        bail!("array name '{name}' cannot name a link in /dev/uraid");
    }
    Ok(())
}

/// Checks a link's name in /dev/uraid: an array name ([`check_name`]),
/// or `NAME:VOLUME` with a volume name of the same rules.
fn check_link(link: &str) -> Result<()> {
    let (name, volume) = match link.split_once(':') {
        Some((n, v)) => (n, Some(v)),
        None => (link, None),
    };
    check_name(name)?;
    if let Some(v) = volume {
        uraid_core::control::superblock::check_name_of("volume", v).map_err(|e| anyhow!("{e}"))?;
    }
    Ok(())
}

/// Whether `file` is a ublk block device's name, `ublkbN`.
fn is_ublk_name(file: &str) -> bool {
    file.strip_prefix("ublkb").is_some_and(|n| !n.is_empty() && n.len() <= 10 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `target` (a link's content) is one of ours `depth`
/// directories below the device directory: `../` `depth` times, then
/// `ublkbN`.
fn is_ours(target: &Path, depth: usize) -> bool {
    let Some(t) = target.to_str() else { return false };
    t.strip_prefix(&"../".repeat(depth)).is_some_and(is_ublk_name)
}

/// [`link_volume`] in the device directory `root`, without udev.
fn link_in(root: &Path, name: &str, uuids: &[String], bdev: &Path) -> Result<()> {
    check_link(name)?;
    let uuids: Vec<String> = uuids.iter().filter(|u| !u.is_empty()).map(|u| crate::conf::parse_uuid(u)).collect::<Result<_>>()?;
    let file = bdev.file_name().and_then(|f| f.to_str()).unwrap_or("");
    if !is_ublk_name(file) || bdev.parent() != Some(root) {
        bail!("{} is not a ublk block device ({}/ublkbN): no link to it is made", bdev.display(), root.display());
    }
    let md = std::fs::symlink_metadata(bdev).with_context(|| format!("cannot look at {}", bdev.display()))?;
    if !md.file_type().is_block_device() {
        bail!("{} is not a block device: no link to it is made", bdev.display());
    }
    // Each link on its own: one path held by something else does not
    // keep the other link from being made.
    let mut errors = Vec::new();
    if let Err(e) = make_dirs(root, &["uraid"]).and_then(|d| place(&d, name, &format!("../{file}"), 1)) {
        errors.push(format!("{e:#}"));
    }
    for uuid in uuids {
        if let Err(e) = make_dirs(root, &["disk", "by-id"]).and_then(|d| place(&d, &format!("uraid-{uuid}"), &format!("../../{file}"), 2)) {
            errors.push(format!("{e:#}"));
        }
    }
    match errors.is_empty() {
        true => Ok(()),
        false => Err(anyhow!("{}", errors.join("; "))),
    }
}

/// `root/parts...`, each directory made (mode 0755) when missing.
/// Errors: one is there but is not a directory (a link is not followed),
/// or cannot be made.
fn make_dirs(root: &Path, parts: &[&str]) -> Result<PathBuf> {
    let mut dir = root.to_path_buf();
    for part in parts {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => continue,
            Ok(_) => bail!("{} is not a directory (a link there is not followed): no link is made in it; remove it", dir.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot look at {}", dir.display())),
        }
        match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
            Ok(()) => {}
            // Made meanwhile (by udev): checked as above.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if !std::fs::symlink_metadata(&dir).map(|m| m.is_dir()).unwrap_or(false) {
                    bail!("{} is not a directory: no link is made in it", dir.display());
                }
            }
            Err(e) => return Err(e).with_context(|| format!("cannot make the directory {}", dir.display())),
        }
    }
    Ok(dir)
}

/// Makes `dir/file` a link to `target` (`depth` directories below the
/// device directory). A link of ours to another device is replaced in
/// one step (a new link renamed over it).
fn place(dir: &Path, file: &str, target: &str, depth: usize) -> Result<()> {
    let path = dir.join(file);
    // Twice: a link made by udev between the look and the symlink call is
    // looked at again.
    for _ in 0..2 {
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::os::unix::fs::symlink(target, &path) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot make the link {}", path.display())),
            },
            Err(e) => return Err(e).with_context(|| format!("cannot look at {}", path.display())),
            Ok(m) if m.file_type().is_symlink() => {
                let now = std::fs::read_link(&path).with_context(|| format!("cannot read the link {}", path.display()))?;
                if now == Path::new(target) {
                    return Ok(());
                }
                if !is_ours(&now, depth) {
                    bail!(
                        "{} is a link to {}, not one of uraid's: left alone (remove it if it is stale, then start again)",
                        path.display(),
                        now.display()
                    );
                }
                // '#' is in no array name nor UUID: this name is ours alone.
                let tmp = dir.join(format!(".#{file}.{}", std::process::id()));
                let _ = std::fs::remove_file(&tmp);
                std::os::unix::fs::symlink(target, &tmp).with_context(|| format!("cannot make the link {}", tmp.display()))?;
                return std::fs::rename(&tmp, &path).with_context(|| {
                    let _ = std::fs::remove_file(&tmp);
                    format!("cannot replace the link {}", path.display())
                });
            }
            Ok(_) => bail!("{} exists and is not a link: left alone (move it away, then start again)", path.display()),
        }
    }
    bail!("{} keeps changing under us: is something else making it?", path.display())
}

/// [`unlink_volume`] in `root`; with `only`, just the links to `root/only`. An
/// empty `name` removes the by-id link alone.
fn unlink_in(root: &Path, name: &str, uuid: &str, only: Option<&str>) {
    if !name.is_empty() && check_link(name).is_err() {
        return;
    }
    let by_name = root.join("uraid");
    let mut links = if name.is_empty() { vec![] } else { vec![(by_name.join(name), 1)] };
    if let Ok(uuid) = crate::conf::parse_uuid(uuid) {
        links.push((root.join("disk/by-id").join(format!("uraid-{uuid}")), 2));
    }
    for (path, depth) in links {
        let Ok(m) = std::fs::symlink_metadata(&path) else { continue };
        let Ok(now) = std::fs::read_link(&path) else { continue };
        let wanted = only.is_none_or(|f| now.file_name().and_then(|n| n.to_str()) == Some(f));
        if m.file_type().is_symlink() && is_ours(&now, depth) && wanted {
            let _ = std::fs::remove_file(&path);
        }
    }
    // Only when empty (fails otherwise); a link there is not a directory.
    if std::fs::symlink_metadata(&by_name).map(|m| m.is_dir()).unwrap_or(false) {
        let _ = std::fs::remove_dir(&by_name);
    }
}

/// Asks udev (when it runs) for a change event of `bdev`, so that its
/// rule runs again now that the record exists. Best effort: without
/// udev, or when udevadm fails, the links made by [`link_volume`] are there.
fn udev_change(bdev: &Path) {
    if !Path::new("/run/udev/control").exists() {
        return;
    }
    let child = std::process::Command::new("udevadm")
        .args(["trigger", "--action=change"])
        .arg(bdev)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return };
    // udevadm trigger only queues the event; 5 s is plenty.
    crate::common::wait_or_kill(&mut child, std::time::Duration::from_secs(5));
}

/// What `uraid serve NAME --ublk` records of its ublk device in
/// `RUN_DIR/NAME.ublk` (JSON), kept after a kill so that the next serve
/// re-attaches, removed at a clean stop (which deletes the device).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct UblkRecord {
    /// The ublk device number N (`/dev/ublkbN`, `/dev/ublkcN`).
    pub dev_id: u32,
    /// The array's UUID, as `uraid examine` prints it (lowercase here);
    /// empty for a temporary `mem:` array.
    pub uuid: String,
    /// The process id of the `uraid serve` that started or re-attached
    /// the device (the kernel's `ublksrv_pid` of it).
    pub pid: u32,
    /// The block device, `/dev/ublkbN`.
    pub bdev: PathBuf,
    /// The first volume's UUID (a Matrix array's only).
    #[serde(default)]
    pub volume_uuid: String,
    /// The devices of a Matrix array's further volumes.
    #[serde(default)]
    pub volumes: Vec<VolumeUblkRecord>,
}

/// The device of a volume after the first in a [`UblkRecord`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct VolumeUblkRecord {
    /// The volume's name.
    pub volume: String,
    /// The volume's UUID.
    pub uuid: String,
    /// N of /dev/ublkbN.
    pub dev_id: u32,
    /// The block device, `/dev/ublkbN`.
    pub bdev: PathBuf,
}

/// The ublk devices recorded in the run directory: `(array name,
/// record)`, the most recently written first. Files that are not ours
/// (another owner than root or us, a link, too large, not the format, a
/// name or UUID (when not empty) not valid, a `bdev` that is not `/dev/ublkb<dev_id>`)
/// are skipped.
pub(crate) fn records() -> Vec<(String, UblkRecord)> {
    records_in(&crate::runstate::run_dir())
}

/// [`records`] of the directory `dir`.
fn records_in(dir: &Path) -> Vec<(String, UblkRecord)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<(std::time::SystemTime, String, UblkRecord)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.strip_suffix(".ublk")?.to_string();
            check_name(&name).ok()?;
            let (when, r) = read_record(&e.path()).ok()?;
            Some((when, name, r))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().map(|(_, n, r)| (n, r)).collect()
}

/// One record file and when it was written. Errors: see [`records`].
fn read_record(path: &Path) -> Result<(std::time::SystemTime, UblkRecord)> {
    use std::io::Read;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    let md = f.metadata()?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !md.is_file() || (md.uid() != 0 && md.uid() != me) || md.len() > MAX_RECORD_BYTES {
        bail!("{} is not a record of ours", path.display());
    }
    let mut text = String::new();
    f.take(MAX_RECORD_BYTES).read_to_string(&mut text)?;
    let mut r: UblkRecord = serde_json::from_str(&text)?;
    if !r.uuid.is_empty() {
        r.uuid = crate::conf::parse_uuid(&r.uuid)?;
    }
    if !r.volume_uuid.is_empty() {
        r.volume_uuid = crate::conf::parse_uuid(&r.volume_uuid)?;
    }
    if r.bdev != Path::new(DEV).join(format!("ublkb{}", r.dev_id)) {
        bail!("{}: bdev {} is not the device {}", path.display(), r.bdev.display(), r.dev_id);
    }
    for v in &mut r.volumes {
        uraid_core::control::superblock::check_name_of("volume", &v.volume).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        v.uuid = crate::conf::parse_uuid(&v.uuid)?;
        if v.bdev != Path::new(DEV).join(format!("ublkb{}", v.dev_id)) {
            bail!("{}: bdev {} is not the device {}", path.display(), v.bdev.display(), v.dev_id);
        }
    }
    Ok((md.modified().unwrap_or(std::time::UNIX_EPOCH), r))
}

/// `uraid udev-id KERNEL` (hidden; the udev rule's IMPORT{program}).
#[derive(Args)]
pub(crate) struct UdevIdArgs {
    /// The block device's kernel name (udev's %k), like ublkb0.
    #[arg(value_name = "KERNEL")]
    pub(crate) kernel: String,
}

/// Prints `URAID_NAME=LINK`, `URAID_UUID=UUID` and
/// `URAID_VOLUME_UUID=UUID` (udev's KEY=value lines) for the ublk device
/// `KERNEL` when a record in the run directory names it, nothing when
/// none does (a ublk device of another program). For the first volume's
/// device LINK is the array's name and URAID_UUID its UUID; for a
/// further volume's (a Matrix array) LINK is `NAME:VOLUME` and
/// URAID_UUID the volume's UUID (so that a rule that knows only
/// URAID_NAME and URAID_UUID makes that volume's links); URAID_VOLUME_UUID
/// is the volume's UUID either way. Errors: `KERNEL` is not `ublkbN`.
pub(crate) fn udev_id(a: UdevIdArgs) -> Result<()> {
    if !is_ublk_name(&a.kernel) {
        bail!("'{}' is not a ublk block device's kernel name (ublkbN, as udev's %k gives it)", a.kernel);
    }
    for line in udev_lines(&records(), &Path::new(DEV).join(&a.kernel)) {
        println!("{line}");
    }
    Ok(())
}

/// What [`udev_id`] prints for `bdev`, from `records`.
fn udev_lines(records: &[(String, UblkRecord)], bdev: &Path) -> Vec<String> {
    // All checked: names of [A-Za-z0-9._-], UUIDs of hex and '-'.
    let found = records.iter().find_map(|(name, r)| {
        if r.bdev == bdev {
            return Some((name.clone(), r.uuid.clone(), r.volume_uuid.clone()));
        }
        r.volumes.iter().find(|v| v.bdev == bdev).map(|v| (format!("{name}:{}", v.volume), v.uuid.clone(), v.uuid.clone()))
    });
    let Some((link, uuid, volume_uuid)) = found else { return Vec::new() };
    let mut lines = vec![format!("URAID_NAME={link}")];
    if !uuid.is_empty() {
        lines.push(format!("URAID_UUID={uuid}"));
    }
    if !volume_uuid.is_empty() && volume_uuid != uuid {
        lines.push(format!("URAID_VOLUME_UUID={volume_uuid}"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "0F1E2D3C-4B5A-4978-8695-A4B3C2D1E0F0";
    const LOW: &str = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f0";

    /// A loop device over a file of `fill` bytes, detached on drop.
    struct Loop {
        dev: PathBuf,
        _dir: tempfile::TempDir,
    }

    impl Loop {
        fn new(fill: u8) -> Loop {
            let dir = tempfile::tempdir().unwrap();
            let img = dir.path().join("img");
            std::fs::write(&img, vec![fill; 1 << 20]).unwrap();
            let out = std::process::Command::new("losetup").args(["-f", "--show"]).arg(&img).output().expect("losetup");
            assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
            Loop { dev: PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()), _dir: dir }
        }
    }

    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = std::process::Command::new("losetup").arg("-d").arg(&self.dev).status();
        }
    }

    /// A node `root/ublkbN` of the same block device as `l` (a device
    /// directory of the test's own).
    fn node(root: &Path, n: u32, l: &Loop) -> PathBuf {
        let rdev = std::fs::metadata(&l.dev).unwrap().rdev();
        let p = root.join(format!("ublkb{n}"));
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: c is a NUL-terminated path that lives through the call.
        let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFBLK | 0o600, rdev) };
        assert_eq!(r, 0, "mknod {}: {}", p.display(), std::io::Error::last_os_error());
        p
    }

    /// [`link_in`] with one UUID.
    fn li(root: &Path, name: &str, uuid: &str, bdev: &Path) -> Result<()> {
        link_in(root, name, &[uuid.to_string()], bdev)
    }

    fn first_byte(p: &Path) -> u8 {
        use std::io::Read;
        let mut b = [0u8; 1];
        std::fs::File::open(p).unwrap().read_exact(&mut b).unwrap();
        b[0]
    }

    /// The links reach the real block device, follow a new device, are
    /// removed, and never replace what is not ours.
    #[test]
    fn links_name_a_real_block_device_and_leave_others_alone() {
        let (a, b) = (Loop::new(0xa1), Loop::new(0xb2));
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let (d7, d8) = (node(r, 7, &a), node(r, 8, &b));

        li(r, "data", UUID, &d7).unwrap();
        let by_name = r.join("uraid/data");
        let by_id = r.join(format!("disk/by-id/uraid-{LOW}"));
        assert_eq!(std::fs::read_link(&by_name).unwrap(), Path::new("../ublkb7"));
        assert_eq!(std::fs::read_link(&by_id).unwrap(), Path::new("../../ublkb7"));
        assert_eq!(first_byte(&by_name), 0xa1, "the name reads the device");
        assert_eq!(first_byte(&by_id), 0xa1);
        // Again: nothing changes. A new device: the links follow it.
        li(r, "data", UUID, &d7).unwrap();
        li(r, "data", UUID, &d8).unwrap();
        assert_eq!(first_byte(&by_name), 0xb2);
        assert_eq!(first_byte(&by_id), 0xb2);
        assert!(std::fs::read_dir(r.join("uraid")).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().starts_with(".#")));

        // Not ours: a file, a directory, a link elsewhere; all untouched.
        std::fs::write(r.join("uraid/file"), b"keep").unwrap();
        std::fs::create_dir(r.join("uraid/dir")).unwrap();
        std::os::unix::fs::symlink("../sda", r.join("uraid/other")).unwrap();
        let other_id = r.join("disk/by-id/uraid-11111111-2222-3333-4444-555555555555");
        for n in ["file", "dir", "other"] {
            let e = li(r, n, "11111111-2222-3333-4444-555555555555", &d7).unwrap_err().to_string();
            assert!(e.contains(&format!("uraid/{n}")) && e.contains("left alone"), "{e}");
            assert_eq!(std::fs::read_link(&other_id).unwrap(), Path::new("../../ublkb7"), "the other link is made all the same");
            unlink_in(r, n, "11111111-2222-3333-4444-555555555555", None);
            assert!(std::fs::symlink_metadata(&other_id).is_err());
        }
        assert_eq!(std::fs::read(r.join("uraid/file")).unwrap(), b"keep");
        assert!(r.join("uraid/dir").is_dir());
        assert_eq!(std::fs::read_link(r.join("uraid/other")).unwrap(), Path::new("../sda"));

        // Bad input: no link made.
        for (name, uuid, dev) in [("..", UUID, &d7), (".", UUID, &d7), ("a/b", UUID, &d7), ("", UUID, &d7), ("x", "nope", &d7)] {
            assert!(li(r, name, uuid, dev).is_err(), "{name} {uuid}");
        }
        std::fs::write(r.join("ublkb9"), b"").unwrap();
        let e = li(r, "x", UUID, &r.join("ublkb9")).unwrap_err().to_string();
        assert!(e.contains("not a block device"), "{e}");
        let e = li(r, "x", UUID, &a.dev).unwrap_err().to_string();
        assert!(e.contains("not a ublk block device"), "{e}");
        assert!(!r.join("uraid/x").exists() && !r.join("uraid/..").join("x").exists());

        // unlink_device keeps links to another device; unlink removes.
        unlink_in(r, "data", UUID, Some("ublkb7"));
        assert!(std::fs::symlink_metadata(&by_name).is_ok());
        unlink_in(r, "data", UUID, None);
        assert!(std::fs::symlink_metadata(&by_name).is_err() && std::fs::symlink_metadata(&by_id).is_err());
        assert!(r.join("uraid").is_dir(), "not empty (file, dir, other): kept");

        // A temporary array (no UUID): the name only.
        li(r, "tmp", "", &d8).unwrap();
        assert_eq!(first_byte(&r.join("uraid/tmp")), 0xb2);
        unlink_in(r, "tmp", "", None);
        assert!(std::fs::symlink_metadata(r.join("uraid/tmp")).is_err());

        // A Matrix array's further volume: NAME:VOLUME and its own UUID,
        // beside the first volume's links.
        const V1: &str = "aaaaaaaa-2222-4333-8444-555555555555";
        link_in(r, "mx", &[UUID.to_string(), LOW.replace("0f1e", "1f1e")], &d7).unwrap();
        link_in(r, "mx:safe", &[V1.to_string()], &d8).unwrap();
        assert_eq!(first_byte(&r.join("uraid/mx")), 0xa1);
        assert_eq!(first_byte(&r.join("uraid/mx:safe")), 0xb2);
        assert_eq!(first_byte(&r.join(format!("disk/by-id/uraid-{LOW}"))), 0xa1);
        assert_eq!(first_byte(&r.join(format!("disk/by-id/uraid-{}", LOW.replace("0f1e", "1f1e")))), 0xa1);
        assert_eq!(first_byte(&r.join(format!("disk/by-id/uraid-{V1}"))), 0xb2);
        assert!(link_in(r, "mx:a:b", &[], &d8).is_err() && link_in(r, "mx:", &[], &d8).is_err());
        unlink_in(r, "mx:safe", "", None);
        unlink_in(r, "", V1, None);
        assert!(std::fs::symlink_metadata(r.join("uraid/mx:safe")).is_err() && std::fs::symlink_metadata(r.join(format!("disk/by-id/uraid-{V1}"))).is_err());
        assert_eq!(first_byte(&r.join("uraid/mx")), 0xa1, "the first volume's link stays");

        // A directory on the way that is a link is not followed.
        let elsewhere = tempfile::tempdir().unwrap();
        let r2 = tempfile::tempdir().unwrap();
        let d = node(r2.path(), 3, &a);
        std::os::unix::fs::symlink(elsewhere.path(), r2.path().join("uraid")).unwrap();
        let e = li(r2.path(), "data", UUID, &d).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }

    /// Records: the format serve writes is read; others are skipped.
    #[test]
    fn records_are_read_and_foreign_files_skipped() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::write(p.join("data.ublk"), format!(r#"{{"dev_id":3,"uuid":"{UUID}","pid":42,"bdev":"/dev/ublkb3"}}"#)).unwrap();
        std::fs::write(p.join("bad.ublk"), r#"{"dev_id":4,"uuid":"x","pid":1,"bdev":"/dev/ublkb4"}"#).unwrap();
        std::fs::write(p.join("wrong.ublk"), format!(r#"{{"dev_id":5,"uuid":"{UUID}","pid":1,"bdev":"/dev/sda"}}"#)).unwrap();
        std::fs::write(p.join("..ublk"), format!(r#"{{"dev_id":6,"uuid":"{UUID}","pid":1,"bdev":"/dev/ublkb6"}}"#)).unwrap();
        std::os::unix::fs::symlink(p.join("data.ublk"), p.join("link.ublk")).unwrap();
        std::fs::write(p.join("big.ublk"), vec![b' '; 5000]).unwrap();
        std::fs::write(p.join("tmp.ublk"), r#"{"dev_id":9,"uuid":"","pid":43,"bdev":"/dev/ublkb9"}"#).unwrap();
        let rs = records_in(p);
        let mut names: Vec<&str> = rs.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        assert_eq!(names, ["data", "tmp"], "{rs:?}");
        let data = &rs.iter().find(|(n, _)| n == "data").unwrap().1;
        assert_eq!(*data, UblkRecord { dev_id: 3, uuid: LOW.into(), pid: 42, bdev: "/dev/ublkb3".into(), volume_uuid: String::new(), volumes: vec![] });
        assert_eq!(udev_lines(&rs, Path::new("/dev/ublkb3")), [format!("URAID_NAME=data"), format!("URAID_UUID={LOW}")]);
    }

    /// A Matrix array's record: every volume's device is found, named
    /// NAME:VOLUME past the first and known by its volume's UUID; a
    /// record with a further volume that is not well-formed is skipped.
    #[test]
    fn matrix_records_name_every_volume() {
        const V0: &str = "11111111-2222-4333-8444-555555555555";
        const V1: &str = "AAAAAAAA-2222-4333-8444-555555555555";
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        let rec = |more: &str| {
            format!(
                r#"{{"dev_id":3,"uuid":"{UUID}","pid":42,"bdev":"/dev/ublkb3","volume":"fast","volume_uuid":"{V0}","volumes":[{more}]}}"#
            )
        };
        std::fs::write(p.join("mx.ublk"), rec(&format!(r#"{{"volume":"safe","uuid":"{V1}","dev_id":4,"bdev":"/dev/ublkb4"}}"#))).unwrap();
        std::fs::write(p.join("e1.ublk"), rec(&format!(r#"{{"volume":"safe","uuid":"{V1}","dev_id":5,"bdev":"/dev/sda"}}"#))).unwrap();
        std::fs::write(p.join("e2.ublk"), rec(&format!(r#"{{"volume":"a:b","uuid":"{V1}","dev_id":6,"bdev":"/dev/ublkb6"}}"#))).unwrap();
        std::fs::write(p.join("e3.ublk"), rec(r#"{"volume":"safe","uuid":"nope","dev_id":7,"bdev":"/dev/ublkb7"}"#)).unwrap();
        let rs = records_in(p);
        assert_eq!(rs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["mx"], "{rs:?}");
        let v1 = V1.to_lowercase();
        assert_eq!(udev_lines(&rs, Path::new("/dev/ublkb3")), [format!("URAID_NAME=mx"), format!("URAID_UUID={LOW}"), format!("URAID_VOLUME_UUID={V0}")]);
        assert_eq!(udev_lines(&rs, Path::new("/dev/ublkb4")), [format!("URAID_NAME=mx:safe"), format!("URAID_UUID={v1}")]);
        assert!(udev_lines(&rs, Path::new("/dev/ublkb5")).is_empty());
        // The names the links take.
        for ok in ["mx", "mx:safe", "a.b:c-d_e"] {
            assert!(check_link(ok).is_ok(), "{ok}");
        }
        for bad in ["", ":", "mx:", ":safe", "mx:a:b", "..", "mx:a/b", "a/b:c"] {
            assert!(check_link(bad).is_err(), "{bad}");
        }
    }
}
