//! The exports of a served array, as the manager drives them: every
//! export of every volume (NBD, ublk, several at once; a Matrix array's
//! volumes each their own) paused, swapped and resumed together, so that
//! no request runs on a volume the manager has replaced. Each export
//! knows which volume of the array it serves (its index in the volume
//! table) and is moved to that volume's replacement alone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uraid_core::export::{Export, StatsSnapshot};
use uraid_core::Volume;

/// One export and the volume of the array it serves.
#[derive(Clone)]
pub(crate) struct Exported {
    /// The volume's index in the array's volume table (0: the first).
    pub volume: usize,
    /// The volume's name (the array's name for a temporary array).
    pub volume_name: String,
    /// The export.
    pub export: Arc<dyn Export>,
}

/// The exports of an array's volumes and the flag that stops them all.
#[derive(Clone)]
pub(crate) struct Exports {
    list: Vec<Exported>,
    stop: Arc<AtomicBool>,
}

impl Exports {
    /// `list` (at least one), stopped by `stop`.
    pub(crate) fn new(list: Vec<Exported>, stop: Arc<AtomicBool>) -> Exports {
        Exports { list, stop }
    }

    /// Each export, with its volume.
    pub(crate) fn list(&self) -> &[Exported] {
        &self.list
    }

    /// The volumes served, each once, in the order of the volume table:
    /// `(index, name)`.
    pub(crate) fn volumes(&self) -> Vec<(usize, String)> {
        let mut v: Vec<(usize, String)> = self.list.iter().map(|e| (e.volume, e.volume_name.clone())).collect();
        v.sort_by_key(|(i, _)| *i);
        v.dedup_by_key(|(i, _)| *i);
        v
    }

    /// Whether the exports are stopping.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Makes every export serve its own volume of `vols` (the array's
    /// volumes, in the order of its volume table; see
    /// [`Export::replace_volume`]); an export already on it is left
    /// alone, and every one is tried. Errors: those of the exports that
    /// refused, each named by its address, and an export whose volume
    /// `vols` lacks.
    pub(crate) fn replace_volumes(&self, vols: &[Arc<Volume>]) -> Result<(), String> {
        let errs: Vec<String> = self
            .list
            .iter()
            .filter_map(|e| match vols.get(e.volume) {
                Some(v) if Arc::ptr_eq(v, &e.export.volume()) => None,
                Some(v) => e.export.replace_volume(v.clone()).err().map(|m| format!("{}: {m}", e.export.address())),
                None => Some(format!("{}: the array has no volume {} ('{}') any more", e.export.address(), e.volume, e.volume_name)),
            })
            .collect();
        if errs.is_empty() { Ok(()) } else { Err(errs.join("; ")) }
    }

    /// Resumes every export.
    pub(crate) fn resume(&self) {
        self.list.iter().for_each(|e| e.export.resume());
    }

    /// Pauses every export and waits until all are quiet, at most
    /// `limit`: true when they are (they stay paused, to be resumed by
    /// the caller), false when some were not by then (all are resumed).
    pub(crate) fn quiet(&self, limit: Duration) -> bool {
        self.list.iter().for_each(|e| e.export.pause());
        let t0 = Instant::now();
        while !self.list.iter().all(|e| e.export.is_quiet()) {
            if t0.elapsed() > limit {
                self.resume();
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// The statistics of the exports of volume `index` summed.
    pub(crate) fn stats_of(&self, index: usize) -> StatsSnapshot {
        sum(self.list.iter().filter(|e| e.volume == index).map(|e| e.export.stats()))
    }
}

/// Snapshots of the exports of one volume added up (empty: all zero).
pub(crate) fn sum(mut all: impl Iterator<Item = StatsSnapshot>) -> StatsSnapshot {
    let first = all.next().unwrap_or_default();
    all.fold(first, |a, b| a.sum(&b))
}
