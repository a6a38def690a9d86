//! A pass-through layer: [`Tap`] sits over any [`BlockQueue`] and under
//! any layer that takes one (the cache layer's
//! [`CacheQueue`](crate::cache::queue::CacheQueue) is generic over the
//! queue below it), passes every request down and every completion up
//! untouched, and counts what went through in a [`TapCounts`] that other
//! threads may read. It is the pattern of a new layer (a tracer, a
//! throttle): it uses only the [`BlockQueue`] trait of the layer below and
//! answers [`BlockQueue::caps`] from it. No layer needs editing to stack
//! it: `CacheQueue::new(Tap::new(raid.queue(d)?, counts), cache)`.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::io::request::{BlockQueue, Caps, Completion, Op, Rejected, Request};
use crate::{Error, Result};

/// What went through a [`Tap`] (shared: the tap counts, anyone reads).
#[derive(Debug, Default)]
pub struct TapCounts {
    /// Requests taken by the layer below, by kind: read, write, flush,
    /// discard, write-zeroes.
    pub requests: [AtomicU64; 5],
    /// Bytes of the reads and writes taken by the layer below.
    pub read_bytes: AtomicU64,
    /// Bytes of the writes taken by the layer below.
    pub write_bytes: AtomicU64,
    /// FUA writes taken.
    pub fua: AtomicU64,
    /// Completions passed up.
    pub completions: AtomicU64,
    /// Completions passed up with an error.
    pub errors: AtomicU64,
}

impl TapCounts {
    /// The index of `op` in [`requests`](Self::requests).
    pub fn slot(op: Op) -> usize {
        match op {
            Op::Read => 0,
            Op::Write => 1,
            Op::Flush => 2,
            Op::Discard => 3,
            Op::WriteZeroes { .. } => 4,
        }
    }

    /// Requests of `op`'s kind taken so far.
    pub fn of(&self, op: Op) -> u64 {
        self.requests[Self::slot(op)].load(Ordering::Relaxed)
    }
}

/// A pass-through layer over `L` that counts requests and completions.
pub struct Tap<L: BlockQueue> {
    lower: L,
    counts: Arc<TapCounts>,
}

impl<L: BlockQueue> Tap<L> {
    /// Puts a tap over `lower`, counting into `counts`.
    pub fn new(lower: L, counts: Arc<TapCounts>) -> Tap<L> {
        Tap { lower, counts }
    }

    /// The queue below.
    pub fn lower(&self) -> &L {
        &self.lower
    }

    fn count_up(&self, out: &[Completion]) {
        let errors = out.iter().filter(|c| c.result.is_err()).count() as u64;
        self.counts.completions.fetch_add(out.len() as u64, Ordering::Relaxed);
        self.counts.errors.fetch_add(errors, Ordering::Relaxed);
    }
}

impl<L: BlockQueue> BlockQueue for Tap<L> {
    fn push(&mut self, req: Request) -> std::result::Result<(), Rejected> {
        let (op, len, fua) = (req.op, req.len as u64, req.fua);
        self.lower.push(req)?;
        let c = &self.counts;
        c.requests[TapCounts::slot(op)].fetch_add(1, Ordering::Relaxed);
        match op {
            Op::Read => c.read_bytes.fetch_add(len, Ordering::Relaxed),
            Op::Write => c.write_bytes.fetch_add(len, Ordering::Relaxed),
            _ => 0,
        };
        if fua {
            c.fua.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
    fn submit(&mut self) {
        self.lower.submit()
    }
    fn wait(&mut self, min: usize, out: &mut Vec<Completion>) {
        let start = out.len();
        self.lower.wait(min, out);
        self.count_up(&out[start..]);
    }
    fn wait_event(&mut self, out: &mut Vec<Completion>, fd: Option<RawFd>, timeout: std::time::Duration) -> bool {
        let start = out.len();
        let fired = self.lower.wait_event(out, fd, timeout);
        self.count_up(&out[start..]);
        fired
    }
    fn in_flight(&self) -> usize {
        self.lower.in_flight()
    }
    fn has_room(&self) -> bool {
        self.lower.has_room()
    }
    fn depth(&self) -> usize {
        self.lower.depth()
    }
    fn validate(&self, req: &Request) -> Result<()> {
        self.lower.validate(req)
    }
    fn broken(&self) -> Option<&Error> {
        self.lower.broken()
    }
    fn caps(&self) -> Caps {
        self.lower.caps()
    }
}
