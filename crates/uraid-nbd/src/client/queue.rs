//! One connection as a [`BlockQueue`]: requests encoded as they are pushed
//! and sent on a non-blocking socket, replies parsed (simple replies only)
//! and matched by handle, READ data straight into the request's buffer;
//! a server that breaks the protocol fails every request in flight.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use uraid_core::{bail, BlockQueue, Completion, Error, ErrorKind, IoBuf, Op, Request, Result};

use super::{ExportInfo, NbdUri, Stream};
use crate::proto::*;

/// Bytes of the receive buffer; larger READ data goes straight into its
/// request's buffer.
const INBUF: usize = 256 << 10;

/// A request sent (or about to be) and not answered yet.
struct Slot {
    tag: u64,
    op: Op,
    offset: u64,
    len: usize,
    buf: Option<IoBuf>,
}

/// A request queued for sending: its header, and for a WRITE its payload
/// (in its slot's buffer).
struct Outgoing {
    hdr: [u8; REQUEST_LEN],
    /// The slot whose buffer's first `len` bytes follow the header.
    payload: Option<usize>,
}

/// One NBD connection as a [`BlockQueue`] (see the module docs).
pub struct NbdQueue {
    s: Stream,
    fd: RawFd,
    uri: NbdUri,
    info: ExportInfo,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Requests queued for sending, in order; `sent` bytes of the first
    /// one are already on the wire.
    outq: std::collections::VecDeque<Outgoing>,
    sent: usize,
    /// Bytes received and not parsed yet: `inbuf[in_start..in_end]`.
    inbuf: Vec<u8>,
    in_start: usize,
    in_end: usize,
    /// A READ reply whose data is being received: its slot and the bytes
    /// of it already in the buffer.
    data: Option<(usize, usize)>,
    /// The last receive returned less than it had room for: the socket is
    /// very likely empty, so the next wait polls before it reads instead
    /// of spending a system call to hear EAGAIN.
    drained: bool,
    /// Completions made without the server (refusals are returned by
    /// push; these are flushes the export does not need).
    ready: Vec<Completion>,
    /// Requests pushed and not yet handed out as completions.
    in_flight: usize,
    /// The connection is unusable (this says why): every request fails.
    broken: Option<Error>,
    /// Longest wait for any byte from the server while requests are in
    /// flight, and when one last came (or the queue last became busy).
    reply_timeout: Duration,
    last_heard: Instant,
}

impl NbdQueue {
    pub(super) fn over(s: Stream, info: ExportInfo, depth: usize, uri: &NbdUri, reply_timeout: Duration) -> Result<NbdQueue> {
        let depth = depth.max(1);
        s.set_nonblocking(true).map_err(|e| Error::new(ErrorKind::Io, format!("{uri}: cannot make the socket non-blocking: {e}")))?;
        let fd = s.as_raw_fd();
        Ok(NbdQueue {
            s,
            fd,
            uri: uri.clone(),
            info,
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            outq: std::collections::VecDeque::with_capacity(depth),
            sent: 0,
            inbuf: vec![0u8; INBUF],
            in_start: 0,
            in_end: 0,
            data: None,
            drained: false,
            ready: Vec::new(),
            in_flight: 0,
            broken: None,
            reply_timeout,
            last_heard: Instant::now(),
        })
    }

    /// The export this connection serves.
    pub fn info(&self) -> ExportInfo {
        self.info
    }

    /// Checks a request against the export before it is sent.
    fn check(&self, req: &Request) -> Result<u16> {
        let i = &self.info;
        let cmd = match req.op {
            Op::Read => CMD_READ,
            Op::Write => CMD_WRITE,
            Op::Flush => CMD_FLUSH,
            Op::Discard if i.has(TF_SEND_TRIM) => CMD_TRIM,
            Op::WriteZeroes { .. } if i.has(TF_SEND_WRITE_ZEROES) => CMD_WRITE_ZEROES,
            op => bail!(Unsupported, "the export {} does not take {op:?}", self.uri),
        };
        if cmd != CMD_READ && cmd != CMD_FLUSH && i.read_only() {
            bail!(InvalidInput, "the export {} is read-only", self.uri);
        }
        if req.fua && !i.has(TF_SEND_FUA) && cmd != CMD_READ {
            bail!(Unsupported, "the export {} does not take FUA writes", self.uri);
        }
        if cmd == CMD_FLUSH {
            return Ok(cmd);
        }
        let bs = i.min_block as u64;
        if !req.offset.is_multiple_of(bs) || !(req.len as u64).is_multiple_of(bs) || req.len == 0 {
            bail!(InvalidInput, "a request of {} bytes at {} is not whole blocks of {bs} bytes", req.len, req.offset);
        }
        if req.offset.checked_add(req.len as u64).is_none_or(|e| e > i.size) {
            bail!(OutOfRange, "a request of {} bytes at {} goes past the export's end ({} bytes)", req.len, req.offset, i.size);
        }
        if matches!(cmd, CMD_READ | CMD_WRITE) {
            if req.len > i.max_payload as usize {
                bail!(InvalidInput, "a request of {} bytes is larger than the export's maximum of {}", req.len, i.max_payload);
            }
            if req.buf.as_ref().is_none_or(|b| b.len() < req.len) {
                bail!(InvalidInput, "a request of {} bytes without a buffer that large", req.len);
            }
        }
        Ok(cmd)
    }

    /// Sends what is queued until done or the socket is full.
    fn send_some(&mut self) {
        while self.broken.is_none() && !self.outq.is_empty() {
            // The common case, one request header (a READ, a FLUSH): one
            // write(2), no iovec to build.
            if self.outq.len() == 1 && self.sent == 0 && self.outq[0].payload.is_none() {
                match self.s.write(&self.outq[0].hdr) {
                    Ok(REQUEST_LEN) => {
                        self.outq.clear();
                        return;
                    }
                    // Partly sent: the general path goes on from there.
                    Ok(n) if n > 0 => {
                        self.sent = n;
                        continue;
                    }
                    Ok(_) => return self.fail_all("the server closed the connection".into()),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return self.fail_all(format!("sending to the server failed: {e}")),
                }
            }
            let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(self.outq.len().min(512) * 2);
            let mut skip = self.sent;
            for o in self.outq.iter().take(512) {
                let payload = o.payload.map(|si| {
                    let s = self.slots[si].as_ref().expect("queued request has its slot");
                    &s.buf.as_ref().expect("write has a buffer")[..s.len]
                });
                for part in [Some(&o.hdr[..]), payload].into_iter().flatten() {
                    if skip >= part.len() {
                        skip -= part.len();
                    } else {
                        iov.push(IoSlice::new(&part[skip..]));
                        skip = 0;
                    }
                }
            }
            match self.s.write_vectored(&iov) {
                Ok(0) => self.fail_all("the server closed the connection".into()),
                Ok(mut n) => {
                    n += self.sent;
                    while let Some(o) = self.outq.front() {
                        let len = REQUEST_LEN + o.payload.map_or(0, |si| self.slots[si].as_ref().map_or(0, |s| s.len));
                        if n < len {
                            break;
                        }
                        n -= len;
                        self.outq.pop_front();
                    }
                    self.sent = n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.fail_all(format!("sending to the server failed: {e}")),
            }
        }
    }

    /// Receives and parses what the socket has, appending completions to
    /// `out`. Returns false when nothing could be read (it would block).
    fn recv_some(&mut self, out: &mut Vec<Completion>) -> bool {
        if self.broken.is_some() {
            return false;
        }
        if std::mem::take(&mut self.drained) {
            return false;
        }
        // READ data that did not fit in the buffer goes straight into its
        // request's buffer.
        if let Some((si, got)) = self.data {
            let s = self.slots[si].as_mut().expect("reply's slot");
            let len = s.len;
            let buf = s.buf.as_mut().expect("read has a buffer");
            let r = self.s.read(&mut buf[got..len]);
            if matches!(r, Ok(n) if n > 0) {
                self.last_heard = Instant::now();
            }
            match r {
                Ok(0) => {
                    self.fail_all("the server closed the connection in the middle of a reply".into());
                    return true;
                }
                Ok(n) if got + n == len => {
                    self.data = None;
                    self.finish(si, Ok(len), out);
                    return true;
                }
                Ok(n) => {
                    self.data = Some((si, got + n));
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
                Err(e) => {
                    self.fail_all(format!("receiving from the server failed: {e}"));
                    return true;
                }
            }
        }
        self.inbuf.copy_within(self.in_start..self.in_end, 0);
        self.in_end -= self.in_start;
        self.in_start = 0;
        let end = self.in_end;
        match self.s.read(&mut self.inbuf[end..]) {
            Ok(0) => {
                let what = if self.in_flight > self.ready.len() { "with requests in flight" } else { "" };
                self.fail_all(format!("the server closed the connection {what}").trim_end().to_string());
            }
            Ok(n) => {
                self.last_heard = Instant::now();
                self.drained = end + n < self.inbuf.len();
                self.in_end += n;
                self.parse(out);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => self.fail_all(format!("receiving from the server failed: {e}")),
        }
        true
    }

    /// Parses the replies in the receive buffer.
    fn parse(&mut self, out: &mut Vec<Completion>) {
        while self.broken.is_none() && self.data.is_none() && self.in_end - self.in_start >= 16 {
            let hdr: [u8; 16] = self.inbuf[self.in_start..self.in_start + 16].try_into().expect("16 bytes");
            let Some((handle, error)) = parse_simple_reply(&hdr) else {
                let magic = u32::from_be_bytes(hdr[0..4].try_into().expect("4 bytes"));
                let what = if magic == STRUCTURED_REPLY_MAGIC {
                    "a structured reply, which this client did not ask for".to_string()
                } else {
                    format!("a reply with a bad magic 0x{magic:08x}")
                };
                self.fail_all(format!("the server sent {what}; the connection is out of step"));
                return;
            };
            let si = handle as usize;
            let Some(slot) = self.slots.get(si).and_then(Option::as_ref).filter(|_| !self.outq.iter().any(|o| o.hdr[8..16] == hdr[8..16])) else {
                self.fail_all(format!("the server answered handle {handle}, which no request in flight has"));
                return;
            };
            if error != 0 {
                self.in_start += 16;
                let (op, len, offset) = (slot.op, slot.len, slot.offset);
                let e = Error::from_errno(format!("the server failed {op:?} of {len} bytes at {offset}"), errno_of_nbd(error));
                self.finish(si, Err(e), out);
                continue;
            }
            if slot.op != Op::Read {
                self.in_start += 16;
                let len = slot.len;
                self.finish(si, Ok(len), out);
                continue;
            }
            // READ data follows: what is here is copied, the rest read
            // straight into the buffer.
            let len = slot.len;
            let have = (self.in_end - self.in_start - 16).min(len);
            let from = self.in_start + 16;
            let buf = self.slots[si].as_mut().and_then(|s| s.buf.as_mut()).expect("read has a buffer");
            buf[..have].copy_from_slice(&self.inbuf[from..from + have]);
            self.in_start = from + have;
            if have == len {
                self.finish(si, Ok(len), out);
            } else {
                self.data = Some((si, have));
            }
        }
    }

    fn finish(&mut self, si: usize, result: Result<usize>, out: &mut Vec<Completion>) {
        let slot = self.slots[si].take().expect("finished slot");
        self.free.push(si);
        self.in_flight -= 1;
        out.push(Completion { tag: slot.tag, result, buf: slot.buf });
    }

    /// The connection is unusable: every request in flight fails with
    /// `why`, and so does every later one.
    fn fail_all(&mut self, why: String) {
        if self.broken.is_some() {
            return;
        }
        self.broken = Some(Error::new(ErrorKind::Io, format!("NBD connection to {}: {why}", self.uri)));
        self.outq.clear();
        self.data = None;
    }

    /// After a failure: every slot's completion, with the error.
    fn drain_failed(&mut self, out: &mut Vec<Completion>) {
        let Some(e) = self.broken.clone() else { return };
        for si in 0..self.slots.len() {
            if self.slots[si].is_some() {
                self.finish(si, Err(e.clone()), out);
            }
        }
    }

    /// Waits until the socket can be read (or written, when `write`), or
    /// `extra` can be read (then true), or `timeout_ms` passed.
    fn poll(&mut self, write: bool, extra: Option<RawFd>, timeout_ms: i32) -> bool {
        let ev = libc::POLLIN | if write { libc::POLLOUT } else { 0 };
        let mut fds = [libc::pollfd { fd: self.fd, events: ev, revents: 0 }, libc::pollfd { fd: extra.unwrap_or(-1), events: libc::POLLIN, revents: 0 }];
        let n = if extra.is_some() { 2 } else { 1 };
        // SAFETY: `fds` is a valid array of `n` pollfd structures that
        // lives across the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), n as libc::nfds_t, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                self.fail_all(format!("poll failed: {e}"));
            }
            return false;
        }
        extra.is_some() && fds[1].revents != 0
    }

    /// Sends NBD_CMD_DISC when the connection is quiet (best effort).
    pub(super) fn disconnect(&mut self) {
        if self.broken.is_none() && self.in_flight == 0 {
            let h = RequestHeader { flags: 0, cmd: CMD_DISC, handle: 0, offset: 0, len: 0 };
            // Blocking, but not for long: the server reads what it is sent.
            let _ = self.s.set_nonblocking(false);
            let _ = self.s.set_timeout(Some(Duration::from_secs(1)));
            let _ = self.s.write_all(&encode_request(&h));
            self.broken = Some(Error::new(ErrorKind::Io, format!("NBD connection to {}: disconnected", self.uri)));
        }
    }

    /// The loop behind [`BlockQueue::wait`] and [`BlockQueue::wait_event`]:
    /// sends, receives, and sleeps in poll(2) until `min` completions are
    /// in `out`, nothing is in flight, `extra` is readable (true) or the
    /// deadline passed.
    fn wait_for(&mut self, min: usize, out: &mut Vec<Completion>, extra: Option<RawFd>, deadline: Option<Instant>) -> bool {
        let start = out.len();
        self.in_flight -= self.ready.len();
        out.append(&mut self.ready);
        loop {
            self.send_some();
            while self.recv_some(out) {
                if out.len() - start >= min && self.data.is_none() {
                    break;
                }
            }
            if self.broken.is_some() {
                self.drain_failed(out);
            }
            if out.len() - start >= min || self.in_flight == 0 {
                self.send_some();
                return false;
            }
            // A server that sends nothing for the reply timeout while
            // requests are in flight is given up (its requests fail).
            let now = Instant::now();
            let quiet = now.saturating_duration_since(self.last_heard);
            if quiet >= self.reply_timeout {
                self.fail_all(format!("the server sent nothing for {} s with {} requests in flight", quiet.as_secs(), self.in_flight));
                continue;
            }
            let mut left = self.reply_timeout.saturating_sub(quiet);
            if let Some(d) = deadline {
                let until = d.saturating_duration_since(now);
                if until.is_zero() {
                    return false;
                }
                left = left.min(until);
            }
            if self.poll(!self.outq.is_empty(), extra, left.as_millis().clamp(1, i32::MAX as u128) as i32) {
                return true;
            }
        }
    }
}

impl BlockQueue for NbdQueue {
    /// Encodes the request and queues it for sending (it goes at the next
    /// submit or wait). Refused (handed back): `Busy` when `depth` requests
    /// are in flight; `InvalidInput`, `OutOfRange` or `Unsupported` when
    /// the export cannot take it (see the checks); `Io` once the
    /// connection failed.
    fn push(&mut self, req: Request) -> std::result::Result<(), uraid_core::io::request::Rejected> {
        use uraid_core::io::request::Rejected;
        if let Some(e) = &self.broken {
            return Err(Rejected { error: e.clone(), request: req });
        }
        let cmd = match self.check(&req) {
            Ok(c) => c,
            Err(error) => return Err(Rejected { error, request: req }),
        };
        if cmd == CMD_FLUSH && !self.info.has(TF_SEND_FLUSH) {
            // The server has no cache to flush (it did not offer FLUSH,
            // and the spec forbids sending one): done at once.
            self.in_flight += 1;
            self.ready.push(Completion { tag: req.tag, result: Ok(0), buf: req.buf });
            return Ok(());
        }
        let Some(si) = self.free.pop() else {
            return Err(Rejected { error: Error::new(ErrorKind::Busy, "the NBD queue is full"), request: req });
        };
        if self.in_flight == 0 {
            // Busy from now: the reply timeout counts from here.
            self.last_heard = Instant::now();
        }
        let mut flags = 0;
        if req.fua && cmd != CMD_READ && cmd != CMD_FLUSH {
            flags |= CMD_FLAG_FUA;
        }
        if let Op::WriteZeroes { no_hole: true } = req.op {
            flags |= CMD_FLAG_NO_HOLE;
        }
        let len = if cmd == CMD_FLUSH { 0 } else { req.len as u32 };
        let offset = if cmd == CMD_FLUSH { 0 } else { req.offset };
        let hdr = encode_request(&RequestHeader { flags, cmd, handle: si as u64, offset, len });
        self.slots[si] = Some(Slot { tag: req.tag, op: req.op, offset, len: len as usize, buf: req.buf });
        self.outq.push_back(Outgoing { hdr, payload: (cmd == CMD_WRITE).then_some(si) });
        self.in_flight += 1;
        Ok(())
    }

    /// Sends what is queued, as far as the socket takes it now.
    fn submit(&mut self) {
        self.send_some();
    }

    fn wait(&mut self, min: usize, out: &mut Vec<Completion>) {
        self.wait_for(min, out, None, None);
    }

    fn wait_event(&mut self, out: &mut Vec<Completion>, fd: Option<RawFd>, timeout: Duration) -> bool {
        self.wait_for(1, out, fd, Instant::now().checked_add(timeout))
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn has_room(&self) -> bool {
        self.broken.is_none() && !self.free.is_empty()
    }

    fn depth(&self) -> usize {
        self.slots.len()
    }

    fn validate(&self, req: &Request) -> Result<()> {
        self.check(req).map(|_| ())
    }

    fn broken(&self) -> Option<&Error> {
        self.broken.as_ref()
    }

    /// What the export said it can do at the handshake.
    fn caps(&self) -> uraid_core::io::request::Caps {
        self.info.caps()
    }
}

impl Drop for NbdQueue {
    /// Says goodbye (NBD_CMD_DISC) when nothing is in flight, as the spec
    /// asks of a client that is done.
    fn drop(&mut self) {
        self.disconnect();
    }
}
