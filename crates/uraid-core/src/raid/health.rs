//! Member health, shared by the data path and the control path.
//!
//! One [`Health`] per array (all the Matrix volumes on the same members
//! share it). The data path reads the member states on every redundant
//! request and marks a member [`Faulty`](MemberState::Faulty) when an I/O
//! on it fails; the control path (assemble, `uraid fail`, rebuild) sets the
//! states and persists them in the superblocks through the hook installed
//! with [`Health::set_on_change`], so a failure reaches the other members'
//! superblocks (event counter up) before the request that met it completes,
//! as md's `md_error` + superblock update do.
//!
//! A [`Rebuilding`](MemberState::Rebuilding) member takes every write but
//! holds valid data only below its recovery offset (an absolute byte offset
//! on the member, like md's `recovery_offset`): reads and parity updates
//! treat it as missing above that offset.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::raid::spare::SpareMap;

use crate::Result;

/// State of one member (role) of an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[repr(u8)]
pub enum MemberState {
    /// In sync: read and written.
    Active = 0,
    /// Failed or failed by the user: neither read nor written.
    Faulty = 1,
    /// Being rebuilt: written always, read only below its recovery offset.
    Rebuilding = 2,
    /// A spare waiting for a rebuild: neither read nor written.
    Spare = 3,
    /// No device in this role (removed, or missing at assemble).
    Missing = 4,
    /// Held by a distributed spare of its declustered volume (issue 33):
    /// its chunks live in the rows' spare chunks on the other members
    /// ([`SpareMap`]); read below its recovery offset (the distributed
    /// rebuild's progress) where the spare chunk's member is readable,
    /// written always.
    Spared = 5,
}

impl MemberState {
    /// The state stored as `v` (superblock byte); unknown values are
    /// `Missing`.
    pub fn from_u8(v: u8) -> MemberState {
        match v {
            0 => MemberState::Active,
            1 => MemberState::Faulty,
            2 => MemberState::Rebuilding,
            3 => MemberState::Spare,
            5 => MemberState::Spared,
            _ => MemberState::Missing,
        }
    }

    /// Lower-case name as `uraid status` prints it.
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Active => "active",
            MemberState::Faulty => "faulty",
            MemberState::Rebuilding => "rebuilding",
            MemberState::Spare => "spare",
            MemberState::Missing => "missing",
            MemberState::Spared => "spared",
        }
    }
}

type OnChange = Box<dyn Fn(&Health, u32) -> Result<()> + Send + Sync>;

/// The states of an array's member roles, and the recovery offset of each.
pub struct Health {
    states: Vec<AtomicU8>,
    recovery: Vec<AtomicU64>,
    generation: AtomicU64,
    stopped: AtomicBool,
    /// An engine thread was given up with writes in flight (see
    /// [`set_unclean`](Health::set_unclean)).
    unclean: AtomicBool,
    on_change: Mutex<Option<OnChange>>,
    /// Told after `on_change` (see [`set_notify`](Health::set_notify)).
    notify: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    /// The members' read errors and their limit.
    read_errors: crate::raid::read_errors::ReadErrors,
    /// The declustered volume's distributed spares (set at assemble when
    /// the array's one volume is declustered).
    spare: OnceLock<Arc<SpareMap>>,
    /// Some role is [`Spared`](MemberState::Spared): the data path remaps
    /// its pieces (tested once per request).
    spared: AtomicBool,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health").field("states", &self.states()).field("generation", &self.generation()).finish()
    }
}

impl Health {
    /// `members` roles, all [`Active`](MemberState::Active).
    pub fn new(members: usize) -> Health {
        Health {
            states: (0..members).map(|_| AtomicU8::new(MemberState::Active as u8)).collect(),
            recovery: (0..members).map(|_| AtomicU64::new(u64::MAX)).collect(),
            generation: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            unclean: AtomicBool::new(false),
            on_change: Mutex::new(None),
            notify: Mutex::new(None),
            read_errors: crate::raid::read_errors::ReadErrors::new(members),
            spare: OnceLock::new(),
            spared: AtomicBool::new(false),
        }
    }

    /// Sets the declustered volume's distributed spare map (once; later
    /// calls are ignored).
    pub fn set_spare_map(&self, map: Arc<SpareMap>) {
        let _ = self.spare.set(map);
        self.note_spared();
    }

    /// The distributed spare map, when the array's volume is declustered.
    #[inline]
    pub fn spare_map(&self) -> Option<&Arc<SpareMap>> {
        self.spare.get()
    }

    /// True when some role is [`held`](Self::held) by a distributed spare
    /// (some of its I/O goes to the spare chunks: see
    /// [`spare_home`](Self::spare_home)).
    #[inline]
    pub fn spared(&self) -> bool {
        self.spared.load(Ordering::Acquire)
    }

    /// Where role `m`'s I/O at absolute member offset `abs` goes: the
    /// spare chunk's member when a distributed spare holds `m` there (see
    /// [`spare_home`](Self::spare_home)), else `m`.
    #[inline]
    pub fn physical(&self, m: u32, abs: u64) -> u32 {
        self.spare_home(m, abs).unwrap_or(m)
    }

    /// True when a distributed spare holds role `m`'s bytes somewhere:
    /// the role is [`Spared`](MemberState::Spared), or it is being
    /// rebalanced (rebuilding onto a device that took the role while the
    /// spare still holds its bytes at and above the recovery offset).
    #[inline]
    pub fn held(&self, m: u32) -> bool {
        match self.state(m) {
            MemberState::Spared => true,
            MemberState::Rebuilding => self.rebalancing(m),
            _ => false,
        }
    }

    /// True when role `m` is being rebalanced: rebuilding onto its device
    /// (from recovery offset 0 up) while a distributed spare still holds
    /// it; below the recovery offset its bytes are on the device, at and
    /// above it in the spare chunks.
    #[inline]
    pub fn rebalancing(&self, m: u32) -> bool {
        self.state(m) == MemberState::Rebuilding && self.spare.get().is_some_and(|s| s.spare_of(m).is_some())
    }

    /// The member holding role `m`'s byte at absolute member offset `abs`
    /// in a spare chunk: the row's spare chunk's member when `m` is
    /// [`Spared`](MemberState::Spared), or rebalancing and `abs` is at or
    /// above its recovery offset; `None` when the role's own device holds
    /// it (or nothing does). When that member's own role is held too (its
    /// device lost after it took the spare chunk: draid6 with two spares
    /// in use), the byte lives where that role's byte of the row lives.
    #[inline]
    pub fn spare_home(&self, m: u32, abs: u64) -> Option<u32> {
        let x = self.home_once(m, abs)?;
        if x != m && self.held(x) {
            return Some(self.home_once(x, abs).unwrap_or(x));
        }
        Some(x)
    }

    /// [`spare_home`](Self::spare_home) without following a held holder.
    #[inline]
    fn home_once(&self, m: u32, abs: u64) -> Option<u32> {
        let sm = self.spare.get()?;
        match self.state(m) {
            MemberState::Spared => sm.holder(m, abs),
            MemberState::Rebuilding if abs >= self.recovery(m) => sm.holder(m, abs),
            _ => None,
        }
    }

    /// True when `[offset, offset+len)` of spared role `m` can be read:
    /// below its recovery offset, and in each chunk row the spare chunk's
    /// member holds valid data.
    #[cold]
    #[inline(never)]
    fn spared_readable(&self, m: u32, offset: u64, len: u64) -> bool {
        offset.saturating_add(len) <= self.recovery(m) && self.spare_rows_readable(m, offset, len)
    }

    /// True when `[offset, offset+len)` of rebuilding role `m` can be
    /// read: below its recovery offset (on its device), or, while it is
    /// rebalanced, at or above it where each row's spare chunk's member
    /// holds valid data. A range across the recovery offset is not.
    #[cold]
    #[inline(never)]
    fn rebuilding_readable(&self, m: u32, offset: u64, len: u64) -> bool {
        let rec = self.recovery(m);
        offset.saturating_add(len) <= rec || (offset >= rec && self.rebalancing(m) && self.spare_rows_readable(m, offset, len))
    }

    /// True when, in each chunk row of `[offset, offset+len)`, the member
    /// holding role `m`'s spare chunk holds valid data there (followed
    /// once when that member's own role is held: see
    /// [`spare_home`](Self::spare_home); a held holder's rebuild into its
    /// spare must have passed the row).
    fn spare_rows_readable(&self, m: u32, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        let Some(sm) = self.spare.get() else { return false };
        let mut at = offset;
        loop {
            let Some(x) = sm.holder(m, at) else { return false };
            let stop = end.min(sm.row_end(at));
            let (y, hop_ok) = match x != m && self.held(x) {
                true => (self.home_once(x, at).unwrap_or(x), self.state(x) != MemberState::Spared || stop <= self.recovery(x)),
                false => (x, true),
            };
            // The role's place in this row is a spare chunk or unused: it
            // holds no data or parity there, nothing to read.
            let ok = sm.holds_nothing(m, at)
                || hop_ok
                && y != m
                && match self.state(y) {
                    MemberState::Active => true,
                    MemberState::Rebuilding => stop <= self.recovery(y),
                    _ => false,
                };
            at = sm.row_end(at);
            if !ok || at >= end {
                return ok;
            }
        }
    }

    /// The members' read errors (repaired, failed) and the limit past
    /// which a member is failed for them.
    pub fn read_errors(&self) -> &crate::raid::read_errors::ReadErrors {
        &self.read_errors
    }

    /// Number of roles.
    pub fn members(&self) -> usize {
        self.states.len()
    }

    /// State of role `m`.
    #[inline]
    pub fn state(&self, m: u32) -> MemberState {
        MemberState::from_u8(self.states[m as usize].load(Ordering::Acquire))
    }

    /// Every role's state.
    pub fn states(&self) -> Vec<MemberState> {
        (0..self.states.len() as u32).map(|m| self.state(m)).collect()
    }

    /// Sets role `m`'s state (control path; does not call the hook). A
    /// `Rebuilding` member starts with recovery offset 0 unless
    /// [`set_recovery`](Self::set_recovery) says otherwise.
    pub fn set_state(&self, m: u32, s: MemberState) {
        if matches!(s, MemberState::Rebuilding | MemberState::Spared) {
            self.recovery[m as usize].store(0, Ordering::Release);
        } else {
            self.recovery[m as usize].store(u64::MAX, Ordering::Release);
        }
        self.states[m as usize].store(s as u8, Ordering::Release);
        self.note_spared();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Sets the flag [`spared`](Self::spared) from the states and the
    /// spare map: some role is [`held`](Self::held). The control path
    /// calls it after it changes the spare map's assignments.
    pub fn note_spared(&self) {
        let any = (0..self.states.len() as u32).any(|m| self.held(m));
        self.spared.store(any, Ordering::Release);
    }

    /// Absolute byte offset on role `m` below which a rebuilding member
    /// holds valid data (`u64::MAX` when it is in sync).
    pub fn recovery(&self, m: u32) -> u64 {
        self.recovery[m as usize].load(Ordering::Acquire)
    }

    /// Moves role `m`'s recovery offset (rebuild progress).
    pub fn set_recovery(&self, m: u32, offset: u64) {
        self.recovery[m as usize].store(offset, Ordering::Release);
    }

    /// True when role `m` holds valid data over `[offset, offset+len)`
    /// (absolute member bytes): active, or rebuilding and already past it.
    /// The data path asks this per member piece: the active case is one
    /// load and one compare, the rest out of line.
    #[inline]
    pub fn readable(&self, m: u32, offset: u64, len: u64) -> bool {
        self.states[m as usize].load(Ordering::Acquire) == MemberState::Active as u8 || self.readable_slow(m, offset, len)
    }

    /// [`readable`](Self::readable) for a role not active.
    #[cold]
    #[inline(never)]
    fn readable_slow(&self, m: u32, offset: u64, len: u64) -> bool {
        match self.state(m) {
            MemberState::Active => true,
            MemberState::Rebuilding => self.rebuilding_readable(m, offset, len),
            MemberState::Spared => self.spared_readable(m, offset, len),
            _ => false,
        }
    }

    /// True when writes go to role `m` (active, rebuilding, or held by a
    /// distributed spare).
    #[inline]
    pub fn writable(&self, m: u32) -> bool {
        // One load and a mask test (the data path asks per member).
        const WRITABLE: u32 = 1 << MemberState::Active as u32 | 1 << MemberState::Rebuilding as u32 | 1 << MemberState::Spared as u32;
        let s = self.states[m as usize].load(Ordering::Acquire) as u32;
        s < 32 && (1 << s) & WRITABLE != 0
    }

    /// True when role `m`'s own device is in service (active or
    /// rebuilding): what gets its flushes and its copy of the bitmap. A
    /// role a distributed spare holds has none in service (its chunks are
    /// on the others).
    #[inline]
    pub fn device_in_service(&self, m: u32) -> bool {
        matches!(self.state(m), MemberState::Active | MemberState::Rebuilding)
    }

    /// Bumped on every state change; lets a reader notice one cheaply.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Marks role `m` faulty after an I/O error (data path) and runs the
    /// hook, which persists the change. Returns true when this call made
    /// the change (the member was not already faulty). A hook error is
    /// returned; the member stays faulty in memory either way.
    pub fn fail(&self, m: u32) -> Result<bool> {
        let cur = self.states[m as usize].load(Ordering::Acquire);
        if cur == MemberState::Faulty as u8 || cur == MemberState::Missing as u8 {
            return Ok(false);
        }
        if self.states[m as usize]
            .compare_exchange(cur, MemberState::Faulty as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Ok(false);
        }
        self.recovery[m as usize].store(u64::MAX, Ordering::Release);
        self.note_spared();
        self.generation.fetch_add(1, Ordering::AcqRel);
        let hook = self.on_change.lock().unwrap_or_else(|e| e.into_inner());
        let persisted = match hook.as_ref() {
            Some(h) => h(self, m),
            None => Ok(()),
        };
        drop(hook);
        if let Some(n) = self.notify.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            n();
        }
        persisted?;
        Ok(true)
    }

    /// Installs a notification run after the data path fails a member
    /// (after the [`set_on_change`](Health::set_on_change) hook, whatever
    /// it returned): a service that watches the array learns of it at
    /// once instead of at its next look. It must not block.
    pub fn set_notify(&self, f: impl Fn() + Send + Sync + 'static) {
        *self.notify.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(f));
    }

    /// Installs the hook run after the data path fails a member (with the
    /// role); the control path persists the new states there.
    pub fn set_on_change(&self, f: impl Fn(&Health, u32) -> Result<()> + Send + Sync + 'static) {
        *self.on_change.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(f));
    }

    /// Marks the array failed: more members are gone than a volume
    /// tolerates, so nothing more is written (writes fail with EIO).
    pub fn stop_writes(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// Records that an engine queue was given up (a panic in its thread,
    /// its ring failed) with requests in flight: some stripes may hold
    /// copies or parity that disagree, so the array must not be marked
    /// clean at its stop (its write-intent bitmap, or a whole resync, then
    /// repairs them at the next assemble).
    pub fn set_unclean(&self) {
        self.unclean.store(true, Ordering::Release);
    }

    /// True once [`set_unclean`](Self::set_unclean) was called.
    pub fn unclean(&self) -> bool {
        self.unclean.load(Ordering::Acquire)
    }

    /// True once [`stop_writes`](Self::stop_writes) was called.
    pub fn writes_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn fail_runs_the_hook_once_and_rebuilding_reads_below_recovery() {
        let h = Health::new(3);
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        h.set_on_change(move |h, m| {
            assert_eq!(h.state(m), MemberState::Faulty);
            c.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        assert!(h.fail(1).unwrap());
        assert!(!h.fail(1).unwrap());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(!h.readable(1, 0, 1) && !h.writable(1));
        h.set_state(2, MemberState::Rebuilding);
        h.set_recovery(2, 1 << 20);
        assert!(h.readable(2, 0, 1 << 20));
        assert!(!h.readable(2, 4096, 1 << 20));
        assert!(h.writable(2));
        assert_eq!(h.states(), vec![MemberState::Active, MemberState::Faulty, MemberState::Rebuilding]);
    }

    /// Issue 33: a role a distributed spare holds reads below its
    /// recovery offset where the row's spare chunk is on a member in
    /// service, is always written, and its I/O goes to that member; the
    /// flag the data path tests is set only while some role is held.
    #[test]
    fn a_spared_role_reads_from_its_rows_spare_chunks() {
        let map = crate::raid::level::DraidMap::new(8, 4, 1, 1, 9).unwrap();
        let (chunk, base) = (65536u64, 1u64 << 20);
        let sm = Arc::new(SpareMap::new(map, chunk, base, 64 * chunk));
        let h = Health::new(8);
        h.set_spare_map(sm.clone());
        assert!(!h.spared());
        h.set_state(3, MemberState::Faulty);
        sm.set(3, Some(0));
        h.set_state(3, MemberState::Spared);
        assert!(h.spared() && h.writable(3));
        h.set_recovery(3, base + 10 * chunk);
        let row = (0..10).find(|&r| map.spare(r, 0) != 3).unwrap();
        let at = base + row * chunk;
        assert!(h.readable(3, at, chunk), "below the recovery offset");
        assert!(!h.readable(3, base + 10 * chunk, chunk), "above it");
        assert_eq!(h.physical(3, at), map.spare(row, 0));
        h.set_state(map.spare(row, 0), MemberState::Faulty);
        assert!(!h.readable(3, at, chunk), "the spare chunk's member failed");
        h.set_state(3, MemberState::Faulty);
        assert!(!h.spared(), "no role held: the data path pays nothing");
    }

    /// Issue 33: a role that a device took while its distributed spare
    /// holds it (the rebalance) reads and writes its device below the
    /// recovery offset and its rows' spare chunks at and above it; a range
    /// across the offset is not readable (reconstructed); when the
    /// rebalance ends, nothing is held and the data path pays nothing.
    #[test]
    fn a_rebalanced_role_lives_on_its_device_below_the_checkpoint_and_in_the_spare_above() {
        let map = crate::raid::level::DraidMap::new(8, 4, 1, 1, 9).unwrap();
        let (chunk, base) = (65536u64, 1u64 << 20);
        let sm = Arc::new(SpareMap::new(map, chunk, base, 64 * chunk));
        let h = Health::new(8);
        h.set_spare_map(sm.clone());
        sm.set(3, Some(0));
        h.set_state(3, MemberState::Spared);
        h.set_recovery(3, u64::MAX);
        h.set_state(3, MemberState::Rebuilding);
        assert!(h.spared() && h.rebalancing(3) && h.held(3) && h.writable(3));
        h.set_recovery(3, base + 10 * chunk);
        let below = base + 2 * chunk;
        assert!(h.readable(3, below, chunk));
        assert_eq!(h.physical(3, below), 3, "below the checkpoint: the device");
        let row = (10..64).find(|&r| map.spare(r, 0) != 3).unwrap();
        let above = base + row * chunk;
        assert!(h.readable(3, above, chunk), "above it: the spare chunk");
        assert_eq!(h.physical(3, above), map.spare(row, 0));
        assert!(!h.readable(3, base + 9 * chunk, 2 * chunk), "across the checkpoint");
        h.set_state(map.spare(row, 0), MemberState::Faulty);
        assert!(!h.readable(3, above, chunk), "the spare chunk's member failed");
        assert!(h.readable(3, below, chunk));
        sm.set(3, None);
        h.set_state(3, MemberState::Active);
        assert!(!h.spared(), "no role held: the data path pays nothing");
    }
}
