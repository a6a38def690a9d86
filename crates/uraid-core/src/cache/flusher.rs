//! The write-back side of the cache: the flusher thread and its passes
//! (dirty lines written down to the RAID layer through a queue of its own,
//! then the members flushed; in journal mode, lines recorded first and
//! records retired after), the durability marks the request side waits on,
//! and the cache's end (close, crash).

use super::*;

impl Cache {
    /// A sequence number below which every write is on the members (or
    /// was superseded there): the oldest write a dirty line carries or a
    /// zeroing in flight has, or the next number when there is none.
    pub(super) fn clean_mark(&self) -> u64 {
        let _g = self.gate.write().unwrap_or_else(|e| e.into_inner());
        let mut mark = self.seq.load(Ordering::Acquire);
        // A zeroing still on its way to the members is not there yet (one
        // that completed before this look is covered by the members' flush
        // that follows it).
        for &(_, _, seq) in lock(&self.zeroing).iter() {
            mark = mark.min(seq);
        }
        for sh in self.shards.iter() {
            for l in lock(sh).lines.values() {
                if l.oldest != 0 {
                    mark = mark.min(l.oldest);
                }
            }
        }
        mark
    }

    /// Asks the flusher for every write taken so far; returns the
    /// sequence number to wait for.
    pub(super) fn want_all(&self) -> u64 {
        let target = self.seq.load(Ordering::Acquire);
        self.want(target);
        target
    }

    /// Journal mode: writes every write taken so far back to the members
    /// and retires its records (blocking). Other modes: nothing.
    pub(crate) fn drain(&self) -> Result<()> {
        if self.cfg.mode != CacheMode::Journal {
            return Ok(());
        }
        let target = self.want_all();
        loop {
            if let Some(r) = self.durable(target) {
                return r;
            }
            crate::clock::sleep(Duration::from_micros(200));
        }
    }

    pub(super) fn want(&self, target: u64) {
        self.wanted.fetch_max(target, Ordering::AcqRel);
        self.kick();
    }

    pub(super) fn kick(&self) {
        *lock(&self.kick) = true;
        self.kick_cv.notify_one();
    }

    /// The dirty lines to write back now, oldest first: every one when
    /// `all`, else those dirty as a whole or for [`DIRTY_EXPIRE_NS`].
    pub(super) fn dirty_lines(&self, all: bool) -> Vec<Snap> {
        let mut v: Vec<(u64, u64)> = Vec::new();
        let expired = crate::io::member::now_ns().saturating_sub(DIRTY_EXPIRE_NS);
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
                let mut sh = self.shard(idx);
                let l = sh.lines.get_mut(&idx)?;
                let mut copy = lock(&self.pool).pop().unwrap_or_else(|| IoBuf::new(self.line as usize));
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

    /// The flusher wrote the sectors `bits` of line `idx` as of
    /// generation `generation` (its snapshot, holding every write up to
    /// `last_seq`): marks them clean, but for those a write came into
    /// since (`fresh`: they keep that write's bytes, dirty). Once no sector
    /// of the snapshot is dirty any more, the line's oldest write is after
    /// `last_seq`, so that the journal's records up to there can retire.
    ///
    /// Only then: a dirty sector must keep the record of its write in the
    /// journal. A line that stayed dirty whole after such a write-back was
    /// later written whole with no record of its own (it looked covered
    /// by its writes' records, but the older ones had retired); torn by a
    /// power cut, its degraded replay rebuilt the lost member's rows from
    /// torn parity.
    pub(super) fn written_back(&self, idx: u64, generation: u64, bits: &[u64], last_seq: u64) {
        let mut sh = self.shard(idx);
        let Some(l) = sh.lines.get_mut(&idx) else { return };
        let same = l.generation == generation;
        if !same && l.snapped != generation {
            // Not the line's last snapshot (record_line took a newer one,
            // then the journal was lost and the pass wrote the older):
            // which sectors came since is not known, so none is cleaned;
            // the next pass writes the line again.
            return;
        }
        let n = Line::count(&l.dirty);
        for ((d, b), f) in l.dirty.iter_mut().zip(bits).zip(&l.fresh) {
            *d &= if same { !b } else { !(b & !f) };
        }
        let left = Line::count(&l.dirty);
        self.dirty.fetch_sub((n - left) * CACHE_SECTOR, Ordering::Relaxed);
        if left == 0 && l.oldest != 0 {
            l.oldest = 0;
            drop(sh);
            self.may_evict();
            self.release_promise();
        } else if l.oldest != 0 && l.dirty.iter().zip(&l.fresh).all(|(d, f)| d & !f == 0) {
            l.oldest = l.oldest.max(last_seq + 1);
        }
    }

    /// Journal mode on RAID 5/6: the log bytes a line's stripe record
    /// takes, times `lines` (0 otherwise: no stripe records).
    pub(super) fn promise_for(&self, lines: u64) -> u64 {
        match &self.journal {
            Some(j) if self.parity => lines * j.record_span(self.line),
            _ => 0,
        }
    }

    /// A dirty line became clean: its stripe record's promise goes back.
    pub(super) fn release_promise(&self) {
        if let Some(j) = &self.journal {
            j.release(self.promise_for(1));
        }
    }

    /// One pass of the flusher over `vol` (a queue that bypasses the
    /// cache): writes back every line dirty when it starts, then, when a
    /// flush waits, flushes the members and moves the durable mark.
    ///
    /// Journal mode: a RAID 5/6 line dirty in part is first recorded
    /// ([`record_line`](Self::record_line)): a rows record, then its rows
    /// are written as rows writes (parity from the rows recorded, nothing
    /// read again), or a stripe record, then it is written whole; every
    /// pass ends with a members' flush and a checkpoint that retires the
    /// records whose data is now on the members.
    pub(super) fn pass(&self, vol: &Arc<RaidVolume>) -> Result<()> {
        let start_seq = {
            let _g = self.gate.write().unwrap_or_else(|e| e.into_inner());
            self.seq.load(Ordering::Acquire)
        };
        let journal = self.live_journal();
        let flush = self.wanted.load(Ordering::Acquire) > *lock(&self.durable);
        let pressed = self.dirty.load(Ordering::Relaxed) * 2 > self.cfg.dirty_limit
            || self.starved.swap(false, Ordering::AcqRel)
            || journal.is_some_and(|j| j.pressure() * 2 > j.log_size());
        let lines = self.dirty_lines(flush || pressed || self.closed.load(Ordering::Acquire));
        // Journal: records no dirty line carries (zeroes records over lines
        // the cache does not hold) retire at a checkpoint of their own.
        if lines.is_empty() && !flush && !journal.is_some_and(|j| j.used() > 0 && j.retirable(self.clean_mark())) {
            return Ok(());
        }
        if let Some(j) = journal {
            // Data in the snapshot had its record's place before it was
            // copied in: no member gets data whose record is not written.
            j.wait_written();
        }
        let mut q = vol.queue(FLUSH_DEPTH)?;
        let mut fill_q = if journal.is_some() && self.parity { Some(vol.queue(FLUSH_DEPTH)?) } else { None };
        let mut out = Vec::new();
        // Member writes in flight, by tag.
        let mut inflight: HashMap<u64, InFlight> = HashMap::new();
        let mut tag = 0u64;
        let mut first_err: Option<crate::Error> = None;
        // A line left for the next pass: the writes it holds are not on the
        // members, so this pass does not move the durable mark.
        let mut skipped = false;
        // Lines whose records are submitted and not yet written, and the
        // newest of those records: written (one group commit) before the
        // lines go to the members.
        let mut ready: Vec<Ready> = Vec::new();
        let mut recorded: Option<crate::cache::journal::Reservation> = None;
        let count = lines.len();
        let mut lines: Vec<Option<Snap>> = lines.into_iter().map(Some).collect();
        // The members' bytes under the lines' holes that their records
        // need, read for RECORD_BATCH lines at a time, all in flight
        // together (see `prefetch`).
        let mut pre: Vec<Option<PreRead>> = Vec::new();
        // The next window's reads, started before this one's commit.
        let mut next: Option<Prefetch> = None;
        for i in 0..count {
            if i % RECORD_BATCH == 0 {
                pre = match (journal, fill_q.as_mut()) {
                    (Some(_), Some(fq)) if first_err.is_none() => {
                        let end = (i + RECORD_BATCH).min(count);
                        let got = match next.take() {
                            Some(p) => self.prefetch_finish(fq, p, &mut lines[i..end]),
                            None => self.prefetch(fq, &mut lines[i..end]),
                        };
                        match got {
                            Ok(p) => p,
                            Err(e) => {
                                first_err.get_or_insert(e);
                                Vec::new()
                            }
                        }
                    }
                    _ => Vec::new(),
                };
            }
            let pre_read = pre.get_mut(i % RECORD_BATCH).and_then(Option::take);
            let Snap { idx, mut generation, mut data, dirty: mut bits, valid, mut last_seq } = lines[i].take().expect("each line once");
            if first_err.is_some() {
                lock(&self.pool).push(data);
                continue;
            }
            if self.zeroing_over(idx) {
                // A zeroing on its way to the members: this line's writes
                // go after it (whichever came first, the outcome is then
                // what the cache holds, and what a replay makes).
                lock(&self.pool).push(data);
                skipped = true;
                continue;
            }
            let mut runs = runs_of(&bits, self.sectors);
            let mut rows = Vec::new();
            if let (Some(j), Some(fq)) = (journal, fill_q.as_mut()) {
                if runs != [(0, self.sectors)] {
                    match self.record_line(j, fq, idx, &mut data, &valid, &bits, pre_read) {
                        // The line as recorded (it may hold writes that came
                        // after the snapshot) is what goes to the members:
                        // whole, or its dirty sectors, every one in the
                        // rows recorded.
                        Ok(Recorded::Line { generation: g, dirty, last_seq: l, whole, record, rows: r }) => {
                            runs = if whole { vec![(0, self.sectors)] } else { runs_of(&dirty, self.sectors) };
                            rows = r;
                            (generation, bits, last_seq) = (g, dirty, l);
                            recorded = Some(record);
                        }
                        Ok(Recorded::Clean) => {
                            lock(&self.pool).push(data);
                            continue;
                        }
                        // The log is full (retire records first), or a
                        // zeroing is on its way: the next pass.
                        Ok(Recorded::Full | Recorded::Later) => {
                            lock(&self.pool).push(data);
                            skipped = true;
                            self.kick();
                            continue;
                        }
                        // The journal was lost: the line goes as it is
                        // (its write hole is open again).
                        Err(_) if j.is_lost() => {}
                        Err(e) => {
                            first_err = Some(e);
                            lock(&self.pool).push(data);
                            continue;
                        }
                    }
                }
            }
            ready.push(Ready { idx, generation, data, bits, last_seq, runs, rows });
            // Without records to wait for, each line goes out at once;
            // with them, at the end of the window of lines prefetched.
            let window_end = (i + 1) % RECORD_BATCH == 0 || i + 1 == count;
            if recorded.is_some() && !window_end {
                continue;
            }
            if let (Some(j), Some(r)) = (journal, recorded.take()) {
                // The next window's reads go to the members while the
                // records are written (the fill queue is idle here).
                if let Some(fq) = fill_q.as_mut().filter(|_| window_end && i + 1 < count && first_err.is_none()) {
                    let end = (i + 1 + RECORD_BATCH).min(count);
                    match self.prefetch_start(fq, &mut lines[i + 1..end]) {
                        Ok(p) => next = Some(p),
                        Err(e) => {
                            first_err.get_or_insert(e);
                        }
                    }
                }
                // Every record of the batch, in one write or a few.
                if let Err(e) = j.wait_record(&r) {
                    if !j.is_lost() {
                        first_err.get_or_insert(e);
                    }
                }
            }
            for line in ready.drain(..) {
                if first_err.is_some() {
                    lock(&self.pool).push(line.data);
                    continue;
                }
                self.write_line(&mut q, line, &mut out, &mut inflight, &mut tag, &mut first_err);
            }
        }
        while q.in_flight() > 0 {
            q.wait(1, &mut out);
            self.reap(&mut out, &mut inflight, &mut first_err);
        }
        if journal.is_some() && self.closed.load(Ordering::Acquire) && first_err.is_none() && !flush {
            // Closed meanwhile: a crash (a stop drains first, so nothing
            // is left to retire): the members' flush does not happen.
            return Ok(());
        }
        // Journal: records carrying writes below the mark may go once the
        // members are flushed.
        let mark = journal.map(|_| self.clean_mark());
        let res = match first_err {
            Some(e) => Err(e),
            None if flush || journal.is_some() => q.run(Request::flush(0)).result.map(|_| ()),
            None => Ok(()),
        };
        let res = match (res, journal, mark) {
            (Ok(()), Some(j), Some(m)) => j.checkpoint(m),
            (r, ..) => r,
        };
        if let Err(e) = &res {
            // Writes were lost: every flush waiting or to come says so.
            *lock(&self.failed) = Some(e.clone());
        } else if flush && !skipped {
            // A lost journal held acknowledged writes until now: they are
            // on the members, so its loss may be recorded (before anything
            // acknowledged after the loss is: see `lost_drain`).
            self.record_loss_if_drained(start_seq);
            let mut d = lock(&self.durable);
            *d = (*d).max(start_seq);
        }
        res
    }

    /// Journal mode, RAID 5/6: reads, for each line of `lines` that
    /// [`record_line`](Self::record_line) will record, the members' bytes
    /// under the holes its record needs (the sectors of its rows, or of
    /// the whole line, that the cache does not hold) into its snapshot,
    /// all of them in flight together through `fq`; returns per line the
    /// zeroing epoch before the reads and the sectors read (record_line
    /// reads again if a zeroing started meanwhile, and reads the rest).
    /// Errors: the first failed read's.
    fn prefetch(&self, fq: &mut crate::raid::engine::RaidQueue, lines: &mut [Option<Snap>]) -> Result<Vec<Option<PreRead>>> {
        let p = self.prefetch_start(fq, lines)?;
        self.prefetch_finish(fq, p, lines)
    }

    /// The first half of [`prefetch`](Self::prefetch): every read
    /// submitted (the kernel has them when this returns), not waited for,
    /// so that the journal's commit of the lines before runs meanwhile.
    /// Nothing else may use `fq` until [`prefetch_finish`](Self::prefetch_finish).
    fn prefetch_start(&self, fq: &mut crate::raid::engine::RaidQueue, lines: &mut [Option<Snap>]) -> Result<Prefetch> {
        let sector = CACHE_SECTOR as usize;
        let epoch = self.zero_epoch.load(Ordering::Acquire);
        let mut p = Prefetch { got: vec![None; lines.len()], reads: Vec::new(), first_err: None };
        let mut out = Vec::new();
        for i in 0..lines.len() {
            let Some(snap) = lines[i].as_ref() else { continue };
            if runs_of(&snap.dirty, self.sectors) == [(0, self.sectors)] || self.zeroing_over(snap.idx) {
                continue;
            }
            // The rows of what the line holds dirty now, not at the pass's
            // snapshot: writes since (a pass takes a while) widen its
            // record, whose new holes would be read one line at a time.
            let dirty = self.shard(snap.idx).lines.get(&snap.idx).map(|l| l.dirty.clone());
            let want = self.record_sectors(self.rows_of(dirty.as_deref().unwrap_or(&snap.dirty)).as_deref(), snap.valid.len());
            let holes: Vec<u64> = want.iter().zip(&snap.valid).map(|(w, v)| w & !v).collect();
            p.got[i] = Some((epoch, vec![0u64; snap.valid.len()]));
            let idx = snap.idx;
            for (a, b) in runs_of(&holes, self.sectors) {
                while !fq.has_room() {
                    fq.wait(1, &mut out);
                    for c in out.drain(..) {
                        p.land(c, lines, &self.small);
                    }
                }
                let len = (b - a) * sector;
                p.reads.push((i, a, b));
                let req = Request::read(idx * self.line + (a * sector) as u64, len, self.small.take(len), (p.reads.len() - 1) as u64);
                if let Err(r) = fq.push(req) {
                    // What is in flight lands (or is dropped) first.
                    let _ = self.prefetch_finish(fq, p, lines);
                    return Err(r.error);
                }
            }
        }
        fq.submit();
        Ok(p)
    }

    /// The second half of [`prefetch`](Self::prefetch): waits for every
    /// read of `p` and lays it into its line's snapshot.
    fn prefetch_finish(&self, fq: &mut crate::raid::engine::RaidQueue, mut p: Prefetch, lines: &mut [Option<Snap>]) -> Result<Vec<Option<PreRead>>> {
        let mut out = Vec::new();
        while fq.in_flight() > 0 {
            fq.wait(1, &mut out);
            for c in out.drain(..) {
                p.land(c, lines, &self.small);
            }
        }
        match p.first_err {
            Some(e) => Err(e),
            None => Ok(p.got),
        }
    }

    /// Reads the sectors `holes` of line `idx` from the members into
    /// `data`, all in flight together through `fq` (idle), and marks them
    /// in `read`. Lines dirtied again since the prefetch have holes left
    /// (rows it did not know of); one read after the other cost the
    /// flusher a quarter of its time. Errors: the first failed read's,
    /// once none is in flight.
    fn read_holes(&self, fq: &mut crate::raid::engine::RaidQueue, idx: u64, holes: &[u64], data: &mut IoBuf, read: &mut [u64]) -> Result<()> {
        let sector = CACHE_SECTOR as usize;
        let runs = runs_of(holes, self.sectors);
        let (mut sent, mut done) = (0, 0);
        let mut first_err = None;
        let mut out = Vec::new();
        while done < sent || (sent < runs.len() && first_err.is_none()) {
            while sent < runs.len() && first_err.is_none() && fq.has_room() {
                let (a, b) = runs[sent];
                let len = (b - a) * sector;
                match fq.push(Request::read(idx * self.line + (a * sector) as u64, len, self.small.take(len), sent as u64)) {
                    Ok(()) => sent += 1,
                    Err(r) => {
                        first_err = Some(r.error);
                    }
                }
            }
            if done == sent {
                break;
            }
            fq.wait(1, &mut out);
            for c in out.drain(..) {
                done += 1;
                let (a, b) = runs[c.tag as usize];
                match (c.result, c.buf) {
                    (Ok(_), Some(buf)) => {
                        data[a * sector..b * sector].copy_from_slice(&buf[..(b - a) * sector]);
                        set_bits(read, a, b);
                        self.small.give(buf);
                    }
                    (Err(e), _) => {
                        first_err.get_or_insert(e);
                    }
                    (Ok(_), None) => {
                        first_err.get_or_insert(crate::Error::new(crate::ErrorKind::Io, "a member read came back without its buffer".to_string()));
                    }
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Writes back a line recorded as rows records: each range of rows as
    /// one rows write ([`RaidQueue::push_rows`]: P and Q from the rows
    /// recorded, nothing read), writing the data chunks that are dirty in
    /// it. A line's rows are its stripe's (a line is a stripe's data).
    ///
    /// [`RaidQueue::push_rows`]: crate::raid::engine::RaidQueue::push_rows
    #[allow(clippy::too_many_arguments)]
    fn write_rows(
        &self,
        q: &mut crate::raid::engine::RaidQueue,
        idx: u64,
        generation: u64,
        bits: &[u64],
        last_seq: u64,
        rows: Vec<RowsData>,
        out: &mut Vec<crate::Completion>,
        inflight: &mut HashMap<u64, InFlight>,
        tag: &mut u64,
        first_err: &mut Option<crate::Error>,
    ) {
        let sector = CACHE_SECTOR;
        lock(&self.stats).writebacks += rows.len() as u64;
        for RowsData { lo, hi, data } in rows {
            // The dirty sectors in these rows, and the chunks they are in.
            let mut mine = vec![0u64; bits.len()];
            let mut written = 0u64;
            for (k, c) in (0..self.sectors).step_by(self.chunk_sectors).enumerate() {
                set_bits(&mut mine, c + lo, c + hi);
                if (c + lo..c + hi).any(|i| bits[i / 64] & (1 << (i % 64)) != 0) {
                    written |= 1 << k;
                }
            }
            mine.iter_mut().zip(bits).for_each(|(m, d)| *m &= d);
            if written == 0 {
                continue;
            }
            while !q.has_room() {
                q.wait(1, out);
                self.reap(out, inflight, first_err);
            }
            *tag += 1;
            inflight.insert(*tag, InFlight { idx, generation, bits: mine, last_seq });
            if let Err(r) = q.push_rows(*tag, idx, lo as u64 * sector, hi as u64 * sector, written, data) {
                inflight.remove(tag);
                first_err.get_or_insert(r.error);
            }
        }
    }

    /// Sends the runs of `line` to the members through `q` (tagged in
    /// `inflight`), waiting for room as it goes.
    fn write_line(
        &self,
        q: &mut crate::raid::engine::RaidQueue,
        line: Ready,
        out: &mut Vec<crate::Completion>,
        inflight: &mut HashMap<u64, InFlight>,
        tag: &mut u64,
        first_err: &mut Option<crate::Error>,
    ) {
        let sector = CACHE_SECTOR as usize;
        let Ready { idx, generation, data, bits, last_seq, runs, rows } = line;
        if !rows.is_empty() {
            lock(&self.pool).push(data);
            return self.write_rows(q, idx, generation, &bits, last_seq, rows, out, inflight, tag, first_err);
        }
        let full = runs == [(0, self.sectors)];
        let mut data = Some(data);
        {
            let mut s = lock(&self.stats);
            s.writebacks += runs.len() as u64;
            s.full_lines += full as u64;
        }
        for (a, b) in runs {
            while !q.has_room() {
                q.wait(1, out);
                self.reap(out, inflight, first_err);
            }
            let len = (b - a) * sector;
            let buf = if full {
                // The snapshot itself goes out: no second copy.
                data.take().expect("one run")
            } else {
                let src = data.as_ref().expect("kept for the runs");
                let mut buf = lock(&self.pool).pop().filter(|p| p.len() >= len).unwrap_or_else(|| IoBuf::new(self.line as usize));
                buf[..len].copy_from_slice(&src[a * sector..b * sector]);
                buf
            };
            // A whole line written after a stripe record cleans only
            // what was dirty in the snapshot.
            let mut mine = vec![0u64; bits.len()];
            set_bits(&mut mine, a, b);
            mine.iter_mut().zip(&bits).for_each(|(m, d)| *m &= d);
            *tag += 1;
            inflight.insert(*tag, InFlight { idx, generation, bits: mine, last_seq });
            let r = Request { op: Op::Write, offset: idx * self.line + (a * sector) as u64, len, buf: Some(buf), tag: *tag, fua: false };
            if let Err(r) = q.push(r) {
                inflight.remove(tag);
                first_err.get_or_insert(r.error);
            }
        }
        if let Some(d) = data {
            lock(&self.pool).push(d);
        }
    }

    /// The rows (sectors `a..b` of each chunk) the rows records of a line
    /// dirty in `dirty` hold, one record a range, or `None` when a stripe
    /// record of the whole line is the better choice: the dirty sectors
    /// fill half a chunk's rows or more, lie in more than
    /// [`MAX_ROWS_RECORDS`] ranges, or cross a chunk's end. Rows dirty in
    /// any chunk count for every chunk (a row's record holds the row of
    /// each, so that replay can compute its parity); ranges less than
    /// [`ROWS_GAP`] rows apart are one.
    ///
    /// Random writes leave a line two or three sectors dirty in rows far
    /// apart: one range over them was half the chunk, recorded whole (the
    /// stripe read, logged and written, about 100 times the data).
    pub(super) fn rows_of(&self, dirty: &[u64]) -> Option<Vec<(usize, usize)>> {
        let cs = self.chunk_sectors;
        if cs == self.sectors {
            return None;
        }
        let mut rows = vec![0u64; cs.div_ceil(64)];
        for (a, b) in runs_of(dirty, self.sectors) {
            if a / cs != (b - 1) / cs {
                return None;
            }
            set_bits(&mut rows, a % cs, (b - 1) % cs + 1);
        }
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for (a, b) in runs_of(&rows, cs) {
            match ranges.last_mut() {
                Some(last) if a - last.1 < ROWS_GAP => last.1 = b,
                _ => ranges.push((a, b)),
            }
        }
        let total: usize = ranges.iter().map(|(a, b)| b - a).sum();
        (!ranges.is_empty() && ranges.len() <= MAX_ROWS_RECORDS && total * 2 < cs).then_some(ranges)
    }

    /// The sectors a record of a line holds, as `words` words of bits: the
    /// rows `rows` of every chunk (rows records), or all (`None`: a
    /// stripe record).
    fn record_sectors(&self, rows: Option<&[(usize, usize)]>, words: usize) -> Vec<u64> {
        rows.map_or_else(|| vec![u64::MAX; words], |r| self.rows_mask(r))
    }

    /// The sectors of the row ranges `rows` (of each chunk) as bits of a
    /// line.
    pub(super) fn rows_mask(&self, rows: &[(usize, usize)]) -> Vec<u64> {
        let mut m = vec![0u64; self.sectors.div_ceil(64)];
        for k in (0..self.sectors).step_by(self.chunk_sectors) {
            for &(lo, hi) in rows {
                set_bits(&mut m, k + lo, k + hi);
            }
        }
        m
    }

    /// Journal mode, RAID 5/6: records line `idx` (snapshot `data`, `valid`
    /// and `dirty` sectors) before the flusher writes it. When its dirty
    /// sectors lie in a few ranges of rows ([`rows_of`](Self::rows_of)), a
    /// rows record of each range, of every chunk (random writes: a few
    /// sectors a chunk, not the stripe), their places taken together;
    /// otherwise a stripe record of the whole line.
    /// Completes what is recorded with the members' bytes where the cache
    /// held none, then, with the writers held (`jorder`), lays the line's
    /// valid sectors as they are now over it and takes the record's place
    /// in the log: the record holds every write whose record lies before
    /// it in the log, so a record never carries older data than one it
    /// follows (replay applies the records after the tail, and the records
    /// before it, retired, may hold newer writes already on the members).
    /// If writes that came meanwhile dirtied sectors outside the rows, the
    /// rows of the line as it is then are taken, once, and after that the
    /// line is recorded whole (what the flusher writes must hold
    /// every write up to the line's newest). The record may retire once the
    /// line's oldest dirty write is on the members.
    ///
    /// `pre`: the zeroing epoch when [`prefetch`](Self::prefetch) started
    /// and the sectors it read into `data` already.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_line(
        &self,
        j: &crate::cache::journal::Journal,
        fq: &mut crate::raid::engine::RaidQueue,
        idx: u64,
        data: &mut IoBuf,
        valid: &[u64],
        dirty: &[u64],
        mut pre: Option<PreRead>,
    ) -> Result<Recorded> {
        let sector = CACHE_SECTOR as usize;
        // From the rows of what it holds dirty now, as the prefetch did
        // (the pass's snapshot may be old): widening is then left for
        // writes that come during these reads.
        let now = self.shard(idx).lines.get(&idx).map(|l| self.rows_of(&l.dirty));
        let mut rows = now.unwrap_or_else(|| self.rows_of(dirty));
        let mut widened = false;
        let mut read = vec![0u64; valid.len()];
        loop {
            // What the members hold under a zeroing in flight may be the
            // bytes from before it: not to be recorded, nor written back.
            let zeroes = match pre.take() {
                Some((epoch, got)) => {
                    read = got;
                    epoch
                }
                None => self.zero_epoch.load(Ordering::Acquire),
            };
            if self.zeroing_over(idx) {
                return Ok(Recorded::Later);
            }
            // The sectors to record: the rows of every chunk, or all.
            let want = self.record_sectors(rows.as_deref(), valid.len());
            let holes: Vec<u64> = want.iter().zip(valid).zip(&read).map(|((w, v), r)| w & !v & !r).collect();
            self.read_holes(fq, idx, &holes, data, &mut read)?;
            let order = lock(&self.jorder);
            if self.zero_epoch.load(Ordering::Acquire) != zeroes {
                // A zeroing started during the reads (zeroings hold
                // `jorder` to start): read again, or wait for it.
                drop(order);
                read.iter_mut().for_each(|w| *w = 0);
                continue;
            }
            let (generation, dirty, oldest, last_seq) = {
                let mut sh = self.shard(idx);
                let Some(l) = sh.lines.get_mut(&idx).filter(|l| l.oldest != 0) else { return Ok(Recorded::Clean) };
                if rows.is_some() && l.dirty.iter().zip(&want).any(|(d, w)| d & !w != 0) {
                    // Dirtied outside the rows meanwhile: the rows of what
                    // it holds now, once; then whole (which ends).
                    rows = if widened { None } else { self.rows_of(&l.dirty) };
                    widened = true;
                    continue;
                }
                for (a, b) in runs_of(&l.valid, self.sectors) {
                    data[a * sector..b * sector].copy_from_slice(&l.data[a * sector..b * sector]);
                }
                l.snapped();
                (l.generation, l.dirty.clone(), l.oldest, l.last_seq)
            };
            let whole = rows.is_none();
            // (volume offset, piece, record data) of each record: a rows
            // record a range of rows, or one stripe record.
            let records: Vec<(u64, u64, Option<IoBuf>, usize, usize)> = match &rows {
                None => vec![(idx * self.line, 0, None, 0, 0)],
                Some(ranges) => ranges
                    .iter()
                    .map(|&(lo, hi)| {
                        let piece = (hi - lo) * sector;
                        let mut b = self.small.take(piece * self.sectors / self.chunk_sectors);
                        for (k, c) in (0..self.sectors).step_by(self.chunk_sectors).enumerate() {
                            b[k * piece..(k + 1) * piece].copy_from_slice(&data[(c + lo) * sector..(c + hi) * sector]);
                        }
                        (idx * self.line + (lo * sector) as u64, piece as u64, Some(b), lo, hi)
                    })
                    .collect(),
            };
            // Every record's place is taken with the writers held, so that
            // no writer's record comes between them: each holds the line
            // as it is now.
            let mut places = Vec::with_capacity(records.len());
            let data_chunks = (self.sectors / self.chunk_sectors) as u64;
            for (_, piece, b, _, _) in &records {
                // A rows record's data: its piece of every data chunk (its
                // buffer, from the small ones, may be longer).
                let len = if b.is_some() { piece * data_chunks } else { self.line };
                match j.reserve(len, oldest, None) {
                    Some(r) => places.push(r),
                    None => break,
                }
            }
            drop(order);
            let full = places.len() < records.len();
            // Submitted: written with the records of the other lines of
            // this batch (and writers' records) in one group-commit write,
            // which the line's member writes wait for. A place taken must
            // be filled, also when the log filled before the line's last
            // (the commit waits for every place before a record): the
            // records taken hold the line as it is, which a replay may
            // write as well as the flusher.
            let stride = self.chunk_sectors as u64 * CACHE_SECTOR;
            let mut last = None;
            let mut kept = Vec::new();
            for (r, (offset, piece, b, lo, hi)) in places.into_iter().zip(records) {
                match b {
                    None => j.submit(r, crate::cache::journal::RecordKind::Stripe, offset, last_seq, &data[..self.line as usize])?,
                    Some(b) => {
                        j.submit_rows(r, offset, stride, piece, last_seq, &b[..(piece * data_chunks) as usize])?;
                        kept.push(RowsData { lo, hi, data: b });
                    }
                }
                last = Some(r);
            }
            let Some(record) = last.filter(|_| !full) else { return Ok(Recorded::Full) };
            {
                let mut st = lock(&self.stats);
                if whole {
                    st.stripe_records += 1;
                } else {
                    st.rows_records += 1;
                }
            }
            return Ok(Recorded::Line { generation, dirty, last_seq, whole, record, rows: kept });
        }
    }

    pub(super) fn reap(&self, out: &mut Vec<crate::Completion>, inflight: &mut HashMap<u64, InFlight>, err: &mut Option<crate::Error>) {
        for c in out.drain(..) {
            // Line-sized buffers go back to the pool, a rows write's to
            // the small ones.
            match c.buf {
                Some(b) if b.len() as u64 == self.line => lock(&self.pool).push(b),
                Some(b) => self.small.give(b),
                None => {}
            }
            let Some(InFlight { idx, generation, bits, last_seq }) = inflight.remove(&c.tag) else { continue };
            match c.result {
                Ok(_) => self.written_back(idx, generation, &bits, last_seq),
                Err(e) => {
                    err.get_or_insert(e);
                }
            }
        }
    }

    /// Makes the flusher write through `vol` from now on.
    pub(crate) fn retarget(&self, vol: Weak<RaidVolume>) {
        *lock(&self.target) = vol;
    }

    /// Starts the flusher thread of `vol`'s cache. It holds the volume only
    /// during a pass, and ends when the volume is gone or the cache closed.
    pub(crate) fn start_flusher(self: &Arc<Self>, vol: Weak<RaidVolume>) {
        self.retarget(vol);
        let cache = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("uraid-flusher".into())
            .spawn(move || loop {
                let Some(c) = cache.upgrade() else { return };
                {
                    let k = lock(&c.kick);
                    let (mut k, _) = c.kick_cv.wait_timeout_while(k, FLUSH_INTERVAL, |k| !*k).unwrap_or_else(|e| e.into_inner());
                    *k = false;
                }
                if c.closed.load(Ordering::Acquire) {
                    return;
                }
                let Some(v) = lock(&c.target).upgrade() else { return };
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    #[cfg(feature = "failpoints")]
                    if std::env::var_os("URAID_FAILPOINT_FLUSHER_PANIC").is_some() && c.dirty.load(Ordering::Relaxed) > 0 {
                        panic!("URAID_FAILPOINT_FLUSHER_PANIC");
                    }
                    c.pass(&v)
                })) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        eprintln!("uraid: the write-back cache could not write to the members: {e}");
                        crate::clock::sleep(Duration::from_millis(200));
                    }
                    Err(panic) => return c.flusher_died(&crate::error::panic_message(&*panic)),
                }
            })
            .expect("cannot start the cache flusher thread");
    }

    /// The flusher thread panicked with `why`: from now on every flush,
    /// write and held writer fails with EIO (what the cache held is not
    /// on the members), reads are still served.
    pub(super) fn flusher_died(&self, why: &str) {
        let e = crate::Error::new(
            crate::ErrorKind::Io,
            format!(
                "the volume cache's flusher thread panicked ({why}): writes the cache holds may not be on the members; \
                 stop the array and assemble it again (a journal replays what it recorded)"
            ),
        );
        eprintln!("uraid: {e}");
        *lock(&self.failed) = Some(e);
        self.dead.store(true, Ordering::Release);
    }

    /// Stops the flusher (after [`Volume::flush`] has written everything).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.kick();
    }

    /// A crash (tests): the flusher stops without writing what is dirty,
    /// and this returns once it has (no member write of the cache is in
    /// progress after it). `c` must be the last handle besides the
    /// flusher's.
    pub fn crash(c: &Arc<Cache>) {
        c.close();
        while Arc::strong_count(c) > 1 {
            crate::clock::sleep(Duration::from_millis(1));
        }
    }
}
