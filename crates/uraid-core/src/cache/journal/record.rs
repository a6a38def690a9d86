//! Writing the journal: records (data, rows of a stripe, zeroes) put in
//! their reserved places with RWF_DSYNC, the header rewritten at each
//! checkpoint as records retire, and reading back what was written.

use std::sync::atomic::Ordering;

use crate::cache::journal::{rows_shape_ok, Header, Journal, RecordKind, Reservation, State, COMMIT_WAIT, GROUP_BYTES, GROUP_RECORDS, HEADER_SIZE, RECORD_HEADER, RECORD_MAGIC};
use crate::{Error, IoBuf, Result};

impl Journal {
    /// Writes the record reserved as `r` (`kind`, volume byte `offset`,
    /// `data` of whole sectors, cache write sequence number `cache_seq`:
    /// see the format) durably, then waits until every record
    /// before it is written too. Errors: `Io`; the reservation still ends
    /// (later records do not wait for it forever), but its record is not
    /// valid, so replay stops before it.
    pub fn write(&self, r: Reservation, kind: RecordKind, offset: u64, cache_seq: u64, data: &[u8]) -> Result<()> {
        self.write_record(r, kind, offset, (0, 0), cache_seq, data)
    }

    /// Writes the rows record reserved as `r`, as [`write`](Self::write)
    /// does: `data` is pieces of `piece` bytes (whole sectors, `stride` a
    /// multiple of 512 no smaller than `piece`) back to back, piece `k`
    /// for volume byte `offset + k * stride` (see the format). Errors: as
    /// `write`.
    pub fn write_rows(&self, r: Reservation, offset: u64, stride: u64, piece: u64, cache_seq: u64, data: &[u8]) -> Result<()> {
        debug_assert!(rows_shape_ok(data.len() as u64, stride, piece));
        self.write_record(r, RecordKind::Rows, offset, (stride, piece), cache_seq, data)
    }

    /// Writes the zeroes record reserved as `r` (reserved for 0 data
    /// bytes): `len` bytes (whole sectors) zeroed at volume byte `offset`
    /// by cache write `cache_seq`, as [`write`](Self::write) does. Errors:
    /// as `write`.
    pub fn write_zeroes(&self, r: Reservation, offset: u64, len: u64, cache_seq: u64) -> Result<()> {
        self.write_record(r, RecordKind::Zeroes, offset, (0, len), cache_seq, &[])
    }

    /// [`write`](Self::write) with the rows record's (stride, piece), the
    /// zeroes record's (0, bytes zeroed), (0, 0) for the other kinds:
    /// [`submit_record`](Self::submit_record), then
    /// [`commit`](Self::commit) until it is written.
    pub(super) fn write_record(&self, r: Reservation, kind: RecordKind, offset: u64, shape: (u64, u64), cache_seq: u64, data: &[u8]) -> Result<()> {
        self.submit_record(r, kind, offset, shape, cache_seq, data)?;
        self.wait_record(&r)
    }

    /// Commits the pending records (see [`commit`](Self::commit)) until
    /// the record reserved as `r` counts as acknowledged, and every one
    /// before it (records are acknowledged in log order). Errors: as
    /// [`written`](Self::written).
    pub fn wait_record(&self, r: &Reservation) -> Result<()> {
        self.commit_until(|s| self.outcome(s, r))
    }

    /// Commits the pending records (see [`commit`](Self::commit)) until
    /// `done` says what to return.
    fn commit_until<R>(&self, done: impl Fn(&State) -> Option<R>) -> R {
        loop {
            self.commit();
            let s = self.lock();
            if let Some(res) = done(&s) {
                return res;
            }
            // Another thread is writing a batch, or an earlier record is
            // reserved and not yet submitted: a batch's end and a
            // submission wake this.
            let _ = self.cv.wait_timeout(s, COMMIT_WAIT).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Submits the rows record reserved as `r` (see
    /// [`write_rows`](Self::write_rows)) without waiting, as
    /// [`submit`](Self::submit) does.
    pub fn submit_rows(&self, r: Reservation, offset: u64, stride: u64, piece: u64, cache_seq: u64, data: &[u8]) -> Result<()> {
        debug_assert!(rows_shape_ok(data.len() as u64, stride, piece));
        self.submit_record(r, RecordKind::Rows, offset, (stride, piece), cache_seq, data)
    }

    /// Submits a data record for the write reserved as `r` (as
    /// [`write`](Self::write), without waiting): it is written with the
    /// others submitted meanwhile at the next [`commit`](Self::commit);
    /// [`written`](Self::written) says when it is durable. Errors: `Io`
    /// when the journal moved since the reservation (the record is not
    /// written).
    pub fn submit(&self, r: Reservation, kind: RecordKind, offset: u64, cache_seq: u64, data: &[u8]) -> Result<()> {
        self.submit_record(r, kind, offset, (0, 0), cache_seq, data)
    }

    /// Encodes the record reserved as `r` (see the format) and puts it
    /// among the pending ones.
    fn submit_record(&self, r: Reservation, kind: RecordKind, offset: u64, (stride, piece): (u64, u64), cache_seq: u64, data: &[u8]) -> Result<()> {
        let len = data.len() as u64;
        // A record of another length than its place would leave a gap or
        // an overlap in the log, where a replay stops.
        assert_eq!(len, r.len, "a journal record's data must be as long as the place taken for it");
        let unit = self.unit() as usize;
        // Zeroed: the header's unused bytes and the data's padding.
        let mut b = IoBuf::new(self.record_span(len) as usize);
        b[..8].copy_from_slice(RECORD_MAGIC);
        b[8..16].copy_from_slice(&r.seq.to_le_bytes());
        b[16..24].copy_from_slice(&r.pos.to_le_bytes());
        b[24..28].copy_from_slice(&(kind as u32).to_le_bytes());
        b[32..40].copy_from_slice(&offset.to_le_bytes());
        b[40..48].copy_from_slice(&len.to_le_bytes());
        b[48..52].copy_from_slice(&crc32c::crc32c(data).to_le_bytes());
        b[64..72].copy_from_slice(&cache_seq.to_le_bytes());
        b[72..80].copy_from_slice(&stride.to_le_bytes());
        b[80..88].copy_from_slice(&piece.to_le_bytes());
        b[unit..unit + data.len()].copy_from_slice(data);
        let mut s = self.lock();
        if s.epoch != r.epoch {
            return Err(self.moved());
        }
        b[56..64].copy_from_slice(&s.nonce.to_le_bytes());
        let crc = crc32c::crc32c(&b[..508]);
        b[508..512].copy_from_slice(&crc.to_le_bytes());
        s.pending.insert(r.seq, (r.pos, b, r.epoch));
        drop(s);
        // Those waiting for an earlier record's submission to commit.
        self.cv.notify_all();
        Ok(())
    }

    /// The error of a record reserved before the journal moved.
    fn moved(&self) -> Error {
        Error::new(crate::ErrorKind::Io, format!("the journal on {} was lost and moved since this record's place was taken", self.name()))
    }

    /// Whether the record reserved as `r` counts as acknowledged: `Some(Ok)`
    /// once it and every record before it are written, `Some(Err)` when it
    /// never will (the journal was lost or moved), `None` while pending.
    pub fn written(&self, r: &Reservation) -> Option<Result<()>> {
        let s = self.lock();
        self.outcome(&s, r)
    }

    fn outcome(&self, s: &State, r: &Reservation) -> Option<Result<()>> {
        if s.epoch != r.epoch {
            return Some(Err(self.moved()));
        }
        if self.lost.load(Ordering::Acquire) {
            // An earlier record may never be written: this one does not
            // count as acknowledged in order.
            return Some(Err(Error::new(
                crate::ErrorKind::Io,
                format!("the journal on {} was lost before this record or an earlier one was written", self.name()),
            )));
        }
        (s.written_below > r.seq).then_some(Ok(()))
    }

    /// Writes the pending records, unless another thread is at it (it
    /// writes those submitted meanwhile too): each run of records back to
    /// back in the log (at most 1 MiB) with one `RWF_DSYNC` write, until
    /// none is pending. A failed write loses the journal (see
    /// [`is_lost`](Self::is_lost)); [`written`](Self::written)
    /// then says so to every record not yet acknowledged.
    pub fn commit(&self) {
        let mut s = self.lock();
        if s.writing {
            return;
        }
        s.writing = true;
        while !s.pending.is_empty() {
            let batch = std::mem::take(&mut s.pending);
            drop(s);
            let mut done: Vec<(u64, u64, bool)> = Vec::with_capacity(batch.len());
            let mut run: Vec<(u64, u64, IoBuf)> = Vec::new();
            let mut it = batch.into_iter().peekable();
            while let Some((seq, (pos, buf, epoch))) = it.next() {
                run.push((seq, pos, buf));
                let end = pos % self.log_size + run.last().map_or(0, |r| r.2.len() as u64);
                let bytes: usize = run.iter().map(|r| r.2.len()).sum();
                let joins = it.peek().is_some_and(|(_, (p, b, e))| *e == epoch && p % self.log_size == end && bytes + b.len() <= GROUP_BYTES && run.len() < GROUP_RECORDS);
                if joins {
                    continue;
                }
                let res = self.write_run(&run, epoch);
                done.extend(run.drain(..).map(|(seq, _, _)| (seq, epoch, res)));
            }
            s = self.lock();
            for (seq, epoch, ok) in done {
                if s.epoch != epoch {
                    continue;
                }
                // Held records have consecutive numbers (reserved in order,
                // retired from the front), so a record's place is its
                // distance from the first.
                let at = s.held.front().map(|h| seq.wrapping_sub(h.seq) as usize);
                if let Some(h) = at.and_then(|i| s.held.get_mut(i)).filter(|h| h.seq == seq) {
                    h.written = ok;
                }
                s.early.insert(seq);
            }
            loop {
                let w = s.written_below;
                if !s.early.remove(&w) {
                    break;
                }
                s.written_below += 1;
            }
            self.cv.notify_all();
        }
        s.writing = false;
        self.cv.notify_all();
    }

    /// Writes a run of records back to back in the log (sequence number,
    /// log position, encoded record), reserved in `epoch`, with one
    /// write. True when it is durable.
    fn write_run(&self, run: &[(u64, u64, IoBuf)], epoch: u64) -> bool {
        let at = HEADER_SIZE + run[0].1 % self.log_size;
        let bufs: Vec<&[u8]> = run.iter().map(|(_, _, b)| &b[..]).collect();
        self.write_dsync_vectored(&bufs, at, Some(epoch)).is_ok()
    }

    /// One write with `RWF_DSYNC` (durable when it returns: FUA on a drive)
    /// at journal byte `offset`. An error loses the journal (see
    /// [`is_lost`](Self::is_lost)); on a member, the member is failed as
    /// for any write error on it.
    ///
    /// A record's write carries the `epoch` of its reservation: checked
    /// under the device's lock, so a record never reaches the device a
    /// rehome put in place after it was reserved.
    pub(super) fn write_dsync(&self, buf: &[u8], offset: u64, epoch: Option<u64>) -> Result<()> {
        self.write_dsync_vectored(&[buf], offset, epoch)
    }

    /// [`write_dsync`](Self::write_dsync) of the buffers `bufs` back to
    /// back from journal byte `offset`, in one write.
    pub(super) fn write_dsync_vectored(&self, bufs: &[&[u8]], offset: u64, epoch: Option<u64>) -> Result<()> {
        let res = {
            let g = self.member.read().unwrap_or_else(|e| e.into_inner());
            match g.as_ref() {
                Some(m) if epoch.is_none_or(|e| e == self.lock().epoch) => m.write_dsync_vectored_at(bufs, self.base + offset),
                _ => return Err(self.lost_error(&format!("cannot write the journal at byte {} of", self.base + offset))),
            }
        };
        res.map_err(|err| {
            if !self.lost.load(Ordering::Acquire) {
                eprintln!("uraid: {err}: the journal is lost; the cache writes without it (each write waits for the members)");
                self.mark_lost();
                if let Some(h) = &self.host {
                    // Persisted by the array's hook; an error there is the
                    // array's to report.
                    let _ = h.health.fail(h.role);
                }
            }
            err
        })
    }

    /// Reads `buf.len()` bytes at journal byte `offset`. Errors: `Io`, and
    /// `Io` when the journal is lost.
    /// Any offset and length: a read the device could not take as it is
    /// (O_DIRECT off its logical blocks) goes through an aligned buffer.
    pub(super) fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let g = self.member.read().unwrap_or_else(|e| e.into_inner());
        let Some(m) = g.as_ref() else {
            return Err(self.lost_error("cannot read the journal on"));
        };
        let abs = self.base + offset;
        let blk = u64::from(m.block_size()).max(RECORD_HEADER);
        let aligned = abs.is_multiple_of(blk) && (buf.len() as u64).is_multiple_of(blk) && (buf.as_ptr() as usize).is_multiple_of(4096);
        if aligned || !m.direct() {
            return m.read_exact_at(buf, abs);
        }
        let start = abs / blk * blk;
        let end = (abs + buf.len() as u64).div_ceil(blk) * blk;
        let mut b = IoBuf::try_new((end - start) as usize)?;
        m.read_exact_at(&mut b, start)?;
        let skip = (abs - start) as usize;
        buf.copy_from_slice(&b[skip..skip + buf.len()]);
        Ok(())
    }

    /// The error of an I/O `what` the journal cannot do because it is lost.
    pub(super) fn lost_error(&self, what: &str) -> Error {
        let why = std::io::Error::other("the journal is lost (a write to it failed, or its member failed or was replaced)");
        Error::io(what, std::path::Path::new(&self.name()), why)
    }

    /// Blocks until every record reserved so far is written (committing
    /// the pending ones: see [`commit`](Self::commit)).
    pub fn wait_written(&self) {
        let target = self.lock().next_seq;
        self.commit_until(|s| (s.written_below >= target || self.lost.load(Ordering::Acquire)).then_some(()))
    }

    /// True when the oldest record not retired carries a cache write below
    /// `mark` and is written: a checkpoint at `mark` would retire it.
    pub fn retirable(&self, mark: u64) -> bool {
        if self.is_lost() {
            return false;
        }
        let s = self.lock();
        s.held.front().is_some_and(|h| h.retires_at(mark, s.written_below))
    }

    /// Retires the records, oldest first, whose data is on the members:
    /// those carrying a cache write below `mark` (the caller flushed the
    /// members after every such write reached them), and writes the new
    /// tail into the header. Errors: `Io`. A lost journal retires nothing
    /// and returns `Ok` (its records no longer matter).
    pub fn checkpoint(&self, mark: u64) -> Result<()> {
        if self.is_lost() {
            return Ok(());
        }
        let (tail, tail_seq) = {
            let mut s = self.lock();
            let before = s.tail;
            while s.held.front().is_some_and(|h| h.retires_at(mark, s.written_below)) {
                s.held.pop_front();
            }
            match s.held.front().copied() {
                Some(h) => {
                    s.tail = h.pos;
                    s.tail_seq = h.seq;
                }
                None => {
                    s.tail = s.head;
                    s.tail_seq = s.next_seq;
                }
            }
            if s.tail == before {
                return Ok(());
            }
            (s.tail, s.tail_seq)
        };
        match self.write_header(tail, tail_seq) {
            Err(_) if self.is_lost() => Ok(()),
            r => r,
        }
    }

    pub(super) fn write_header(&self, tail: u64, tail_seq: u64) -> Result<()> {
        let nonce = self.lock().nonce;
        let h = Header { id: self.id, log_size: self.log_size, tail, tail_seq, nonce, unit: self.unit() };
        self.write_dsync(&h.encode(), 0, None)
    }
}
