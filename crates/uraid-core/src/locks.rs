//! Per-stripe locks: concurrent writes to one stripe (and rebuild, scrub
//! and resync of it) are ordered by a lock on that stripe, not a global one.
//!
//! A fixed table of lock words hashed by stripe number, shared by every
//! queue of a volume; two stripes that hash alike only wait for each other.
//! The data path never blocks on a lock: a stripe operation that cannot
//! take its lock waits in its queue and retries (see the engine); the
//! control path (rebuild, scrub) uses [`StripeLocks::lock`], which spins
//! with short sleeps.

use std::sync::atomic::{AtomicBool, Ordering};

/// Number of lock words (a power of two).
const WORDS: usize = 1 << 14;

/// The lock table of one volume.
pub struct StripeLocks {
    words: Box<[AtomicBool]>,
}

impl std::fmt::Debug for StripeLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StripeLocks")
    }
}

impl Default for StripeLocks {
    fn default() -> Self {
        StripeLocks { words: (0..WORDS).map(|_| AtomicBool::new(false)).collect() }
    }
}

fn slot(stripe: u64) -> usize {
    // Fibonacci hashing: neighbouring stripes land far apart.
    (stripe.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 50) as usize & (WORDS - 1)
}

impl StripeLocks {
    /// Takes the lock of `stripe` if it is free; true when taken.
    pub fn try_lock(&self, stripe: u64) -> bool {
        self.words[slot(stripe)].compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Releases the lock of `stripe` (taken by this caller).
    pub fn unlock(&self, stripe: u64) {
        self.words[slot(stripe)].store(false, Ordering::Release);
    }

    /// Takes the lock of `stripe`, waiting as long as needed (control path).
    pub fn lock(&self, stripe: u64) -> StripeGuard<'_> {
        let mut spins = 0u32;
        while !self.try_lock(stripe) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        }
        StripeGuard { locks: self, stripe }
    }
}

impl StripeLocks {
    /// Takes the locks of every stripe in `stripes` (control path: rebuild,
    /// scrub), in increasing order, each lock word once even when two
    /// stripes of the range share it, so a batch never waits for itself.
    /// The data path holds one stripe lock at a time and never waits while
    /// holding one, so this cannot deadlock with it.
    pub fn lock_range(&self, stripes: std::ops::Range<u64>) -> Vec<StripeGuard<'_>> {
        let mut held: Vec<usize> = Vec::new();
        let mut out = Vec::new();
        for s in stripes {
            let w = slot(s);
            if held.contains(&w) {
                continue;
            }
            held.push(w);
            out.push(self.lock(s));
        }
        out
    }
}

/// Holds one stripe lock; released on drop.
pub struct StripeGuard<'a> {
    locks: &'a StripeLocks,
    stripe: u64,
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        self.locks.unlock(self.stripe);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let l = StripeLocks::default();
        assert!(l.try_lock(7));
        assert!(!l.try_lock(7));
        l.unlock(7);
        {
            let _g = l.lock(7);
            assert!(!l.try_lock(7));
        }
        assert!(l.try_lock(7));
        l.unlock(7);
    }

    #[test]
    fn a_range_takes_each_word_once() {
        let l = StripeLocks::default();
        // Stripes WORDS apart are likely to share a word; find two that do.
        let a = 3u64;
        let b = (4..1u64 << 24).find(|&x| slot(x) == slot(a)).expect("two stripes share a word");
        let g = l.lock_range(a..b + 1);
        assert!(!l.try_lock(a) && !l.try_lock(b));
        drop(g);
        assert!(l.try_lock(a));
    }
}
