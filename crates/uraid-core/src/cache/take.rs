//! The request side of the cache: what a request pushed by the cache
//! layer's queue does to the cache (a read hit or miss, a write taken into
//! write-back or recorded in the journal, a zeroing, a flush or FUA write
//! waiting for durability), and what the queue tells the cache back when a
//! request it sent down completes.

use std::sync::atomic::Ordering;

use crate::cache::lines::Line;
use crate::cache::{is_set, lock, Cache, CacheMode, Taken, CACHE_SECTOR};
use crate::io::request::{Op, Request};

impl Cache {
    /// Offers request `req` (with its data) to the cache; see [`Taken`].
    pub(crate) fn take(&self, req: &mut Request) -> Taken {
        if self.dead.load(Ordering::Acquire) && req.op != Op::Read {
            if let Some(e) = lock(&self.failed).clone() {
                return Taken::Failed(e);
            }
        }
        match (req.op, self.cfg.mode) {
            (Op::Flush, CacheMode::WriteBack) => Taken::Durable(self.want_all()),
            // A lost journal: what it held is only in the cache.
            (Op::Flush, CacheMode::Journal) if self.journal_lost() => Taken::Durable(self.want_all()),
            // Journal: every acknowledged write is durable in the journal
            // already; the members' flush covers discards and zeroes.
            (Op::Write, CacheMode::WriteBack | CacheMode::Journal) => self.write_back(req),
            // (A FUA one under plain write-back waits for the write-back
            // below: its zeroes must be durable when it completes.)
            (Op::WriteZeroes { .. }, CacheMode::WriteBack | CacheMode::Journal)
                if !(self.journal_lost() || req.fua && self.cfg.mode == CacheMode::WriteBack) =>
            {
                self.zero(req)
            }
            // A discard's partial RAID 5/6 stripes are written as zeroes,
            // which a crash can tear: with the journal it goes as a zeroing
            // (the write hole stays closed; the whole stripes are still
            // discarded on the members).
            (Op::Discard, CacheMode::Journal) if !self.journal_lost() => self.zero(req),
            (Op::Discard | Op::WriteZeroes { .. }, CacheMode::WriteBack | CacheMode::Journal) => {
                Taken::DurableThenMembers(self.want_all())
            }
            (Op::Write | Op::Discard | Op::WriteZeroes { .. }, _) => {
                // Goes to the members; what the cache holds of the range
                // is dropped (write-back: written back first).
                self.invalidate(req.offset, req.len);
                Taken::Members { pins: Vec::new(), epoch: 0 }
            }
            (Op::Read, _) => self.read(req),
            (Op::Flush, _) => Taken::Members { pins: Vec::new(), epoch: 0 },
        }
    }

    pub(super) fn write_back(&self, req: &mut Request) -> Taken {
        let lines = self.lines.spans(req.offset, req.len).count() as u64;
        let new_lines = self.lines.uncached(req.offset, req.len);
        let dirty = self.lines.dirty_bytes();
        let journal = self.live_journal();
        // Without its journal, journal mode still acknowledges only what
        // survives a crash: each write waits for the members' flush.
        let fua = req.fua || (self.journal.is_some() && journal.is_none());
        if let Some(j) = journal {
            if !j.can_hold(req.len as u64) {
                return Taken::Failed(crate::Error::new(
                    crate::ErrorKind::InvalidInput,
                    format!("a write of {} bytes does not fit the journal's log ({} bytes); use a larger journal device", req.len, j.log_size()),
                ));
            }
        }
        if dirty + req.len as u64 > self.cfg.dirty_limit && dirty > 0
            || !self.lines.make_room(new_lines * self.line)
            || journal.is_some_and(|j| !j.fits(req.len as u64, self.promise_for(lines)))
        {
            if new_lines == lines && !fua && journal.is_none() {
                // Full, and nothing of the range is cached (so no older
                // dirty data can be written back over it): the write goes
                // around the cache, straight to the members.
                lock(&self.stats).written_around += 1;
                self.wt_epoch.fetch_add(1, Ordering::AcqRel);
                self.kick();
                return Taken::Members { pins: Vec::new(), epoch: 0 };
            }
            return self.held_for_room();
        }
        let order = journal.map(|_| lock(&self.jorder));
        let gate = self.gate.read().unwrap_or_else(|e| e.into_inner());
        let seq = self.seq.fetch_add(1, Ordering::AcqRel);
        let place = match journal {
            Some(j) => match j.reserve(req.len as u64, seq, Some(self.promise_for(lines))) {
                Some(r) => Some((j, r)),
                None => {
                    // The log filled since the look above (its sequence
                    // number stays unused: a gap is harmless).
                    drop((gate, order));
                    return self.held_for_room();
                }
            },
            None => None,
        };
        let data = req.buf.as_ref().expect("a write has a buffer");
        let now = self.lines.tick();
        let mut merged = 0;
        for (idx, a, b, off) in self.lines.spans(req.offset, req.len) {
            let mut slot = self.lines.slot(idx);
            let line = slot.get_or_make();
            let bytes = (b - a) * CACHE_SECTOR as usize;
            line.data_mut()[a * CACHE_SECTOR as usize..][..bytes].copy_from_slice(&data[off..off + bytes]);
            if self.made_dirty(line, a, b, seq, now) {
                merged += 1;
            }
        }
        drop((gate, order));
        {
            let mut s = lock(&self.stats);
            s.writes += 1;
            // One write counts once, however many dirty lines it joined.
            s.merged += (merged > 0) as u64;
        }
        if self.lines.dirty_bytes() * 2 > self.cfg.dirty_limit {
            self.kick();
        }
        if let Some((j, r)) = place {
            // Acknowledged once the record is durable (FUA included): it
            // goes out with the records of other writes submitted meanwhile
            // (group commit), when the queue commits the journal.
            if j.submit(r, crate::cache::journal::RecordKind::Data, req.offset, seq, &data[..req.len]).is_err() {
                return Taken::Durable(self.record_failed(seq));
            }
            lock(&self.stats).journal_records += 1;
            return Taken::Recorded(r, seq);
        }
        if fua {
            self.want(seq + 1);
            return Taken::Durable(seq + 1);
        }
        Taken::Done(req.len)
    }

    /// A write-zeroes under write-back (not FUA) or the journal (not
    /// lost), or a discard under the journal (it reads back as zeroes).
    /// Takes the next write sequence number and records the zeroing
    /// on the journal (a zeroes record of the whole range: replay zeroes
    /// it in its place among the writes). The lines it covers in part (at
    /// most its first and last) get zeroes as a write of zeroes would
    /// (dirty, in the cache: the flusher records and writes them as it does
    /// any line, so no stripe is ever zeroed in part on the members and
    /// replay never has to rebuild a member's chunk from parity torn by a
    /// zeroing: the RAID 5/6 write hole stays closed). The whole lines go
    /// to the members at once (full stripes), as a zeroing in flight until
    /// it completes ([`sent_on_done`](Self::sent_on_done)); those the cache
    /// holds get zeroes too (dirty, so the flusher writes them after any
    /// older bytes of theirs it may have in flight). Lines the cache does
    /// not hold have no write of the flusher in flight (a line is dropped
    /// only once clean). Waits for room as a write does.
    pub(super) fn zero(&self, req: &mut Request) -> Taken {
        let journal = self.live_journal();
        let end = req.offset + req.len as u64;
        // The whole lines [mid_a, mid_b); the parts before and after.
        let mid_a = req.offset.next_multiple_of(self.line).min(end);
        let mid_b = (end / self.line * self.line).max(mid_a);
        let parts: Vec<(u64, usize)> =
            [(req.offset, mid_a), (mid_b, end)].into_iter().filter(|(a, b)| a < b).map(|(a, b)| (a, (b - a) as usize)).collect();
        let part_bytes: u64 = parts.iter().map(|&(_, n)| n as u64).sum();
        let part_lines: u64 = parts.iter().map(|&(a, n)| self.lines.spans(a, n).count() as u64).sum();
        let new_lines: u64 = parts.iter().map(|&(a, n)| self.lines.uncached(a, n)).sum();
        // The log room the stripe records of the lines this makes dirty
        // may take: the partial lines only (at most two; the whole lines
        // it zeroes in the cache are dirty already, see below).
        let ahead = self.promise_for(part_lines);
        if new_lines * self.line > self.cfg.size {
            // The partial lines can never fit (a cache of one line).
            if journal.is_some() {
                return Taken::Failed(crate::Error::new(
                    crate::ErrorKind::InvalidInput,
                    format!(
                        "a zeroing or discard that covers two lines in part needs a cache of two lines ({} bytes); \
                         this one holds {} bytes: set a larger one with 'uraid config --cache-size'",
                        2 * self.line,
                        self.cfg.size
                    ),
                ));
            }
            return Taken::DurableThenMembers(self.want_all());
        }
        let dirty = self.lines.dirty_bytes();
        if dirty + part_bytes > self.cfg.dirty_limit && dirty > 0
            || !self.lines.make_room(new_lines * self.line)
            || journal.is_some_and(|j| !j.fits(0, ahead))
        {
            return self.held_for_room();
        }
        let order = journal.map(|_| lock(&self.jorder));
        let gate = self.gate.read().unwrap_or_else(|e| e.into_inner());
        let seq = self.seq.fetch_add(1, Ordering::AcqRel);
        let place = match journal {
            Some(j) => match j.reserve(0, seq, Some(ahead)) {
                Some(r) => Some((j, r)),
                None => {
                    drop((gate, order));
                    return self.held_for_room();
                }
            },
            None => None,
        };
        let now = self.lines.tick();
        for &(a, n) in &parts {
            for (idx, sa, sb, _) in self.lines.spans(a, n) {
                let mut slot = self.lines.slot(idx);
                let line = slot.get_or_make();
                line.data_mut()[sa * CACHE_SECTOR as usize..sb * CACHE_SECTOR as usize].fill(0);
                self.made_dirty(line, sa, sb, seq, now);
            }
        }
        // Listed with the gate held and the sequence number taken (under
        // `jorder` in journal mode, no write is half copied in): a write
        // before this one is in these lines, one after it is not yet.
        self.zero_held_lines(mid_a, mid_b, seq, now);
        if mid_b > mid_a {
            lock(&self.zeroing).push((mid_a, mid_b, seq));
            self.zero_epoch.fetch_add(1, Ordering::AcqRel);
        }
        self.wt_epoch.fetch_add(1, Ordering::AcqRel);
        drop((gate, order));
        lock(&self.stats).writes += 1;
        if let Some((j, r)) = place {
            if j.write_zeroes(r, req.offset, req.len as u64, seq).is_ok() {
                lock(&self.stats).journal_records += 1;
            } else {
                // The journal is lost (it said why): the zeroing is
                // acknowledged once it is on the members and flushed, as
                // every write is then.
                self.live_journal();
                if mid_b > mid_a {
                    self.sent_on_done(req.op, mid_a, (mid_b - mid_a) as usize);
                }
                return Taken::DurableThenMembers(self.want_all());
            }
        }
        if mid_b == mid_a {
            return Taken::Done(req.len);
        }
        Taken::MembersPart { offset: mid_a, len: (mid_b - mid_a) as usize }
    }

    /// A zeroing of the whole lines `[mid_a, mid_b)` (bytes), write `seq`
    /// at clock `now`, in the lines the cache holds: a clean one forgets
    /// the range (reads go to the members), a dirty one gets zeroes there
    /// (dirty: written by the flusher after any older bytes of the line it
    /// may have in flight). The gate and sequence number are held.
    fn zero_held_lines(&self, mid_a: u64, mid_b: u64, seq: u64, now: u64) {
        let held = if mid_b > mid_a { self.lines.held(mid_a, (mid_b - mid_a) as usize) } else { Vec::new() };
        for idx in held {
            let base = idx * self.line;
            let a = ((mid_a.max(base) - base) / CACHE_SECTOR) as usize;
            let b = ((mid_b.min(base + self.line) - base) / CACHE_SECTOR) as usize;
            let mut slot = self.lines.slot(idx);
            // Dropped since it was listed: nothing of it to zero.
            let Some(line) = slot.get_mut() else { continue };
            if line.oldest() == 0 {
                // Clean: nothing of it is in flight; what it held of the
                // range is no longer valid (reads go to the members).
                self.lines.forget(line, a, b);
                continue;
            }
            // Dirty: zeroes, written by the flusher after any older bytes
            // of the line it may have in flight.
            line.data_mut()[a * CACHE_SECTOR as usize..b * CACHE_SECTOR as usize].fill(0);
            self.made_dirty(line, a, b, seq, now);
        }
    }

    /// A writer waits for room: counted, and the flusher pressed to write
    /// every dirty line at its next pass ([`Taken::Full`]).
    pub(super) fn held_for_room(&self) -> Taken {
        lock(&self.stats).throttled += 1;
        self.starved.store(true, Ordering::Release);
        self.kick();
        Taken::Full
    }

    /// True while a zeroing this cache sent on overlaps line `idx`.
    pub(super) fn zeroing_over(&self, idx: u64) -> bool {
        let (a, b) = (idx * self.line, (idx + 1) * self.line);
        lock(&self.zeroing).iter().any(|&(s, e, _)| s < b && a < e)
    }

    /// Sectors `a..b` of `line` were just written by write `seq` (at
    /// clock `now`): marks them valid and dirty. True when the line was
    /// dirty already (the write merged into it).
    #[inline]
    pub(super) fn made_dirty(&self, line: &mut Line, a: usize, b: usize, seq: u64, now: u64) -> bool {
        let (merged, first) = self.lines.mark_dirty(line, a, b, seq, now);
        if first {
            // Promised whether or not the journal is lost now (it is
            // released the same way when the line is clean again).
            if let Some(j) = &self.journal {
                j.promise(self.promise_for(1));
            }
        }
        merged
    }

    /// A write or discard that bypasses the cache: write-through drops the
    /// range's valid bits; write-back cannot have dirty data there that
    /// would later overwrite it, so the dirty sectors of the range are
    /// dropped too (the new data supersedes them).
    pub(crate) fn invalidate(&self, offset: u64, len: usize) {
        self.wt_epoch.fetch_add(1, Ordering::AcqRel);
        if len == 0 {
            return;
        }
        for (idx, a, b, _) in self.lines.spans(offset, len) {
            let mut slot = self.lines.slot(idx);
            if let Some(line) = slot.get_mut() {
                if self.lines.drop_sectors(line, a, b) {
                    self.release_promise();
                }
            }
        }
    }

    pub(super) fn read(&self, req: &mut Request) -> Taken {
        let epoch = self.wt_epoch.load(Ordering::Acquire);
        let now = self.lines.tick();
        let spans: Vec<_> = self.lines.spans(req.offset, req.len).collect();
        let hit = spans.iter().all(|&(idx, a, b, _)| self.lines.slot(idx).get().is_some_and(|l| l.holds(a, b)));
        if hit {
            let buf = req.buf.as_mut().expect("a read has a buffer");
            let mut complete = true;
            for &(idx, a, b, off) in &spans {
                let mut slot = self.lines.slot(idx);
                match slot.get_mut() {
                    Some(l) if l.holds(a, b) => {
                        let bytes = (b - a) * CACHE_SECTOR as usize;
                        buf[off..off + bytes].copy_from_slice(&l.data()[a * CACHE_SECTOR as usize..][..bytes]);
                        l.used(now);
                    }
                    _ => complete = false, // evicted meanwhile
                }
            }
            if complete {
                lock(&self.stats).read_hits += 1;
                return Taken::Done(req.len);
            }
        }
        lock(&self.stats).read_misses += 1;
        let mut pins = Vec::new();
        for &(idx, ..) in &spans {
            if let Some(l) = self.lines.slot(idx).get_mut() {
                l.pin();
                pins.push(idx);
            }
        }
        Taken::Members { pins, epoch }
    }

    /// A read that went to the members completed (`ok`) into `buf`: lays
    /// the valid sectors of its pinned lines over it and unpins them; a
    /// write-through cache keeps what was read when no write moved since.
    pub(crate) fn finish_read(&self, offset: u64, buf: &mut [u8], pins: &[u64], epoch: u64, ok: bool) {
        let len = buf.len();
        if ok && self.cfg.mode == CacheMode::WriteThrough && self.wt_epoch.load(Ordering::Acquire) == epoch {
            // Room for the lines this read brings in (least used go first).
            self.lines.evict(self.lines.uncached(offset, len) * self.line);
        }
        for (idx, a, b, off) in self.lines.spans(offset, len) {
            let pinned = pins.contains(&idx);
            let mut slot = self.lines.slot(idx);
            if ok {
                if let Some(l) = slot.get() {
                    if pinned {
                        for i in a..b {
                            if is_set(l.valid(), i) {
                                let (s, o) = (i * CACHE_SECTOR as usize, off + (i - a) * CACHE_SECTOR as usize);
                                buf[o..o + CACHE_SECTOR as usize].copy_from_slice(&l.data()[s..s + CACHE_SECTOR as usize]);
                            }
                        }
                    }
                }
                let keep = self.cfg.mode == CacheMode::WriteThrough
                    && self.wt_epoch.load(Ordering::Acquire) == epoch
                    && (slot.get().is_some() || self.lines.fits(self.line));
                if keep {
                    let l = slot.get_or_make();
                    let bytes = (b - a) * CACHE_SECTOR as usize;
                    l.data_mut()[a * CACHE_SECTOR as usize..][..bytes].copy_from_slice(&buf[off..off + bytes]);
                    l.set_valid(a, b);
                }
            }
            if pinned {
                if let Some(l) = slot.get_mut() {
                    self.lines.unpin(l);
                }
            }
        }
    }

    /// True once every write below sequence `target` is durable; the
    /// flusher's error, if it lost writes.
    pub(crate) fn durable(&self, target: u64) -> Option<std::result::Result<(), crate::Error>> {
        if let Some(e) = lock(&self.failed).clone() {
            return Some(Err(e));
        }
        let durable = *lock(&self.durable);
        // A loss of the journal not recorded yet: nothing is acknowledged
        // until it is. (A flusher pass that started before the loss was
        // seen may have made `target` durable, but a write it covers was
        // taken after the loss.) Once everything taken before the loss is
        // durable on the members, it is recorded here.
        if !self.record_loss_if_drained(durable) {
            return None;
        }
        (durable >= target).then_some(Ok(()))
    }

    /// A write, discard or zeroing that this cache sent on to the members
    /// (around a full cache, or after the write-back) completed: it takes a
    /// sequence number, so that a flush from now on waits for a pass that
    /// starts after it, and that pass flushes the members. (Without it, a
    /// flush after writes that only went around found its target already
    /// durable and flushed nothing: the writes stayed in the drives'
    /// volatile caches.)
    ///
    /// `op`, `offset`, `len`: the request's; a zeroing in flight
    /// ([`zero`](Self::zero)) ends here.
    pub(crate) fn sent_on_done(&self, op: Op, offset: u64, len: usize) {
        if matches!(op, Op::WriteZeroes { .. } | Op::Discard) {
            let mut z = lock(&self.zeroing);
            if let Some(i) = z.iter().position(|&(a, b, _)| (a, b) == (offset, offset + len as u64)) {
                z.swap_remove(i);
            }
        }
        self.seq.fetch_add(1, Ordering::AcqRel);
    }

    /// What a writer held for room does now: fail with the flusher's error
    /// once a pass lost writes (the members refuse them; waiting would be
    /// for ever when they always will; a dead flusher, or one stopped by a
    /// failed volume below, sets that error too), try again once there is
    /// room under the dirty limit and the journal's pressure (`Some(Ok)`),
    /// or wait (`None`).
    pub(crate) fn room(&self) -> Option<crate::Result<()>> {
        if let Some(e) = lock(&self.failed).clone() {
            return Some(Err(e));
        }
        let room = self.lines.dirty_bytes() < self.cfg.dirty_limit && self.live_journal().is_none_or(|j| j.pressure() * 2 < j.log_size());
        room.then_some(Ok(()))
    }

    /// When a loss of the journal waits to be recorded and every write
    /// taken before it is durable on the members (`durable`, a write
    /// sequence number), records it (the journal's
    /// [`drained_after_loss`](crate::cache::journal::Journal::drained_after_loss)
    /// hook). The lock is held while the hook runs, so nothing is
    /// acknowledged before it has. False while a loss still waits.
    pub(super) fn record_loss_if_drained(&self, durable: u64) -> bool {
        let mut l = lock(&self.lost_drain);
        match *l {
            None => true,
            Some(t) if durable >= t => {
                if let Some(j) = &self.journal {
                    j.drained_after_loss();
                }
                *l = None;
                true
            }
            Some(_) => false,
        }
    }
}

impl Cache {
    /// Writes the journal records submitted so far (group commit: see
    /// [`crate::cache::journal::Journal::commit`]); nothing without a live
    /// journal.
    pub(crate) fn commit_journal(&self) {
        if let Some(j) = &self.journal {
            j.commit();
        }
    }

    /// Whether the journal record reserved as `r` is acknowledged (see
    /// [`crate::cache::journal::Journal::written`]); an error when the
    /// volume has no journal.
    pub(crate) fn recorded(&self, r: &crate::cache::journal::Reservation) -> Option<crate::Result<()>> {
        match &self.journal {
            Some(j) => j.written(r),
            None => Some(Err(crate::Error::new(crate::ErrorKind::Io, "the volume has no journal"))),
        }
    }

    /// The record of cache write `seq` will not be acknowledged (the
    /// journal is lost; it said why): the write is in the cache, and is
    /// acknowledged once it is on the members. Returns the sequence number
    /// to wait for ([`Taken::Durable`]).
    pub(crate) fn record_failed(&self, seq: u64) -> u64 {
        self.live_journal();
        self.want(seq + 1);
        seq + 1
    }
}
