//! The runtime-state file of `uraid serve`: what the serving process alone
//! knows (today the counters of each volume's cache), published for other
//! processes such as `uraid status`, which cannot open the members while
//! `serve` holds their locks.
//!
//! One JSON file per array, `RUN_DIR/ARRAY-UUID.json`, where `RUN_DIR` is
//! `/run/uraid` unless the environment variable `URAID_RUN_DIR` names
//! another directory. `serve` rewrites it about once a second and at the
//! stop (a temporary file renamed over it, so that a reader never sees half
//! of one) and removes it at a clean stop. A file whose process is gone is
//! stale and is ignored by readers.

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
fn alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else { return false };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; kill only checks that the process exists.
    let r = unsafe { libc::kill(p, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The state published by a running `uraid serve` of the array `uuid`:
/// `None` when there is no file, it cannot be read or parsed, it names
/// another array, or its process is gone (a stale file).
pub(crate) fn read_live(uuid: &str) -> Option<RunState> {
    let text = std::fs::read_to_string(state_path(uuid)).ok()?;
    let st: RunState = serde_json::from_str(&text).ok()?;
    (st.uuid == uuid && alive(st.pid)).then_some(st)
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
/// directory, renamed over the old one.
fn write(path: &Path, st: &RunState) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = path.with_extension(format!("json.tmp.{}", st.pid));
    let text = serde_json::to_vec_pretty(st)?;
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot rename {} to {}", tmp.display(), path.display())
    })
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
/// file at once and then about once a second from a thread;
/// [`Publisher::finish`] stops the thread and writes it a last time;
/// [`Publisher::remove`] deletes it (a clean stop).
pub(crate) struct Publisher {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Publisher {
    /// Starts publishing the state of array `array` (`uuid`) with the
    /// volumes `sources`. A file that cannot be written is reported on
    /// stderr once and does not stop the serving.
    pub(crate) fn start(array: String, uuid: String, sources: Vec<Source>) -> Publisher {
        let shared = Arc::new(Shared { path: state_path(&uuid), array, uuid, sources, warned: AtomicBool::new(false) });
        shared.publish();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last = std::time::Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                    if last.elapsed() >= Duration::from_secs(1) {
                        last = std::time::Instant::now();
                        shared.publish();
                    }
                }
            })
        };
        Publisher { shared, stop, thread: Some(thread) }
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
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

    /// Deletes the state file (after a clean stop) and lets go of the caches.
    pub(crate) fn remove(self) {
        let path = &self.shared.path;
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
