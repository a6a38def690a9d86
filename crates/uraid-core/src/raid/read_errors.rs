//! Read errors of the members and the limit past which a member is failed
//! for them (md's `max_read_errors`).
//!
//! A read that fails on one member of a redundant volume is served from
//! the other copies or the parity, and the bad range is rewritten on the
//! member from them (see the engine's `repair.rs`): the member stays in
//! the array. Each such error counts; the count halves every hour without
//! one (md's `check_decay_read_errors`, on [`crate::clock`]), and a member
//! whose count goes past the limit (default [`DEFAULT_MAX_READ_ERRORS`],
//! md's) is failed instead of repaired. Shared by every volume of an
//! array (it lives in the array's [`Health`](crate::raid::health::Health)).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

/// md's default `max_read_errors`: corrected read errors a member may have
/// (within the decay, see [`ReadErrors`]) before it is failed.
pub const DEFAULT_MAX_READ_ERRORS: u32 = 20;

/// How long the count of a member's read errors takes to halve (s): md
/// halves it every hour.
pub const DECAY_SECS: u64 = 3600;

/// One member's read errors.
#[derive(Debug, Default)]
struct MemberErrors {
    /// Read errors counted towards the limit, and when the count was last
    /// decayed (s, [`crate::clock::since`] the counter's start).
    recent: Mutex<(u32, u64)>,
    /// Read errors repaired from redundancy, ever (this run).
    corrected: AtomicU64,
    /// Read errors that failed the read (no redundancy left, RAID 0).
    uncorrected: AtomicU64,
    /// Why the member was failed for its read errors, when it was.
    failed: Mutex<Option<String>>,
}

/// The read errors of an array's members (by role) and the limit.
#[derive(Debug)]
pub struct ReadErrors {
    max: AtomicU32,
    members: Vec<MemberErrors>,
    start: std::time::Instant,
}

impl ReadErrors {
    /// Counters for `members` roles, all zero, with md's limit.
    pub fn new(members: usize) -> ReadErrors {
        ReadErrors {
            max: AtomicU32::new(DEFAULT_MAX_READ_ERRORS),
            members: (0..members).map(|_| MemberErrors::default()).collect(),
            start: crate::clock::now(),
        }
    }

    /// The limit: a member is failed at its read error past this many.
    pub fn max(&self) -> u32 {
        self.max.load(Ordering::Relaxed)
    }

    /// Sets the limit (`uraid ... --max-read-errors N`; 0: the first read
    /// error fails the member, as before repairs existed).
    pub fn set_max(&self, n: u32) {
        self.max.store(n, Ordering::Relaxed);
    }

    fn member(&self, m: u32) -> Option<&MemberErrors> {
        self.members.get(m as usize)
    }

    /// Counts a read error of role `m`, after halving the count once per
    /// hour since the last one; true when the count is now past the limit
    /// (the member must be failed, not repaired), with the reason kept for
    /// [`failed_reason`](Self::failed_reason).
    pub fn note_error(&self, m: u32) -> bool {
        let Some(e) = self.member(m) else { return true };
        let now = crate::clock::since(self.start).as_secs();
        let mut r = e.recent.lock().unwrap_or_else(|p| p.into_inner());
        let hours = now.saturating_sub(r.1) / DECAY_SECS;
        if hours > 0 {
            r.0 = if hours >= 32 { 0 } else { r.0 >> hours };
            r.1 += hours * DECAY_SECS;
        }
        r.0 = r.0.saturating_add(1);
        let max = self.max();
        let over = r.0 > max;
        if over {
            *e.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!(
                "{} read errors within md's decay window (limit --max-read-errors {max})",
                r.0
            ));
        }
        over
    }

    /// Read errors of role `m` counted towards the limit now (halved per
    /// hour since the last one).
    pub fn recent(&self, m: u32) -> u32 {
        let Some(e) = self.member(m) else { return 0 };
        let now = crate::clock::since(self.start).as_secs();
        let r = e.recent.lock().unwrap_or_else(|p| p.into_inner());
        let hours = now.saturating_sub(r.1) / DECAY_SECS;
        if hours >= 32 {
            0
        } else {
            r.0 >> hours
        }
    }

    /// A read error of role `m` was repaired from redundancy.
    pub fn note_corrected(&self, m: u32) {
        if let Some(e) = self.member(m) {
            e.corrected.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A read error of role `m` failed the read (nothing to repair it from).
    pub fn note_uncorrected(&self, m: u32) {
        if let Some(e) = self.member(m) {
            e.uncorrected.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Read errors of role `m` repaired from redundancy.
    pub fn corrected(&self, m: u32) -> u64 {
        self.member(m)
            .map_or(0, |e| e.corrected.load(Ordering::Relaxed))
    }

    /// Read errors of role `m` that failed the read.
    pub fn uncorrected(&self, m: u32) -> u64 {
        self.member(m)
            .map_or(0, |e| e.uncorrected.load(Ordering::Relaxed))
    }

    /// Read errors repaired on every member.
    pub fn corrected_total(&self) -> u64 {
        (0..self.members.len() as u32)
            .map(|m| self.corrected(m))
            .sum()
    }

    /// Why role `m` was failed for its read errors, if it was.
    pub fn failed_reason(&self, m: u32) -> Option<String> {
        self.member(m)
            .and_then(|e| e.failed.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Why role `m`'s repair failed (the rewrite or the re-read), kept as
    /// the reason it was failed.
    pub fn set_failed_reason(&self, m: u32, why: String) {
        if let Some(e) = self.member(m) {
            *e.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_halves_every_hour_on_the_virtual_clock() {
        let clock = crate::clock::Virtual::new();
        let _on = clock.install();
        let e = ReadErrors::new(2);
        e.set_max(3);
        for _ in 0..3 {
            assert!(!e.note_error(1));
        }
        assert_eq!(e.recent(1), 3);
        clock.advance(std::time::Duration::from_secs(DECAY_SECS));
        assert_eq!(e.recent(1), 1, "3 halves to 1 after an hour");
        assert!(!e.note_error(1));
        assert!(!e.note_error(1));
        assert!(
            e.note_error(1),
            "the 4th error within the window is past the limit of 3"
        );
        assert!(e.failed_reason(1).unwrap().contains("max-read-errors 3"));
        assert_eq!(e.recent(0), 0);
        assert!(!e.note_error(0));
    }
}
