//! The flusher's member writes of one pass: [`Writer`] owns the pass's
//! queue to the RAID layer and the write-backs in flight on it, sends a
//! line down (its dirty runs, or its rows after a rows record), and when
//! one lands marks the line's sectors clean ([`Cache::written_back`]).
//! Its narrow interface: [`Writer::write`], [`Writer::drain`],
//! [`Writer::flush_members`], and the first error it met.

use std::collections::HashMap;

use crate::cache::{lock, set_bits, Cache, CACHE_SECTOR};
use crate::io::buf::IoBuf;
use crate::io::request::{BlockQueue, Completion, Op, Request};
use crate::raid::engine::RaidQueue;
use crate::{Error, Result};

/// A member write of the flusher in flight: line `idx` as of
/// `generation` (holding every write up to `last_seq`), the sectors
/// `bits` it cleans.
struct InFlight {
    idx: u64,
    generation: u64,
    bits: Vec<u64>,
    last_seq: u64,
}

/// A line the flusher writes: its index, generation, snapshot, the
/// sectors it cleans, its newest write, and the sector runs to write.
pub(super) struct Ready {
    pub(super) idx: u64,
    pub(super) generation: u64,
    pub(super) data: IoBuf,
    pub(super) bits: Vec<u64>,
    pub(super) last_seq: u64,
    pub(super) runs: Vec<(usize, usize)>,
    /// After a rows record: its rows, written instead of `runs`.
    pub(super) rows: Vec<RowsData>,
}

/// Rows `lo..hi` (sectors inside a chunk) of every data chunk of a line, as
/// a rows record holds them: chunk k's at `k * (hi - lo)` sectors.
pub(super) struct RowsData {
    pub(super) lo: usize,
    pub(super) hi: usize,
    pub(super) data: IoBuf,
}

/// The member writes of one flusher pass (see the module).
pub(super) struct Writer<'c> {
    cache: &'c Cache,
    q: RaidQueue,
    out: Vec<Completion>,
    /// Member writes in flight, by tag.
    inflight: HashMap<u64, InFlight>,
    tag: u64,
    /// The first write that failed (nothing more is sent then).
    pub(super) first_err: Option<Error>,
}

impl<'c> Writer<'c> {
    /// Writes of `cache`'s lines through `q` (a queue of the RAID layer
    /// the cache writes back to).
    pub(super) fn new(cache: &'c Cache, q: RaidQueue) -> Writer<'c> {
        Writer { cache, q, out: Vec::new(), inflight: HashMap::new(), tag: 0, first_err: None }
    }

    /// Sends `line` down (or, after an error, drops it back to the pool).
    pub(super) fn write(&mut self, line: Ready) {
        if self.first_err.is_some() {
            self.cache.lines.give_buf(line.data);
            return;
        }
        let Ready { idx, generation, data, bits, last_seq, runs, rows } = line;
        if !rows.is_empty() {
            self.cache.lines.give_buf(data);
            return self.write_rows(idx, generation, &bits, last_seq, rows);
        }
        self.write_runs(idx, generation, data, &bits, last_seq, runs);
    }

    /// Waits for every write in flight: counted here (`inflight`), not by
    /// the RAID queue's `in_flight`, which no longer counts a request it
    /// failed at once (a failed volume) before its completion is handed
    /// out: that completion, and its error, were left behind.
    pub(super) fn drain(&mut self) {
        while !self.inflight.is_empty() {
            self.q.wait(1, &mut self.out);
            self.reap();
        }
    }

    /// Flushes the members (every write this pass made is durable).
    /// Errors: the flush's.
    pub(super) fn flush_members(&mut self) -> Result<()> {
        self.q.run(Request::flush(0)).result.map(|_| ())
    }

    /// Waits until the queue has room for one more write.
    fn room(&mut self) {
        while !self.q.has_room() {
            self.q.wait(1, &mut self.out);
            self.reap();
        }
    }

    /// Remembers write `bits` of line `idx` under the next tag; returns it.
    fn track(&mut self, idx: u64, generation: u64, bits: Vec<u64>, last_seq: u64) -> u64 {
        self.tag += 1;
        self.inflight.insert(self.tag, InFlight { idx, generation, bits, last_seq });
        self.tag
    }

    /// Sends the runs `runs` of line `idx` (snapshot `data`) down, waiting
    /// for room as it goes.
    fn write_runs(&mut self, idx: u64, generation: u64, data: IoBuf, bits: &[u64], last_seq: u64, runs: Vec<(usize, usize)>) {
        let c = self.cache;
        let sector = CACHE_SECTOR as usize;
        let full = runs == [(0, c.sectors)];
        let mut data = Some(data);
        {
            let mut s = lock(&c.stats);
            s.writebacks += runs.len() as u64;
            s.full_lines += full as u64;
        }
        for (a, b) in runs {
            self.room();
            let len = (b - a) * sector;
            let buf = if full {
                // The snapshot itself goes out: no second copy.
                data.take().expect("one run")
            } else {
                let src = data.as_ref().expect("kept for the runs");
                let mut buf = c.lines.take_buf();
                debug_assert!(buf.len() >= len, "a pool buffer shorter than a line");
                buf[..len].copy_from_slice(&src[a * sector..b * sector]);
                buf
            };
            // A whole line written after a stripe record cleans only
            // what was dirty in the snapshot.
            let mut mine = vec![0u64; bits.len()];
            set_bits(&mut mine, a, b);
            mine.iter_mut().zip(bits).for_each(|(m, d)| *m &= d);
            let tag = self.track(idx, generation, mine, last_seq);
            let r = Request { op: Op::Write, offset: idx * c.line + (a * sector) as u64, len, buf: Some(buf), tag, fua: false };
            if let Err(r) = self.q.push(r) {
                self.inflight.remove(&tag);
                self.first_err.get_or_insert(r.error);
            }
        }
        if let Some(d) = data {
            c.lines.give_buf(d);
        }
    }

    /// Writes back a line recorded as rows records: each range of rows as
    /// one rows write ([`RaidQueue::push_rows`]: P and Q from the rows
    /// recorded, nothing read), writing the data chunks that are dirty in
    /// it. A line's rows are its stripe's (a line is a stripe's data).
    fn write_rows(&mut self, idx: u64, generation: u64, bits: &[u64], last_seq: u64, rows: Vec<RowsData>) {
        let c = self.cache;
        lock(&c.stats).writebacks += rows.len() as u64;
        for RowsData { lo, hi, data } in rows {
            // The dirty sectors in these rows, and the chunks they are in.
            let mut mine = vec![0u64; bits.len()];
            let mut written = 0u64;
            for (k, s) in (0..c.sectors).step_by(c.chunk_sectors).enumerate() {
                set_bits(&mut mine, s + lo, s + hi);
                if (s + lo..s + hi).any(|i| bits[i / 64] & (1 << (i % 64)) != 0) {
                    written |= 1 << k;
                }
            }
            mine.iter_mut().zip(bits).for_each(|(m, d)| *m &= d);
            if written == 0 {
                continue;
            }
            self.room();
            let tag = self.track(idx, generation, mine, last_seq);
            if let Err(r) = self.q.push_rows(tag, idx, (lo as u64) * CACHE_SECTOR, (hi as u64) * CACHE_SECTOR, written, data) {
                self.inflight.remove(&tag);
                self.first_err.get_or_insert(r.error);
            }
        }
    }

    /// Takes the completions waited for: buffers back to their pools, the
    /// lines' sectors clean, the first error kept.
    fn reap(&mut self) {
        let c = self.cache;
        for done in self.out.drain(..) {
            // Line-sized buffers go back to the pool, a rows write's to
            // the small ones.
            match done.buf {
                Some(b) if b.len() as u64 == c.line => c.lines.give_buf(b),
                Some(b) => c.small.give(b),
                None => {}
            }
            let Some(InFlight { idx, generation, bits, last_seq }) = self.inflight.remove(&done.tag) else { continue };
            match done.result {
                Ok(_) => c.written_back(idx, generation, &bits, last_seq),
                Err(e) => {
                    self.first_err.get_or_insert(e);
                }
            }
        }
    }
}
