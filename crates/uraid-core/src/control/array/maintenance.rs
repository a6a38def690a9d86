//! The array's life and upkeep: activate (journal replay, resync after an
//! unclean stop, spares into failed roles, the bitmap daemon), stop
//! (clean), rebuild with checkpoints, and scrub (check / repair). The work
//! on stripes is `control::maint`'s; this decides what runs and persists
//! the states it leaves.

use std::ops::Range;

use super::assemble::dirty_ranges;
use super::survival::{describe_volume, is_redundant};
use super::Array;
use crate::control::superblock::State;
use crate::raid::health::MemberState;
use crate::units::fmt_size;
use crate::{bail, Result};

/// How often the bitmap daemon clears regions that saw no write lately.
pub(super) const BITMAP_DAEMON_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

impl Array {
    pub(super) fn start_daemon(&mut self) {
        if let Some(b) = &self.bitmap {
            self.daemon = Some(b.start_daemon(BITMAP_DAEMON_INTERVAL));
        }
    }

    /// Marks the array active and ready for writes: resynchronises the
    /// dirty regions of every redundant volume when the array was not
    /// stopped cleanly (`maint::resync`, then clears the bitmap), puts
    /// spares into failed or missing roles, marks every superblock active
    /// (event counter + 1) and starts the bitmap daemon.
    ///
    /// Errors: `Membership` for an array opened with `inspect` (it may be
    /// past its tolerance); `Io` from the resync or a superblock write.
    pub fn activate(&mut self) -> Result<()> {
        self.activate_as(State::Active)
    }

    /// [`activate`](Self::activate), with the superblocks' state `state`.
    fn activate_as(&mut self, state: State) -> Result<()> {
        if self.inspect {
            bail!(Membership, "array '{}' was opened for inspection only and cannot be activated", self.name());
        }
        let (unclean, entries) = {
            let m = self.meta();
            (m.sb.state == State::Active, m.sb.volumes.clone())
        };
        // Journal mode: the records not yet retired hold acknowledged
        // writes and whole lines written when the array stopped.
        for i in 0..entries.len() {
            self.replay_journal(i)?;
        }
        self.vols.set_replayed();
        if unclean {
            let ranges = {
                let m = self.meta();
                dirty_ranges(&m.sb, self.bitmap.as_deref())
            };
            for (v, vol) in entries.iter().zip(self.vols.all()) {
                if !is_redundant(v) {
                    continue;
                }
                let mine: Vec<Range<u64>> = ranges
                    .iter()
                    .filter_map(|r| {
                        let (s, e) = (r.start.max(v.member_start), r.end.min(v.member_end()));
                        (s < e).then_some(s..e)
                    })
                    .collect();
                if !mine.is_empty() {
                    let (bytes, report) = crate::control::maint::resync_report(vol, &mine)?;
                    let what = match &self.bitmap {
                        Some(_) => "the regions its write-intent bitmap marked dirty were resynced",
                        None => "it has no write-intent bitmap, so all of it was resynced",
                    };
                    self.warnings.push(format!(
                        "{} was not stopped cleanly: {what} ({} of each member): {} stripe(s) compared, {} of them \
                         disagreed and were rewritten",
                        describe_volume(v),
                        fmt_size(bytes),
                        report.stripes_checked,
                        report.mismatches
                    ));
                    // A live journal's replay rewrote those stripes whole.
                    let journaled = vol.cache().and_then(|c| c.journal()).is_some_and(|j| !j.is_lost());
                    if report.stripes_unchecked > 0 && !journaled {
                        self.warnings.push(format!(
                            "{}: {} stripe(s) written when the array stopped uncleanly could not be resynced \
                             because a member is missing (RAID 5/6 write hole); their data in the missing \
                             member's chunks may be wrong",
                            describe_volume(v),
                            report.stripes_unchecked
                        ));
                    }
                }
            }
            if let Some(b) = &self.bitmap {
                b.clear_all()?;
            }
        }
        self.meta().sb.state = state;
        self.promote_spares()?;
        self.take_distributed_spares()?;
        self.persist()?;
        if self.daemon.is_none() {
            self.start_daemon();
        }
        Ok(())
    }

    /// For a stopped array that only a rebuild writes (no users: `uraid
    /// rebuild`, the new members of `uraid grow`): [`activate`](Self::activate),
    /// but the superblocks say clean (one write, event counter + 1), as md
    /// marks an array clean while no write of its users is in flight. A
    /// crash during the rebuild then leaves nothing to resync: the rebuild
    /// writes only the members it rebuilds, past their recorded recovery
    /// offsets, and goes on from there. Without this, a degraded parity
    /// array left active by such a crash is refused at the next assemble
    /// (the write hole, which no user write opened).
    ///
    /// Errors: as [`activate`](Self::activate); `Io` from the superblock writes.
    pub fn activate_for_rebuild(&mut self) -> Result<()> {
        // One superblock write, clean: a crash at any moment of it leaves
        // nothing to resync (writing active first, then clean, left a
        // window where a kill made the array look unclean).
        self.activate_as(State::Clean)
    }

    /// Lets go of the members without writing anything.
    pub fn release(self) {}

    /// Flushes the members, stops the bitmap daemon, clears the bitmap,
    /// marks the array clean in every superblock (event counter + 1) and
    /// releases the members. Writes through other handles on the volumes
    /// must have completed. Errors: `Io` from the flush or the superblock
    /// writes, and `Io` when an engine thread was given up with writes in
    /// flight ([`Health::unclean`](crate::raid::health::Health::unclean)): the
    /// members are flushed but the array is left unclean, for a resync.
    pub fn stop(mut self) -> Result<()> {
        if self.frozen {
            // A reshape took over (LiveGrow::stop records where it is).
            return Ok(());
        }
        if self.health.unclean() {
            // Flush what can be, keep the bitmap and the unclean state.
            for v in self.vols.all() {
                let _ = v.flush();
            }
            self.daemon = None;
            bail!(
                Io,
                "array '{}' was not marked clean: an engine thread was given up with writes in flight (see the \
                 messages above); the next assemble resyncs the regions its write-intent bitmap marks",
                self.name()
            );
        }
        for v in self.vols.all() {
            if !self.health.writes_stopped() {
                v.close_cache()?;
                v.flush()?;
            }
        }
        self.daemon = None;
        if let Some(b) = &self.bitmap {
            b.clear_all()?;
        }
        self.meta().sb.state = State::Clean;
        self.persist()
    }

    /// Roles being rebuilt: onto a device, or into distributed spare
    /// space (held by a spare and not yet in sync).
    pub fn rebuilding(&self) -> Vec<u32> {
        (0..self.member_count())
            .filter(|&r| match self.health.state(r) {
                MemberState::Rebuilding => true,
                MemberState::Spared => self.health.recovery(r) != u64::MAX,
                _ => false,
            })
            .collect()
    }

    /// Rebuilds every rebuilding role in turn with `maint::rebuild` (over
    /// all volumes; it resumes from the recovery offset and skips regions
    /// never written), persisting its progress as the recovery offset
    /// (the checkpoint), at most `rate` bytes/s. `progress(role, done,
    /// total)` is called as it goes. Each role becomes active when done.
    ///
    /// Errors: from the rebuild (a member failing during it: the states are
    /// persisted by then) and superblock writes.
    pub fn rebuild(
        &mut self,
        rate: Option<u64>,
        progress: &mut dyn FnMut(u32, u64, u64),
    ) -> Result<Vec<crate::control::maint::RebuildReport>> {
        self.rebuild_until(rate, None, progress)
    }

    /// [`rebuild`](Self::rebuild) that also stops, at its next checkpoint
    /// (every [`CHECKPOINT_BYTES`](crate::control::maint::CHECKPOINT_BYTES) of
    /// progress, after persisting it), once `stop` is set: for a rebuild in
    /// the background of `uraid serve`, which the next assemble resumes.
    ///
    /// Errors: as `rebuild`, and `Interrupted` when stopped.
    pub fn rebuild_until(
        &mut self,
        rate: Option<u64>,
        stop: Option<&std::sync::atomic::AtomicBool>,
        progress: &mut dyn FnMut(u32, u64, u64),
    ) -> Result<Vec<crate::control::maint::RebuildReport>> {
        let mut reports = Vec::new();
        for role in self.rebuilding() {
            let meta = self.meta.clone();
            let health = self.health.clone();
            let checkpoint = move |offset: u64| -> Result<()> {
                health.set_recovery(role, offset);
                meta.lock().unwrap_or_else(|e| e.into_inner()).persist(&health)?;
                if stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed)) {
                    bail!(Interrupted, "the rebuild of role {role} was stopped at member byte {offset}; it resumes there");
                }
                Ok(())
            };
            let only_dirty = self.meta().sb.slots[role as usize].resync_from_bitmap && self.bitmap.is_some();
            let opts = crate::control::maint::RebuildOptions { rate, checkpoint: &checkpoint, only_dirty };
            let report = crate::control::maint::rebuild(self.vols.all(), role, &opts, &mut |d, t| progress(role, d, t))?;
            if self.health.state(role) != MemberState::Spared {
                self.health.set_state(role, MemberState::Active);
            }
            // A rebalance's end: its distributed spare is free again.
            self.end_rebalance(role);
            self.persist()?;
            reports.push(report);
        }
        Ok(reports)
    }

    /// Scrubs volume `index` (`uraid check` / `uraid repair`) with
    /// `maint::check`. Errors: `InvalidInput` for a volume that does not
    /// exist or is not redundant; from the check.
    pub fn check(
        &self,
        index: usize,
        repair: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<crate::control::maint::CheckReport> {
        let mut report = crate::control::maint::CheckReport::default();
        self.check_part(index, repair, &Default::default(), &mut report, progress)?;
        Ok(report)
    }

    /// [`check`](Self::check) that resumes, limits its rate and stops on a
    /// flag: see [`maint::check_part`](crate::control::maint::check_part)
    /// (returns where it stopped, `None` at the end). Same errors.
    pub fn check_part(
        &self,
        index: usize,
        repair: bool,
        opts: &crate::control::maint::CheckOptions<'_>,
        report: &mut crate::control::maint::CheckReport,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Option<u64>> {
        let entries = self.volume_entries();
        let Some(v) = entries.get(index) else {
            bail!(InvalidInput, "array '{}' has no volume {index}", self.name());
        };
        if !is_redundant(v) {
            bail!(InvalidInput, "{} has no redundancy to check", describe_volume(v));
        }
        crate::control::maint::check_part(&self.vols.all()[index], repair, opts, report, progress)
    }
}
