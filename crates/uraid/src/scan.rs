//! `uraid scan`: finds the arrays on the machine, like mdadm's
//! `--examine --scan`, and optionally writes them to the configuration
//! file ([`crate::conf`]); and [`member_args`], which lets every command
//! that takes members take an array's NAME or UUID instead.
//!
//! What is examined: every block device of the machine (from
//! /sys/class/block; those of size 0, such as unbound loop devices, are
//! skipped), or instead the config's `devices` globs when it has them;
//! plus the regular files of the directories given. The superblocks are
//! grouped by array UUID; the one with the highest event counter speaks
//! for its array.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use uraid_core::control::array::{self, Examination};
use uraid_core::control::superblock::{fmt_uuid, State, Superblock};
use uraid_core::raid::health::MemberState;
use uraid_core::MemberSpec;

use crate::conf::{self, Config};

#[derive(Args)]
pub(crate) struct ScanArgs {
    /// Print JSON: an array of objects with the fields of the text lines.
    #[arg(long)]
    json: bool,
    /// Write the arrays found to the configuration file (updating the
    /// `[[array]]` of each, keeping everything else): FILE, or without a
    /// value $URAID_CONFIG, else /etc/uraid/uraid.conf. Put directories
    /// before it, or write --config=FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    config: Option<Option<PathBuf>>,
    /// Bring up every array found that no process serves yet (at boot):
    /// with systemd, `systemctl start uraid@NAME.service`; without it,
    /// `uraid serve NAME` in the background (its output in
    /// RUN_DIR/NAME.log); either way an array of the configuration starts
    /// with all its settings (those of --config FILE when given). Arrays
    /// missing members are left alone.
    #[arg(long)]
    assemble: bool,
    /// Directories whose regular files are examined too (arrays on files).
    dirs: Vec<PathBuf>,
}

/// One array found by a scan.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ScannedArray {
    /// The array's name.
    pub name: String,
    /// The array's UUID, as `uraid examine` prints it.
    pub uuid: String,
    /// The RAID level of each volume, comma separated (`5`, or `5,0` for
    /// Matrix volumes).
    pub level: String,
    /// Roles whose recorded device was found.
    pub members_found: u32,
    /// Roles of the array (spares not counted).
    pub members_expected: u32,
    /// Spares found.
    pub spares: u32,
    /// `clean`, `active` (not stopped cleanly), `degraded` (a role not
    /// found, or faulty, missing or rebuilding in the superblock), `in
    /// use` (a uraid process holds a member) or `reshaping` (a reshape is
    /// recorded in the middle: the next assemble goes on with it).
    pub state: &'static str,
    /// A member is locked by a running uraid process.
    pub in_use: bool,
    /// The event counter of the authoritative superblock.
    pub events: u64,
    /// The devices found (roles in order, then spares): what to give a
    /// command for this array.
    pub devices: Vec<String>,
    /// Who each of `devices` is (same order): model, serial, by-id name;
    /// `None` for files and stacked devices.
    pub identities: Vec<Option<uraid_core::io::identity::Identity>>,
}

impl ScannedArray {
    /// The mdadm-style line: `ARRAY name=.. uuid=.. level=.. members=F/E
    /// state=.. devices=A,B`. A device path with anything but letters,
    /// digits and `/._-+:@~%` is written quoted ([`conf::quote`]: a TOML
    /// string), so that it cannot end the line or forge another.
    pub(crate) fn line(&self) -> String {
        let spares = if self.spares > 0 { format!(" spares={}", self.spares) } else { String::new() };
        format!(
            "ARRAY name={} uuid={} level={} members={}/{}{spares} state={} devices={}",
            conf::quote(&self.name),
            self.uuid,
            self.level,
            self.members_found,
            self.members_expected,
            self.state.replace(' ', "-"),
            self.devices.iter().map(|d| conf::quote(d)).collect::<Vec<_>>().join(",")
        )
    }
}

/// `uraid scan`.
pub(crate) fn cmd_scan(a: ScanArgs) -> Result<()> {
    let target = a.config.as_ref().map(|f| f.clone().unwrap_or_else(conf::path));
    // The configuration to update is the one whose `devices` are scanned.
    let cfg = match &target {
        Some(p) => conf::load_from(p)?,
        None => conf::load()?,
    };
    let found = scan(&a.dirs, &cfg)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else {
        for f in &found {
            println!("{}", f.line());
            // mdadm --verbose style: one indented line per known drive.
            for (d, id) in f.devices.iter().zip(&f.identities) {
                if let Some(id) = id {
                    println!("   {}: {}", conf::quote(d), id.summary_and_name());
                }
            }
        }
    }
    if let Some(p) = &target {
        write_config(p, &found)?;
        eprintln!("uraid: {} array(s) written to {}", found.len(), p.display());
    }
    if a.assemble {
        assemble_all(&found, &cfg, target.as_deref())?;
    }
    Ok(())
}

/// `scan --assemble`: starts serving every complete array of `found` that
/// is not served yet. An array of the configuration `cfg` (read from
/// `config`, else from [`conf::path`]) is started by its UUID, as `uraid
/// serve NAME` starts it, so that all its settings apply (socket, metrics,
/// console, rebuild and scrub rates, scrub schedule); another by its
/// members. Errors: an array that could not be started (the others are
/// still started).
fn assemble_all(found: &[ScannedArray], cfg: &Config, config: Option<&Path>) -> Result<()> {
    let systemd = Path::new("/run/systemd/system").is_dir();
    // The file the started processes read their settings from.
    let config = config.map(std::path::absolute).transpose().context("--config")?;
    if let (true, Some(c)) = (systemd, &config) {
        if *c != conf::path() {
            eprintln!(
                "uraid: warning: uraid@NAME.service reads {}, not {}: the arrays start with the settings of the former",
                conf::path().display(),
                c.display()
            );
        }
    }
    let mut failed = Vec::new();
    for f in found {
        if f.in_use {
            eprintln!("uraid: array '{}' is already served", f.name);
            continue;
        }
        if f.members_found < f.members_expected {
            eprintln!(
                "uraid: array '{}' has {} of its {} members here; not started (start it by hand with 'uraid serve {}' to run it degraded)",
                f.name, f.members_found, f.members_expected, f.name
            );
            continue;
        }
        let configured = cfg.arrays.iter().find(|e| e.uuid.eq_ignore_ascii_case(&f.uuid));
        let started = if systemd {
            std::process::Command::new("systemctl").args(["start", "--no-block", &format!("uraid@{}.service", f.name)]).status()
        } else {
            // The run directory as serve checks it (no one else may write
            // it), and the log opened without following a link planted at
            // its name.
            let dir = crate::runstate::check_run_dir()?;
            let log_path = dir.join(format!("{}.log", f.name));
            let opened = {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&log_path)
            };
            let log = match opened {
                Ok(l) => l,
                Err(e) => {
                    failed.push(format!(
                        "{} (cannot open its log {}: {e}; a symbolic link there is not followed: remove it)",
                        f.name,
                        log_path.display()
                    ));
                    continue;
                }
            };
            let exe = std::env::current_exe()?;
            let mut c = std::process::Command::new(exe);
            // A configured array: by its UUID, the way `uraid serve NAME`
            // finds it and its settings (a UUID, unlike a name, is never
            // taken for a path nor shared by two arrays).
            match configured {
                Some(e) => c.arg("serve").arg(&e.uuid),
                None => c.arg("serve").args(&f.devices),
            };
            if let Some(p) = &config {
                c.env("URAID_CONFIG", p);
            }
            c.stdin(std::process::Stdio::null()).stdout(log.try_clone()?).stderr(log);
            // Its own session: it outlives this command and its terminal.
            // SAFETY: setsid in the child between fork and exec only.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut c, || {
                    libc::setsid();
                    Ok(())
                });
            }
            c.spawn().map(|_| std::process::ExitStatus::default())
        };
        match started {
            Ok(st) if st.success() => match configured {
                Some(_) => println!("started array '{}' with its settings from {}", f.name, config.clone().unwrap_or_else(conf::path).display()),
                None => println!("started array '{}'", f.name),
            },
            Ok(st) => failed.push(format!("{} ({st})", f.name)),
            Err(e) => failed.push(format!("{} ({e})", f.name)),
        }
    }
    if !failed.is_empty() {
        bail!("could not start: {}", failed.join(", "));
    }
    Ok(())
}

/// Examines the machine's block devices (or the config's `devices` globs)
/// and the regular files of `dirs`, and returns the arrays found, by name
/// then UUID. A device that cannot be examined is noted on stderr.
/// Errors: a directory that cannot be listed.
pub(crate) fn scan(dirs: &[PathBuf], cfg: &Config) -> Result<Vec<ScannedArray>> {
    let mut groups: HashMap<[u8; 16], Vec<(String, Superblock)>> = HashMap::new();
    for path in candidates(dirs, cfg)? {
        let name = path.display().to_string();
        let shown = conf::quote(&name).into_owned();
        match array::examine(&MemberSpec::Path(path)) {
            Ok(Examination::Member(sb)) => groups.entry(sb.array_uuid).or_default().push((name, *sb)),
            Ok(Examination::Corrupt(why)) => eprintln!("uraid: scan: {shown}: damaged uraid superblock ({why}); left out"),
            Ok(Examination::Foreign(_) | Examination::Empty) => {}
            Err(e) => eprintln!("uraid: scan: {shown}: cannot examine it ({e}); left out"),
        }
    }
    let locked = locked_files();
    let mut out: Vec<ScannedArray> = groups.into_values().map(|g| summarize(g, &locked)).collect();
    out.sort_by(|a, b| (&a.name, &a.uuid).cmp(&(&b.name, &b.uuid)));
    Ok(out)
}

/// The array that the superblocks of one group describe.
fn summarize(group: Vec<(String, Superblock)>, locked: &HashSet<(u64, u64)>) -> ScannedArray {
    let auth = group.iter().map(|(_, sb)| sb).max_by_key(|sb| sb.events).expect("a group has a member").clone();
    let n = auth.member_count as usize;
    // Each device in the slot of the authoritative table that names it.
    let mut by_slot: Vec<Option<&str>> = vec![None; auth.slots.len()];
    for (name, sb) in &group {
        match auth.slots.iter().position(|s| !s.is_empty() && s.uuid == sb.member_uuid) {
            Some(i) if by_slot[i].is_none() => by_slot[i] = Some(name),
            Some(i) => eprintln!(
                "uraid: scan: {} and {} carry the same member uuid of array '{}' (a copy?); {} left out",
                conf::quote(name),
                conf::quote(by_slot[i].unwrap_or_default()),
                auth.name,
                conf::quote(name)
            ),
            None => eprintln!(
                "uraid: scan: {}: a former member of array '{}' ({}), not in its slot table; left out",
                conf::quote(name),
                auth.name,
                fmt_uuid(&auth.array_uuid)
            ),
        }
    }
    let found = by_slot.iter().take(n).filter(|d| d.is_some()).count() as u32;
    let spares = by_slot.iter().skip(n).filter(|d| d.is_some()).count() as u32;
    let devices: Vec<String> = by_slot.iter().flatten().map(|d| d.to_string()).collect();
    let in_use = devices.iter().any(|d| std::fs::metadata(d).is_ok_and(|m| locked.contains(&(m.dev(), m.ino()))));
    let role_down = auth.slots.iter().take(n).any(|s| matches!(s.state, MemberState::Faulty | MemberState::Missing | MemberState::Rebuilding));
    let state = if (found as usize) < n || role_down {
        "degraded"
    } else if in_use {
        "in use"
    } else if auth.reshape.is_some() {
        "reshaping"
    } else if auth.state == State::Active {
        "active"
    } else {
        "clean"
    };
    ScannedArray {
        name: auth.name.clone(),
        uuid: fmt_uuid(&auth.array_uuid),
        level: auth.volumes.iter().map(|v| v.level.to_string()).collect::<Vec<_>>().join(","),
        members_found: found,
        members_expected: auth.member_count,
        spares,
        state,
        in_use,
        events: auth.events,
        identities: devices.iter().map(|d| uraid_core::io::identity::identity_of_path(Path::new(d))).collect(),
        devices,
    }
}

/// The files (device and inode) that some process holds an `flock` on, as
/// /proc/locks lists them: how a member held by a running uraid process is
/// told (`examine` reads it without taking its lock).
fn locked_files() -> HashSet<(u64, u64)> {
    let Ok(text) = std::fs::read_to_string("/proc/locks") else { return HashSet::new() };
    text.lines()
        .filter_map(|line| {
            // "1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF"; blocked
            // waiters have a "->" field and are skipped.
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 6 || f[1] != "FLOCK" {
                return None;
            }
            let mut it = f[5].split(':');
            let major = u32::from_str_radix(it.next()?, 16).ok()?;
            let minor = u32::from_str_radix(it.next()?, 16).ok()?;
            let ino = it.next()?.parse::<u64>().ok()?;
            Some((libc::makedev(major, minor), ino))
        })
        .collect()
}

/// The paths to examine, each file or device once.
fn candidates(dirs: &[PathBuf], cfg: &Config) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    match &cfg.devices {
        None => paths.extend(block_devices()),
        Some(globs) => {
            for g in globs {
                for entry in glob::glob(g).with_context(|| format!("devices pattern '{g}' in {}", conf::path().display()))? {
                    match entry {
                        Ok(p) => paths.push(p),
                        Err(e) => eprintln!("uraid: scan: {e}; left out"),
                    }
                }
            }
        }
    }
    for d in dirs {
        let dir = std::fs::canonicalize(d).with_context(|| format!("cannot open directory {}", d.display()))?;
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot list directory {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        files.sort();
        paths.extend(files);
    }
    let mut seen = HashSet::new();
    Ok(paths.into_iter().filter(|p| worth_examining(p).is_some_and(|id| seen.insert(id))).collect())
}

/// An identity for `p` (the device number of a block device, device and
/// inode of a file) when it is a block device with a size or a regular
/// file that can hold a superblock; `None` for anything else.
fn worth_examining(p: &Path) -> Option<(bool, u64, u64)> {
    let md = std::fs::metadata(p).ok()?;
    if md.file_type().is_block_device() {
        let rdev = md.rdev();
        let size = std::fs::read_to_string(format!("/sys/dev/block/{}:{}/size", libc::major(rdev), libc::minor(rdev))).ok()?;
        let sectors: u64 = size.trim().parse().ok()?;
        // An unbound loop or nbd device has size 0: nothing to read, and
        // reading it may wait.
        (sectors > 0 && std::fs::File::open(p).is_ok()).then_some((true, rdev, 0))
    } else if md.is_file() {
        (md.len() >= uraid_core::control::superblock::SB_SIZE as u64).then_some((false, md.dev(), md.ino()))
    } else {
        None
    }
}

/// Every block device of the machine, as /dev/NAME, from /sys/class/block.
fn block_devices() -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir("/sys/class/block") else { return Vec::new() };
    let mut names: Vec<String> = rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
    names.sort();
    names.retain(|n| !skip_in_scan(n));
    names.into_iter().map(|n| Path::new("/dev").join(n)).filter(|p| p.exists()).collect()
}

/// Whether the block device `name` (a name in /sys/class/block) is a ublk
/// device that is no member to read: one that is not LIVE (its server died:
/// a read waits until a server re-attaches, user recovery, which is what
/// the next `uraid serve NAME` is to do, or until the device is deleted),
/// or a live one that uraid serves (an array's export, its server's JSON
/// names the array's UUID). A ublk device another program serves, live, is
/// read like any block device. When the driver cannot be asked (no
/// /dev/ublk-control, no permission), a ublk device is skipped: its state is
/// unknown and a read may wait. Other devices: false.
///
/// A suspended device-mapper device (`/sys/class/block/dm-N/dm/suspended`
/// is 1: `dmsetup suspend`, or LVM and multipath in the middle of a table
/// change) is skipped too: a read waits until it resumes, and a scan must
/// not hang on it (LVM's `ignore_suspended_devices` and blkid do the same).
fn skip_in_scan(name: &str) -> bool {
    if name.starts_with("dm-") {
        return std::fs::read_to_string(format!("/sys/class/block/{name}/dm/suspended")).is_ok_and(|s| s.trim() == "1");
    }
    let Some(id) = name.strip_prefix("ublkb").and_then(|n| n.parse::<u32>().ok()) else { return false };
    match uraid_ublk::probe(id) {
        Ok(Some(info)) => !info.live() || info.uuid.is_some(),
        // Deleted since the listing (/dev/ublkbN is gone too), or unknown.
        Ok(None) | Err(_) => true,
    }
}

/// The arguments of a command that takes members, with an array's NAME or
/// UUID in place of them: when `args` is one word that is not an existing
/// path, not `mem:...` or `null:...` and has no '/', it names an array, looked up in the
/// configuration file (its `members` and `journal`; without `members`, its
/// devices are found by UUID), else on the machine's devices (and the
/// config's `devices` globs). Anything else is returned unchanged.
///
/// Errors: the configuration does not parse; no array of that name or
/// UUID (the message suggests `uraid scan`); several arrays of that name
/// (their UUIDs are listed: give one).
pub(crate) fn member_args(args: &[String]) -> Result<Vec<String>> {
    let [word] = args else { return Ok(args.to_vec()) };
    // A directory of that name is no member (mount points are often
    // named after their array): the word is then the array's name.
    if word.is_empty() || word.contains('/') || word.starts_with("mem:") || word.starts_with("null:") || Path::new(word).exists() && !Path::new(word).is_dir() {
        return Ok(args.to_vec());
    }
    let cfg = conf::load()?;
    let entry = cfg.array(word);
    if let Some(e) = entry.filter(|e| e.members.is_some()) {
        // The array as it is now: its members found by UUID among the
        // devices listed, the directories of the listed files and the
        // machine's devices, so that a member replaced since the config
        // was written is found and a stale one (removed or replaced) is
        // left out.
        let listed = e.members.clone().unwrap_or_default();
        let mut dirs: Vec<std::path::PathBuf> =
            listed.iter().filter(|m| Path::new(m).is_file()).filter_map(|m| Path::new(m).parent().map(Path::to_path_buf)).collect();
        dirs.sort();
        dirs.dedup();
        if let Some(now) = scan(&dirs, &cfg)?.into_iter().find(|a| a.uuid == e.uuid) {
            for d in listed.iter().filter(|d| !now.devices.iter().any(|n| same_file(n, d))) {
                eprintln!(
                    "uraid: warning: {d}, listed for array '{}' in {}, is no longer one of its members (gone, removed or replaced); left out ('uraid scan --config' brings the file up to date)",
                    e.name,
                    conf::path().display()
                );
            }
            let mut devices = now.devices;
            devices.extend(e.journal.clone());
            return Ok(devices);
        }
        // A member that is gone (a dead drive) is left out: the array is
        // then opened degraded, as when a scan does not find it.
        let (there, gone): (Vec<String>, Vec<String>) = e.devices().into_iter().partition(|d| Path::new(d).exists());
        for d in &gone {
            eprintln!("uraid: warning: {d}, a device of array '{}' in {}, does not exist; left out", e.name, conf::path().display());
        }
        if there.is_empty() {
            bail!("none of the devices {} lists for array '{}' exists; 'uraid scan' finds where they are now", conf::path().display(), e.name);
        }
        return Ok(there);
    }
    let found = scan(&[], &cfg)?;
    let wanted = |a: &&ScannedArray| match entry {
        Some(e) => a.uuid == e.uuid,
        None => a.uuid.eq_ignore_ascii_case(word) || a.name == *word,
    };
    let hits: Vec<&ScannedArray> = found.iter().filter(wanted).collect();
    match hits.as_slice() {
        [] => {
            let where_ = match (&cfg.devices, entry) {
                (_, Some(e)) => format!("its uuid {} is on none of the devices scanned", e.uuid),
                (Some(globs), None) => format!("not in {} nor on the devices {}", conf::path().display(), globs.join(" ")),
                (None, None) => format!("not in {} nor on this machine's block devices", conf::path().display()),
            };
            bail!(
                "no array named '{word}' ({where_}); 'uraid scan DIR...' lists the arrays found (with their files' \
                 directories), 'uraid scan --config' records them (a member file in the current directory: give it as ./{word})"
            )
        }
        [one] => {
            let mut devices = one.devices.clone();
            devices.extend(entry.and_then(|e| e.journal.clone()));
            Ok(devices)
        }
        many => Err(anyhow!(
            "{} arrays are named '{word}': {}; give the UUID instead of the name",
            many.len(),
            many.iter().map(|a| format!("uuid {} (devices {})", a.uuid, a.devices.join(","))).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// Writes `found` into the configuration file `path`: the `[[array]]` of
/// each (the one with its UUID, else its name) gets its name, uuid and
/// members; other arrays, keys and comments stay. The file is replaced
/// atomically (a temporary file renamed over it); its directory is made
/// (0755) when missing. Errors: the file does not parse as a uraid
/// configuration, or cannot be written.
fn write_config(path: &Path, found: &[ScannedArray]) -> Result<()> {
    if path.is_dir() {
        bail!("--config {} is a directory; give the configuration file (put directories to scan before --config)", path.display());
    }
    let text = conf::read_text(path)?.unwrap_or_default();
    conf::parse(&text, path)?;
    let mut doc: toml_edit::DocumentMut = text.parse().with_context(|| format!("{} does not parse", path.display()))?;
    let tables = doc
        .entry("array")
        .or_insert(toml_edit::Item::ArrayOfTables(toml_edit::ArrayOfTables::new()))
        .as_array_of_tables_mut()
        .ok_or_else(|| anyhow!("{}: 'array' is not written as [[array]] tables; write each array as an [[array]] table", path.display()))?;
    for a in found {
        let same_uuid = |t: &toml_edit::Table| t.get("uuid").and_then(|v| v.as_str()).is_some_and(|u| u.eq_ignore_ascii_case(&a.uuid));
        let same_name = |t: &toml_edit::Table| t.get("name").and_then(|v| v.as_str()) == Some(a.name.as_str());
        let at = tables.iter().position(same_uuid).or_else(|| {
            let i = tables.iter().position(same_name)?;
            eprintln!(
                "uraid: the [[array]] named '{}' in {} had another uuid ({}); it now describes the array found, {}",
                a.name,
                path.display(),
                tables.get(i).and_then(|t| t.get("uuid")).and_then(|v| v.as_str()).unwrap_or("none"),
                a.uuid
            );
            Some(i)
        });
        let table = match at {
            Some(i) => tables.get_mut(i).expect("index found above"),
            None => {
                tables.push(toml_edit::Table::new());
                tables.get_mut(tables.len() - 1).expect("just pushed")
            }
        };
        table["name"] = toml_edit::value(a.name.as_str());
        table["uuid"] = toml_edit::value(a.uuid.as_str());
        // By their /dev/disk/by-id names where udev made one: kernel
        // names such as /dev/nvme0n1 can change places at the next boot.
        let stable: Vec<String> = a.devices.iter().map(|d| uraid_core::io::identity::stable_path(Path::new(d)).unwrap_or_else(|| d.clone())).collect();
        table["members"] = toml_edit::value(stable.iter().map(String::as_str).collect::<toml_edit::Array>());
    }
    write_atomically(path, doc.to_string().as_bytes())
}

/// Replaces `path` with `bytes`: a temporary file beside it, synced, then
/// renamed over it (the directory is made, 0755, when missing). A new
/// file is 0644; an existing one keeps its mode.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::DirBuilder::new().recursive(true).mode(0o755).create(&dir).with_context(|| format!("cannot make directory {}", dir.display()))?;
    let name = path.file_name().ok_or_else(|| anyhow!("{} names no file", path.display()))?.to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0o644);
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(&dir)?.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

/// Whether paths `a` and `b` name the same file or device.
fn same_file(a: &str, b: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_specs_pass_through() {
        for args in [vec![], vec!["/dev/loop3".to_string()], vec!["mem:1G".to_string()], vec!["null:1G".to_string()], vec!["a".to_string(), "b".to_string()]] {
            assert_eq!(member_args(&args).unwrap(), args);
        }
    }

    #[test]
    fn the_config_is_updated_keeping_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/uraid.conf");
        let a = |name: &str, uuid: &str, devs: &[&str]| ScannedArray {
            name: name.into(),
            uuid: uuid.into(),
            level: "5".into(),
            members_found: 2,
            members_expected: 2,
            spares: 0,
            state: "clean",
            in_use: false,
            events: 1,
            devices: devs.iter().map(|d| d.to_string()).collect(),
            identities: vec![None; devs.len()],
        };
        let u1 = "11111111-2222-3333-4444-555555555555";
        let u2 = "66666666-2222-3333-4444-555555555555";
        write_config(&p, &[a("one", u1, &["/a", "/b"])]).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.path().join("sub")).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o755);
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, format!("# mine\ndevices = [\"/x/*\"]\n{text}socket = \"/s\"\n")).unwrap();
        write_config(&p, &[a("one", u1, &["/c", "/d"]), a("two", u2, &["/e"])]).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.starts_with("# mine\n"), "{text}");
        let c = conf::parse(&text, &p).unwrap();
        assert_eq!(c.devices.as_deref(), Some(&["/x/*".to_string()][..]));
        let one = c.array("one").unwrap();
        assert_eq!(one.devices(), ["/c", "/d"]);
        assert_eq!(one.socket.as_deref(), Some(Path::new("/s")));
        assert_eq!(c.array(u2).unwrap().devices(), ["/e"]);
        assert_eq!(c.arrays.len(), 2);
    }
}

