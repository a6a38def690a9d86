//! The write-back side of the cache: the flusher thread and its passes
//! (dirty lines written down to the RAID layer through a queue of its own,
//! then the members flushed; in journal mode, lines recorded first and
//! records retired after), the durability marks the request side waits on,
//! and the cache's end (close, crash).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::cache::recorder::{Recorded, Recorder};
use crate::cache::writer::{Ready, Writer};
use crate::cache::lines::Snap;
use crate::cache::{lock, runs_of, Cache, CacheMode, DIRTY_EXPIRE_NS, FLUSH_DEPTH, FLUSH_INTERVAL, RECORD_BATCH};
use crate::raid::engine::RaidVolume;
use crate::Result;

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
        if let Some(oldest) = self.lines.oldest_dirty() {
            mark = mark.min(oldest);
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
        self.lines.snapshots(all, crate::io::member::now_ns().saturating_sub(DIRTY_EXPIRE_NS))
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
        if self.lines.written_back(idx, generation, bits, last_seq) {
            self.release_promise();
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
        let pressed = self.lines.dirty_bytes() * 2 > self.cfg.dirty_limit
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
        let mut w = Writer::new(self, vol.queue(FLUSH_DEPTH)?);
        let mut rec = match journal {
            Some(j) if self.parity => Some(Recorder::new(self, j, vol.queue(FLUSH_DEPTH)?)),
            _ => None,
        };
        let skipped = self.write_lines(lines, &mut w, rec.as_mut());
        w.drain();
        if journal.is_some() && self.closed.load(Ordering::Acquire) && w.first_err.is_none() && !flush {
            // Closed meanwhile: a crash (a stop drains first, so nothing
            // is left to retire): the members' flush does not happen.
            return Ok(());
        }
        // Journal: records carrying writes below the mark may go once the
        // members are flushed.
        let mark = journal.map(|_| self.clean_mark());
        let res = match w.first_err.take() {
            Some(e) => Err(e),
            None if flush || journal.is_some() => w.flush_members(),
            None => Ok(()),
        };
        let res = match (res, journal, mark) {
            (Ok(()), Some(j), Some(m)) => j.checkpoint(m),
            (r, ..) => r,
        };
        if let Err(e) = &res {
            // Writes were lost: every flush waiting or to come says so (and
            // writers held for room fail with it). When the volume below
            // has failed, the flusher stops, and the error says why.
            match failed_below(vol) {
                Some(why) => self.volume_failed(&why),
                None => *lock(&self.failed) = Some(e.clone()),
            }
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

    /// The body of a pass: each of `lines` (oldest first) recorded by
    /// `rec` when there is one (journal mode, RAID 5/6) and sent down by
    /// `w`; with records, a window of [`RECORD_BATCH`] lines at a time
    /// (their records one group commit, then their member writes). True
    /// when a line was left for the next pass (its writes are then not
    /// all on the members).
    fn write_lines(&self, lines: Vec<Snap>, w: &mut Writer<'_>, mut rec: Option<&mut Recorder<'_>>) -> bool {
        let mut skipped = false;
        // Lines whose records are submitted and not yet written: written
        // before the lines go to the members.
        let mut ready: Vec<Ready> = Vec::new();
        let count = lines.len();
        let mut lines: Vec<Option<Snap>> = lines.into_iter().map(Some).collect();
        for i in 0..count {
            if let Some(r) = rec.as_deref_mut().filter(|_| i % RECORD_BATCH == 0) {
                r.window(&mut lines[i..(i + RECORD_BATCH).min(count)], &mut w.first_err);
            }
            let snap = lines[i].take().expect("each line once");
            if let Some(line) = self.ready_line(snap, i, rec.as_deref_mut(), &mut w.first_err, &mut skipped) {
                ready.push(line);
            }
            // Without records to wait for, each line goes out at once;
            // with them, at the end of the window of lines prefetched.
            let window_end = (i + 1) % RECORD_BATCH == 0 || i + 1 == count;
            if rec.as_deref().is_some_and(|r| r.pending()) && !window_end {
                continue;
            }
            if let Some(r) = rec.as_deref_mut() {
                // The next window's reads go to the members while the
                // records are written.
                let next = (window_end && i + 1 < count).then(|| &mut lines[i + 1..(i + 1 + RECORD_BATCH).min(count)]);
                r.commit(next, &mut w.first_err);
            }
            for line in ready.drain(..) {
                w.write(line);
            }
        }
        skipped
    }

    /// What of line `snap` (the `i`th of the pass) goes down: its dirty
    /// runs, or, recorded first by `rec`, the line as recorded. `None`
    /// when nothing goes now (an error before, a zeroing over it, the log
    /// full: `skipped` then, or clean meanwhile).
    fn ready_line(&self, snap: Snap, i: usize, rec: Option<&mut Recorder<'_>>, first_err: &mut Option<crate::Error>, skipped: &mut bool) -> Option<Ready> {
        let Snap { idx, mut generation, mut data, dirty: mut bits, valid, mut last_seq } = snap;
        if first_err.is_some() {
            self.lines.give_buf(data);
            return None;
        }
        if self.zeroing_over(idx) {
            // A zeroing on its way to the members: this line's writes
            // go after it (whichever came first, the outcome is then
            // what the cache holds, and what a replay makes).
            self.lines.give_buf(data);
            *skipped = true;
            return None;
        }
        let mut runs = runs_of(&bits, self.sectors);
        let mut rows = Vec::new();
        if let Some(r) = rec.filter(|_| runs != [(0, self.sectors)]) {
            match r.record(i, idx, &mut data, &valid, &bits) {
                // The line as recorded (it may hold writes that came
                // after the snapshot) is what goes to the members:
                // whole, or its dirty sectors, every one in the rows
                // recorded.
                Ok(Recorded::Line { generation: g, dirty, last_seq: l, whole, rows: rd, .. }) => {
                    runs = if whole { vec![(0, self.sectors)] } else { runs_of(&dirty, self.sectors) };
                    rows = rd;
                    (generation, bits, last_seq) = (g, dirty, l);
                }
                Ok(Recorded::Clean) => {
                    self.lines.give_buf(data);
                    return None;
                }
                // The log is full (retire records first), or a zeroing
                // is on its way: the next pass.
                Ok(Recorded::Full | Recorded::Later) => {
                    self.lines.give_buf(data);
                    *skipped = true;
                    self.kick();
                    return None;
                }
                // The journal was lost: the line goes as it is (its write
                // hole is open again).
                Err(_) if r.journal_lost() => {}
                Err(e) => {
                    *first_err = Some(e);
                    self.lines.give_buf(data);
                    return None;
                }
            }
        }
        Some(Ready { idx, generation, data, bits, last_seq, runs, rows })
    }

    /// Makes the flusher write through `vol` from now on, and returns once
    /// no pass runs on the volume it wrote through before: such a pass
    /// writes to that volume's members, and a role whose device it still
    /// holds must not turn rebuilding on the new volume until it has ended
    /// (its errors there would fail the role's new device: see
    /// `Array::install`).
    pub(crate) fn retarget(&self, vol: Weak<RaidVolume>) {
        let _pass = lock(&self.passing);
        *lock(&self.target) = vol;
    }

    /// Starts the flusher thread of `vol`'s cache. It holds the volume only
    /// during a pass, and ends when the volume is gone or the cache closed.
    pub(crate) fn start_flusher(self: &Arc<Self>, vol: Weak<RaidVolume>) {
        self.retarget(vol);
        let cache = Arc::downgrade(self);
        // On the starter's clock: a simulation's virtual time moves the
        // flush interval and the dirty lines' expiry on.
        crate::clock::spawn("uraid-flusher", move || loop {
            let Some(c) = cache.upgrade() else { return };
            {
                let k = lock(&c.kick);
                let (mut k, _) = crate::clock::wait_timeout_while(&c.kick_cv, k, FLUSH_INTERVAL, |k| !*k);
                *k = false;
            }
            if c.closed.load(Ordering::Acquire) {
                return;
            }
            // Held for the pass, until the volume it took is dropped.
            let pass = lock(&c.passing);
            let Some(v) = lock(&c.target).upgrade() else { return };
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                #[cfg(feature = "failpoints")]
                if std::env::var_os("URAID_FAILPOINT_FLUSHER_PANIC").is_some() && c.lines.dirty_bytes() > 0 {
                    panic!("URAID_FAILPOINT_FLUSHER_PANIC");
                }
                c.pass(&v)
            }));
            drop((v, pass));
            match res {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    if c.dead.load(Ordering::Acquire) {
                        // The volume below has failed (see `pass`): nothing
                        // will ever be written there again.
                        return;
                    }
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

    /// The volume below has failed (`why`: the members it lost), seen by
    /// a pass that failed: the flusher stops, and from now on
    /// every flush, write and writer held for room fails with EIO, as on
    /// the volume without a cache; reads are still served. The dirty lines
    /// stay in the cache, counted in [`stats`](Self::stats)'s `dirty_bytes`,
    /// and [`lost_writes`](Self::lost_writes) says how many bytes they hold.
    pub(super) fn volume_failed(&self, why: &str) {
        let dirty = self.lines.dirty_bytes();
        let e = crate::Error::new(
            crate::ErrorKind::Io,
            format!(
                "the volume below the cache has failed ({why}): the {dirty} dirty \
                 bytes the cache holds cannot be written to the members, and every write and flush fails from now on; \
                 stop the array, bring the lost members back and assemble it again (a journal replays what it recorded)"
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

/// Why `vol` takes no more writes: it lost more members than its level
/// tolerates (the level's rule: [`Geometry::survival`](crate::raid::geometry::Geometry::survival)),
/// or the RAID layer stopped its writes after such a loss. `None` while
/// it can still be written.
fn failed_below(vol: &RaidVolume) -> Option<String> {
    let health = vol.health();
    let n = vol.geometry().members() as u32;
    let lost: crate::raid::level::MemberMask = (0..n).filter(|&m| !health.writable(m)).fold(0, |g, m| g | 1 << m);
    if !health.writes_stopped() && (lost == 0 || vol.geometry().survival(lost).survives) {
        return None;
    }
    let names: Vec<&str> = (0..n).filter(|&m| lost & 1 << m != 0).map(|m| vol.members()[m as usize].name()).collect();
    Some(format!("the {} volume lost members {}, more than it tolerates", vol.geometry().level(), names.join(", ")))
}
