//! The runtime-state file of `uraid serve`: what the serving process alone
//! knows (today the counters of each volume's cache), published for other
//! processes such as `uraid status`, which cannot open the members while
//! `serve` holds their locks.
//!
//! One JSON file per array, `RUN_DIR/ARRAY-UUID.json`, where `RUN_DIR` is
//! `/run/uraid` unless the environment variable `URAID_RUN_DIR` names
//! another directory. `serve` rewrites it when its counters change (looked at once a
//! second; at least every 10 s) and at the stop (a temporary file renamed over it, so that a reader never sees half
//! of one) and removes it at a clean stop. A file whose process is gone is
//! stale and is ignored by readers.
//!
//! The run directory must be writable by its owner only (root or the
//! serving user, [`check_run_dir`]): anyone else who could write there
//! could put a socket or a file of theirs in place of ours. The state file
//! is written through the directory's descriptor, never through a
//! symbolic link ([`write()`]), and read only when its owner is root or us.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use uraid_core::cache::{Cache, CacheStats};

/// The directory of the runtime files (sockets and state):
/// `$URAID_RUN_DIR`, else `/run/uraid`.
pub(crate) fn run_dir() -> PathBuf {
    match std::env::var_os("URAID_RUN_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from("/run/uraid"),
    }
}

/// Checks that the run directory ([`run_dir`]) can hold the sockets and
/// state files of `serve`: made (0755) when missing; a directory owned
/// by root or by us that no one else may write to (group and others
/// without write permission, sticky bit or not). Returns it.
///
/// Errors: it cannot be made or looked at, is not a directory, belongs
/// to another user, or may be written by others (the message says how to
/// fix it).
pub(crate) fn check_run_dir() -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = run_dir();
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .with_context(|| format!("cannot create the run directory {} (set URAID_RUN_DIR to another)", dir.display()))?;
    }
    let md = std::fs::metadata(&dir).with_context(|| format!("cannot look at the run directory {}", dir.display()))?;
    safe_dir(&dir, &md)?;
    Ok(dir)
}

/// The check of [`check_run_dir`] on `dir` whose metadata is `md`.
fn safe_dir(dir: &Path, md: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if !md.is_dir() {
        anyhow::bail!("the run directory {} is not a directory; set URAID_RUN_DIR to a directory", dir.display());
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if md.uid() != me && md.uid() != 0 {
        anyhow::bail!(
            "the run directory {} belongs to user {}, not to root or to us (user {me}): that user could replace the \
             control socket or the state files; set URAID_RUN_DIR to a directory of ours",
            dir.display(),
            md.uid()
        );
    }
    if md.mode() & 0o022 != 0 {
        anyhow::bail!(
            "the run directory {} may be written by other users (mode {:04o}): they could put a control socket or a \
             state file of theirs in place of the array's. Use a directory only its owner can write: chmod 0755 {}, \
             or set URAID_RUN_DIR to another directory",
            dir.display(),
            md.mode() & 0o7777,
            dir.display()
        );
    }
    Ok(())
}

/// The directory of state kept across restarts and reboots (the stamp of
/// the last scheduled check, as systemd keeps a persistent timer's in
/// /var/lib/systemd/timers): `$URAID_STATE_DIR`, else `/var/lib/uraid`.
pub(crate) fn state_dir() -> PathBuf {
    match std::env::var_os("URAID_STATE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from("/var/lib/uraid"),
    }
}

/// The stamp of the array whose UUID is `uuid`: its modification time is
/// when the last check (scrub) of the array ended under a `--scrub-every`
/// schedule, so the schedule counts from there across restarts.
pub(crate) fn check_stamp(uuid: &str) -> PathBuf {
    state_dir().join(format!("check-{uuid}.stamp"))
}

/// The state file of the array whose UUID is `uuid` (as `fmt_uuid` prints it).
pub(crate) fn state_path(uuid: &str) -> PathBuf {
    run_dir().join(format!("{uuid}.json"))
}

/// One volume in the state file.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct VolumeState {
    /// The volume's name.
    pub name: String,
    /// The volume's UUID.
    pub uuid: String,
    /// Its cache's counters, `None` without a cache (a file whose mode
    /// this build does not know does not parse: it is ignored).
    pub cache: Option<CacheStats>,
}

/// The content of a state file.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct RunState {
    /// The process serving the array.
    pub pid: u32,
    /// The array's name.
    pub array: String,
    /// The array's UUID.
    pub uuid: String,
    /// When the file was written, in milliseconds since the Unix epoch.
    pub updated_unix_ms: u64,
    /// Every volume of the array, in the order of the volume table.
    pub volumes: Vec<VolumeState>,
}

impl RunState {
    /// Seconds since the file was written (0 when the clock went back).
    pub(crate) fn age_seconds(&self) -> f64 {
        now_ms().saturating_sub(self.updated_unix_ms) as f64 / 1000.0
    }

    /// The counters of the volume named `name`, if it has a cache.
    pub(crate) fn cache_of(&self, name: &str) -> Option<CacheStats> {
        self.volumes.iter().find(|v| v.name == name).and_then(|v| v.cache)
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// True when process `pid` exists (`kill(pid, 0)`; a process of another
/// user, EPERM, exists too).
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else { return false };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; kill only checks that the process exists.
    let r = unsafe { libc::kill(p, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The longest state file read, bytes (one is a few KiB).
const MAX_STATE_BYTES: u64 = 1 << 20;

/// The state published by a running `uraid serve` of the array `uuid`:
/// `None` when there is no file, it is a symbolic link, belongs to another
/// user than root or us, is larger than [`MAX_STATE_BYTES`], cannot be
/// read or parsed, names another array, or its process is gone (a stale
/// file).
pub(crate) fn read_live(uuid: &str) -> Option<RunState> {
    let st: RunState = read_json(&state_path(uuid))?;
    (st.uuid == uuid && alive(st.pid)).then_some(st)
}

/// A JSON state file of `serve` at `path`: `None` when there is none, it
/// is a symbolic link, belongs to another user than root or us, is larger
/// than [`MAX_STATE_BYTES`], or cannot be read or parsed.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).ok()?;
    let md = f.metadata().ok()?;
    if !md.is_file() || !crate::sock::trusted_uid(md.uid()) {
        return None;
    }
    let mut text = String::new();
    f.take(MAX_STATE_BYTES).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// What the publisher needs of one volume.
pub(crate) struct Source {
    /// The volume's name.
    pub name: String,
    /// The volume's UUID.
    pub uuid: String,
    /// Its cache, if any (shared with the volume; it outlives a volume
    /// made again over a spare).
    pub cache: Option<Arc<Cache>>,
}

/// Writes `st` to `path` atomically: a temporary file in the same
/// directory, renamed over the old one. Both names are taken relative to
/// the directory's descriptor (opened once, and checked as
/// [`check_run_dir`] does), and neither is followed when it is a symbolic
/// link.
///
/// Errors: the directory is not safe ([`check_run_dir`]), the temporary
/// name or `path` is a symbolic link or something else than a file of
/// ours (left alone), or the file cannot be written.
fn write(path: &Path, st: &RunState) -> Result<()> {
    write_json(path, st, st.pid)
}

/// [`write()`] for any JSON value, by process `pid` (the temporary file's
/// name holds it): the other state files of `serve` (the ublk device's).
pub(crate) fn write_json<T: serde::Serialize>(path: &Path, st: &T, pid: u32) -> Result<()> {
    use std::ffi::CString;
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = path.parent().unwrap_or(Path::new("."));
    let file = path.file_name().with_context(|| format!("{} names no file", path.display()))?;
    std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let d = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
        .with_context(|| format!("cannot open the directory {}", dir.display()))?;
    safe_dir(dir, &d.metadata()?)?;
    let tmp_name = format!("{}.tmp.{}", file.to_string_lossy(), pid);
    let tmp = CString::new(tmp_name.as_bytes()).context("a file name with a NUL byte")?;
    let dst = CString::new(file.as_bytes()).context("a file name with a NUL byte")?;
    let tmp_path = dir.join(&tmp_name);
    // What is at `name` in the directory, not followed: (is a regular
    // file, owner), or None when nothing is there.
    let at = |name: &CString| -> Option<(bool, libc::uid_t)> {
        // SAFETY: a zeroed stat is a valid value; fstatat writes into it
        // and reads the NUL-terminated name; the directory is open.
        unsafe {
            let mut sb: libc::stat = std::mem::zeroed();
            (libc::fstatat(d.as_raw_fd(), name.as_ptr(), &mut sb, libc::AT_SYMLINK_NOFOLLOW) == 0)
                .then_some((sb.st_mode & libc::S_IFMT == libc::S_IFREG, sb.st_uid))
        }
    };
    let ours = |kind: Option<(bool, libc::uid_t)>, p: &Path| -> Result<()> {
        match kind {
            Some((true, uid)) if crate::sock::trusted_uid(uid) => Ok(()),
            Some(_) => anyhow::bail!(
                "{} is a symbolic link, or not a file of ours: not followed, not replaced; remove it",
                p.display()
            ),
            None => Ok(()),
        }
    };
    ours(at(&dst), path)?;
    let open = || {
        // SAFETY: openat reads the NUL-terminated name relative to the open
        // directory; the descriptor it returns is owned below.
        let fd = unsafe {
            libc::openat(d.as_raw_fd(), tmp.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC, 0o644)
        };
        if fd < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            // SAFETY: `fd` was just opened and is owned by nobody else.
            Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
        }
    };
    let mut f = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // A temporary file left by an earlier process of this pid goes;
            // anything else is left alone.
            ours(at(&tmp), &tmp_path)?;
            // SAFETY: unlinkat reads the NUL-terminated name relative to the
            // open directory.
            unsafe { libc::unlinkat(d.as_raw_fd(), tmp.as_ptr(), 0) };
            open()
        }
        r => r,
    }
    .with_context(|| format!("cannot write {}", tmp_path.display()))?;
    let text = serde_json::to_vec_pretty(st)?;
    let renamed = f.write_all(&text).and_then(|_| {
        // SAFETY: renameat reads both NUL-terminated names relative to the
        // open directory.
        let r = unsafe { libc::renameat(d.as_raw_fd(), tmp.as_ptr(), d.as_raw_fd(), dst.as_ptr()) };
        if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
    });
    if let Err(e) = renamed {
        // SAFETY: as above.
        unsafe { libc::unlinkat(d.as_raw_fd(), tmp.as_ptr(), 0) };
        return Err(e).with_context(|| format!("cannot write {} and rename it to {}", tmp_path.display(), path.display()));
    }
    Ok(())
}

/// What the publishing thread and the stop share.
struct Shared {
    path: PathBuf,
    array: String,
    uuid: String,
    sources: Vec<Source>,
    /// A failure to write was reported (once is enough).
    warned: AtomicBool,
}

impl Shared {
    /// Writes the file now; the first failure is printed on stderr.
    fn publish(&self) {
        let st = RunState {
            pid: std::process::id(),
            array: self.array.clone(),
            uuid: self.uuid.clone(),
            updated_unix_ms: now_ms(),
            volumes: self
                .sources
                .iter()
                .map(|s| VolumeState { name: s.name.clone(), uuid: s.uuid.clone(), cache: s.cache.as_ref().map(|c| c.stats()) })
                .collect(),
        };
        if let Err(e) = write(&self.path, &st) {
            if !self.warned.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "uraid serve: warning: cannot publish the runtime state in {} ({e:#}); 'uraid status' will not \
                     show the live cache counters (set URAID_RUN_DIR to a writable directory)",
                    self.path.display()
                );
            }
        }
    }
}

/// Publishes the state of a served array: [`Publisher::start`] writes the
/// file at once and then, from a thread that looks once a second, when
/// the counters changed (at least every [`REFRESH`]);
/// [`Publisher::finish`] stops the thread and writes it a last time;
/// [`Publisher::remove`] deletes it (a clean stop). With no cache there
/// is nothing that changes, so no thread.
pub(crate) struct Publisher {
    shared: Arc<Shared>,
    /// Dropped to stop the thread at once.
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The longest an unchanged file goes unwritten while serving, so that
/// its age tells readers the process still publishes.
const REFRESH: Duration = Duration::from_secs(10);

impl Publisher {
    /// Starts publishing the state of array `array` (`uuid`) with the
    /// volumes `sources`. A file that cannot be written is reported on
    /// stderr once and does not stop the serving.
    pub(crate) fn start(array: String, uuid: String, sources: Vec<Source>) -> Publisher {
        let shared = Arc::new(Shared { path: state_path(&uuid), array, uuid, sources, warned: AtomicBool::new(false) });
        shared.publish();
        if shared.sources.iter().all(|s| s.cache.is_none()) {
            return Publisher { shared, stop: None, thread: None };
        }
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let counters = |sh: &Shared| sh.sources.iter().map(|s| s.cache.as_ref().map(|c| c.stats())).collect::<Vec<_>>();
                let (mut last, mut seen) = (std::time::Instant::now(), counters(&shared));
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(Duration::from_secs(1)) {
                    let now = counters(&shared);
                    if now != seen || last.elapsed() >= REFRESH {
                        (last, seen) = (std::time::Instant::now(), now);
                        shared.publish();
                    }
                }
            })
        };
        Publisher { shared, stop: Some(stop), thread: Some(thread) }
    }

    fn stop_thread(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Stops the thread and writes the file a last time; returns the
    /// publisher for [`Publisher::remove`].
    pub(crate) fn finish(mut self) -> Publisher {
        self.stop_thread();
        self.shared.publish();
        self
    }

    /// Deletes the state file (after a clean stop) and lets go of the
    /// caches. Anything but a file (a symbolic link put there) is left.
    pub(crate) fn remove(self) {
        let path = &self.shared.path;
        if std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_file()) {
            return;
        }
        if let Err(e) = std::fs::remove_file(path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("uraid serve: warning: cannot remove {}: {e}", path.display());
            }
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn state(pid: u32) -> RunState {
        RunState { pid, array: "a".into(), uuid: "u".into(), updated_unix_ms: 1, volumes: Vec::new() }
    }

    /// A symbolic link planted at the temporary name or at the state
    /// file's name is not followed: the file it points to is unchanged and
    /// the error says why.
    #[test]
    fn a_planted_symbolic_link_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let run = d.path().join("run");
        std::fs::create_dir(&run).unwrap();
        let path = run.join("u.json");
        std::os::unix::fs::symlink(&victim, run.join("u.json.tmp.4242")).unwrap();
        let e = write(&path, &state(4242)).unwrap_err();
        println!("symbolic link at the temporary name: {e:#}");
        assert!(format!("{e:#}").contains("symbolic link"), "{e:#}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        std::fs::remove_file(run.join("u.json.tmp.4242")).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let e = write(&path, &state(4242)).unwrap_err();
        assert!(format!("{e:#}").contains("symbolic link"), "{e:#}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink());
        // A plain leftover temporary file of ours is replaced.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(run.join("u.json.tmp.4242"), "old").unwrap();
        write(&path, &state(4242)).unwrap();
        let back: RunState = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back.pid, 4242);
        assert!(!run.join("u.json.tmp.4242").exists());
    }

    /// A directory that others may write to (sticky or not) is refused.
    #[test]
    fn a_world_writable_run_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        for mode in [0o1777, 0o777, 0o775] {
            std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let e = write(&d.path().join("u.json"), &state(1)).unwrap_err();
            assert!(format!("{e:#}").contains("may be written by other users"), "{mode:o}: {e:#}");
            assert!(!d.path().join("u.json").exists());
        }
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        write(&d.path().join("u.json"), &state(1)).unwrap();
    }
}
