//! The reshape layer: while a served volume is restriped onto more members
//! (`uraid grow` of a served array), its requests go to the old layout or
//! to the new one by the reshape's position, as md's `raid5_make_request`
//! does with `reshape_progress`.
//!
//! - [`ReshapeState`] is shared by every queue of the volume and by the
//!   reshape itself (the mover, `control::array::grow`): the position
//!   (logical bytes below it are in the new layout), the end of the range
//!   being moved (`[position, locked_end)`: requests there wait), and the
//!   requests in flight with their ranges, so that the mover starts moving
//!   a range only once no request routed before into it is still running.
//! - [`ReshapeQueue`] is the per-thread queue: a [`RaidQueue`] on each
//!   layout; a request below the position goes to the new one, one past
//!   the moved range to the old one, one that straddles the position is
//!   cut in two, and one that touches the range being moved waits (it is
//!   retried as the mover goes on). A flush goes to the new layout, whose
//!   members are all of the old one's and the new ones.
//!
//! Both layouts are over the same devices; a range the mover has not
//! locked is never written by it, and the rows it writes hold only bytes
//! already moved (see `control::array::grow`), so the two never touch the
//! same member bytes at once.

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::io::member::now_ns;
use crate::io::request::{BlockQueue, Completion, Op, Rejected, Request};
use crate::raid::engine::RaidQueue;
use crate::{Error, ErrorKind, IoBuf};

/// How long a queue with waiting requests (or requests on both layouts)
/// blocks on one layout before it looks at the other again, ns.
const SLICE_NS: u64 = 200_000;

/// The position of a reshape of a served volume, shared by its queues and
/// the mover (see the module's documentation).
#[derive(Debug)]
pub struct ReshapeState {
    inner: Mutex<Inner>,
    /// Signalled when a request ends or the position moves.
    changed: Condvar,
}

#[derive(Debug)]
struct Inner {
    /// Logical bytes below are in the new layout.
    position: u64,
    /// `[position, locked_end)` is being moved: requests there wait.
    locked_end: u64,
    /// Requests routed and not ended: id -> logical byte range.
    in_flight: HashMap<u64, (u64, u64)>,
    next_id: u64,
    /// Bumped at every change of the position or the locked range.
    generation: u64,
}

/// Where [`ReshapeState::route`] sends a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// It touches the range being moved: it waits.
    Wait,
    /// Wholly in the new layout.
    New,
    /// Wholly in the old layout.
    Old,
    /// Bytes below the given offset to the new layout, the rest to the old.
    Split(u64),
}

impl ReshapeState {
    /// A reshape whose bytes below `position` are in the new layout, with
    /// nothing locked.
    pub fn new(position: u64) -> Arc<ReshapeState> {
        Arc::new(ReshapeState {
            inner: Mutex::new(Inner { position, locked_end: position, in_flight: HashMap::new(), next_id: 1, generation: 0 }),
            changed: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Logical bytes below this are in the new layout.
    pub fn position(&self) -> u64 {
        self.lock().position
    }

    /// The mover: requests to `[position, end)` wait from now on; returns
    /// once no request routed before overlaps it (those finish first).
    pub fn lock_to(&self, end: u64) {
        let mut g = self.lock();
        if end > g.locked_end {
            g.locked_end = end;
            g.generation += 1;
        }
        let from = g.position;
        while g.in_flight.values().any(|&(s, e)| s < end && e > from) {
            g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The mover: the bytes below `position` are in the new layout (and no
    /// longer locked); with `unlock`, the bytes past it are not locked
    /// either (the mover stopped).
    pub fn advance(&self, position: u64, unlock: bool) {
        let mut g = self.lock();
        g.position = position;
        if unlock || g.locked_end < position {
            g.locked_end = position;
        }
        g.generation += 1;
        drop(g);
        self.changed.notify_all();
    }

    fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Routes `[start, end)`, registering it as in flight unless it waits.
    fn route(&self, start: u64, end: u64) -> (Route, u64) {
        let mut g = self.lock();
        let route = if start < g.locked_end && end > g.position {
            Route::Wait
        } else if end <= g.position {
            Route::New
        } else if start >= g.position {
            Route::Old
        } else {
            Route::Split(g.position)
        };
        if route == Route::Wait {
            return (route, 0);
        }
        let id = g.next_id;
        g.next_id += 1;
        g.in_flight.insert(id, (start, end));
        (route, id)
    }

    /// A request routed as `id` ended.
    fn ended(&self, id: u64) {
        let mut g = self.lock();
        g.in_flight.remove(&id);
        drop(g);
        self.changed.notify_all();
    }
}

/// A request handed to the layouts and not yet completed upward.
struct Pending {
    tag: u64,
    offset: u64,
    len: usize,
    buf: Option<IoBuf>,
    /// Parts still out (1 or 2).
    left: u8,
    /// Where the second part starts (a split request), logical bytes.
    split: u64,
    /// Id in [`ReshapeState`]'s registry (0: a flush, not registered).
    id: u64,
    error: Option<Error>,
}

/// A per-thread queue of a volume under reshape (see the module's
/// documentation). Not `Send`, as the [`RaidQueue`]s it holds.
pub struct ReshapeQueue {
    old: RaidQueue,
    new: RaidQueue,
    state: Arc<ReshapeState>,
    depth: usize,
    /// Requests out, by slot; a part's tag below is `slot << 1 | part`.
    slots: Vec<Option<Pending>>,
    free: Vec<usize>,
    /// Requests waiting for the mover, in order.
    waiting: VecDeque<Request>,
    /// The state's generation when `waiting` was last tried.
    tried: u64,
    /// Completions made here (a request a layout refused).
    ready: Vec<Completion>,
    tmp: Vec<Completion>,
}

impl ReshapeQueue {
    /// A queue over `old` and `new` (queues of the two layouts' RAID
    /// layers, each of `depth`), routed by `state`, with room for `depth`
    /// requests.
    pub fn new(old: RaidQueue, new: RaidQueue, state: Arc<ReshapeState>, depth: usize) -> ReshapeQueue {
        ReshapeQueue {
            old,
            new,
            state,
            depth,
            slots: Vec::new(),
            free: Vec::new(),
            waiting: VecDeque::new(),
            tried: u64::MAX,
            ready: Vec::new(),
            tmp: Vec::new(),
        }
    }

    fn out(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn slot(&mut self, p: Pending) -> usize {
        match self.free.pop() {
            Some(s) => {
                self.slots[s] = Some(p);
                s
            }
            None => {
                self.slots.push(Some(p));
                self.slots.len() - 1
            }
        }
    }

    /// Routes `req` to the layouts, or keeps it waiting.
    fn dispatch(&mut self, req: Request) {
        if req.op == Op::Flush {
            let s = self.slot(Pending { tag: req.tag, offset: 0, len: 0, buf: None, left: 1, split: 0, id: 0, error: None });
            let sub = Request { tag: (s as u64) << 1, ..req };
            if let Err(r) = self.new.push(sub) {
                self.part_done(s, Err(r.error), None);
            }
            return;
        }
        let end = req.offset + req.len as u64;
        let (route, id) = self.state.route(req.offset, end);
        if route == Route::Wait {
            self.waiting.push_back(req);
            return;
        }
        let Request { op, offset, len, buf, tag, fua } = req;
        let split = match route {
            Route::Split(at) => at,
            _ => 0,
        };
        let left = if split > 0 { 2 } else { 1 };
        let s = self.slot(Pending { tag, offset, len, buf, left, split, id, error: None });
        let t = (s as u64) << 1;
        let parts: Vec<(bool, Request)> = match route {
            Route::New | Route::Old => {
                let buf = self.slots[s].as_mut().expect("just set").buf.take();
                vec![(route == Route::New, Request { op, offset, len, buf, tag: t, fua })]
            }
            Route::Split(at) => {
                let first = (at - offset) as usize;
                let cut = |from: usize, n: usize, p: &Pending| -> Option<IoBuf> {
                    p.buf.as_ref().map(|b| {
                        let mut sub = IoBuf::new(n);
                        if op == Op::Write {
                            sub.copy_from_slice(&b[from..from + n]);
                        }
                        sub
                    })
                };
                let p = self.slots[s].as_ref().expect("just set");
                let (b0, b1) = (cut(0, first, p), cut(first, len - first, p));
                vec![
                    (true, Request { op, offset, len: first, buf: b0, tag: t, fua }),
                    (false, Request { op, offset: at, len: len - first, buf: b1, tag: t | 1, fua }),
                ]
            }
            Route::Wait => unreachable!("handled above"),
        };
        for (to_new, sub) in parts {
            let q = if to_new { &mut self.new } else { &mut self.old };
            if let Err(r) = q.push(sub) {
                let buf = r.request.buf;
                self.part_done(s, Err(r.error), buf.map(|b| (r.request.tag & 1, b)));
            }
        }
    }

    /// A part of slot `s` completed with `result`; `buf` is the part's
    /// buffer with its part number (0 or 1): a split request's part's own
    /// buffer (a read's bytes are copied into the request's), or the
    /// request's buffer itself.
    fn part_done(&mut self, s: usize, result: crate::Result<usize>, buf: Option<(u64, IoBuf)>) {
        let Some(p) = self.slots.get_mut(s).and_then(|p| p.as_mut()) else { return };
        if let Err(e) = result {
            p.error.get_or_insert(e);
        }
        match buf {
            Some((part, b)) if p.split > 0 => {
                // A split request: the part's own buffer; a read copies back.
                if let Some(orig) = p.buf.as_mut() {
                    let from = if part == 0 { 0 } else { (p.split - p.offset) as usize };
                    let n = b.len().min(orig.len().saturating_sub(from));
                    orig[from..from + n].copy_from_slice(&b[..n]);
                }
            }
            Some((_, b)) => p.buf = Some(b),
            None => {}
        }
        p.left -= 1;
        if p.left > 0 {
            return;
        }
        let p = self.slots[s].take().expect("checked above");
        self.free.push(s);
        if p.id != 0 {
            self.state.ended(p.id);
        }
        let result = match p.error {
            Some(e) => Err(e),
            None => Ok(p.len),
        };
        self.ready.push(Completion { tag: p.tag, result, buf: p.buf });
    }

    /// Takes the layouts' completions in `tmp` (whichever layout completed
    /// them: a part's tag says its slot and part), and keeps the emptied
    /// vector for the next wait.
    fn parts_done(&mut self, mut tmp: Vec<Completion>) {
        for c in tmp.drain(..) {
            let s = (c.tag >> 1) as usize;
            let part = c.tag & 1;
            self.part_done(s, c.result, c.buf.map(|b| (part, b)));
        }
        self.tmp = tmp;
    }

    /// Tries the waiting requests again when the mover moved.
    fn retry_waiting(&mut self) {
        if self.waiting.is_empty() {
            return;
        }
        let g = self.state.generation();
        if g == self.tried {
            return;
        }
        self.tried = g;
        for _ in 0..self.waiting.len() {
            let req = self.waiting.pop_front().expect("counted");
            self.dispatch(req);
        }
    }

    /// Moves what the layouts completed (without blocking) to `ready`.
    fn reap(&mut self) -> bool {
        let mut fired = false;
        for new in [false, true] {
            let mut tmp = std::mem::take(&mut self.tmp);
            let q = if new { &mut self.new } else { &mut self.old };
            fired |= q.wait_until(0, &mut tmp, None);
            self.parts_done(tmp);
        }
        fired
    }

    /// The waiting loop: as [`RaidQueue::wait_until`], over both layouts.
    fn wait_until(&mut self, min: usize, out: &mut Vec<Completion>, fd: Option<RawFd>, deadline: Option<u64>) -> bool {
        if let Some(fd) = fd {
            self.old.arm_poll(fd);
        }
        let mut got = 0usize;
        loop {
            self.retry_waiting();
            let fired = self.reap();
            got += self.ready.len();
            out.append(&mut self.ready);
            if got >= min || fired || (deadline.is_none() && self.in_flight() == 0) {
                self.old.submit();
                self.new.submit();
                return fired;
            }
            let now = now_ns();
            if deadline.is_some_and(|d| now >= d) {
                return false;
            }
            let (o, n) = (self.old.in_flight() > 0, self.new.in_flight() > 0);
            // Block on one layout; come back soon when the other one, the
            // waiting requests or the caller's descriptor (armed on the
            // old layout's ring) may need a look.
            let alone = !self.waiting.is_empty() || (o && n) || (n && fd.is_some());
            let mut until = deadline;
            if alone {
                let t = now + SLICE_NS;
                until = Some(until.map_or(t, |u| u.min(t)));
            }
            let mut tmp = std::mem::take(&mut self.tmp);
            let fired = if n && !o { self.new.wait_until(1, &mut tmp, until) } else { self.old.wait_until(1, &mut tmp, until) };
            self.parts_done(tmp);
            if fired {
                out.append(&mut self.ready);
                self.old.submit();
                self.new.submit();
                return true;
            }
        }
    }
}

impl BlockQueue for ReshapeQueue {
    fn push(&mut self, req: Request) -> std::result::Result<(), Rejected> {
        if self.in_flight() >= self.depth {
            let error = Error::new(ErrorKind::Busy, format!("queue is full ({} requests in flight); wait for completions first", self.depth));
            return Err(Rejected { error, request: req });
        }
        if let Err(error) = self.old.validate(&req) {
            return Err(Rejected { error, request: req });
        }
        self.dispatch(req);
        Ok(())
    }

    fn submit(&mut self) {
        self.old.submit();
        self.new.submit();
    }

    fn wait(&mut self, min: usize, out: &mut Vec<Completion>) {
        self.wait_until(min, out, None, None);
    }

    fn wait_event(&mut self, out: &mut Vec<Completion>, fd: Option<RawFd>, timeout: std::time::Duration) -> bool {
        self.wait_until(1, out, fd, Some(now_ns() + timeout.as_nanos() as u64))
    }

    fn in_flight(&self) -> usize {
        self.out() + self.waiting.len() + self.ready.len()
    }

    fn has_room(&self) -> bool {
        self.in_flight() < self.depth
    }

    fn depth(&self) -> usize {
        self.depth
    }

    fn validate(&self, req: &Request) -> crate::Result<()> {
        self.old.validate(req)
    }

    /// The old layout's: the volume keeps its size and what it can do
    /// until the reshape ends.
    fn caps(&self) -> crate::io::request::Caps {
        self.old.volume().caps()
    }
}
