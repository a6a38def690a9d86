//! The exports of a served array, as the manager drives them: every
//! export of its first volume (NBD, ublk, several at once) paused,
//! swapped and resumed together, so that no request runs on a volume the
//! manager has replaced.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uraid_core::export::{Export, StatsSnapshot};
use uraid_core::Volume;

/// The exports of one volume and the flag that stops them all.
#[derive(Clone)]
pub(crate) struct Exports {
    list: Vec<Arc<dyn Export>>,
    stop: Arc<AtomicBool>,
}

impl Exports {
    /// `list` (at least one), stopped by `stop`.
    pub(crate) fn new(list: Vec<Arc<dyn Export>>, stop: Arc<AtomicBool>) -> Exports {
        Exports { list, stop }
    }

    /// Each export.
    pub(crate) fn list(&self) -> &[Arc<dyn Export>] {
        &self.list
    }

    /// Whether the exports are stopping.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Makes every export serve `vol` (see [`Export::replace_volume`]);
    /// every one is tried. Errors: those of the exports that refused,
    /// each named by its address.
    pub(crate) fn replace_volume(&self, vol: &Arc<Volume>) -> Result<(), String> {
        let errs: Vec<String> =
            self.list.iter().filter_map(|e| e.replace_volume(vol.clone()).err().map(|m| format!("{}: {m}", e.address()))).collect();
        if errs.is_empty() { Ok(()) } else { Err(errs.join("; ")) }
    }

    /// Resumes every export.
    pub(crate) fn resume(&self) {
        self.list.iter().for_each(|e| e.resume());
    }

    /// Pauses every export and waits until all are quiet, at most
    /// `limit`: true when they are (they stay paused, to be resumed by
    /// the caller), false when some were not by then (all are resumed).
    pub(crate) fn quiet(&self, limit: Duration) -> bool {
        self.list.iter().for_each(|e| e.pause());
        let t0 = Instant::now();
        while !self.list.iter().all(|e| e.is_quiet()) {
            if t0.elapsed() > limit {
                self.resume();
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// The statistics of every export summed: what the volume's users
    /// did, whichever way they came.
    pub(crate) fn stats(&self) -> StatsSnapshot {
        sum(self.list.iter().map(|e| e.stats()))
    }
}

/// Snapshots of the exports of one volume added up (empty: all zero).
pub(crate) fn sum(mut all: impl Iterator<Item = StatsSnapshot>) -> StatsSnapshot {
    let first = all.next().unwrap_or_default();
    all.fold(first, |a, b| a.sum(&b))
}
