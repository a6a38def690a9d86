//! Per-stripe locks: concurrent writes to one stripe (and rebuild, scrub
//! and resync of it) are ordered by a lock on that stripe, not a global one.
//!
//! A fixed table of lock words hashed by stripe number, shared by every
//! queue of a volume; two stripes that hash alike only wait for each other.
//! The data path never blocks on a lock: a stripe operation that cannot
//! take its lock waits in its queue and retries (see the engine); the
//! control path (rebuild, scrub) uses [`StripeLocks::lock`], which spins
//! with short sleeps.
//!
//! Each lock word also counts the writes released through it (its
//! *generation*): a queue that keeps a reconstructed degraded stripe for
//! the next request (see the engine) checks, under the lock, that no write
//! to a stripe of that word happened since.

use std::sync::atomic::{AtomicU64, Ordering};

/// Number of lock words (a power of two).
const WORDS: usize = 1 << 14;

/// The lock table of one volume.
pub struct StripeLocks {
    /// Bit 0: held. Bits 1..: the generation.
    words: Box<[AtomicU64]>,
}

impl std::fmt::Debug for StripeLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StripeLocks")
    }
}

impl Default for StripeLocks {
    fn default() -> Self {
        StripeLocks { words: (0..WORDS).map(|_| AtomicU64::new(0)).collect() }
    }
}

fn slot(stripe: u64) -> usize {
    // Fibonacci hashing: neighbouring stripes land far apart.
    (stripe.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 50) as usize & (WORDS - 1)
}

impl StripeLocks {
    /// The lock word `stripe` hashes to (stripes with the same word share
    /// one lock).
    pub fn word(&self, stripe: u64) -> usize {
        slot(stripe)
    }

    /// Takes the lock of `stripe` if it is free; true when taken.
    pub fn try_lock(&self, stripe: u64) -> bool {
        let w = &self.words[slot(stripe)];
        let v = w.load(Ordering::Relaxed);
        v & 1 == 0 && w.compare_exchange(v, v | 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Releases the lock of `stripe` (taken by this caller) after reading
    /// only: the generation stays.
    pub fn unlock(&self, stripe: u64) {
        self.words[slot(stripe)].fetch_and(!1, Ordering::Release);
    }

    /// Releases the lock of `stripe` (taken by this caller) after changing
    /// what the members hold there: the generation goes up by one.
    pub fn unlock_written(&self, stripe: u64) {
        // Held means bit 0 is set: adding 1 clears it and carries into the
        // generation.
        self.words[slot(stripe)].fetch_add(1, Ordering::Release);
    }

    /// Releases lock word `word` (see [`word`](Self::word)) held by this
    /// caller, as [`unlock_written`](Self::unlock_written) does: a queue
    /// given up (a panic, a failed ring) lets go of its stripes this way,
    /// not knowing what it left written.
    pub fn release_word(&self, word: usize) {
        self.words[word & (WORDS - 1)].fetch_add(1, Ordering::Release);
    }

    /// The write generation of `stripe`'s lock word (shared with the
    /// stripes that hash alike); stable while the caller holds the lock.
    pub fn generation(&self, stripe: u64) -> u64 {
        self.words[slot(stripe)].load(Ordering::Acquire) >> 1
    }

    /// Takes the lock of `stripe`, waiting as long as needed (control path).
    pub fn lock(&self, stripe: u64) -> StripeGuard<'_> {
        let mut spins = 0u32;
        while !self.try_lock(stripe) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                crate::clock::sleep(std::time::Duration::from_micros(20));
            }
        }
        StripeGuard { locks: self, stripe }
    }
}

/// How long (ns, on the caller's clock) [`StripeLocks::lock_range`] waits
/// for one lock while it holds others before it lets them all go and
/// starts again. A data-path operation finishes in far less; one that
/// takes longer may be waiting, on the thread that holds the wanted lock,
/// for a lock of this range.
const RANGE_PATIENCE_NS: u64 = 20_000_000;

impl StripeLocks {
    /// Takes the locks of every stripe in `stripes` (control path: rebuild,
    /// scrub), in increasing order, each lock word once even when two
    /// stripes of the range share it, so a batch never waits for itself.
    ///
    /// It never holds some of the range's locks for long while it waits
    /// for another: after `RANGE_PATIENCE_NS` (20 ms) it releases those it holds
    /// and starts again. A data-path queue never waits while it holds a
    /// lock, but one thread may drive two queues (the write-back cache's
    /// flusher writes lines through one and reads for its journal records
    /// through the other): the first queue's lock is then held while the
    /// thread waits for the second queue's operation, which may want a
    /// lock of this range. Holding on would deadlock both (simulation
    /// seeds 13184738158306722489 and 4838787883033342269).
    pub fn lock_range(&self, stripes: std::ops::Range<u64>) -> Vec<StripeGuard<'_>> {
        let mut held: Vec<usize> = Vec::new();
        let mut out = Vec::new();
        'again: loop {
            for s in stripes.clone() {
                let w = slot(s);
                if held.contains(&w) {
                    continue;
                }
                let mut spins = 0u32;
                let mut since = None;
                while !self.try_lock(s) {
                    spins += 1;
                    if spins < 64 {
                        std::hint::spin_loop();
                        continue;
                    }
                    let now = crate::clock::now_ns();
                    let t0 = *since.get_or_insert(now);
                    if !out.is_empty() && now.saturating_sub(t0) > RANGE_PATIENCE_NS {
                        // Let go, give the holder's other work a moment, and
                        // take the range again from its start.
                        held.clear();
                        out.clear();
                        crate::clock::sleep(std::time::Duration::from_millis(1));
                        continue 'again;
                    }
                    crate::clock::sleep(std::time::Duration::from_micros(20));
                }
                held.push(w);
                out.push(StripeGuard { locks: self, stripe: s });
            }
            return out;
        }
    }
}

/// Holds one stripe lock; released on drop as a write (the control path
/// may have rewritten the stripe), so the generation goes up.
pub struct StripeGuard<'a> {
    locks: &'a StripeLocks,
    stripe: u64,
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        self.locks.unlock_written(self.stripe);
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
    fn writes_bump_the_generation_reads_do_not() {
        let l = StripeLocks::default();
        let g0 = l.generation(9);
        assert!(l.try_lock(9));
        l.unlock(9);
        assert_eq!(l.generation(9), g0);
        assert!(l.try_lock(9));
        l.unlock_written(9);
        assert_eq!(l.generation(9), g0 + 1);
        assert!(l.try_lock(9), "unlocked after a write");
        assert!(!l.try_lock(9));
        l.unlock(9);
        drop(l.lock(9));
        assert_eq!(l.generation(9), g0 + 2, "the control path's guard counts as a write");
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

    #[test]
    fn a_range_lets_go_while_a_lock_it_wants_waits_for_one_it_holds() {
        // A thread that holds stripe `b` and will release it only once it
        // got stripe `a` (the flusher's writer queue holding a lock while
        // the same thread waits for its recorder queue's read): the range
        // a..=b must let `a` go for a while rather than wait with it held.
        let l = std::sync::Arc::new(StripeLocks::default());
        let (a, b) = (5u64, 6u64);
        assert_ne!(slot(a), slot(b));
        assert!(l.try_lock(b));
        let (tx, rx) = std::sync::mpsc::channel();
        let l2 = l.clone();
        let holder = std::thread::spawn(move || {
            // Wait until the range below holds `a`, then for `a` itself.
            while l2.try_lock(a) {
                l2.unlock(a);
                std::thread::yield_now();
            }
            while !l2.try_lock(a) {
                std::thread::yield_now();
            }
            l2.unlock(a);
            l2.unlock(b);
        });
        let l3 = l.clone();
        std::thread::spawn(move || {
            drop(l3.lock_range(a..b + 1));
            let _ = tx.send(());
        });
        rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the range deadlocked with a holder waiting for a lock it held");
        holder.join().unwrap();
    }
}
