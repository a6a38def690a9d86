//! The cache's line table: the lines the cache holds, each with a valid
//! and a dirty bit per 512-byte sector, in shards (a mutex each, hashed by
//! line number, so that queues on different lines do not wait for each
//! other); the bytes cached and dirty; least-recently-used eviction of
//! clean lines; the pool of line-sized buffers.
//!
//! Its interface: look a line up under its shard's lock ([`LineTable::slot`]),
//! mark sectors dirty ([`LineTable::mark_dirty`]) or clean
//! ([`LineTable::written_back`], [`LineTable::drop_sectors`],
//! [`LineTable::forget`]), make room ([`LineTable::make_room`],
//! [`LineTable::evict`]) and, for the flusher, take the dirty lines
//! ([`LineTable::snapshots`]) and the oldest write they carry
//! ([`LineTable::oldest_dirty`]). The byte counts change only here, so that
//! the dirty count stays the sum of the lines' dirty sectors.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::cache::{lock, CACHE_SECTOR};
use crate::io::buf::IoBuf;

/// Shards of the table (a mutex each).
const SHARDS: usize = 64;

/// A dirty line as the flusher took it ([`LineTable::snapshots`]).
pub(super) struct Snap {
    pub(super) idx: u64,
    pub(super) generation: u64,
    /// The line's dirty sectors (the rest of the buffer is stale).
    pub(super) data: IoBuf,
    pub(super) dirty: Vec<u64>,
    pub(super) valid: Vec<u64>,
    pub(super) last_seq: u64,
}

/// One line: a stripe's data (see the cache's module), its bits and what
/// the flusher and the journal need to know of its writes.
pub(super) struct Line {
    data: IoBuf,
    /// One bit per sector.
    valid: Vec<u64>,
    dirty: Vec<u64>,
    /// Set anew by every write into the line (and at its making): a
    /// generation no line had before ([`LineTable::next_generation`]).
    generation: u64,
    /// Reads in flight that will lay this line over their result.
    readers: u32,
    /// Sequence number of the oldest write the dirty sectors carry (for
    /// the flusher's order), 0 when clean.
    oldest: u64,
    /// When it became dirty ([`now_ns`](crate::io::member::now_ns)).
    dirty_since: u64,
    /// Sequence number of the newest write copied in.
    last_seq: u64,
    last_use: u64,
    /// The generation the flusher last took the line at (its snapshot).
    snapped: u64,
    /// Sectors written since that snapshot: on a write-back of the
    /// snapshot they stay dirty, the others are on the members
    /// ([`LineTable::written_back`]).
    fresh: Vec<u64>,
}

impl Line {
    fn count(bits: &[u64]) -> u64 {
        bits.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// The line's bytes.
    #[inline]
    pub(super) fn data(&self) -> &IoBuf {
        &self.data
    }

    /// The line's bytes, to copy a write or a read into (then
    /// [`LineTable::mark_dirty`] or [`Line::set_valid`]).
    #[inline]
    pub(super) fn data_mut(&mut self) -> &mut IoBuf {
        &mut self.data
    }

    /// The valid sectors (a bit each).
    #[inline]
    pub(super) fn valid(&self) -> &[u64] {
        &self.valid
    }

    /// The dirty sectors (a bit each).
    #[inline]
    pub(super) fn dirty(&self) -> &[u64] {
        &self.dirty
    }

    /// True when sectors `a..b` are all valid.
    #[inline]
    pub(super) fn holds(&self, a: usize, b: usize) -> bool {
        all_set(&self.valid, a, b)
    }

    /// Sectors `a..b` hold what the members hold (read in).
    #[inline]
    pub(super) fn set_valid(&mut self, a: usize, b: usize) {
        set_bits(&mut self.valid, a, b);
    }

    /// The sequence number of the oldest write its dirty sectors carry; 0
    /// when clean.
    #[inline]
    pub(super) fn oldest(&self) -> u64 {
        self.oldest
    }

    /// Its generation now (see `generation`).
    #[inline]
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// The sequence number of the newest write copied in.
    #[inline]
    pub(super) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Used at LRU time `now` ([`LineTable::tick`]).
    #[inline]
    pub(super) fn used(&mut self, now: u64) {
        self.last_use = now;
    }

    /// A read in flight will lay this line over its result: not evicted
    /// until [`LineTable::unpin`].
    #[inline]
    pub(super) fn pin(&mut self) {
        self.readers += 1;
    }

    /// The flusher takes the line as it is now: writes from now on are
    /// `fresh`.
    pub(super) fn snapped(&mut self) {
        self.snapped = self.generation;
        self.fresh.iter_mut().for_each(|w| *w = 0);
    }

    fn evictable(&self) -> bool {
        self.oldest == 0 && self.readers == 0
    }
}

#[derive(Default)]
struct Shard {
    lines: HashMap<u64, Line>,
}

/// Line `idx` under its shard's lock ([`LineTable::slot`]).
pub(super) struct Slot<'t> {
    table: &'t LineTable,
    idx: u64,
    shard: MutexGuard<'t, Shard>,
}

impl Slot<'_> {
    /// The line, if the table holds it.
    #[inline]
    pub(super) fn get(&self) -> Option<&Line> {
        self.shard.lines.get(&self.idx)
    }

    /// The line, if the table holds it.
    #[inline]
    pub(super) fn get_mut(&mut self) -> Option<&mut Line> {
        self.shard.lines.get_mut(&self.idx)
    }

    /// The line, made (empty: nothing valid) if the table does not hold
    /// it; counted in the cached bytes.
    #[inline]
    pub(super) fn get_or_make(&mut self) -> &mut Line {
        let t = self.table;
        self.shard.lines.entry(self.idx).or_insert_with(|| t.make())
    }

    /// Drops the line whatever it holds (tests: as an eviction would).
    #[cfg(test)]
    pub(super) fn remove(&mut self) {
        if let Some(l) = self.shard.lines.remove(&self.idx) {
            self.table.dropped(l);
        }
    }
}

/// The lines of a cache (see the module).
pub(super) struct LineTable {
    /// Bytes per line.
    line: u64,
    /// Sectors per line.
    sectors: usize,
    /// Most bytes the lines may take (the cache's size).
    size: u64,
    shards: Box<[Mutex<Shard>]>,
    /// Bytes of the dirty sectors of every line.
    dirty: AtomicU64,
    /// Bytes of the lines held.
    cached: AtomicU64,
    /// Bumped whenever a line may have become evictable (made, clean, or
    /// its last reader gone); `fruitless` is its value when an eviction
    /// last found nothing to evict. Until it moves, writers held for room
    /// in a cache full of dirty lines do not scan every line again on
    /// each try (a held writer tries every 100 µs or so: the scans took
    /// half the CPU of the thread that feeds the cache).
    evictable: AtomicU64,
    fruitless: AtomicU64,
    /// The LRU clock: every use of a line takes the next tick.
    clock: AtomicU64,
    /// The last line generation handed out: generations are unique across
    /// lines and their lives, so a write-back in flight for a line dropped
    /// and made again never matches the new line's.
    generations: AtomicU64,
    /// Line-sized buffers for reuse (lines, the flusher's snapshots).
    pool: Mutex<Vec<IoBuf>>,
}

impl LineTable {
    /// An empty table of lines of `line` bytes (`sectors` sectors), at
    /// most `size` bytes of them.
    pub(super) fn new(line: u64, sectors: usize, size: u64) -> LineTable {
        LineTable {
            line,
            sectors,
            size,
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            dirty: AtomicU64::new(0),
            cached: AtomicU64::new(0),
            evictable: AtomicU64::new(0),
            fruitless: AtomicU64::new(u64::MAX),
            clock: AtomicU64::new(0),
            generations: AtomicU64::new(0),
            pool: Mutex::new(Vec::new()),
        }
    }

    /// Bytes of dirty sectors.
    #[inline]
    pub(super) fn dirty_bytes(&self) -> u64 {
        self.dirty.load(Ordering::Relaxed)
    }

    /// Bytes of the lines held.
    #[inline]
    pub(super) fn cached_bytes(&self) -> u64 {
        self.cached.load(Ordering::Relaxed)
    }

    /// True when `need` more bytes of lines fit the size as it is.
    #[inline]
    pub(super) fn fits(&self, need: u64) -> bool {
        self.cached_bytes() + need <= self.size
    }

    /// True when `need` more bytes of lines fit, after an eviction if
    /// they do not.
    #[inline]
    pub(super) fn make_room(&self, need: u64) -> bool {
        self.fits(need) || self.evict(need)
    }

    /// The next LRU tick (a use of lines now).
    #[inline]
    pub(super) fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Line `idx`, its shard locked while the slot lives.
    #[inline]
    pub(super) fn slot(&self, idx: u64) -> Slot<'_> {
        let shard = lock(&self.shards[(idx.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS]);
        Slot { table: self, idx, shard }
    }

    /// Lines `[first, last]` of `[offset, offset + len)`, and for each the
    /// sector range inside it and the byte offset in the request.
    #[inline]
    pub(super) fn spans(&self, offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> + '_ {
        let end = offset + len as u64;
        let first = offset / self.line;
        let last = (end - 1) / self.line;
        (first..=last).map(move |idx| {
            let base = idx * self.line;
            let a = offset.max(base);
            let b = end.min(base + self.line);
            (idx, ((a - base) / CACHE_SECTOR) as usize, ((b - base) / CACHE_SECTOR) as usize, (a - offset) as usize)
        })
    }

    /// How many lines of `[offset, offset + len)` the table does not hold.
    pub(super) fn uncached(&self, offset: u64, len: usize) -> u64 {
        self.spans(offset, len).filter(|&(idx, ..)| self.slot(idx).get().is_none()).count() as u64
    }

    /// The lines of `[offset, offset + len)` the table holds now: looked up
    /// one by one, or, for a range of more lines than it holds, by a walk
    /// over what it holds (a zeroing of a whole device costs the cache's
    /// size, not the device's).
    pub(super) fn held(&self, offset: u64, len: usize) -> Vec<u64> {
        if len == 0 {
            return Vec::new();
        }
        let (first, last) = (offset / self.line, (offset + len as u64 - 1) / self.line);
        if last - first < self.cached_bytes() / self.line {
            return (first..=last).filter(|idx| self.slot(*idx).get().is_some()).collect();
        }
        let mut v: Vec<u64> = Vec::new();
        for sh in self.shards.iter() {
            v.extend(lock(sh).lines.keys().filter(|&&idx| (first..=last).contains(&idx)));
        }
        v
    }

    /// A line-sized buffer (from the pool, holding whatever it held, or
    /// new).
    #[inline]
    pub(super) fn take_buf(&self) -> IoBuf {
        lock(&self.pool).pop().unwrap_or_else(|| IoBuf::new(self.line as usize))
    }

    /// Keeps line-sized buffer `b` for reuse.
    #[inline]
    pub(super) fn give_buf(&self, b: IoBuf) {
        lock(&self.pool).push(b);
    }

    /// A new line generation (see `generations`).
    fn next_generation(&self) -> u64 {
        self.generations.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A line may have become evictable: the next eviction scans again.
    fn may_evict(&self) {
        self.evictable.fetch_add(1, Ordering::AcqRel);
    }

    /// A new, empty line, counted in the cached bytes.
    fn make(&self) -> Line {
        let data = self.take_buf();
        let words = self.sectors.div_ceil(64);
        self.cached.fetch_add(self.line, Ordering::Relaxed);
        self.may_evict();
        Line {
            data,
            valid: vec![0; words],
            dirty: vec![0; words],
            generation: self.next_generation(),
            readers: 0,
            oldest: 0,
            dirty_since: 0,
            last_seq: 0,
            last_use: 0,
            snapped: 0,
            fresh: vec![0; words],
        }
    }

    /// Line `l` left the table: its bytes are no longer cached.
    fn dropped(&self, l: Line) {
        // A dirty line is never dropped before it is written back.
        debug_assert!(l.dirty.iter().all(|&w| w == 0), "a line dropped with dirty sectors");
        self.cached.fetch_sub(self.line, Ordering::Relaxed);
        self.give_buf(l.data);
    }

    /// Sectors `a..b` of `line` were just written (its bytes copied in)
    /// by write `seq` at LRU tick `now`: marks them valid and dirty.
    /// Returns (the line was dirty already: the write merged into it, the
    /// line became dirty with this write).
    #[inline]
    pub(super) fn mark_dirty(&self, line: &mut Line, a: usize, b: usize, seq: u64, now: u64) -> (bool, bool) {
        let before = Line::count(&line.dirty);
        set_bits(&mut line.valid, a, b);
        set_bits(&mut line.dirty, a, b);
        set_bits(&mut line.fresh, a, b);
        self.dirty.fetch_add((Line::count(&line.dirty) - before) * CACHE_SECTOR, Ordering::Relaxed);
        line.generation = self.next_generation();
        line.last_seq = seq;
        let first = line.oldest == 0;
        if first {
            line.oldest = seq;
            line.dirty_since = crate::io::member::now_ns();
        }
        line.last_use = now;
        (before > 0, first)
    }

    /// Sectors `a..b` of `line` no longer hold what the volume holds (a
    /// write or discard went around the cache): neither valid nor dirty.
    /// True when that made the line clean.
    pub(super) fn drop_sectors(&self, line: &mut Line, a: usize, b: usize) -> bool {
        let mut dropped = 0;
        for i in a..b {
            let (w, bit) = (i / 64, 1u64 << (i % 64));
            line.valid[w] &= !bit;
            if line.dirty[w] & bit != 0 {
                line.dirty[w] &= !bit;
                dropped += 1;
            }
        }
        line.generation = self.next_generation();
        self.dirty.fetch_sub(dropped * CACHE_SECTOR, Ordering::Relaxed);
        if Line::count(&line.dirty) == 0 && line.oldest != 0 {
            line.oldest = 0;
            self.may_evict();
            return true;
        }
        false
    }

    /// Sectors `a..b` of clean `line` are no longer valid (reads go to the
    /// members).
    pub(super) fn forget(&self, line: &mut Line, a: usize, b: usize) {
        debug_assert_eq!(line.oldest, 0, "forget is for clean lines");
        for i in a..b {
            line.valid[i / 64] &= !(1 << (i % 64));
        }
        line.generation = self.next_generation();
    }

    /// A read pinned `line` ([`Line::pin`]) is done with it.
    #[inline]
    pub(super) fn unpin(&self, line: &mut Line) {
        line.readers -= 1;
        if line.readers == 0 {
            self.may_evict();
        }
    }

    /// The flusher wrote the sectors `bits` of line `idx` as of
    /// generation `generation` (its snapshot, holding every write up to
    /// `last_seq`): marks them clean, but for those a write came into
    /// since (`fresh`: they keep that write's bytes, dirty). Once no sector
    /// of the snapshot is dirty any more, the line's oldest write is after
    /// `last_seq`. True when the line became clean.
    pub(super) fn written_back(&self, idx: u64, generation: u64, bits: &[u64], last_seq: u64) -> bool {
        let mut s = self.slot(idx);
        let Some(l) = s.get_mut() else { return false };
        let same = l.generation == generation;
        if !same && l.snapped != generation {
            // Not the line's last snapshot (record_line took a newer one,
            // then the journal was lost and the pass wrote the older):
            // which sectors came since is not known, so none is cleaned;
            // the next pass writes the line again.
            return false;
        }
        let n = Line::count(&l.dirty);
        for ((d, b), f) in l.dirty.iter_mut().zip(bits).zip(&l.fresh) {
            *d &= if same { !b } else { !(b & !f) };
        }
        let left = Line::count(&l.dirty);
        let before = self.dirty.fetch_sub((n - left) * CACHE_SECTOR, Ordering::Relaxed);
        // The dirty byte count is the sum of the lines' dirty sectors.
        debug_assert!(before >= (n - left) * CACHE_SECTOR, "dirty bytes {before} below a line's {}", (n - left) * CACHE_SECTOR);
        let clean = left == 0 && l.oldest != 0;
        if clean {
            l.oldest = 0;
        } else if l.oldest != 0 && l.dirty.iter().zip(&l.fresh).all(|(d, f)| d & !f == 0) {
            l.oldest = l.oldest.max(last_seq + 1);
        }
        drop(s);
        if clean {
            self.may_evict();
        }
        clean
    }

    /// The oldest write sequence number a dirty line carries, if any.
    pub(super) fn oldest_dirty(&self) -> Option<u64> {
        let mut mark = None;
        for sh in self.shards.iter() {
            for l in lock(sh).lines.values() {
                if l.oldest != 0 {
                    mark = Some(mark.map_or(l.oldest, |m: u64| m.min(l.oldest)));
                }
            }
        }
        mark
    }

    /// The dirty lines to write back now, oldest write first, each taken
    /// as it is ([`Line::snapped`]): every one when `all`, else those
    /// dirty as a whole or since `expired` ([`now_ns`](crate::io::member::now_ns)) or before.
    pub(super) fn snapshots(&self, all: bool, expired: u64) -> Vec<Snap> {
        let mut v: Vec<(u64, u64)> = Vec::new();
        for sh in self.shards.iter() {
            v.extend(
                lock(sh)
                    .lines
                    .iter()
                    .filter(|(_, l)| l.oldest != 0 && (all || l.dirty_since <= expired || all_set(&l.dirty, 0, self.sectors)))
                    .map(|(&i, l)| (l.oldest, i)),
            );
        }
        v.sort_unstable();
        v.into_iter()
            .filter_map(|(_, idx)| {
                let mut s = self.slot(idx);
                let l = s.get_mut()?;
                let mut copy = self.take_buf();
                // Only the dirty sectors: the flusher writes no other
                // (the rest of a buffer from the pool is stale), and a
                // journal record lays the valid sectors over its own
                // copy again (see `record_line`). Random writes dirty a
                // sector or two of a line: copying it whole cost more
                // than the rest of its write-back.
                let sector = CACHE_SECTOR as usize;
                for (a, b) in runs_of(&l.dirty, self.sectors) {
                    copy[a * sector..b * sector].copy_from_slice(&l.data[a * sector..b * sector]);
                }
                l.snapped();
                Some(Snap { idx, generation: l.generation, data: copy, dirty: l.dirty.clone(), valid: l.valid.clone(), last_seq: l.last_seq })
            })
            .collect()
    }

    /// Drops clean lines nobody reads, least recently used first, until
    /// `need` more bytes fit. True when they do.
    pub(super) fn evict(&self, need: u64) -> bool {
        // Read before the scan: a line that becomes evictable during it
        // moves the epoch, and the next call scans again.
        let epoch = self.evictable.load(Ordering::Acquire);
        if self.fruitless.load(Ordering::Acquire) == epoch {
            return self.fits(need);
        }
        let mut cands: Vec<(u64, u64)> = Vec::new();
        for sh in self.shards.iter() {
            let sh = lock(sh);
            cands.extend(sh.lines.iter().filter(|(_, l)| l.evictable()).map(|(&i, l)| (l.last_use, i)));
        }
        cands.sort_unstable();
        for (_, idx) in cands {
            if self.fits(need) {
                break;
            }
            let mut s = self.slot(idx);
            if s.get().is_some_and(Line::evictable) {
                let l = s.shard.lines.remove(&idx).expect("present");
                self.dropped(l);
            }
        }
        let room = self.fits(need);
        if !room {
            self.fruitless.store(epoch, Ordering::Release);
        }
        room
    }

    /// True when the last eviction found nothing to evict and no line
    /// became evictable since (tests).
    #[cfg(test)]
    pub(super) fn eviction_is_fruitless(&self) -> bool {
        self.fruitless.load(Ordering::Relaxed) == self.evictable.load(Ordering::Relaxed)
    }
}

/// The runs `[a, b)` of set bits among the first `n` (a word at a time:
/// the flusher runs this over every dirty line's bitmaps).
pub(super) fn runs_of(bits: &[u64], n: usize) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < n {
        let word = bits[i / 64] >> (i % 64);
        if word == 0 {
            i = (i / 64 + 1) * 64;
            continue;
        }
        i += word.trailing_zeros() as usize;
        if i >= n {
            break;
        }
        let s = i;
        loop {
            let off = i % 64;
            let ones = (bits[i / 64] >> off).trailing_ones() as usize;
            i += ones;
            if ones < 64 - off || i >= n {
                break;
            }
        }
        i = i.min(n);
        runs.push((s, i));
    }
    runs
}

/// The bits of word `i / 64` from bit `i % 64` on, `b - i` of them at
/// most: (the word's index, its mask, how many bits).
fn word_mask(i: usize, b: usize) -> (usize, u64, usize) {
    let off = i % 64;
    let k = (64 - off).min(b - i);
    let mask = if k == 64 { !0 } else { ((1u64 << k) - 1) << off };
    (i / 64, mask, k)
}

/// Sets bits `a..b`.
pub(super) fn set_bits(bits: &mut [u64], a: usize, b: usize) {
    let mut i = a;
    while i < b {
        let (w, mask, k) = word_mask(i, b);
        bits[w] |= mask;
        i += k;
    }
}

/// True when bits `a..b` are all set.
pub(super) fn all_set(bits: &[u64], a: usize, b: usize) -> bool {
    let mut i = a;
    while i < b {
        let (w, mask, k) = word_mask(i, b);
        if bits[w] & mask != mask {
            return false;
        }
        i += k;
    }
    true
}

/// True when bit `i` is set.
pub(super) fn is_set(bits: &[u64], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time bitmap helpers agree with a bit-by-bit reading
    /// on random bitmaps of runs (words all set, all clear, runs across
    /// words, lengths not a multiple of 64).
    #[test]
    fn bitmap_runs_match_a_bit_by_bit_reading() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(19);
        for _ in 0..2000 {
            let n = rng.random_range(1..=300usize);
            let mut bits = vec![0u64; n.div_ceil(64)];
            let mut set = vec![false; n];
            let mut i = 0;
            while i < n {
                let longest = if rng.random_bool(0.3) { 130 } else { 5 };
                let run = rng.random_range(1..=longest);
                let on = rng.random_bool(0.5);
                for b in set.iter_mut().skip(i).take(run) {
                    *b = on;
                }
                i += run;
            }
            for (i, &on) in set.iter().enumerate() {
                if on {
                    set_bits(&mut bits, i, i + 1);
                }
            }
            assert!(set.iter().enumerate().all(|(i, &on)| is_set(&bits, i) == on));
            let mut want = Vec::new();
            let mut i = 0;
            while i < n {
                if set[i] {
                    let s = i;
                    while i < n && set[i] {
                        i += 1;
                    }
                    want.push((s, i));
                } else {
                    i += 1;
                }
            }
            assert_eq!(runs_of(&bits, n), want, "n {n}");
            let (a, b) = (rng.random_range(0..n), rng.random_range(0..=n));
            let (a, b) = (a.min(b), a.max(b));
            assert_eq!(all_set(&bits, a, b), set[a..b].iter().all(|&x| x), "{a}..{b}");
            let mut more = bits.clone();
            set_bits(&mut more, a, b);
            assert!((0..n).all(|i| is_set(&more, i) == (set[i] || (a..b).contains(&i))), "set {a}..{b}");
        }
    }
}
