//! The journal side of the flusher (journal mode, RAID 5/6): before a
//! line dirty in part goes to the members, it is recorded in the journal
//! (rows records of the rows its dirty sectors lie in, or a stripe record
//! of the whole line), completed with the members' bytes where the cache
//! holds none. [`Recorder`] holds one pass's state for it: its own queue
//! for those reads, the reads of a window of lines started ahead, and the
//! newest record submitted, which the window's member writes wait for
//! ([`Recorder::commit`]: one group-commit write).

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use crate::cache::journal::{Journal, RecordKind, Reservation};
use crate::cache::writer::RowsData;
use crate::cache::lines::Snap;
use crate::cache::{lock, runs_of, set_bits, Cache, SmallBufs, CACHE_SECTOR, MAX_ROWS_RECORDS, RECORD_BATCH, ROWS_GAP};
use crate::io::buf::IoBuf;
use crate::io::request::{Completion, Request};
use crate::raid::engine::RaidQueue;
use crate::{Error, ErrorKind, Result};

/// What [`Cache::record_line`] did with a line.
pub(super) enum Recorded {
    /// Recorded as the line was then, whole (`whole`) or the rows of its
    /// dirty sectors (a rows record): its `generation`, `dirty` sectors
    /// (all in the rows recorded) and newest write `last_seq`.
    /// The record is submitted, not yet written: `record` (member writes
    /// of the line wait for it: [`Journal::wait_record`]).
    /// `rows`: a rows record's ranges of rows (sectors inside a chunk)
    /// with the rows of every data chunk (chunk k's at `k * piece`), as
    /// recorded: written back as rows writes, which need no reads.
    Line { generation: u64, dirty: Vec<u64>, last_seq: u64, whole: bool, record: Reservation, rows: Vec<RowsData> },
    /// Nothing of it is dirty any more.
    Clean,
    /// The log has no room for it now.
    Full,
    /// A zeroing sent on to the members overlaps it, or started while its
    /// missing sectors were read: try again at the next pass.
    Later,
}

/// What the flusher's prefetch read of a line: the zeroing epoch before
/// the reads, and the sectors read into its snapshot.
type PreRead = (u64, Vec<u64>);

/// The flusher's prefetch reads of a window of lines in flight (see
/// `Cache::prefetch_start`).
struct Prefetch {
    /// Per line of the window: what [`PreRead`] says, filled as reads land.
    got: Vec<Option<PreRead>>,
    /// Reads in flight: (line, first sector, end sector), by tag.
    reads: Vec<(usize, usize, usize)>,
    /// The first read that failed.
    first_err: Option<Error>,
    /// Reads landed (failed ones included). Counted here, not by the RAID
    /// queue's `in_flight`, which no longer counts a request it failed at
    /// once (a failed volume) before its completion is handed out.
    landed: usize,
}

impl Prefetch {
    /// Lays read `c` into its line's snapshot and marks its sectors read;
    /// its buffer goes back to `small`.
    fn land(&mut self, c: Completion, lines: &mut [Option<Snap>], small: &SmallBufs) {
        let sector = CACHE_SECTOR as usize;
        let (i, a, b) = self.reads[c.tag as usize];
        self.landed += 1;
        match (c.result, c.buf, lines[i].as_mut(), self.got[i].as_mut()) {
            (Ok(_), Some(buf), Some(snap), Some((_, bits))) => {
                snap.data[a * sector..b * sector].copy_from_slice(&buf[..(b - a) * sector]);
                set_bits(bits, a, b);
                small.give(buf);
            }
            (Err(e), ..) => {
                self.first_err.get_or_insert(e);
            }
            _ => {}
        }
    }
}

/// The records of one flusher pass (see the module).
pub(super) struct Recorder<'c> {
    cache: &'c Cache,
    j: &'c Journal,
    /// The queue of the reads that complete records.
    fq: RaidQueue,
    /// Per line of the current window: what the prefetch read.
    pre: Vec<Option<PreRead>>,
    /// The next window's reads, started before this one's commit.
    next: Option<Prefetch>,
    /// The newest record submitted in this window, not yet written.
    recorded: Option<Reservation>,
}

impl<'c> Recorder<'c> {
    /// Records of `cache`'s lines into `j`, reading through `fq`.
    pub(super) fn new(cache: &'c Cache, j: &'c Journal, fq: RaidQueue) -> Recorder<'c> {
        Recorder { cache, j, fq, pre: Vec::new(), next: None, recorded: None }
    }

    /// Whether the journal is lost (a line then goes down unrecorded).
    pub(super) fn journal_lost(&self) -> bool {
        self.j.is_lost()
    }

    /// Whether records of this window wait to be written.
    pub(super) fn pending(&self) -> bool {
        self.recorded.is_some()
    }

    /// A new window of `lines`: the members' bytes their records need,
    /// read (or, started by the last [`commit`](Self::commit), landed).
    pub(super) fn window(&mut self, lines: &mut [Option<Snap>], first_err: &mut Option<Error>) {
        if first_err.is_some() {
            self.pre = Vec::new();
            return;
        }
        let got = match self.next.take() {
            Some(p) => self.cache.prefetch_finish(&mut self.fq, p, lines),
            None => self.cache.prefetch(&mut self.fq, lines),
        };
        self.pre = got.unwrap_or_else(|e| {
            first_err.get_or_insert(e);
            Vec::new()
        });
    }

    /// Records line `idx` (the `i`th of the pass; see
    /// [`Cache::record_line`]). Errors: the journal's, a member read's.
    pub(super) fn record(&mut self, i: usize, idx: u64, data: &mut IoBuf, valid: &[u64], dirty: &[u64]) -> Result<Recorded> {
        let pre = self.pre.get_mut(i % RECORD_BATCH).and_then(Option::take);
        let r = self.cache.record_line(self.j, &mut self.fq, idx, data, valid, dirty, pre);
        if let Ok(Recorded::Line { record, .. }) = &r {
            self.recorded = Some(*record);
        }
        r
    }

    /// Writes this window's records (one group commit) and, meanwhile,
    /// starts the reads of the `next` window's lines.
    pub(super) fn commit(&mut self, next: Option<&mut [Option<Snap>]>, first_err: &mut Option<Error>) {
        let Some(r) = self.recorded.take() else { return };
        if let Some(lines) = next.filter(|_| first_err.is_none()) {
            match self.cache.prefetch_start(&mut self.fq, lines) {
                Ok(p) => self.next = Some(p),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        // Every record of the batch, in one write or a few.
        if let Err(e) = self.j.wait_record(&r) {
            if !self.j.is_lost() {
                first_err.get_or_insert(e);
            }
        }
    }
}

impl Cache {
    /// Journal mode, RAID 5/6: reads, for each line of `lines` that
    /// [`record_line`](Self::record_line) will record, the members' bytes
    /// under the holes its record needs (the sectors of its rows, or of
    /// the whole line, that the cache does not hold) into its snapshot,
    /// all of them in flight together through `fq`; returns per line the
    /// zeroing epoch before the reads and the sectors read (record_line
    /// reads again if a zeroing started meanwhile, and reads the rest).
    /// Errors: the first failed read's.
    fn prefetch(&self, fq: &mut RaidQueue, lines: &mut [Option<Snap>]) -> Result<Vec<Option<PreRead>>> {
        let p = self.prefetch_start(fq, lines)?;
        self.prefetch_finish(fq, p, lines)
    }

    /// The first half of [`prefetch`](Self::prefetch): every read
    /// submitted (the kernel has them when this returns), not waited for,
    /// so that the journal's commit of the lines before runs meanwhile.
    /// Nothing else may use `fq` until [`prefetch_finish`](Self::prefetch_finish).
    fn prefetch_start(&self, fq: &mut RaidQueue, lines: &mut [Option<Snap>]) -> Result<Prefetch> {
        let sector = CACHE_SECTOR as usize;
        let epoch = self.zero_epoch.load(Ordering::Acquire);
        let mut p = Prefetch { got: vec![None; lines.len()], reads: Vec::new(), first_err: None, landed: 0 };
        let mut out = Vec::new();
        for i in 0..lines.len() {
            let Some(snap) = lines[i].as_ref() else { continue };
            if runs_of(&snap.dirty, self.sectors) == [(0, self.sectors)] || self.zeroing_over(snap.idx) {
                continue;
            }
            // The rows of what the line holds dirty now, not at the pass's
            // snapshot: writes since (a pass takes a while) widen its
            // record, whose new holes would be read one line at a time.
            let dirty = self.lines.slot(snap.idx).get().map(|l| l.dirty().to_vec());
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
                    p.reads.pop();
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
    fn prefetch_finish(&self, fq: &mut RaidQueue, mut p: Prefetch, lines: &mut [Option<Snap>]) -> Result<Vec<Option<PreRead>>> {
        let mut out = Vec::new();
        while p.landed < p.reads.len() {
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
    fn read_holes(&self, fq: &mut RaidQueue, idx: u64, holes: &[u64], data: &mut IoBuf, read: &mut [u64]) -> Result<()> {
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
                        first_err.get_or_insert(Error::new(ErrorKind::Io, "a member read came back without its buffer".to_string()));
                    }
                }
            }
        }
        first_err.map_or(Ok(()), Err)
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
        j: &Journal,
        fq: &mut RaidQueue,
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
        let now = self.lines.slot(idx).get().map(|l| self.rows_of(l.dirty()));
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
                let mut slot = self.lines.slot(idx);
                let Some(l) = slot.get_mut().filter(|l| l.oldest() != 0) else { return Ok(Recorded::Clean) };
                if rows.is_some() && l.dirty().iter().zip(&want).any(|(d, w)| d & !w != 0) {
                    // Dirtied outside the rows meanwhile: the rows of what
                    // it holds now, once; then whole (which ends).
                    rows = if widened { None } else { self.rows_of(l.dirty()) };
                    widened = true;
                    continue;
                }
                for (a, b) in runs_of(l.valid(), self.sectors) {
                    data[a * sector..b * sector].copy_from_slice(&l.data()[a * sector..b * sector]);
                }
                l.snapped();
                (l.generation(), l.dirty().to_vec(), l.oldest(), l.last_seq())
            };
            return self.submit_records(j, order, idx, data, rows.as_deref(), (generation, dirty, oldest, last_seq));
        }
    }

    /// The end of [`record_line`](Self::record_line), with the writers
    /// held (`order`, released once the places are taken): makes the
    /// records of line `idx` (snapshot `data`, the line's `generation`,
    /// `dirty` sectors, `oldest` and newest write as `snap` says), the
    /// rows records of `rows` or a stripe record, takes their places in
    /// the log and submits them. Errors: the journal's.
    fn submit_records(
        &self,
        j: &Journal,
        order: MutexGuard<'_, ()>,
        idx: u64,
        data: &IoBuf,
        rows: Option<&[(usize, usize)]>,
        snap: (u64, Vec<u64>, u64, u64),
    ) -> Result<Recorded> {
        let (generation, dirty, oldest, last_seq) = snap;
        let sector = CACHE_SECTOR as usize;
        let whole = rows.is_none();
        // (volume offset, piece, record data) of each record: a rows
        // record a range of rows, or one stripe record.
        let records: Vec<(u64, u64, Option<IoBuf>, usize, usize)> = match rows {
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
                None => j.submit(r, RecordKind::Stripe, offset, last_seq, &data[..self.line as usize])?,
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
        Ok(Recorded::Line { generation, dirty, last_seq, whole, record, rows: kept })
    }
}
