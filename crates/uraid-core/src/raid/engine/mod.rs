//! The RAID layer's engine: one io_uring per engine thread.
//!
//! A [`RaidVolume`] is the shared, read-only description of an array (members,
//! geometry, data offset). Each thread that does I/O makes its own [`RaidQueue`]
//! from it: its own ring, with the member descriptors registered once. A
//! logical request is split by the geometry into member pieces; pieces that
//! are contiguous on one member are merged into one vectored I/O (so a
//! 1 MiB request on 4 members is 4 member I/Os whatever the chunk size);
//! the request completes when all its pieces have. There is no lock on this
//! path and, once the slots have grown to the largest request seen, no
//! allocation either.
//!
//! Emulated ceilings (see [`crate::io::member::Throttle`]) hold a piece's
//! completion back until the modelled drive would have finished it.
//!
//! The queue takes requests from the layer above (the cache layer's
//! [`CacheQueue`](crate::cache::queue::CacheQueue), or the stack's
//! [`Queue`](crate::volume::Queue) when there is no cache) and knows
//! nothing of it. This file holds the queue's submit, wait and complete
//! loop; `ring.rs` the io_uring itself (push, submit, wait, reap in
//! batches), `volume.rs` the volume, `piece.rs` one member I/O, `stripe/`
//! the redundant levels' stripe operations.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use io_uring::{opcode, squeue, types};

use crate::io::member::now_ns;
use crate::io::request::BlockQueue;
pub use crate::io::request::{Completion, Op, Rejected, Request, MAX_REQUEST, SECTOR};
use crate::{bail, Error, ErrorKind, Result};

/// A per-thread submission and completion queue over a [`RaidVolume`].
///
/// Not `Send`: it is used only by the thread that made it.
pub struct RaidQueue {
    /// Closed in `Drop`, or leaked when the kernel may still be doing I/O
    /// into memory of this queue's (a ring given up, a panic).
    ring: Ring,
    vol: Arc<RaidVolume>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Pieces done by the kernel but held until their emulated deadline.
    held: BinaryHeap<Reverse<(u64, u64)>>,
    /// A poll on the caller's descriptor is in the ring.
    poll_armed: bool,
    /// That poll fired and was not reported yet.
    poll_ready: bool,
    /// Stripe operations of the redundant levels.
    raid: stripe::State,
    /// Completions of member I/Os a fault plan failed (user data, -errno).
    synthetic: Vec<(u64, i32)>,
    /// Set when the ring failed for good: every request fails with it.
    broken: Option<Error>,
    /// This queue's per-member I/O counters (see `counters`).
    counters: counters::QueueCounters,
}

/// user_data of the poll armed by [`RaidQueue::wait_event`].
const POLL_TAG: u64 = u64::MAX;
/// user_data of the removal of that poll.
const CANCEL_TAG: u64 = u64::MAX - 1;
/// Set in the user_data of a piece of a stripe operation (`raid`), whose
/// index is in bits 16..62 and the piece's in bits 0..16.
const SOP_BIT: u64 = 1 << 62;

pub mod counters;
mod piece;
mod repair;
mod ring;
mod slot;
mod stripe;
mod teardown;
#[cfg(feature = "failpoints")]
use teardown::queue_panic_failpoint;
mod volume;

use piece::*;
use ring::{Ring, REAP_BATCH};
use slot::{RowsWrite, Slot};
pub use volume::{RaidVolume, Shared};

impl RaidQueue {
    fn new(vol: Arc<RaidVolume>, depth: usize) -> Result<RaidQueue> {
        let depth = depth.clamp(1, 4096);
        let fds: Vec<i32> = vol.members().iter().map(|m| m.file().as_raw_fd()).collect();
        let ring = Ring::new(depth, &fds)?;
        // Emulated latencies of tens of µs need timers without the default
        // 50 µs slack.
        // SAFETY: prctl with PR_SET_TIMERSLACK takes one integer argument.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
        let vol_for_state = vol.clone();
        let slots = (0..depth)
            .map(|_| Slot::empty())
            .collect();
        Ok(RaidQueue {
            ring,
            vol,
            slots,
            free: (0..depth as u32).rev().collect(),
            held: BinaryHeap::with_capacity(depth * 4),
            poll_armed: false,
            poll_ready: false,
            raid: stripe::State::new(&vol_for_state),
            synthetic: Vec::new(),
            broken: None,
            counters: vol_for_state.counters.take(),
        })
    }

    /// The ring failed with an error that is not transient (`what`: the
    /// call): the queue is given up. Requests in flight complete with EIO
    /// at the next wait (their buffers are leaked, not returned: the kernel
    /// may still be using them), new ones are refused, and the volume takes
    /// no more writes (some member writes may be half done; the bitmap
    /// keeps their regions dirty for the resync at the next assemble).
    fn ring_failed(&mut self, what: &str, e: std::io::Error) {
        if self.broken.is_some() {
            return;
        }
        let err = Error::new(
            ErrorKind::Io,
            format!(
                "the engine's io_uring failed ({what}: {e}): requests in flight fail and the volume takes no more writes; \
                 stop the array and assemble it again"
            ),
        );
        eprintln!("uraid: {err}");
        self.vol.health().stop_writes();
        self.broken = Some(err);
    }

    /// Completes every request in flight with the queue's error (see
    /// [`ring_failed`](Self::ring_failed)).
    fn fail_everything(&mut self, out: &mut Vec<Completion>) {
        let Some(e) = self.broken.clone() else { return };
        if self.in_flight() > 0 {
            self.vol.health().set_unclean();
        }
        let free: std::collections::HashSet<u32> = self.free.iter().copied().collect();
        for si in 0..self.slots.len() as u32 {
            if free.contains(&si) {
                continue;
            }
            let slot = &mut self.slots[si as usize];
            if let Some(b) = slot.buf.take() {
                std::mem::forget(b);
            }
            out.push(Completion { tag: slot.tag, result: Err(e.clone()), buf: None });
            self.free.push(si);
        }
        self.raid.abandon(self.vol.locks(), true);
        self.raid.avoid.clear();
        self.held.clear();
        self.synthetic.clear();
        // Abandoned: whatever the kernel still does names only leaked memory.
        self.ring.abandon();
    }

    /// The volume this queue serves.
    pub fn volume(&self) -> &Arc<RaidVolume> {
        &self.vol
    }

    /// Logical requests in flight.
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Room for more requests.
    pub fn has_room(&self) -> bool {
        self.in_flight() < self.slots.len()
    }

    fn check(&self, req: &Request) -> Result<()> {
        if !self.has_room() {
            bail!(Busy, "queue is full ({} requests in flight); wait for completions first", self.slots.len());
        }
        self.validate(req)
    }

    /// Requests this queue can hold at once (its `depth`).
    pub fn depth(&self) -> usize {
        self.slots.len()
    }

    /// Checks `req` against the volume: inside it, aligned to its block
    /// size, no longer than [`MAX_REQUEST`], with a large enough buffer.
    /// Errors: `OutOfRange` past the end, `InvalidInput` otherwise.
    pub fn validate(&self, req: &Request) -> Result<()> {
        if req.op == Op::Flush {
            return Ok(());
        }
        let range_only = req.op.is_range_only();
        let bs = self.vol.block_size as u64;
        let end = req.offset.checked_add(req.len as u64);
        if end.is_none_or(|e| e > self.vol.capacity()) {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!(
                    "I/O of {} bytes at offset {} goes past the end of the volume ({} bytes)",
                    req.len,
                    req.offset,
                    self.vol.capacity()
                ),
            ));
        }
        let max = if range_only { usize::MAX } else { MAX_REQUEST };
        // Block sizes are powers of two (Linux's logical block sizes): a
        // mask, not two divisions, on every request.
        let misaligned = if bs.is_power_of_two() {
            (req.offset | req.len as u64) & (bs - 1) != 0
        } else {
            !req.offset.is_multiple_of(bs) || !(req.len as u64).is_multiple_of(bs)
        };
        if misaligned || req.len == 0 || req.len > max {
            bail!(
                InvalidInput,
                "I/O of {} bytes at offset {} is not aligned: offset and length must be multiples of \
                 {bs} bytes, and the length from {bs} to {MAX_REQUEST}",
                req.len,
                req.offset
            );
        }
        match &req.buf {
            _ if range_only => Ok(()),
            Some(b) if b.len() >= req.len => Ok(()),
            _ => bail!(InvalidInput, "I/O of {} bytes needs a buffer of at least that size", req.len),
        }
    }

    /// Queues `req`. Its member I/Os reach the kernel at the next
    /// [`wait`](Self::wait) or [`submit`](Self::submit).
    ///
    /// Errors (the request is handed back): `Busy` when `depth` requests are
    /// in flight, `OutOfRange` past the end, `InvalidInput` when misaligned.
    pub fn push(&mut self, req: Request) -> std::result::Result<(), Rejected> {
        if let Some(error) = self.broken.clone() {
            return Err(Rejected { error, request: req });
        }
        if let Err(error) = self.check(&req) {
            return Err(Rejected { error, request: req });
        }
        self.push_members(req);
        Ok(())
    }

    /// Queues `req` (checked) on the members.
    fn push_members(&mut self, req: Request) {
        let si = self.free.pop().expect("checked") as usize;
        let op = req.op;
        self.slots[si].fill(req, None);
        if self.vol.geometry().layout().is_some() {
            self.plan(si);
            return;
        }
        match op {
            Op::Flush => self.plan_flush(si),
            _ => self.slots[si].split(self.vol.geometry(), self.vol.data_offset),
        }
        self.slots[si].pending = self.slots[si].npieces;
        self.push_pieces(si);
    }

    /// Sends the pieces of slot `si` (each with its emulated drive's
    /// deadline).
    fn push_pieces(&mut self, si: usize) {
        let now = self.vol.throttle_clock();
        for pi in 0..self.slots[si].npieces {
            let p = &mut self.slots[si].pieces[pi];
            p.deadline = self.vol.deadline(p.member, p.op, p.len, now);
            self.push_piece(si, pi);
        }
    }

    /// Adds to slot `si` a flush piece for each member a flush goes to:
    /// every member of a RAID 0 volume, every writable one of a redundant
    /// volume. A redundant volume that has failed (also when a member
    /// failing this flush took it past its tolerance) gets no flush: the
    /// slot fails with EIO, since what the flush was to make durable is not
    /// all written.
    fn plan_flush(&mut self, si: usize) {
        let n = self.vol.members().len() as u32;
        let members: Vec<u32> = match self.vol.geometry().layout() {
            None => (0..n).collect(),
            Some(l) => match self.volume_failed(l) {
                Some(msg) => {
                    self.slots[si].error = Some(Error::new(ErrorKind::Io, msg));
                    return;
                }
                // (A role a distributed spare holds has no device to
                // flush: the members holding its chunks are flushed.)
                None => (0..n).filter(|&m| self.vol.health().device_in_service(m)).collect(),
            },
        };
        let slot = &mut self.slots[si];
        for m in members {
            let p = slot.next_piece();
            p.op = Op::Flush;
            p.fua = false;
            p.member = m;
            p.offset = 0;
            p.len = 0;
        }
    }

    fn push_piece(&mut self, si: usize, pi: usize) {
        let p = &mut self.slots[si].pieces[pi];
        let ud = ((si as u64) << 16) | pi as u64;
        let m = &self.vol.members()[p.member as usize];
        zero_fill_if_refused(p, m);
        if let Some(res) = injected_fault(p, m) {
            self.synthetic.push((ud, res));
            return;
        }
        let sqe = if is_block_discard(p, m) {
            match block_discard_sqe(p, m) {
                Ok(sqe) => sqe,
                Err(res) => {
                    self.synthetic.push((ud, res));
                    return;
                }
            }
        } else {
            time_first_push(p, &self.counters);
            build_sqe(p, m)
        };
        // SAFETY: the buffers and iovecs named by the entry live in the
        // slot, which is neither reused nor moved until this piece's
        // completion has been reaped.
        unsafe { self.push_sqe(sqe.user_data(ud)) };
    }

    /// Pushes one entry, submitting first when the submission queue is full.
    ///
    /// # Safety
    /// Every pointer in `sqe` must stay valid until its completion is reaped.
    unsafe fn push_sqe(&mut self, sqe: squeue::Entry) {
        if self.broken.is_some() {
            // Nothing goes to a ring given up; the request fails at the
            // next wait.
            return;
        }
        // SAFETY: guaranteed by the caller.
        while !unsafe { self.ring.push(&sqe) } {
            // Submission queue full: hand what we have to the kernel.
            self.submit_now();
            if self.broken.is_some() {
                return;
            }
        }
    }

    /// Like [`wait`](Self::wait) for one completion, but also returns when
    /// `fd` becomes readable (the result is then true) or after `timeout`.
    /// Lets one thread serve a socket and the drives with a single wait;
    /// the poll stays armed across calls until it fires.
    pub fn wait_event(&mut self, out: &mut Vec<Completion>, fd: Option<RawFd>, timeout: std::time::Duration) -> bool {
        if let Some(fd) = fd {
            self.arm_poll(fd);
        }
        self.wait_until(1, out, Some(now_ns() + timeout.as_nanos() as u64))
    }

    /// Puts a poll for readability of `fd` in the ring (once: it stays
    /// armed until it fires); a wait returns true when it has. The layer
    /// above uses it to wait on its caller's socket and the members at
    /// once.
    pub fn arm_poll(&mut self, fd: RawFd) {
        if !self.poll_armed {
            let sqe = opcode::PollAdd::new(types::Fd(fd), (libc::POLLIN | libc::POLLRDHUP) as u32).build().user_data(POLL_TAG);
            // SAFETY: a poll names no memory.
            unsafe { self.push_sqe(sqe) };
            self.poll_armed = true;
        }
    }

    /// The error every request fails with once the ring failed for good.
    pub fn broken(&self) -> Option<&Error> {
        self.broken.as_ref()
    }

    /// Submits what is queued and waits until at least `min` requests have
    /// completed (or none is left in flight), appending them to `out`.
    pub fn wait(&mut self, min: usize, out: &mut Vec<Completion>) {
        self.wait_until(min, out, None);
    }

    /// The one waiting loop: returns once `min` requests completed, the
    /// armed poll fired (true), nothing is left in flight (without a
    /// deadline), or the deadline (ns, [`now_ns`]) passed. Emulated drives'
    /// held completions are released at their deadlines meanwhile.
    pub fn wait_until(&mut self, min: usize, out: &mut Vec<Completion>, deadline: Option<u64>) -> bool {
        let start = out.len();
        loop {
            if self.broken.is_some() {
                self.fail_everything(out);
                return std::mem::take(&mut self.poll_ready);
            }
            self.reap(out);
            if !self.held.is_empty() {
                self.release_held(now_ns(), out);
            }
            self.raid_poll(out);
            if self.raid.has_plugged() {
                // Plugged partial-stripe writes wait for a partner only
                // while something else is in progress, and not too long.
                let busy = self.ring.in_kernel() > self.poll_armed as usize || !self.held.is_empty() || self.raid.has_waiting();
                if !busy || self.raid.plug_deadline().is_some_and(|d| now_ns() >= d) {
                    self.unplug(out);
                    continue;
                }
            }
            if out.len() - start >= min || self.poll_ready || (deadline.is_none() && self.in_flight() == 0) {
                self.submit();
                return std::mem::take(&mut self.poll_ready);
            }
            let now = now_ns();
            if deadline.is_some_and(|d| now >= d) {
                self.submit();
                return false;
            }
            if !self.synthetic.is_empty() {
                // Completions made here (a fault injected on an I/O that
                // released held ones started): nothing in the kernel to
                // wait for them.
                continue;
            }
            let held = self.held.peek().map(|r| r.0 .0);
            let mut until = match (held, deadline) {
                (Some(h), Some(d)) => Some(h.min(d)),
                (h, d) => h.or(d),
            };
            if let Some(d) = self.raid.plug_deadline() {
                until = Some(until.map_or(d, |u| u.min(d)));
            }
            if self.raid.waits_on_others(self.vol.locks()) {
                // A stripe operation waits for a lock another thread
                // holds: look again soon.
                let t = now + stripe::LOCK_RETRY_NS;
                until = Some(until.map_or(t, |u| u.min(t)));
            }
            let res = match until {
                None => self.ring.submit_and_wait(None),
                Some(u) => {
                    let wait_ns = u.saturating_sub(now);
                    if wait_ns == 0 {
                        continue;
                    }
                    let ts = types::Timespec::new().sec(wait_ns / 1_000_000_000).nsec((wait_ns % 1_000_000_000) as u32);
                    if self.ring.in_kernel() > 0 {
                        self.ring.submit_and_wait(Some(&ts))
                    } else {
                        self.submit();
                        crate::clock::sleep(std::time::Duration::from_nanos(wait_ns));
                        Ok(())
                    }
                }
            };
            match res {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)) => {}
                // Short of memory for a moment: look again.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOMEM)) => {
                    crate::clock::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => self.ring_failed("waiting for completions", e),
            }
        }
    }

    fn submit_now(&mut self) {
        if self.broken.is_some() {
            return;
        }
        let mut tries = 0;
        loop {
            match self.ring.submit() {
                Ok(()) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // EBUSY: the completion queue is full; reap happens in wait().
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => break,
                // Short of memory for a moment: try again, for a while.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOMEM)) && tries < 1000 => {
                    tries += 1;
                    crate::clock::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => {
                    self.ring_failed("submitting", e);
                    return;
                }
            }
        }
    }

    /// Hands every queued member I/O to the kernel without waiting.
    #[inline]
    pub fn submit(&mut self) {
        if self.ring.has_unsubmitted() {
            self.submit_now();
        }
    }

    /// Takes every completion the ring holds (in batches: one update of
    /// the completion queue's head per batch) and every synthetic one.
    fn reap(&mut self, out: &mut Vec<Completion>) {
        let mut batch = [(0u64, 0i32); REAP_BATCH];
        self.counters.new_pass();
        loop {
            let n = self.ring.reap(&mut batch);
            for &(ud, res) in &batch[..n] {
                self.on_cqe(ud, res, out);
            }
            if n > 0 {
                continue;
            }
            match self.synthetic.pop() {
                Some((ud, res)) => self.on_cqe(ud, res, out),
                None => break,
            }
        }
    }

    fn on_cqe(&mut self, ud: u64, res: i32, out: &mut Vec<Completion>) {
        if ud == POLL_TAG {
            self.poll_armed = false;
            self.poll_ready = res >= 0 || res == -libc::ECANCELED;
            return;
        }
        if ud == CANCEL_TAG {
            return;
        }
        if ud & SOP_BIT != 0 {
            self.sop_cqe(ud, res, out);
            return;
        }
        let si = (ud >> 16) as usize;
        let pi = (ud & 0xffff) as usize;
        let member = self.slots[si].pieces[pi].member;
        match progress(&mut self.slots[si].pieces[pi], res, &self.vol.members()[member as usize], &mut self.counters) {
            Outcome::Again => {
                self.push_piece(si, pi);
                return;
            }
            Outcome::Done(r) => {
                let p = &self.slots[si].pieces[pi];
                if p.op == Op::Read && self.vol.geometry().layout().is_some() {
                    let l = &mut self.raid.load_mut()[member as usize];
                    *l = l.saturating_sub(p.len as u64);
                }
                if let Some(e) = r {
                    if !self.read_failed(si, pi, member, &e) {
                        self.slot_error(si, member, e);
                    }
                }
            }
        }
        let deadline = self.slots[si].pieces[pi].deadline;
        if deadline != 0 && deadline > now_ns() {
            self.held.push(Reverse((deadline, ud)));
            return;
        }
        self.piece_done(si, out);
    }

    fn release_held(&mut self, now: u64, out: &mut Vec<Completion>) {
        while let Some(&Reverse((d, ud))) = self.held.peek() {
            if d > now {
                break;
            }
            self.held.pop();
            if ud & SOP_BIT != 0 {
                self.sop_piece_done(((ud & !SOP_BIT) >> 16) as usize, out);
            } else {
                self.piece_done((ud >> 16) as usize, out);
            }
        }
    }

    /// Records the error of a piece of slot `si` on `member`. On a
    /// redundant volume a member that fails a read or a flush with a
    /// device failure ([`Error::is_device_failure`]) is marked faulty and
    /// the request is planned again around it (see `raid`); any other
    /// error fails the request and leaves the member in.
    fn slot_error(&mut self, si: usize, member: u32, e: Error) {
        if self.vol.geometry().layout().is_some() && e.is_device_failure() {
            self.member_failed(member);
            self.slots[si].replan = true;
            return;
        }
        let slot = &mut self.slots[si];
        if slot.error.is_none() {
            slot.error = Some(e);
        }
    }

    /// Flushes every writable member for slot `si`, a FUA zeroing or
    /// discard whose member I/O is done: fallocate(2) has no FUA, so the
    /// request completes once this flush does (as the block layer turns a
    /// FUA it cannot pass on into a flush after the write). One flush per
    /// member, however many stripes the request covered.
    fn sync_members(&mut self, si: usize, out: &mut Vec<Completion>) {
        let n = self.vol.members().len() as u32;
        let slot = &mut self.slots[si];
        slot.syncing = true;
        slot.npieces = 0;
        // Each try after the first follows a member's failure.
        slot.plans += 1;
        self.plan_flush(si);
        let slot = &mut self.slots[si];
        if slot.error.is_none() && slot.plans as u32 > 2 * n + 2 {
            slot.error = Some(Error::new(ErrorKind::Io, format!("gave up flushing after {} attempts: members keep failing", slot.plans - 1)));
            slot.npieces = 0;
        }
        // One count for this call, dropped below.
        slot.pending = slot.npieces + 1;
        self.push_pieces(si);
        self.piece_done(si, out);
    }

    fn piece_done(&mut self, si: usize, out: &mut Vec<Completion>) {
        let slot = &mut self.slots[si];
        slot.pending -= 1;
        if slot.pending > 0 {
            return;
        }
        if std::mem::take(&mut slot.replan) && slot.error.is_none() {
            if std::mem::take(&mut slot.syncing) {
                // A member failed its flush (it is faulty now): flush the
                // others again.
                self.sync_members(si, out);
            } else {
                self.replan(si, out);
            }
            return;
        }
        if slot.error.is_none() && std::mem::take(&mut slot.sync_after) {
            self.sync_members(si, out);
            return;
        }
        if !slot.repairs.is_empty() && self.run_repairs(si, out) {
            // Its repairs are in flight: it completes after them.
            return;
        }
        let slot = &mut self.slots[si];
        let result = match slot.error.take() {
            Some(e) => Err(e),
            None => Ok(slot.len),
        };
        out.push(Completion { tag: slot.tag, result, buf: slot.buf.take() });
        self.free.push(si as u32);
    }
}

impl BlockQueue for RaidQueue {
    fn push(&mut self, req: Request) -> std::result::Result<(), Rejected> {
        RaidQueue::push(self, req)
    }
    fn submit(&mut self) {
        RaidQueue::submit(self)
    }
    fn wait(&mut self, min: usize, out: &mut Vec<Completion>) {
        RaidQueue::wait(self, min, out)
    }
    fn wait_event(&mut self, out: &mut Vec<Completion>, fd: Option<RawFd>, timeout: std::time::Duration) -> bool {
        RaidQueue::wait_event(self, out, fd, timeout)
    }
    fn in_flight(&self) -> usize {
        RaidQueue::in_flight(self)
    }
    fn has_room(&self) -> bool {
        RaidQueue::has_room(self)
    }
    fn depth(&self) -> usize {
        RaidQueue::depth(self)
    }
    fn validate(&self, req: &Request) -> Result<()> {
        RaidQueue::validate(self, req)
    }
    fn broken(&self) -> Option<&Error> {
        RaidQueue::broken(self)
    }
    fn caps(&self) -> crate::io::request::Caps {
        self.vol.caps()
    }
}

#[cfg(test)]
mod tests;
