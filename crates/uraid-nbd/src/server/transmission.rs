//! The transmission phase of one connection: requests read from the socket
//! without blocking and pushed to the connection's queue of the volume
//! stack, replies (simple or structured) written as their I/O completes,
//! out of order, within the connection's share of the buffer budget.

use std::io::{self, IoSlice, Write};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use uraid_core::export::stats::{now_us, ConnStats, Kind};
use uraid_core::io::request::Op;
use uraid_core::{BlockQueue, Completion, IoBuf, Queue, Request, Volume};

use super::{Buffers, Live, ServerOptions, MAX_QUEUED_REPLIES, TICK};
use crate::proto::{
    nbd_errno, parse_request, simple_reply, structured_error, structured_header, RequestHeader, CMD_FLAG_FAST_ZERO,
    CMD_DISC, CMD_FLAG_FUA, CMD_FLAG_NO_HOLE, CMD_FLUSH, CMD_READ, CMD_TRIM, CMD_WRITE, CMD_WRITE_ZEROES, EINVAL, ENOSPC, EPERM, MAX_PAYLOAD,
    REPLY_FLAG_DONE, REPLY_TYPE_NONE, REPLY_TYPE_OFFSET_DATA, REQUEST_LEN,
};
use crate::sock::peer_name;
use crate::wire::{Recv, Wire};

/// What one request in flight is waiting for.
#[derive(Clone, Copy)]
pub(super) struct Pending {
    handle: u64,
    cmd: u16,
    offset: u64,
    /// Bytes of data a READ returns (its buffer may be larger).
    len: usize,
    /// When its header was read, µs ([`now_us`]).
    at: u64,
}

impl Pending {
    fn of(h: &RequestHeader, at: u64) -> Pending {
        Pending { handle: h.handle, cmd: h.cmd, offset: h.offset, len: h.len as usize, at }
    }
}

/// One reply, queued until the batch is sent.
pub(super) struct Reply {
    /// Header (simple: 16 bytes; structured: 20, or 28 with the offset).
    hdr: [u8; 28],
    hlen: usize,
    /// READ data: the buffer and how many of its bytes to send.
    data: Option<(IoBuf, usize)>,
    /// An error message payload (structured replies).
    extra: Vec<u8>,
    /// For the statistics: the request's command, whether the reply is a
    /// success, bytes read or written, when the header was read (µs).
    kind: Kind,
    ok: bool,
    bytes: u32,
    at: u64,
}

/// Size of the receive buffer; larger WRITE payloads are read straight
/// into their I/O buffer.
pub(super) const INBUF: usize = 256 << 10;

/// Buffers a connection keeps for reuse, in bytes at most (the pool is
/// also bounded by the queue depth in count).
pub(super) const POOL_BYTES: usize = 16 << 20;

pub(super) struct Transmission<'s> {
    s: &'s mut Wire,
    fd: RawFd,
    live: &'s Live,
    vol: Arc<Volume>,
    /// The export's size in bytes this connection was told (its volume
    /// may grow since: a reshape).
    size: u64,
    /// The export's generation `vol` belongs to.
    generation: u64,
    q: Queue,
    structured: bool,
    read_only: bool,
    slots: Vec<Option<Pending>>,
    free: Vec<usize>,
    pool: Vec<IoBuf>,
    /// Bytes of the buffers in `pool`.
    pool_bytes: usize,
    /// Bytes of every buffer this connection holds (in flight, queued in
    /// replies, being filled by a payload, pooled).
    held: usize,
    /// Most bytes `held` may reach.
    budget: usize,
    /// The buffer memory every connection draws from.
    buffers: Arc<Buffers>,
    /// The pool's pressure count this connection last answered.
    pressure_seen: u64,
    /// A request read (at that time, µs) but not started: no buffer
    /// memory for it yet.
    stalled: Option<(RequestHeader, u64)>,
    /// Payload bytes of a refused WRITE still to be read and dropped.
    skip: usize,
    /// Longest a payload may stop arriving, µs
    /// ([`ServerOptions::payload_timeout`]).
    payload_timeout: u64,
    /// A receive got bytes since the payload stall check last looked.
    got_bytes: bool,
    /// Since when (µs) the payload being read has not moved: set by the
    /// first wait that found nothing new, so the clock is read only when
    /// a payload stops, never per request.
    payload_idle: Option<u64>,
    /// Bytes received and not parsed yet: `inbuf[in_start..in_end]`. Many
    /// requests arrive in one recv(2), so one system call serves a batch.
    inbuf: Vec<u8>,
    in_start: usize,
    in_end: usize,
    /// The last receive returned less than it had room for.
    drained: bool,
    /// When the last receive into `inbuf` returned (µs, [`now_us`]): when
    /// every header in it was read (one clock read per receive, not per
    /// request).
    recv_at: u64,
    /// Replies waiting to go out in one writev(2) per batch.
    replies: Vec<Reply>,
    /// A WRITE whose payload is being read: header, when it was read
    /// (µs), buffer, bytes read.
    payload: Option<(RequestHeader, u64, IoBuf, usize)>,
    /// Still reading requests (false after DISC, EOF, a protocol error or
    /// a shutdown).
    reading: bool,
    /// The socket failed: no more replies can be sent.
    broken: bool,
    /// This connection's I/O counters.
    stats: ConnStats<'s>,
    /// Counted in the export's `parked`: paused with nothing in flight.
    parked: bool,
}

impl Drop for Transmission<'_> {
    /// Every buffer goes with the connection, also when its thread
    /// panicked: the server-wide buffer count gets them back; so do the
    /// export's counts of connections and parked ones.
    fn drop(&mut self) {
        let held = std::mem::take(&mut self.held);
        self.buffers.give(held, held);
        self.park(false);
        self.live.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<'s> Transmission<'s> {
    pub(super) fn new(s: &'s mut Wire, live: &'s Live, structured: bool, opts: &ServerOptions, buffers: Arc<Buffers>) -> io::Result<Self> {
        let depth = opts.queue_depth.max(1);
        let (vol, generation) = live.volume();
        let q = vol.queue(depth).map_err(|e| io::Error::other(e.to_string()))?;
        let size = live.capacity.load(Ordering::Acquire).min(q.caps().capacity);
        live.active.fetch_add(1, Ordering::AcqRel);
        // A connection that arrives while the export is paused waits too:
        // it starts as if the export had moved since.
        let generation = if live.paused.load(Ordering::Acquire) { generation.wrapping_sub(1) } else { generation };
        let fd = s.raw_fd();
        Ok(Transmission {
            s,
            fd,
            live,
            vol,
            size,
            generation,
            q,
            structured,
            read_only: opts.read_only,
            slots: vec![None; depth],
            free: (0..depth).rev().collect(),
            pool: Vec::new(),
            pool_bytes: 0,
            held: 0,
            budget: opts.conn_buffer_bytes,
            pressure_seen: buffers.pressure.load(Ordering::Relaxed),
            buffers,
            stalled: None,
            skip: 0,
            payload_timeout: opts.payload_timeout.as_micros().min(u64::MAX as u128) as u64,
            got_bytes: false,
            payload_idle: None,
            inbuf: vec![0u8; INBUF],
            in_start: 0,
            in_end: 0,
            drained: false,
            replies: Vec::with_capacity(depth),
            payload: None,
            reading: true,
            broken: false,
            recv_at: now_us(),
            stats: live.stats.open(),
            parked: false,
        })
    }

    pub(super) fn run(mut self, shutdown: &AtomicBool) {
        let mut out: Vec<Completion> = Vec::with_capacity(self.slots.len());
        loop {
            if shutdown.load(Ordering::Relaxed) {
                // Stop taking requests; answer those in flight, then close.
                self.reading = false;
            }
            // Another connection waits for shared buffer room.
            let pressure = self.buffers.pressure.load(Ordering::Relaxed);
            if pressure != self.pressure_seen {
                self.pressure_seen = pressure;
                self.trim_pool();
            }
            // The export moved to another volume: finish what is in flight
            // here, then move before reading more.
            // Paused: finish what is in flight, then wait (not reading)
            // until the export resumes.
            let moving = self.live.generation.load(Ordering::Acquire) != self.generation;
            if moving && self.q.in_flight() == 0 {
                let paused = self.live.paused.load(Ordering::Acquire);
                self.park(paused);
                if !paused && !self.move_volume() {
                    self.reading = false;
                }
            }
            let moving = self.live.generation.load(Ordering::Acquire) != self.generation;
            if !moving {
                self.read_requests();
            }
            self.flush_replies();
            if !self.reading && self.q.in_flight() == 0 {
                break;
            }
            let poll = (self.reading && !moving && !self.free.is_empty() && self.stalled.is_none()).then_some(self.fd);
            if poll.is_some() && (self.payload.is_some() || self.skip > 0) {
                if self.payload_stalled() {
                    continue;
                }
            } else {
                self.payload_idle = None;
            }
            self.q.wait_event(&mut out, poll, TICK);
            for c in out.drain(..) {
                self.complete(c);
            }
            self.flush_replies();
        }
        // Tell the client now, before the queue (whose ring may still poll
        // the socket) is dropped: the hang-up also ends that poll at once.
        self.s.close_notify();
        // SAFETY: shutdown(2) on the connection's own, still open socket.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
        // Every buffer goes with this connection: see Drop.
    }

    /// Before a wait for the socket while a WRITE payload is due: true
    /// when the payload has not moved for the payload timeout; the
    /// connection then reads no more, frees the payload's buffer, and the
    /// server says so.
    fn payload_stalled(&mut self) -> bool {
        if std::mem::take(&mut self.got_bytes) {
            self.payload_idle = None;
            return false;
        }
        let now = now_us();
        let since = *self.payload_idle.get_or_insert(now);
        if now.saturating_sub(since) < self.payload_timeout {
            return false;
        }
        let what = match self.payload.take() {
            Some((h, _, buf, got)) => {
                self.release(buf);
                format!("it sent {got} of the {} bytes of a WRITE payload", h.len)
            }
            None => format!("it had {} bytes of a refused WRITE's payload left to send", self.skip),
        };
        self.skip = 0;
        self.reading = false;
        self.payload_idle = None;
        let _ = writeln!(
            io::stderr(),
            "uraid serve: closing the connection of {}: {what}, then nothing for {} s (--payload-timeout); its buffers are freed",
            peer_name(self.fd),
            self.payload_timeout as f64 / 1e6
        );
        true
    }

    /// Gives back the buffers kept for reuse beyond this connection's
    /// reserve (another connection waits for shared room).
    fn trim_pool(&mut self) {
        while self.held > self.buffers.reserve {
            let Some(b) = self.pool.pop() else { break };
            self.pool_bytes -= b.len();
            self.release(b);
        }
    }

    /// Counts this connection in the export's parked ones (`true`: paused
    /// and nothing in flight, reading nothing) or takes it out.
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

    /// Moves to the export's current volume (nothing in flight). False
    /// when its queue cannot be made (the connection then ends).
    pub(super) fn move_volume(&mut self) -> bool {
        let (vol, generation) = self.live.volume();
        match vol.queue(self.slots.len()) {
            Ok(q) => {
                self.q = q;
                self.vol = vol;
                self.generation = generation;
                true
            }
            Err(_) => false,
        }
    }

    /// A buffer of at least `len` bytes (a power of two, at least 4 KiB),
    /// reused from the pool or counted against this connection's budget
    /// and the server's (its reserve first, then the shared part); None
    /// while neither has room (the request waits).
    pub(super) fn take_buf(&mut self, len: usize) -> Option<IoBuf> {
        let class = len.next_power_of_two().max(4096);
        if let Some(i) = self.pool.iter().position(|b| b.len() == class) {
            self.pool_bytes -= class;
            return Some(self.pool.swap_remove(i));
        }
        loop {
            if self.held + class <= self.budget && self.buffers.take(self.held, class) {
                self.held += class;
                return Some(IoBuf::new(class));
            }
            // Room first from the buffers kept for reuse.
            let Some(b) = self.pool.pop() else {
                if self.held + class <= self.budget {
                    // The shared part is full: the others give back what
                    // they keep for reuse.
                    self.buffers.pressure.fetch_add(1, Ordering::Relaxed);
                }
                return None;
            };
            self.pool_bytes -= b.len();
            self.release(b);
        }
    }

    /// Gives a buffer back: kept for reuse while the pool has room, freed
    /// otherwise.
    pub(super) fn give_buf(&mut self, b: IoBuf) {
        if self.pool.len() < self.slots.len() && self.pool_bytes + b.len() <= POOL_BYTES {
            self.pool_bytes += b.len();
            self.pool.push(b);
        } else {
            self.release(b);
        }
    }

    pub(super) fn release(&mut self, b: IoBuf) {
        self.buffers.give(self.held, b.len());
        self.held -= b.len();
    }

    /// Reads and dispatches requests until the socket has no more data, the
    /// queue is full, a request waits for buffer memory, enough replies
    /// are queued, or reading stopped.
    pub(super) fn read_requests(&mut self) {
        while self.reading && !self.free.is_empty() && self.replies.len() < MAX_QUEUED_REPLIES {
            if let Some((h, at)) = self.stalled.take() {
                if !self.start(h, at) {
                    self.stalled = Some((h, at));
                    return;
                }
                continue;
            }
            if self.skip > 0 && self.in_end > self.in_start {
                let take = (self.in_end - self.in_start).min(self.skip);
                self.in_start += take;
                self.skip -= take;
                continue;
            }
            if let Some((h, at, mut buf, mut got)) = self.payload.take() {
                let want = h.len as usize;
                // Payload bytes already received come from the buffer...
                let take = (self.in_end - self.in_start).min(want - got);
                buf[got..got + take].copy_from_slice(&self.inbuf[self.in_start..self.in_start + take]);
                self.in_start += take;
                got += take;
                if got == want {
                    self.dispatch(h, at, Some(buf));
                    continue;
                }
                // ... the rest straight from the socket into the I/O buffer.
                match self.s.recv_nb(&mut buf[got..want]) {
                    Recv::Got(n) => {
                        self.got_bytes = true;
                        if got + n == want {
                            self.dispatch(h, at, Some(buf));
                        } else {
                            self.payload = Some((h, at, buf, got + n));
                        }
                    }
                    Recv::Again => {
                        self.payload = Some((h, at, buf, got));
                        return;
                    }
                    Recv::Closed => {
                        self.payload = Some((h, at, buf, got));
                        self.reading = false;
                    }
                }
                continue;
            }
            if self.skip == 0 && self.in_end - self.in_start >= REQUEST_LEN {
                let mut hdr = [0u8; REQUEST_LEN];
                hdr.copy_from_slice(&self.inbuf[self.in_start..self.in_start + REQUEST_LEN]);
                self.in_start += REQUEST_LEN;
                self.on_header(&hdr);
                continue;
            }
            // Need more bytes: keep the partial header at the front.
            self.inbuf.copy_within(self.in_start..self.in_end, 0);
            self.in_end -= self.in_start;
            self.in_start = 0;
            if self.drained {
                // The last receive did not fill the buffer: the socket is
                // very likely empty, so let the poll say when it is not
                // instead of spending a system call to hear EAGAIN.
                self.drained = false;
                return;
            }
            let end = self.in_end;
            let room = self.inbuf.len() - end;
            match self.s.recv_nb(&mut self.inbuf[end..]) {
                Recv::Got(n) => {
                    self.recv_at = now_us();
                    self.got_bytes = true;
                    self.in_end += n;
                    self.drained = n < room && !self.s.is_tls();
                }
                Recv::Again => return,
                Recv::Closed => self.reading = false,
            }
        }
    }

    pub(super) fn on_header(&mut self, raw: &[u8; REQUEST_LEN]) {
        let Some(h) = parse_request(raw) else {
            // Out of sync with the client: a hard disconnect, as the spec allows.
            self.reading = false;
            return;
        };
        match h.cmd {
            CMD_DISC => self.reading = false,
            CMD_WRITE if h.len > MAX_PAYLOAD => {
                // We cannot take (or skip safely) a payload that large.
                self.reading = false;
            }
            _ => {
                self.stats.received();
                if !self.start(h, self.recv_at) {
                    self.stalled = Some((h, self.recv_at));
                }
            }
        }
    }

    /// Starts request `h` (its header read): a WRITE's payload is read
    /// next into a buffer of its own, a READ goes to the engine with its
    /// buffer, the rest at once. False when the buffer memory is not
    /// there yet (nothing was consumed: call again later). A refused WRITE
    /// gets its error now and its payload is read and dropped.
    pub(super) fn start(&mut self, h: RequestHeader, at: u64) -> bool {
        match h.cmd {
            CMD_WRITE | CMD_READ if h.len > 0 => {
                if let Err((err, msg)) = self.check(&h) {
                    self.reply_error(&Pending::of(&h, at), err, msg);
                    if h.cmd == CMD_WRITE {
                        self.skip = h.len as usize;
                    }
                    return true;
                }
                let Some(buf) = self.take_buf(h.len as usize) else { return false };
                if h.cmd == CMD_WRITE {
                    self.payload = Some((h, at, buf, 0));
                } else {
                    self.dispatch(h, at, Some(buf));
                }
                true
            }
            _ => {
                self.dispatch(h, at, None);
                true
            }
        }
    }

    pub(super) fn check(&self, h: &RequestHeader) -> Result<(), (u32, &'static str)> {
        let mut allowed = CMD_FLAG_FUA;
        if h.cmd == CMD_WRITE_ZEROES {
            allowed |= CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO;
        }
        if h.flags & !allowed != 0 {
            return Err((EINVAL, "unknown or inapplicable command flag"));
        }
        let writes = matches!(h.cmd, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
        if writes && self.read_only {
            return Err((EPERM, "export is read-only"));
        }
        if matches!(h.cmd, CMD_READ | CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES) {
            let end = h.offset.checked_add(h.len as u64);
            if end.is_none_or(|e| e > self.size) {
                let err = if matches!(h.cmd, CMD_WRITE | CMD_WRITE_ZEROES) { ENOSPC } else { EINVAL };
                return Err((err, "request goes past the end of the export"));
            }
            if h.len > MAX_PAYLOAD && matches!(h.cmd, CMD_READ) {
                return Err((EINVAL, "request larger than the maximum block size"));
            }
            let bs = self.live.block_size as u64;
            if h.cmd != CMD_TRIM && (!h.offset.is_multiple_of(bs) || !(h.len as u64).is_multiple_of(bs)) {
                return Err((EINVAL, "request not aligned to the minimum block size"));
            }
        }
        Ok(())
    }

    pub(super) fn dispatch(&mut self, h: RequestHeader, at: u64, buf: Option<IoBuf>) {
        let p = Pending::of(&h, at);
        if let Err((err, msg)) = self.check(&h) {
            if let Some(b) = buf {
                self.give_buf(b);
            }
            self.reply_error(&p, err, msg);
            return;
        }
        let fua = h.flags & CMD_FLAG_FUA != 0;
        let (op, offset, len, buf) = match h.cmd {
            CMD_READ | CMD_WRITE if h.len == 0 => {
                if let Some(b) = buf {
                    self.give_buf(b);
                }
                self.reply_ok(&p, None);
                return;
            }
            CMD_READ => (Op::Read, h.offset, h.len as usize, buf),
            CMD_WRITE => (Op::Write, h.offset, h.len as usize, buf),
            CMD_FLUSH => (Op::Flush, 0, 0, None),
            CMD_TRIM => {
                // Round inwards to whole blocks, as the spec allows for TRIM.
                let bs = self.live.block_size as u64;
                let start = h.offset.next_multiple_of(bs);
                let end = (h.offset + h.len as u64) / bs * bs;
                // TRIM is a hint the server may ignore (NBD spec): once a
                // member has refused a discard, the engine would write
                // zeros on it, so an fstrim would write all free space;
                // md turns discard off for such an array too. The stack
                // says so (Caps::discard), asked anew each time.
                if end <= start || !self.q.caps().discard {
                    self.reply_ok(&p, None);
                    return;
                }
                (Op::Discard, start, (end - start) as usize, None)
            }
            CMD_WRITE_ZEROES if h.len == 0 => {
                self.reply_ok(&p, None);
                return;
            }
            CMD_WRITE_ZEROES => {
                let op = Op::WriteZeroes { no_hole: h.flags & CMD_FLAG_NO_HOLE != 0 };
                (op, h.offset, h.len as usize, None)
            }
            _ => {
                self.reply_error(&p, EINVAL, "unknown command");
                return;
            }
        };
        let tag = self.free.pop().expect("room was checked before reading");
        self.slots[tag] = Some(p);
        // FUA on a write, trim or zeroing: the engine completes it durable
        // (a zeroing or trim with a datasync of its members after it).
        let fua = fua && matches!(op, Op::Write | Op::Discard | Op::WriteZeroes { .. });
        let req = Request { op, offset, len, buf, tag: tag as u64, fua };
        if let Err(r) = self.q.push(req) {
            self.slots[tag] = None;
            self.free.push(tag);
            if let Some(b) = r.request.buf {
                self.give_buf(b);
            }
            self.reply_error(&p, nbd_errno(r.error.errno()), "request refused by the engine");
        }
    }

    pub(super) fn complete(&mut self, c: Completion) {
        let tag = c.tag as usize;
        let Some(p) = self.slots[tag] else { return };
        match c.result {
            Ok(_) if p.cmd == CMD_READ && c.buf.is_some() => {
                self.slots[tag] = None;
                self.free.push(tag);
                let buf = c.buf.expect("checked");
                let len = p.len.min(buf.len());
                self.reply_ok(&p, Some((buf, len)));
                return;
            }
            Ok(_) => self.reply_ok(&p, None),
            // TRIM is a hint: a member that cannot discard is not an error.
            Err(e) if p.cmd == CMD_TRIM && e.errno() == libc::EOPNOTSUPP => self.reply_ok(&p, None),
            Err(e) => {
                let msg = e.to_string();
                self.reply_error(&p, nbd_errno(e.errno()), &msg);
            }
        }
        self.slots[tag] = None;
        self.free.push(tag);
        if let Some(b) = c.buf {
            self.give_buf(b);
        }
    }

    /// Sends every queued reply, in as few writev(2) calls as the iovec
    /// limit allows, then recycles the READ buffers.
    pub(super) fn flush_replies(&mut self) {
        if self.replies.is_empty() {
            return;
        }
        if !self.broken {
            let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(self.replies.len() * 2);
            for r in &self.replies {
                iov.push(IoSlice::new(&r.hdr[..r.hlen]));
                if let Some((b, n)) = &r.data {
                    iov.push(IoSlice::new(&b[..*n]));
                }
                if !r.extra.is_empty() {
                    iov.push(IoSlice::new(&r.extra));
                }
            }
            let mut failed = None;
            for chunk in iov.chunks_mut(1024) {
                if let Err(e) = self.s.send_all(chunk) {
                    failed = Some(e);
                    break;
                }
            }
            if let Some(e) = failed {
                // The client went away: finish what is in flight, send nothing.
                self.broken = true;
                self.reading = false;
                if e.kind() == io::ErrorKind::TimedOut {
                    let _ = writeln!(io::stderr(), "uraid serve: closing the connection of {}: {e} (--client-timeout)", peer_name(self.fd));
                }
            }
        }
        // Handed to the socket (or dropped with it): completed.
        let now = now_us();
        // Drained, not dropped: the vector keeps its room for the next batch.
        let mut replies = std::mem::take(&mut self.replies);
        for r in replies.drain(..) {
            self.stats.replied(r.kind, r.ok, r.bytes as u64, now.saturating_sub(r.at));
            if let Some((b, _)) = r.data {
                self.give_buf(b);
            }
        }
        self.replies = replies;
    }

    pub(super) fn reply_ok(&mut self, p: &Pending, data: Option<(IoBuf, usize)>) {
        let (handle, offset) = (p.handle, p.offset);
        let data = if p.cmd == CMD_READ { data } else {
            if let Some((b, _)) = data {
                self.give_buf(b);
            }
            None
        };
        let mut hdr = [0u8; 28];
        let hlen = if self.structured {
            match &data {
                Some((_, n)) => {
                    hdr[..20].copy_from_slice(&structured_header(handle, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 8 + *n as u32));
                    hdr[20..28].copy_from_slice(&offset.to_be_bytes());
                    28
                }
                None => {
                    hdr[..20].copy_from_slice(&structured_header(handle, REPLY_FLAG_DONE, REPLY_TYPE_NONE, 0));
                    20
                }
            }
        } else {
            hdr[..16].copy_from_slice(&simple_reply(handle, 0));
            16
        };
        let bytes = match (&data, p.cmd) {
            (Some((_, n)), _) => *n as u32,
            (None, CMD_WRITE) => p.len as u32,
            _ => 0,
        };
        self.replies.push(Reply { hdr, hlen, data, extra: Vec::new(), kind: kind_of(p.cmd), ok: true, bytes, at: p.at });
    }

    pub(super) fn reply_error(&mut self, p: &Pending, err: u32, msg: &str) {
        let mut hdr = [0u8; 28];
        let (hlen, extra) = if self.structured {
            let b = structured_error(p.handle, err, msg);
            hdr[..20].copy_from_slice(&b[..20]);
            (20, b[20..].to_vec())
        } else {
            hdr[..16].copy_from_slice(&simple_reply(p.handle, err));
            (16, Vec::new())
        };
        self.replies.push(Reply { hdr, hlen, data: None, extra, kind: kind_of(p.cmd), ok: false, bytes: 0, at: p.at });
    }
}

/// What a reply to command `cmd` completes, as the counters tell requests
/// apart.
fn kind_of(cmd: u16) -> Kind {
    match cmd {
        CMD_READ => Kind::Read,
        CMD_WRITE => Kind::Write,
        CMD_FLUSH => Kind::Flush,
        CMD_TRIM => Kind::Trim,
        CMD_WRITE_ZEROES => Kind::WriteZeroes,
        _ => Kind::Other,
    }
}
