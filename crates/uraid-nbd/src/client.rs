//! The client side of NBD: connects to an export (uraid's own, or any
//! other server: nbdkit, qemu-nbd, nbd-server), negotiates it with the
//! fixed newstyle handshake and `NBD_OPT_GO`, and drives it through the
//! engine's one I/O interface, [`BlockQueue`]. So the load generator
//! measures an export with the same tests and the same code as the
//! in-process engine (`uraid bench 'nbd+unix:///NAME?socket=PATH'`), as
//! SPDK's bdevperf runs on any bdev.
//!
//! - [`NbdUri`]: `nbd+unix:///NAME?socket=PATH` and `nbd://HOST[:PORT]/NAME`
//!   (the NBD URI format, without TLS).
//! - [`NbdDevice`]: an export as a [`BlockDevice`]: its size, flags and
//!   block size constraints; each [`NbdDevice::open_queue`] is a connection
//!   of its own (one per load thread, as fio's nbd engine per job).
//! - [`NbdQueue`]: one connection. Requests are encoded as they are pushed
//!   and sent without waiting, on a non-blocking socket: a send that would
//!   block leaves the rest for the next call, and a wait reads replies
//!   while it sends, so a client and a server can never both sit blocked
//!   in a send to each other. Replies may come in any order (matched by
//!   handle); READ data goes straight into the request's buffer.
//!
//! Simple replies only, as Linux's nbd client: the client does not ask for
//! structured replies, so a READ's data follows a 16-byte header. A server
//! that breaks the protocol (a bad magic, an unknown handle, a structured
//! reply not asked for, the connection closed with requests in flight)
//! fails every request in flight with an error that says so, and the queue
//! takes no more: nothing is guessed.
//!
//! Sources: NetworkBlockDevice/nbd, doc/proto.md ("Fixed newstyle
//! negotiation", "Transmission", "Block size constraints") and doc/uri.md.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use uraid_core::{bail, BlockDevice, BlockQueue, Completion, Error, ErrorKind, IoBuf, Op, Request, Result};

use crate::proto::*;

/// The NBD port (IANA): `nbd://HOST/NAME` without a port uses it.
pub const NBD_PORT: u16 = 10809;

/// Longest the handshake may take before the connection is given up.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest option reply payload the client reads (bytes); a server sending
/// more is not followed.
const MAX_OPTION_REPLY: u32 = 64 << 10;

/// Bytes of the receive buffer; larger READ data goes straight into its
/// request's buffer.
const INBUF: usize = 256 << 10;

/// Where an export listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix domain socket (its path).
    Unix(PathBuf),
    /// A TCP address, `HOST:PORT`.
    Tcp(String),
}

/// An NBD URI: where the server is and the export's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdUri {
    /// The server's address.
    pub endpoint: Endpoint,
    /// The export's name (empty: the server's default export).
    pub name: String,
}

impl NbdUri {
    /// True when `s` is written as an NBD URI (`nbd://`, `nbd+unix://`, or
    /// their TLS forms, which [`str::parse`] refuses with a clear error).
    pub fn looks_like(s: &str) -> bool {
        ["nbd://", "nbd+unix://", "nbds://", "nbds+unix://"].iter().any(|p| s.starts_with(p))
    }
}

impl std::fmt::Display for NbdUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.endpoint {
            Endpoint::Unix(p) => write!(f, "nbd+unix:///{}?socket={}", self.name, p.display()),
            Endpoint::Tcp(a) => write!(f, "nbd://{a}/{}", self.name),
        }
    }
}

impl std::str::FromStr for NbdUri {
    type Err = Error;

    /// Parses `nbd+unix:///NAME?socket=PATH` or `nbd://HOST[:PORT][/NAME]`
    /// (doc/uri.md; an IPv6 host in brackets). Errors (`InvalidInput`):
    /// another scheme, a missing socket or host, and the TLS schemes
    /// (`nbds`), which this client does not speak.
    fn from_str(s: &str) -> Result<NbdUri> {
        if s.starts_with("nbds://") || s.starts_with("nbds+unix://") {
            bail!(InvalidInput, "'{s}' asks for NBD over TLS, which uraid's NBD client does not speak; use nbd:// or nbd+unix://");
        }
        if let Some(rest) = s.strip_prefix("nbd+unix://") {
            let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
            if !path.is_empty() && !path.starts_with('/') {
                bail!(InvalidInput, "'{s}': a Unix socket URI has no host: write nbd+unix:///NAME?socket=PATH");
            }
            let name = path.strip_prefix('/').unwrap_or("").to_string();
            let socket = query.split('&').find_map(|kv| kv.strip_prefix("socket="));
            let Some(socket) = socket.filter(|p| !p.is_empty()) else {
                bail!(InvalidInput, "'{s}' names no socket: write nbd+unix:///NAME?socket=PATH");
            };
            return Ok(NbdUri { endpoint: Endpoint::Unix(PathBuf::from(socket)), name });
        }
        if let Some(rest) = s.strip_prefix("nbd://") {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            if authority.is_empty() {
                bail!(InvalidInput, "'{s}' names no host: write nbd://HOST[:PORT]/NAME");
            }
            // HOST, HOST:PORT, [V6], [V6]:PORT.
            let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
                match v6.split_once(']') {
                    Some((h, "")) => (format!("[{h}]"), None),
                    Some((h, p)) if p.starts_with(':') => (format!("[{h}]"), Some(&p[1..])),
                    _ => bail!(InvalidInput, "'{s}': '{authority}' is not [IPV6] or [IPV6]:PORT"),
                }
            } else {
                match authority.rsplit_once(':') {
                    Some((h, p)) => (h.to_string(), Some(p)),
                    None => (authority.to_string(), None),
                }
            };
            let port = match port {
                None => NBD_PORT,
                Some(p) => match p.parse::<u16>() {
                    Ok(p) => p,
                    Err(_) => bail!(InvalidInput, "'{s}': '{p}' is not a port from 0 to 65535"),
                },
            };
            if host.is_empty() || host == "[]" {
                bail!(InvalidInput, "'{s}' names no host: write nbd://HOST[:PORT]/NAME");
            }
            let addr = format!("{host}:{port}");
            let name = path.split('?').next().unwrap_or("").to_string();
            return Ok(NbdUri { endpoint: Endpoint::Tcp(addr), name });
        }
        bail!(InvalidInput, "'{s}' is not an NBD URI: write nbd+unix:///NAME?socket=PATH or nbd://HOST[:PORT]/NAME")
    }
}

/// The connection's socket.
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn connect(uri: &NbdUri) -> Result<Stream> {
        let fail = |e: io::Error| Error::new(ErrorKind::Io, format!("cannot connect to {uri}: {e}; is the server running?"));
        Ok(match &uri.endpoint {
            Endpoint::Unix(p) => Stream::Unix(UnixStream::connect(p).map_err(fail)?),
            Endpoint::Tcp(a) => {
                let t = TcpStream::connect(a.as_str()).map_err(fail)?;
                // Requests are small and latency-bound: no Nagle delay.
                t.set_nodelay(true).map_err(fail)?;
                Stream::Tcp(t)
            }
        })
    }
    fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t).and_then(|_| s.set_write_timeout(t)),
            Stream::Tcp(s) => s.set_read_timeout(t).and_then(|_| s.set_write_timeout(t)),
        }
    }
    fn set_nonblocking(&self, nb: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(nb),
            Stream::Tcp(s) => s.set_nonblocking(nb),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Tcp(s) => s.write(b),
        }
    }
    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write_vectored(b),
            Stream::Tcp(s) => s.write_vectored(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
}

/// What the server told about the export in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportInfo {
    /// Size in bytes.
    pub size: u64,
    /// Transmission flags (`TF_*`).
    pub flags: u16,
    /// Minimum block size in bytes (512 when the server gave none, as the
    /// spec asks of a client for interoperability).
    pub min_block: u32,
    /// Preferred block size in bytes (4096 when not given).
    pub preferred_block: u32,
    /// Largest READ or WRITE payload in bytes (32 MiB when not given).
    pub max_payload: u32,
}

impl ExportInfo {
    /// The server takes no writes.
    pub fn read_only(&self) -> bool {
        self.flags & TF_READ_ONLY != 0
    }
    fn has(&self, f: u16) -> bool {
        self.flags & TF_HAS_FLAGS != 0 && self.flags & f != 0
    }
}

fn handshake_err(uri: &NbdUri, what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Io, format!("NBD handshake with {uri} failed: {what}"))
}

/// Opens a connection and negotiates the export (fixed newstyle; `NBD_OPT_GO`
/// asking for block sizes, or `NBD_OPT_EXPORT_NAME` from a server that
/// does not know GO). The socket is left blocking with no timeout.
fn connect(uri: &NbdUri) -> Result<(Stream, ExportInfo)> {
    let mut s = Stream::connect(uri)?;
    let io_err = |e: io::Error| {
        if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
            handshake_err(uri, format!("the server did not answer within {} s", HANDSHAKE_TIMEOUT.as_secs()))
        } else if e.kind() == io::ErrorKind::UnexpectedEof {
            handshake_err(uri, "the server closed the connection")
        } else {
            handshake_err(uri, e)
        }
    };
    s.set_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(io_err)?;
    let mut greet = [0u8; 18];
    s.read_exact(&mut greet).map_err(io_err)?;
    if u64::from_be_bytes(greet[0..8].try_into().expect("8 bytes")) != NBDMAGIC {
        return Err(handshake_err(uri, "the peer is not an NBD server (no NBDMAGIC)"));
    }
    if u64::from_be_bytes(greet[8..16].try_into().expect("8 bytes")) != IHAVEOPT {
        return Err(handshake_err(uri, "the server speaks the oldstyle protocol; this client needs fixed newstyle"));
    }
    let sflags = u16::from_be_bytes([greet[16], greet[17]]);
    if sflags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(handshake_err(uri, "the server does not offer fixed newstyle negotiation"));
    }
    let no_zeroes = sflags & FLAG_NO_ZEROES != 0;
    let cflags = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
    s.write_all(&cflags.to_be_bytes()).map_err(io_err)?;
    // NBD_OPT_GO: the name, and one information request (block sizes).
    let name = uri.name.as_bytes();
    let mut data = Vec::with_capacity(8 + name.len());
    data.extend_from_slice(&(name.len() as u32).to_be_bytes());
    data.extend_from_slice(name);
    data.extend_from_slice(&1u16.to_be_bytes());
    data.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    s.write_all(&option_request(OPT_GO, &data)).map_err(io_err)?;
    let mut export: Option<(u64, u16)> = None;
    let mut blocks: Option<(u32, u32, u32)> = None;
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).map_err(io_err)?;
        if u64::from_be_bytes(h[0..8].try_into().expect("8 bytes")) != OPT_REPLY_MAGIC {
            return Err(handshake_err(uri, "an option reply has a bad magic"));
        }
        let option = u32::from_be_bytes(h[8..12].try_into().expect("4 bytes"));
        let reply = u32::from_be_bytes(h[12..16].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(h[16..20].try_into().expect("4 bytes"));
        if option != OPT_GO {
            return Err(handshake_err(uri, format!("the server answered option {option}, not the NBD_OPT_GO asked")));
        }
        if len > MAX_OPTION_REPLY {
            return Err(handshake_err(uri, format!("an option reply of {len} bytes (at most {MAX_OPTION_REPLY} are read)")));
        }
        let mut d = vec![0u8; len as usize];
        s.read_exact(&mut d).map_err(io_err)?;
        match reply {
            REP_ACK => break,
            REP_INFO if d.len() >= 2 => match u16::from_be_bytes([d[0], d[1]]) {
                INFO_EXPORT if d.len() == 12 => {
                    export = Some((u64::from_be_bytes(d[2..10].try_into().expect("8 bytes")), u16::from_be_bytes([d[10], d[11]])));
                }
                INFO_BLOCK_SIZE if d.len() == 14 => {
                    let g = |i: usize| u32::from_be_bytes(d[i..i + 4].try_into().expect("4 bytes"));
                    blocks = Some((g(2), g(6), g(10)));
                }
                // Other items (a name, a description) are not needed.
                _ => {}
            },
            REP_ERR_UNSUP => {
                // A server from before NBD_OPT_GO: the old way, which ends
                // the negotiation at once.
                let e = option_export_name(&mut s, uri, no_zeroes).map_err(io_err)?;
                return finish(s, uri, e, None);
            }
            r if r & 0x8000_0000 != 0 => {
                let msg = String::from_utf8_lossy(&d).into_owned();
                let why = match r {
                    REP_ERR_UNKNOWN => format!("the server has no export named '{}'", uri.name),
                    REP_ERR_TLS_REQD => "the server requires TLS, which this client does not speak".to_string(),
                    REP_ERR_POLICY => "the server refused the export by policy".to_string(),
                    REP_ERR_SHUTDOWN => "the server is shutting down".to_string(),
                    _ => format!("the server refused NBD_OPT_GO (reply 0x{r:08x})"),
                };
                return Err(handshake_err(uri, if msg.is_empty() { why } else { format!("{why}: {msg}") }));
            }
            r => return Err(handshake_err(uri, format!("an unexpected option reply 0x{r:08x}"))),
        }
    }
    let Some(export) = export else {
        return Err(handshake_err(uri, "the server acknowledged NBD_OPT_GO without telling the export's size"));
    };
    finish(s, uri, export, blocks)
}

/// Checks and completes what the handshake learnt.
fn finish(s: Stream, uri: &NbdUri, (size, flags): (u64, u16), blocks: Option<(u32, u32, u32)>) -> Result<(Stream, ExportInfo)> {
    let (min_block, preferred_block, max_payload) = match blocks {
        Some((min, pref, max)) => {
            if !min.is_power_of_two() || min > 65536 || !pref.is_power_of_two() || pref < min || max < pref {
                return Err(handshake_err(uri, format!("block size constraints min {min}, preferred {pref}, max {max} break the spec's rules")));
            }
            (min.max(512), pref.max(min.max(512)), max.min(MAX_PAYLOAD).max(pref))
        }
        None => (512, 4096, MAX_PAYLOAD),
    };
    s.set_timeout(None).map_err(|e| handshake_err(uri, e))?;
    Ok((s, ExportInfo { size, flags, min_block, preferred_block, max_payload }))
}

/// `NBD_OPT_EXPORT_NAME`: the server answers with the size and flags (and
/// 124 zero bytes unless both sides agreed NO_ZEROES), or closes.
fn option_export_name(s: &mut Stream, uri: &NbdUri, no_zeroes: bool) -> io::Result<(u64, u16)> {
    s.write_all(&option_request(OPT_EXPORT_NAME, uri.name.as_bytes()))?;
    let mut b = [0u8; 10];
    s.read_exact(&mut b)?;
    if !no_zeroes {
        let mut z = [0u8; 124];
        s.read_exact(&mut z)?;
    }
    Ok((u64::from_be_bytes(b[0..8].try_into().expect("8 bytes")), u16::from_be_bytes([b[8], b[9]])))
}

fn option_request(option: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + data.len());
    v.extend_from_slice(&IHAVEOPT.to_be_bytes());
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// An NBD export as a block device: each queue opened on it is a
/// connection of its own.
#[derive(Debug, Clone)]
pub struct NbdDevice {
    uri: NbdUri,
    info: ExportInfo,
}

impl NbdDevice {
    /// Connects to `uri` once to learn the export (then disconnects).
    /// Errors: the server is not there or not NBD, the export is unknown
    /// or refused, or the handshake breaks the protocol (`Io`, with what
    /// happened).
    pub fn connect(uri: &NbdUri) -> Result<NbdDevice> {
        let (s, info) = connect(uri)?;
        let mut q = NbdQueue::over(s, info, 1, uri)?;
        q.disconnect();
        Ok(NbdDevice { uri: uri.clone(), info })
    }

    /// What the server told about the export.
    pub fn info(&self) -> ExportInfo {
        self.info
    }

    /// The export's URI.
    pub fn uri(&self) -> &NbdUri {
        &self.uri
    }

    /// One line for the reader: where, how large, what it takes.
    pub fn describe(&self) -> String {
        let i = &self.info;
        let mut can = Vec::new();
        for (f, n) in [(TF_SEND_FLUSH, "flush"), (TF_SEND_FUA, "FUA"), (TF_SEND_TRIM, "trim"), (TF_SEND_WRITE_ZEROES, "write zeroes")] {
            if i.has(f) {
                can.push(n);
            }
        }
        format!(
            "NBD export {} ({} bytes{}; blocks min {} preferred {} max {} bytes; {})",
            self.uri,
            i.size,
            if i.read_only() { ", read-only" } else { "" },
            i.min_block,
            i.preferred_block,
            i.max_payload,
            if can.is_empty() { "no flush, FUA, trim or zeroing".to_string() } else { can.join(", ") }
        )
    }
}

impl BlockDevice for NbdDevice {
    type Queue = NbdQueue;

    /// A new connection with room for `depth` requests in flight.
    fn open_queue(&self, depth: usize) -> Result<NbdQueue> {
        let (s, info) = connect(&self.uri)?;
        if info.size != self.info.size {
            bail!(Io, "the export {} changed size from {} to {} bytes between connections", self.uri, self.info.size, info.size);
        }
        NbdQueue::over(s, info, depth, &self.uri)
    }

    fn capacity(&self) -> u64 {
        self.info.size
    }

    fn block_size(&self) -> u32 {
        self.info.min_block
    }

    /// NBD_CMD_FLUSH on a connection of its own; every connection's
    /// completed writes are covered when the server offers multi-conn
    /// (uraid serve does), as the spec says.
    fn flush(&self) -> Result<()> {
        BlockQueue::flush(&mut self.open_queue(1)?)
    }
}

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
}

impl NbdQueue {
    fn over(s: Stream, info: ExportInfo, depth: usize, uri: &NbdUri) -> Result<NbdQueue> {
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
            match self.s.read(&mut buf[got..len]) {
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
                let e = Error::from_errno(format!("the server failed {op:?} of {len} bytes at {offset}"), nbd_to_errno(error));
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
    /// `extra` can be read (then true), or `timeout_ms` passed (-1: none).
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
    fn disconnect(&mut self) {
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
    fn wait_for(&mut self, min: usize, out: &mut Vec<Completion>, extra: Option<RawFd>, deadline: Option<std::time::Instant>) -> bool {
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
            let timeout = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    left.as_millis().clamp(1, i32::MAX as u128) as i32
                }
            };
            if self.poll(!self.outq.is_empty(), extra, timeout) {
                return true;
            }
        }
    }
}

/// The errno an NBD error number stands for (the spec's values are
/// Linux's).
fn nbd_to_errno(e: u32) -> i32 {
    match e {
        EPERM => libc::EPERM,
        EIO => libc::EIO,
        ENOMEM => libc::ENOMEM,
        EINVAL => libc::EINVAL,
        ENOSPC => libc::ENOSPC,
        EOVERFLOW => libc::EOVERFLOW,
        ENOTSUP => libc::EOPNOTSUPP,
        ESHUTDOWN => libc::ESHUTDOWN,
        _ => libc::EIO,
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
        self.wait_for(1, out, fd, Some(std::time::Instant::now() + timeout))
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn has_room(&self) -> bool {
        self.broken.is_none() && !self.free.is_empty()
    }
}

impl Drop for NbdQueue {
    /// Says goodbye (NBD_CMD_DISC) when nothing is in flight, as the spec
    /// asks of a client that is done.
    fn drop(&mut self) {
        self.disconnect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> std::result::Result<NbdUri, String> {
        s.parse::<NbdUri>().map_err(|e| e.to_string())
    }

    #[test]
    fn uri_forms() {
        let u = parse("nbd+unix:///bench?socket=/tmp/u.sock").unwrap();
        assert_eq!(u, NbdUri { endpoint: Endpoint::Unix("/tmp/u.sock".into()), name: "bench".into() });
        assert_eq!(u.to_string(), "nbd+unix:///bench?socket=/tmp/u.sock");
        assert_eq!(parse("nbd+unix://?socket=/s").unwrap().name, "");
        assert_eq!(parse("nbd://host/vol").unwrap().endpoint, Endpoint::Tcp("host:10809".into()));
        assert_eq!(parse("nbd://10.0.0.1:2000/vol").unwrap(), NbdUri { endpoint: Endpoint::Tcp("10.0.0.1:2000".into()), name: "vol".into() });
        assert_eq!(parse("nbd://[::1]:2000").unwrap(), NbdUri { endpoint: Endpoint::Tcp("[::1]:2000".into()), name: "".into() });
        assert_eq!(parse("nbd://[::1]/x").unwrap().endpoint, Endpoint::Tcp("[::1]:10809".into()));
        for (bad, says) in [
            ("nbds://host/x", "TLS"),
            ("nbds+unix:///x?socket=/s", "TLS"),
            ("nbd+unix:///x", "names no socket"),
            ("nbd+unix:///x?socket=", "names no socket"),
            ("nbd+unix://host/x?socket=/s", "has no host"),
            ("nbd://", "names no host"),
            ("nbd://:10809/x", "names no host"),
            ("nbd://host:99999/x", "not a port"),
            ("nbd://[::1/x", "not [IPV6]"),
            ("http://host/x", "not an NBD URI"),
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(NbdUri::looks_like("nbd+unix:///x?socket=/s") && NbdUri::looks_like("nbds://h/x"));
        assert!(!NbdUri::looks_like("/dev/loop0") && !NbdUri::looks_like("mem:1G"));
    }
}
