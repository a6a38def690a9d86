//! One ublk queue, served by one thread with its own engine queue.
//!
//! The kernel hands each request of `/dev/ublkbN` to the queue as the
//! completion of an io_uring command (FETCH_REQ, then COMMIT_AND_FETCH_REQ
//! which answers one request and asks for the next of the same tag) on
//! the queue's ring. Every tag has one engine [`IoBuf`]. Without user
//! copy it is given to the kernel as that tag's buffer: the kernel copies
//! a WRITE's data into it before the request arrives, and a READ's data
//! out of it when the answer is committed, both on this thread (the
//! commit's task work runs here), which then holds the queue's speed
//! when it is copy-bound (bench/md.py's SEQ1M reads under TCG: the
//! thread at 93% of a CPU). With user copy (UBLK_F_USER_COPY, Linux
//! 6.5+; the default where the driver has it) uraid moves the data
//! itself, as reads and writes of `/dev/ublkcN` at the tag's offset
//! (`ublk_user_copy_pos` of the kernel's uapi), sent to the ublk ring
//! with IOSQE_ASYNC: io_uring's worker threads do the copies, on any
//! CPU, and the queue thread only plans and answers (requests under
//! 64 KiB are copied by the queue thread itself, one pread or pwrite:
//! there the hand-over costs more than the copy). A WRITE is copied in
//! before it goes to the engine; a READ is copied out before its
//! commit.
//!
//! One wait covers both rings: the engine's wait
//! ([`BlockQueue::wait_event`]) also returns when the ublk ring's fd is
//! readable (a poll of it in the engine's ring), as the NBD server waits
//! on its socket. No request changes threads.
//!
//! The ring is made without IORING_SETUP_COOP_TASKRUN: the kernel
//! completes ublk commands by task work on this thread, and without that
//! flag the task work interrupts the engine's wait, so the command's
//! completion, and with it the poll, is seen at once.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};
use libublk::io::{UblkDev, UblkQueue};
use libublk::sys;
use uraid_core::export::stats::{now_us, ConnStats, Kind};
use uraid_core::io::request::{BlockQueue, Completion, Op, Request};
use uraid_core::{IoBuf, Queue, Volume};

use crate::Live;

/// How long a wait lasts at most when nothing happens: how soon a pause,
/// a new volume or the end is noticed.
const TICK: Duration = Duration::from_millis(100);

/// Where a tag is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Its command is with the kernel, waiting for a request.
    Fetching,
    /// A request arrived, not yet handed to the engine (the export is
    /// moving to another volume, or paused, or the engine is full).
    Waiting,
    /// Its request is in the engine.
    Engine,
    /// User copy: its data is being copied (a WRITE's into the tag's
    /// buffer, a READ's out of it).
    Copying,
    /// The kernel ended its command (the device stops): no more requests.
    Ended,
}

/// One tag: its buffer and the request it holds.
struct Slot {
    /// The buffer the kernel was given for this tag; `None` while the
    /// engine holds it.
    buf: Option<IoBuf>,
    state: State,
    /// When the request arrived (µs, [`now_us`]), its kind and bytes.
    at: u64,
    kind: Kind,
    bytes: u32,
    /// User copy: the WRITE's data is in `buf` (copied in).
    copied: bool,
}

/// User copies of fewer bytes are done by this thread, with one pread or
/// pwrite: handing them to io_uring's workers costs more than the copy.
const ASYNC_COPY_MIN: usize = 64 << 10;

/// The bit of an SQE's user data that marks a user copy of the tag in
/// the low 16 bits (the io commands' user data is the tag alone).
const COPY: u64 = 1 << 32;

/// Where the data of `tag` of queue `qid` is read or written in
/// `/dev/ublkcN` under UBLK_F_USER_COPY (the uapi's `ublk_user_copy_pos`).
fn user_copy_pos(qid: u16, tag: u16) -> u64 {
    sys::UBLKSRV_IO_BUF_OFFSET as u64 + ((qid as u64) << sys::UBLK_QID_OFF) + ((tag as u64) << sys::UBLK_TAG_OFF)
}

/// Settings of a queue thread.
pub(crate) struct QueueConfig {
    pub qid: u16,
    pub depth: u16,
    /// Bytes of each tag's buffer (the device's largest request).
    pub buf_bytes: usize,
    pub read_only: bool,
    /// Commands are ioctl-encoded (UBLK_F_CMD_IOCTL_ENCODE).
    pub ioctl_encode: bool,
    /// The device was made with UBLK_F_USER_COPY: the queue copies the
    /// data (see the module doc).
    pub user_copy: bool,
    /// `/dev/ublkcN`, which user copies read and write.
    pub cdev_fd: std::os::fd::RawFd,
}

/// What a queue thread reports once it has fetched every tag: its
/// thread id, or why it could not start.
pub(crate) type Ready = std::sync::mpsc::Sender<Result<(u16, libc::pid_t), String>>;

/// Writes a line to stderr, ignoring a stderr that went away.
pub(crate) fn log(msg: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// Makes this thread's ublk ring (before [`UblkQueue::new`], which would
/// make one with COOP_TASKRUN: see the module doc).
pub(crate) fn init_ring(depth: u32) -> Result<(), String> {
    libublk::io::ublk_init_task_ring(|cell| {
        if cell.get().is_none() {
            let ring = IoUring::<squeue::Entry>::builder().setup_cqsize(depth * 2).build(depth).map_err(libublk::UblkError::IOError)?;
            cell.set(RefCell::new(ring)).map_err(|_| libublk::UblkError::OtherError(-libc::EEXIST))?;
        }
        Ok(())
    })
    .map_err(|e| format!("cannot make the queue's io_uring: {}", crate::ublk_error(&e)))
}

/// Whether the queue threads of a device with `queues` queues are held
/// to the CPUs of their queue (those whose requests reach it): only when
/// each queue has two CPUs or more. A thread held to the one CPU of its
/// queue shares it with the program submitting there, which blk-mq maps
/// to that very queue, while the other CPUs idle: in bench/export.py's VM
/// (2 CPUs, 2 queues, fio RND4K read) held threads gave 0.3-0.7x the Q32
/// IOPS of free ones and 1.2-6.6x their QD1 latency, on the null target
/// as on the export (4 pairs, one boot).
pub(crate) fn pin_threads(queues: u16) -> bool {
    std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 * queues.max(1) as usize
}

/// The io command `op` (FETCH_REQ or COMMIT_AND_FETCH_REQ) of `tag` in
/// queue `qid`, with the tag's buffer at `addr` and `result` (the answer
/// to its last request, bytes or -errno, for a commit); its user data is
/// the tag.
pub(crate) fn io_cmd(qid: u16, tag: u16, op: u32, result: i32, addr: u64) -> squeue::Entry {
    // struct ublksrv_io_cmd: q_id, tag, result, addr.
    let mut cmd = [0u8; 16];
    cmd[0..2].copy_from_slice(&qid.to_ne_bytes());
    cmd[2..4].copy_from_slice(&tag.to_ne_bytes());
    cmd[4..8].copy_from_slice(&result.to_ne_bytes());
    cmd[8..16].copy_from_slice(&addr.to_ne_bytes());
    // File 0 of the ring is /dev/ublkcN (registered by UblkQueue::new).
    opcode::UringCmd16::new(types::Fixed(0), op).cmd(cmd).build().user_data(tag as u64)
}

/// Queues `sqe` in this thread's ublk ring (submitting what is queued
/// first when the ring is full: it has a slot per tag, so only when
/// earlier commands were not submitted yet).
///
/// # Safety
/// The buffer `sqe` names must stay valid, and unused by us, until the
/// kernel answers the command.
pub(crate) unsafe fn push_ublk(sqe: &squeue::Entry) {
    libublk::io::with_task_io_ring_mut(|r| loop {
        // SAFETY: guaranteed by the caller.
        if unsafe { r.submission().push(sqe) }.is_ok() {
            break;
        }
        let _ = r.submit();
    });
}

/// Serves queue `cfg.qid` of `dev` until the device stops (every tag's
/// command ended). Reports on `ready` once every tag is fetched (or why
/// not).
pub(crate) fn serve(cfg: QueueConfig, dev: &UblkDev, live: &Live, ready: Ready) {
    let setup = (|| {
        init_ring(cfg.depth as u32)?;
        let q = UblkQueue::new(cfg.qid, dev).map_err(|e| format!("cannot set up ublk queue {}: {}", cfg.qid, crate::ublk_error(&e)))?;
        let (vol, generation) = live.volume();
        let eq = vol.queue(cfg.depth as usize).map_err(|e| format!("cannot make an engine queue: {e}"))?;
        Ok::<_, String>((q, vol, generation, eq))
    })();
    let (q, vol, generation, eq) = match setup {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    live.active.fetch_add(1, Ordering::AcqRel);
    let mut s = Server {
        ring_fd: q.as_raw_fd(),
        q,
        live,
        vol,
        generation,
        eq,
        slots: (0..cfg.depth)
            .map(|_| Slot { buf: Some(IoBuf::new(cfg.buf_bytes)), state: State::Fetching, at: 0, kind: Kind::Other, bytes: 0, copied: false })
            .collect(),
        waiting: VecDeque::with_capacity(cfg.depth as usize),
        ended: 0,
        pending_sqes: 0,
        parked: false,
        stats: live.stats.open(),
        cfg,
    };
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    for tag in 0..s.cfg.depth {
        s.command(tag, s.fetch_op(), -1);
    }
    if let Err(e) = s.submit() {
        // Ending the thread closes the ring, which cancels the commands.
        live.active.fetch_sub(1, Ordering::AcqRel);
        let _ = ready.send(Err(format!("cannot fetch the requests of ublk queue {}: {e}", s.cfg.qid)));
        return;
    }
    // What ctrl.start_dev waits for (the buffers are ours, not libublk's).
    dev.notify_buffer_registration_complete(false);
    let _ = ready.send(Ok((s.cfg.qid, tid)));
    s.run();
    live.active.fetch_sub(1, Ordering::AcqRel);
    s.park(false);
}

struct Server<'a> {
    q: UblkQueue<'a>,
    ring_fd: std::os::fd::RawFd,
    live: &'a Live,
    vol: Arc<Volume>,
    /// The export's generation `vol` belongs to.
    generation: u64,
    eq: Queue,
    slots: Vec<Slot>,
    /// Tags whose request arrived and waits for the engine, oldest first.
    waiting: VecDeque<u16>,
    /// Tags whose command the kernel ended.
    ended: usize,
    /// Commands queued in the ublk ring and not yet submitted.
    pending_sqes: usize,
    /// Counted in the export's parked queues.
    parked: bool,
    stats: ConnStats<'a>,
    cfg: QueueConfig,
}

impl Server<'_> {
    fn fetch_op(&self) -> u32 {
        if self.cfg.ioctl_encode { sys::UBLK_U_IO_FETCH_REQ } else { sys::UBLK_IO_FETCH_REQ }
    }

    fn commit_op(&self) -> u32 {
        if self.cfg.ioctl_encode { sys::UBLK_U_IO_COMMIT_AND_FETCH_REQ } else { sys::UBLK_IO_COMMIT_AND_FETCH_REQ }
    }

    /// Queues the io command `op` for `tag` in the ublk ring, with the
    /// tag's buffer and `result` (the answer to its last request, for a
    /// commit).
    fn command(&mut self, tag: u16, op: u32, result: i32) {
        let slot = &mut self.slots[tag as usize];
        let buf = slot.buf.get_or_insert_with(|| IoBuf::new(self.cfg.buf_bytes));
        // Under user copy the kernel is given no buffer (it wants 0).
        let addr = if self.cfg.user_copy { 0 } else { buf.as_mut_ptr() as u64 };
        let sqe = io_cmd(self.cfg.qid, tag, op, result, addr);
        slot.state = State::Fetching;
        slot.copied = false;
        // SAFETY: the command names the tag's buffer (or none, under user
        // copy), which stays in its slot (never freed or used by us)
        // until the kernel answers this command: the kernel writes a
        // WRITE's data into it before that answer and reads a READ's data
        // from it while taking the commit.
        unsafe { push_ublk(&sqe) };
        self.pending_sqes += 1;
    }

    /// User copy: has io_uring's workers copy `len` bytes of `tag`'s
    /// request between `/dev/ublkcN` (fixed file 0 of the ublk ring) and
    /// the tag's buffer: into it for a WRITE (`into`), out of it for a
    /// READ. Its completion comes back to [`arrived`](Self::arrived)
    /// with the [`COPY`] bit.
    fn copy(&mut self, tag: u16, len: usize, into: bool) {
        let pos = user_copy_pos(self.cfg.qid, tag);
        let fd = self.cfg.cdev_fd;
        let slot = &mut self.slots[tag as usize];
        let buf = slot.buf.as_mut().expect("a tag being copied holds its buffer");
        debug_assert!(len <= buf.len());
        if len < ASYNC_COPY_MIN {
            let r = if into {
                // SAFETY: `buf` holds at least `len` bytes, ours alone.
                unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), len, pos as libc::off_t) }
            } else {
                // SAFETY: as above, read only.
                unsafe { libc::pwrite(fd, buf.as_ptr().cast(), len, pos as libc::off_t) }
            };
            let res = if r < 0 { -std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO) } else { r as i32 };
            slot.state = State::Copying;
            return self.copied(tag, res);
        }
        let sqe = if into {
            opcode::Read::new(types::Fixed(0), buf.as_mut_ptr(), len as u32).offset(pos).build()
        } else {
            opcode::Write::new(types::Fixed(0), buf.as_ptr(), len as u32).offset(pos).build()
        };
        let sqe = sqe.flags(squeue::Flags::ASYNC).user_data(COPY | tag as u64);
        slot.state = State::Copying;
        // SAFETY: the buffer stays in the tag's slot, untouched, until
        // the copy's completion (state Copying: neither the engine nor a
        // command gets it before `copied`).
        unsafe { push_ublk(&sqe) };
        self.pending_sqes += 1;
    }

    /// User copy: the copy of `tag` ended with `res` (bytes, or -errno).
    fn copied(&mut self, tag: u16, res: i32) {
        let Some(slot) = self.slots.get_mut(tag as usize) else { return };
        if slot.state != State::Copying {
            return;
        }
        let res = if res >= 0 && res as u32 != slot.bytes { -libc::EIO } else { res };
        match slot.kind {
            Kind::Write if res >= 0 => {
                // In the buffer now: to the engine, in turn.
                slot.copied = true;
                slot.state = State::Waiting;
                self.waiting.push_front(tag);
            }
            _ => self.answer(tag, res),
        }
    }

    /// Submits the commands queued in the ublk ring.
    fn submit(&mut self) -> Result<(), String> {
        if self.pending_sqes == 0 {
            return Ok(());
        }
        loop {
            match libublk::io::with_task_io_ring_mut(|r| r.submit()) {
                Ok(_) => break,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)) => continue,
                Err(e) => return Err(format!("io_uring_enter on the ublk ring: {e}")),
            }
        }
        self.pending_sqes = 0;
        Ok(())
    }

    fn run(&mut self) {
        let mut out: Vec<Completion> = Vec::with_capacity(self.slots.len());
        let mut cqes = Vec::with_capacity(self.slots.len());
        loop {
            libublk::io::with_task_io_ring_mut(|r| cqes.extend(r.completion().map(|c| (c.user_data(), c.result()))));
            for (ud, res) in cqes.drain(..) {
                if ud & COPY != 0 {
                    self.copied(ud as u16, res);
                } else {
                    self.arrived(ud as u16, res);
                }
            }
            // The export moved to another volume, or is paused: finish
            // what is in flight here, then move (or park) before taking
            // more.
            let moving = self.live.generation.load(Ordering::Acquire) != self.generation;
            if moving && self.eq.in_flight() == 0 {
                let paused = self.live.paused.load(Ordering::Acquire);
                self.park(paused);
                if !paused {
                    self.move_volume();
                }
            }
            if self.live.generation.load(Ordering::Acquire) == self.generation {
                self.dispatch();
            }
            if self.ended == self.slots.len() && self.eq.in_flight() == 0 {
                break;
            }
            if self.live.abandon.load(Ordering::Acquire) {
                break;
            }
            if let Err(e) = self.submit() {
                log(format_args!("uraid serve: ublk queue {} stops: {e}", self.cfg.qid));
                break;
            }
            self.eq.wait_event(&mut out, Some(self.ring_fd), TICK);
            for c in out.drain(..) {
                self.complete(c);
            }
        }
        if self.ended < self.slots.len() {
            // The kernel may still write into the buffers of the tags it
            // holds: they must outlive this thread.
            for s in &mut self.slots {
                if let Some(b) = s.buf.take() {
                    std::mem::forget(b);
                }
            }
        }
    }

    /// The kernel answered the command of `tag` with `res`.
    fn arrived(&mut self, tag: u16, res: i32) {
        let Some(slot) = self.slots.get_mut(tag as usize) else { return };
        if slot.state != State::Fetching {
            return;
        }
        if res == sys::UBLK_IO_RES_OK as i32 {
            slot.state = State::Waiting;
            slot.at = now_us();
            self.stats.received();
            self.waiting.push_back(tag);
        } else {
            // UBLK_IO_RES_ABORT: the device stops (or the queue is torn
            // down); anything else is a command the driver refused.
            if res != sys::UBLK_IO_RES_ABORT {
                log(format_args!(
                    "uraid serve: ublk queue {} tag {tag}: the driver refused a command: {}",
                    self.cfg.qid,
                    std::io::Error::from_raw_os_error(-res)
                ));
            }
            slot.state = State::Ended;
            self.ended += 1;
        }
    }

    /// Hands the waiting requests to the engine, while it has room.
    fn dispatch(&mut self) {
        while let Some(&tag) = self.waiting.front() {
            if !self.eq.has_room() {
                return;
            }
            self.waiting.pop_front();
            self.start(tag);
        }
    }

    /// Starts the request of `tag` (or answers it at once).
    fn start(&mut self, tag: u16) {
        let iod = *self.q.get_iod(tag);
        let op = iod.op_flags & 0xff;
        let fua = iod.op_flags & sys::UBLK_IO_F_FUA != 0;
        let offset = iod.start_sector << 9;
        let len = (iod.nr_sectors as usize) << 9;
        let slot = &mut self.slots[tag as usize];
        slot.bytes = len as u32;
        slot.kind = match op {
            sys::UBLK_IO_OP_READ => Kind::Read,
            sys::UBLK_IO_OP_WRITE => Kind::Write,
            sys::UBLK_IO_OP_FLUSH => Kind::Flush,
            sys::UBLK_IO_OP_DISCARD => Kind::Trim,
            sys::UBLK_IO_OP_WRITE_ZEROES => Kind::WriteZeroes,
            _ => Kind::Other,
        };
        let writes = matches!(slot.kind, Kind::Write | Kind::Trim | Kind::WriteZeroes);
        let buf_len = slot.buf.as_ref().map_or(0, |b| b.len());
        let (op, buf) = match slot.kind {
            Kind::Other => return self.answer(tag, -libc::EOPNOTSUPP),
            _ if writes && self.cfg.read_only => return self.answer(tag, -libc::EROFS),
            Kind::Read | Kind::Write if len == 0 => return self.answer(tag, 0),
            Kind::Read | Kind::Write if len > buf_len => return self.answer(tag, -libc::EINVAL),
            Kind::Read => (Op::Read, slot.buf.take()),
            Kind::Write if self.cfg.user_copy && !slot.copied => return self.copy(tag, len, true),
            Kind::Write => (Op::Write, slot.buf.take()),
            Kind::Flush => (Op::Flush, None),
            // A discard is a hint: once a member refused one, the engine
            // would write zeros instead, so it is answered at once.
            Kind::Trim if len == 0 || !self.vol.discards() => return self.answer(tag, 0),
            Kind::Trim => (Op::Discard, None),
            Kind::WriteZeroes if len == 0 => return self.answer(tag, 0),
            Kind::WriteZeroes => (Op::WriteZeroes { no_hole: iod.op_flags & sys::UBLK_IO_F_NOUNMAP != 0 }, None),
        };
        let (offset, len) = if op == Op::Flush { (0, 0) } else { (offset, len) };
        let fua = fua && writes;
        slot.state = State::Engine;
        if let Err(r) = self.eq.push(Request { op, offset, len, buf, tag: tag as u64, fua }) {
            let slot = &mut self.slots[tag as usize];
            if r.request.buf.is_some() {
                slot.buf = r.request.buf;
            }
            let errno = r.error.errno();
            self.answer(tag, -(if errno > 0 { errno } else { libc::EIO }));
        }
    }

    /// The engine finished a request.
    fn complete(&mut self, c: Completion) {
        let tag = c.tag as u16;
        let Some(slot) = self.slots.get_mut(tag as usize) else { return };
        if slot.state != State::Engine {
            return;
        }
        if c.buf.is_some() {
            slot.buf = c.buf;
        }
        if self.cfg.user_copy && slot.kind == Kind::Read && c.result.is_ok() {
            let len = slot.bytes as usize;
            return self.copy(tag, len, false);
        }
        let res = match c.result {
            Ok(_) if matches!(slot.kind, Kind::Read | Kind::Write) => slot.bytes as i32,
            Ok(_) => 0,
            // A discard is a hint: a member that cannot discard is no error.
            Err(e) if slot.kind == Kind::Trim && e.errno() == libc::EOPNOTSUPP => 0,
            Err(e) => -(if e.errno() > 0 { e.errno() } else { libc::EIO }),
        };
        self.answer(tag, res);
    }

    /// Answers the request of `tag` with `res` (bytes, or -errno) and
    /// asks for the tag's next request.
    fn answer(&mut self, tag: u16, res: i32) {
        let slot = &self.slots[tag as usize];
        let bytes = if res > 0 { slot.bytes as u64 } else { 0 };
        self.stats.replied(slot.kind, res >= 0, bytes, now_us().saturating_sub(slot.at));
        self.command(tag, self.commit_op(), res);
    }

    /// Counts this queue in the export's parked ones (paused, nothing in
    /// flight) or takes it out.
    fn park(&mut self, parked: bool) {
        if parked != self.parked {
            self.parked = parked;
            if parked {
                self.live.parked.fetch_add(1, Ordering::AcqRel);
            } else {
                self.live.parked.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Moves to the export's current volume (nothing in flight here).
    fn move_volume(&mut self) {
        let (vol, generation) = self.live.volume();
        match vol.queue(self.slots.len()) {
            Ok(q) => {
                self.eq = q;
                self.vol = vol;
                self.generation = generation;
            }
            Err(e) => {
                // Requests wait (the device's users see a stall, not an
                // error) and the move is tried again at the next tick.
                log(format_args!("uraid serve: ublk queue {}: cannot open the new volume: {e}; retrying", self.cfg.qid));
                std::thread::sleep(TICK);
            }
        }
    }
}
