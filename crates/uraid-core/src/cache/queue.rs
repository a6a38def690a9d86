//! The cache layer's queue: a [`BlockQueue`] on top of the queue of the
//! layer below (the RAID layer's [`RaidQueue`](crate::raid::engine::RaidQueue)
//! in a volume's stack, or any [`BlockQueue`] put between them, such as a
//! pass-through [`Tap`](crate::io::tap::Tap)), present only when the volume
//! has a cache. It uses only the [`BlockQueue`] trait of the layer below.
//!
//! A request pushed here is offered to the volume's [`Cache`] first: it is
//! done there (a hit, a write taken into write-back), parked
//! (a write whose journal record is being committed with others, a flush
//! or FUA write waiting for durability, a write waiting for room under
//! the dirty limit), or sent down to the RAID queue (a read miss, a
//! write-through write, a discard). Completions from below come back up
//! through here, where a read miss gets the cached lines laid over it and
//! the cache learns that a write it sent on has landed. This layer never
//! sees a member; the RAID layer never sees the cache.

use std::os::fd::RawFd;
use std::sync::Arc;

use crate::cache::{Cache, Taken};
use crate::io::member::now_ns;
use crate::io::request::{BlockQueue, Caps, Completion, Op, Rejected, Request};
use crate::{Error, ErrorKind, Result};

/// How often requests parked on the cache are looked at again (ns).
const PARK_POLL_NS: u64 = 100_000;

/// Why a request waits on the cache.
#[derive(Debug, Clone, Copy)]
enum Parked {
    /// Until writes below this sequence number are durable.
    Durable(u64),
    /// The same, then down to the RAID layer.
    DurableThenMembers(u64),
    /// Until the dirty bytes fall below the limit.
    Room,
    /// Until its journal record (and every one before it) is written.
    Recorded(crate::cache::journal::Reservation, u64),
}

/// What this layer remembers of a request it sent down (indexed by the
/// tag it gave the request below).
#[derive(Debug, Default)]
struct SentDown {
    /// The caller's tag.
    tag: u64,
    op: Option<Op>,
    /// The range sent down (bytes).
    offset: u64,
    len: usize,
    /// A read miss: the cache lines to lay over the result and the cache's
    /// write-through epoch at its start ([`Cache::finish_read`]).
    read_miss: Option<(Vec<u64>, u64)>,
    /// The length the completion reports when only part of the request
    /// went down ([`Taken::MembersPart`]).
    report_len: Option<usize>,
}

/// A per-thread queue through a volume's cache to the layer below, `L`
/// (statically: no dynamic call per I/O). Not `Send` when `L` is not, like
/// the RAID layer's queue.
pub struct CacheQueue<L: BlockQueue> {
    lower: L,
    cache: Arc<Cache>,
    /// Requests the cache completed, handed out at the next wait.
    ready: Vec<Completion>,
    /// Requests waiting on the cache: for durability (flush, FUA) or room.
    parked: Vec<(Request, Parked)>,
    /// Requests below, by the tag they carry there.
    down: Vec<SentDown>,
    free: Vec<u32>,
    /// Completions from below, before they are passed up.
    scratch: Vec<Completion>,
}

impl<L: BlockQueue> CacheQueue<L> {
    /// Puts `cache` over `lower`; holds as many requests as `lower` does.
    /// `lower` must be a queue of the volume the cache was made for (or a
    /// pass-through over one): the cache's flusher writes to that
    /// volume's RAID layer on its own.
    pub fn new(lower: L, cache: Arc<Cache>) -> CacheQueue<L> {
        let depth = lower.depth();
        CacheQueue {
            lower,
            cache,
            ready: Vec::new(),
            parked: Vec::new(),
            down: (0..depth).map(|_| SentDown::default()).collect(),
            free: (0..depth as u32).rev().collect(),
            scratch: Vec::with_capacity(depth),
        }
    }

    /// The queue below.
    pub fn lower(&self) -> &L {
        &self.lower
    }

    /// Offers `req` to the cache: done there (handed out at the next wait),
    /// parked on it, or sent down.
    fn offer(&mut self, mut req: Request) {
        let why = match self.cache.take(&mut req) {
            Taken::Done(n) => {
                self.ready.push(Completion { tag: req.tag, result: Ok(n), buf: req.buf });
                return;
            }
            Taken::Members { pins, epoch } => {
                let read_miss = (req.op == Op::Read).then_some((pins, epoch));
                self.send_down(req, read_miss, None);
                return;
            }
            Taken::MembersPart { offset, len } => {
                let whole = req.len;
                (req.offset, req.len) = (offset, len);
                self.send_down(req, None, Some(whole));
                return;
            }
            Taken::Durable(t) => Parked::Durable(t),
            Taken::DurableThenMembers(t) => Parked::DurableThenMembers(t),
            Taken::Full => Parked::Room,
            Taken::Recorded(r, seq) => Parked::Recorded(r, seq),
            Taken::Failed(e) => {
                self.ready.push(Completion { tag: req.tag, result: Err(e), buf: req.buf });
                return;
            }
        };
        self.parked.push((req, why));
    }

    /// Sends `req` to the RAID layer, remembering what to do when it
    /// completes.
    fn send_down(&mut self, mut req: Request, read_miss: Option<(Vec<u64>, u64)>, report_len: Option<usize>) {
        let i = self.free.pop().expect("room was checked") as usize;
        self.down[i] = SentDown { tag: req.tag, op: Some(req.op), offset: req.offset, len: req.len, read_miss, report_len };
        req.tag = i as u64;
        if let Err(r) = self.lower.push(req) {
            // Checked already; only a ring that failed for good refuses.
            let c = self.came_up(Completion { tag: i as u64, result: Err(r.error), buf: r.request.buf });
            self.ready.push(c);
        }
    }

    /// Turns a completion from below into the caller's.
    fn came_up(&mut self, mut c: Completion) -> Completion {
        let i = c.tag as usize;
        let d = std::mem::take(&mut self.down[i]);
        self.free.push(i as u32);
        let op = d.op.expect("a request was sent down with this tag");
        if let (Some((pins, epoch)), Some(b)) = (d.read_miss, c.buf.as_mut()) {
            self.cache.finish_read(d.offset, &mut b[..d.len], &pins, epoch, c.result.is_ok());
        }
        if matches!(op, Op::Write | Op::Discard | Op::WriteZeroes { .. }) {
            // A later flush covers it now.
            self.cache.sent_on_done(op, d.offset, d.len);
        }
        if let (Ok(_), Some(n)) = (&c.result, d.report_len) {
            c.result = Ok(n);
        }
        c.tag = d.tag;
        c
    }

    /// Requests parked on the cache that may go on: completes them, or
    /// sends them down; hands out what the cache completed. True when some
    /// are still parked.
    fn poll_parked(&mut self, out: &mut Vec<Completion>) -> bool {
        if self.parked.is_empty() && self.ready.is_empty() {
            return false;
        }
        // Each parked request is looked at once per call: one offered again
        // may be parked again (the cache is still full), and must wait for
        // the next call, after the RAID queue has reaped and driven its own
        // member I/O (a stripe lock it holds may be what the flusher needs).
        let mut parked = std::mem::take(&mut self.parked);
        if parked.iter().any(|(_, why)| matches!(why, Parked::Recorded(..))) {
            // Group commit: the records of every write parked here (and of
            // other threads' writes submitted meanwhile) in one write.
            self.cache.commit_journal();
        }
        for (req, mut why) in parked.drain(..) {
            let go = match why {
                Parked::Durable(t) | Parked::DurableThenMembers(t) => self.cache.durable(t),
                Parked::Room => self.cache.room(),
                Parked::Recorded(r, seq) => match self.cache.recorded(&r) {
                    Some(Err(_)) => {
                        // The journal is lost: on to the members.
                        why = Parked::Durable(self.cache.record_failed(seq));
                        None
                    }
                    done => done,
                },
            };
            let Some(res) = go else {
                self.parked.push((req, why));
                continue;
            };
            match (why, res) {
                (_, Err(e)) => {
                    // Never sent down: it ends here.
                    self.cache.sent_on_done(req.op, req.offset, req.len);
                    out.push(Completion { tag: req.tag, result: Err(e), buf: req.buf })
                }
                (Parked::Durable(_) | Parked::Recorded(..), Ok(())) => out.push(Completion { tag: req.tag, result: Ok(req.len), buf: req.buf }),
                (Parked::DurableThenMembers(_), Ok(())) => {
                    self.cache.invalidate(req.offset, req.len);
                    self.send_down(req, None, None);
                }
                (Parked::Room, Ok(())) => self.offer(req),
            }
        }
        // Those parked again go back into the list's own allocation.
        parked.append(&mut self.parked);
        self.parked = parked;
        out.append(&mut self.ready);
        !self.parked.is_empty()
    }

    /// The one waiting loop of this layer: returns once `min` requests
    /// completed, `fd` became readable (true), nothing is left in flight
    /// (without a deadline), or the deadline (ns, [`now_ns`]) passed.
    fn wait_until(&mut self, min: usize, out: &mut Vec<Completion>, fd: Option<RawFd>, deadline: Option<u64>) -> bool {
        let start = out.len();
        loop {
            if let Some(e) = self.lower.broken().cloned() {
                // The ring below failed for good: so does everything here.
                out.append(&mut self.ready);
                for (req, _) in self.parked.drain(..) {
                    out.push(Completion { tag: req.tag, result: Err(e.clone()), buf: req.buf });
                }
            }
            let parked = self.poll_parked(out);
            if out.len() - start >= min || (deadline.is_none() && self.in_flight() == 0) {
                self.lower.submit();
                return false;
            }
            let now = now_ns();
            if deadline.is_some_and(|d| now >= d) {
                self.lower.submit();
                return false;
            }
            // Parked requests wait on the cache's flusher (another thread):
            // look again soon.
            let below = if parked { Some(deadline.map_or(now + PARK_POLL_NS, |d| d.min(now + PARK_POLL_NS))) } else { deadline };
            let mut scratch = std::mem::take(&mut self.scratch);
            let fired = match below {
                None => {
                    self.lower.wait(1, &mut scratch);
                    false
                }
                Some(t) => self.lower.wait_event(&mut scratch, fd, std::time::Duration::from_nanos(t.saturating_sub(now))),
            };
            for c in scratch.drain(..) {
                let c = self.came_up(c);
                out.push(c);
            }
            self.scratch = scratch;
            if fired {
                return true;
            }
        }
    }
}

impl<L: BlockQueue> BlockQueue for CacheQueue<L> {
    fn push(&mut self, req: Request) -> std::result::Result<(), Rejected> {
        if let Some(e) = self.lower.broken() {
            return Err(Rejected { error: e.clone(), request: req });
        }
        if !self.has_room() {
            let error = Error::new(
                ErrorKind::Busy,
                format!("queue is full ({} requests in flight); wait for completions first", self.down.len()),
            );
            return Err(Rejected { error, request: req });
        }
        if let Err(error) = self.lower.validate(&req) {
            return Err(Rejected { error, request: req });
        }
        self.offer(req);
        Ok(())
    }

    fn submit(&mut self) {
        self.lower.submit()
    }

    fn wait(&mut self, min: usize, out: &mut Vec<Completion>) {
        self.wait_until(min, out, None, None);
    }

    fn wait_event(&mut self, out: &mut Vec<Completion>, fd: Option<RawFd>, timeout: std::time::Duration) -> bool {
        self.wait_until(1, out, fd, Some(now_ns() + timeout.as_nanos() as u64))
    }

    /// What this layer holds: requests sent below (counted by the tags
    /// this layer gave them until their completion came up, not by the
    /// layer below, which may have finished one whose completion it has not
    /// handed up yet), completed here, or parked on the cache.
    fn in_flight(&self) -> usize {
        let below = self.down.len() - self.free.len();
        debug_assert!(self.lower.in_flight() <= below, "the layer below holds requests this layer never sent");
        below + self.ready.len() + self.parked.len()
    }

    fn has_room(&self) -> bool {
        self.in_flight() < self.down.len()
    }

    fn depth(&self) -> usize {
        self.down.len()
    }

    fn validate(&self, req: &Request) -> Result<()> {
        self.lower.validate(req)
    }

    fn broken(&self) -> Option<&Error> {
        self.lower.broken()
    }

    /// The layer below's, as the cache changes nothing of it (see
    /// [`Cache::caps`]).
    fn caps(&self) -> Caps {
        self.cache.caps(self.lower.caps())
    }
}
