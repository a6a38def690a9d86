//! The NBD server: listening, the fixed newstyle handshake and the
//! transmission phase.
//!
//! One thread per connection, each with its own engine [`Queue`] (its own
//! io_uring). The thread reads requests from the socket without blocking,
//! hands them to the queue, and writes each reply as its I/O completes, so
//! many requests are in flight and replies go out of order. The socket's
//! readiness is one more event on the same ring (a poll), so one wait
//! covers both the client and the drives.
//!
//! Flush semantics hold across connections (`NBD_FLAG_CAN_MULTI_CONN`): a
//! FLUSH on any connection syncs every member, which covers every write
//! any connection has completed.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use uraid_core::io::request::Op;
use uraid_core::{Completion, IoBuf, Queue, Request, Volume};

use crate::proto::*;
use crate::wire::{Recv, Sock, Wire};

/// One export: a volume under a name.
#[derive(Debug, Clone)]
pub struct Export {
    /// Export name, as clients ask for it (`nbd+unix:///NAME?socket=...`).
    pub name: String,
    /// Human-readable description (shown by `nbdinfo --list`).
    pub description: String,
    /// The volume.
    pub volume: Arc<Volume>,
}

/// An export as the server holds it: the volume behind it can be replaced
/// while it serves (see [`Server::replace_volume`]); capacity and block
/// size stay those of the first volume.
#[derive(Debug)]
struct Live {
    name: String,
    description: String,
    capacity: u64,
    block_size: u32,
    current: std::sync::Mutex<Arc<Volume>>,
    /// Bumped by every replacement; connections compare it with theirs.
    generation: AtomicU64,
}

impl Live {
    fn volume(&self) -> (Arc<Volume>, u64) {
        let v = self.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (v, self.generation.load(Ordering::Acquire))
    }
}

/// Server settings. The limits bound what one client can cost the server
/// (see the README's "Limits" for the whole server's memory bound).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Refuse writes, trims and zeroing (EPERM), and say so in the flags.
    pub read_only: bool,
    /// Requests in flight per connection.
    pub queue_depth: usize,
    /// With a TLS configuration the server runs in FORCEDTLS mode (the NBD
    /// spec's name): every option but STARTTLS and ABORT is refused with
    /// NBD_REP_ERR_TLS_REQD until the client has upgraded.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Connections served at once; the next one is answered with
    /// NBD_REP_ERR_POLICY ("too many connections") and closed.
    pub max_connections: usize,
    /// Time a client has for the whole handshake (from connecting to
    /// NBD_OPT_GO), TLS included.
    pub handshake_timeout: Duration,
    /// Longest a client may leave the server unable to send (its replies
    /// unread) before it is disconnected.
    pub client_timeout: Duration,
    /// Bytes of I/O buffers one connection may hold (READ data waiting to
    /// be sent, WRITE payloads, buffers kept for reuse); requests beyond it
    /// wait unread in the socket. At least [`MAX_PAYLOAD`] (32 MiB).
    pub conn_buffer_bytes: usize,
    /// Bytes of I/O buffers all connections together may hold.
    pub buffer_bytes: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            read_only: false,
            queue_depth: 64,
            tls: None,
            max_connections: 64,
            handshake_timeout: Duration::from_secs(10),
            client_timeout: Duration::from_secs(30),
            conn_buffer_bytes: 64 << 20,
            buffer_bytes: 512 << 20,
        }
    }
}

/// Where the server listens.
#[derive(Debug)]
pub enum Listener {
    /// A unix socket (the default; its file is removed when the server stops).
    Unix(UnixListener, PathBuf),
    /// A TCP socket.
    Tcp(TcpListener),
}

/// The server: exports, options and a shutdown flag that a signal handler
/// may set.
#[derive(Debug)]
pub struct Server {
    exports: Arc<Vec<Live>>,
    opts: ServerOptions,
    shutdown: Arc<AtomicBool>,
    connections: Arc<AtomicUsize>,
    /// Bytes of I/O buffers every connection holds together.
    buffers: Arc<AtomicUsize>,
}

/// How often idle connections look at the shutdown flag.
const TICK: Duration = Duration::from_millis(100);
/// Options one handshake may send (nbdkit closes after 32 too).
pub const MAX_OPTIONS: u32 = 32;
/// Replies queued before the connection stops reading to send them.
const MAX_QUEUED_REPLIES: usize = 256;
/// How long a stopping server still tries to send replies already due.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Connections over the limit waiting to be told so; more are closed at once.
const REFUSALS_QUEUED: usize = 16;
/// Time an over-the-limit client has to send its first option.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(2);

impl Server {
    /// A server for `exports` (the first one is the default export, used
    /// when a client asks for the empty name).
    pub fn new(exports: Vec<Export>, mut opts: ServerOptions) -> Server {
        let exports = exports
            .into_iter()
            .map(|e| Live {
                capacity: e.volume.capacity(),
                block_size: e.volume.block_size(),
                name: e.name,
                description: e.description,
                current: std::sync::Mutex::new(e.volume),
                generation: AtomicU64::new(0),
            })
            .collect();
        opts.conn_buffer_bytes = opts.conn_buffer_bytes.max(MAX_PAYLOAD as usize);
        opts.buffer_bytes = opts.buffer_bytes.max(opts.conn_buffer_bytes);
        opts.max_connections = opts.max_connections.max(1);
        Server {
            exports: Arc::new(exports),
            opts,
            shutdown: Arc::new(AtomicBool::new(false)),
            connections: Arc::new(AtomicUsize::new(0)),
            buffers: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The flag that stops the server: set it (from a signal handler or
    /// another thread) and [`run`](Self::run) returns once every request in
    /// flight is answered (or, for a client that does not read, after a
    /// grace of 2 s).
    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        self.shutdown.clone()
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// Bytes of I/O buffers the connections hold now.
    pub fn buffer_bytes(&self) -> usize {
        self.buffers.load(Ordering::Relaxed)
    }

    /// The volume export `name` serves now (`""`: the default export).
    pub fn volume(&self, name: &str) -> Option<Arc<Volume>> {
        find(&self.exports, name).map(|e| e.volume().0)
    }

    /// Makes export `name` serve `vol` from now on: each connection
    /// answers the requests it has in flight on the old volume, then moves
    /// to the new one before it reads another request (so no request runs
    /// on the old volume once every connection has moved: the caller can
    /// tell by the old volume's `Arc` count). Used when a spare takes over
    /// a member's role while the array is exported.
    ///
    /// Errors: no such export, or `vol` has another capacity or block size
    /// (clients were told those at the handshake).
    pub fn replace_volume(&self, name: &str, vol: Arc<Volume>) -> Result<(), String> {
        let e = find(&self.exports, name).ok_or_else(|| format!("no export named '{name}'"))?;
        if vol.capacity() != e.capacity || vol.block_size() != e.block_size {
            return Err(format!(
                "the new volume of export '{}' has {} bytes in blocks of {}, the clients were told {} in blocks of {}",
                e.name,
                vol.capacity(),
                vol.block_size(),
                e.capacity,
                e.block_size
            ));
        }
        *e.current.lock().unwrap_or_else(|p| p.into_inner()) = vol;
        e.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Accepts connections until the shutdown flag is set, then waits for
    /// every connection to finish its requests in flight. A failing
    /// accept(2) (EMFILE when descriptors run out, a connection reset
    /// before it was taken) is transient: the server says so on stderr (at
    /// most once a second), waits 100 ms and goes on.
    ///
    /// Errors: the listening socket cannot be made non-blocking.
    pub fn run(&self, listener: &Listener) -> io::Result<()> {
        let lfd = match listener {
            Listener::Unix(l, _) => {
                l.set_nonblocking(true)?;
                l.as_raw_fd()
            }
            Listener::Tcp(l) => {
                l.set_nonblocking(true)?;
                l.as_raw_fd()
            }
        };
        let (refuse_tx, refuse_rx) = std::sync::mpsc::sync_channel::<OwnedFd>(REFUSALS_QUEUED);
        let refuser = {
            let shutdown = self.shutdown.clone();
            let max = self.opts.max_connections;
            std::thread::Builder::new().name("uraid-nbd-refuse".into()).spawn(move || {
                for fd in refuse_rx {
                    refuse(fd, max, &shutdown);
                }
            })?
        };
        let mut threads: Vec<std::thread::JoinHandle<()>> = Vec::new();
        let mut last_warning: Option<std::time::Instant> = None;
        while !self.shutdown.load(Ordering::Relaxed) {
            let mut pfd = libc::pollfd { fd: lfd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd, count 1.
            unsafe { libc::poll(&mut pfd, 1, TICK.as_millis() as i32) };
            threads.retain(|t| !t.is_finished());
            let accepted = match listener {
                Listener::Unix(l, _) => l.accept().map(|(s, _)| OwnedFd::from(s)),
                Listener::Tcp(l) => l.accept().map(|(s, _)| {
                    let _ = s.set_nodelay(true);
                    OwnedFd::from(s)
                }),
            };
            match accepted {
                Ok(fd) if self.connections.load(Ordering::Relaxed) >= self.opts.max_connections => {
                    // Over the limit: told so by the refusal thread, or
                    // closed at once when it has enough to do.
                    let _ = refuse_tx.try_send(fd);
                }
                Ok(fd) => threads.extend(self.spawn(fd)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                        last_warning = Some(std::time::Instant::now());
                        eprintln!("uraid serve: cannot accept a connection ({e}); going on");
                    }
                    std::thread::sleep(TICK);
                }
            }
        }
        drop(refuse_tx);
        let _ = refuser.join();
        for t in threads {
            let _ = t.join();
        }
        Ok(())
    }

    /// Serves one already-connected client on the calling thread: the
    /// handshake, then the transmission phase, exactly as a connection
    /// [`run`](Self::run) accepted is served (same options, limits and
    /// timeouts, counted in [`connections`](Self::connections) meanwhile).
    /// Returns when the connection ends: the client hangs up or aborts, a
    /// protocol error or a timeout ends it, or the server is stopped.
    /// Used by tests and fuzzers that feed the server a byte stream.
    ///
    /// Errors: `fd` cannot be made non-blocking (nothing is served).
    pub fn serve_stream(&self, fd: OwnedFd) -> io::Result<()> {
        let sock = Sock::new(fd, self.opts.client_timeout, self.shutdown.clone())?;
        self.connections.fetch_add(1, Ordering::Relaxed);
        connection(sock, &self.exports, self.opts.clone(), &self.shutdown, &self.buffers);
        self.connections.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    fn spawn(&self, fd: OwnedFd) -> Option<std::thread::JoinHandle<()>> {
        let sock = Sock::new(fd, self.opts.client_timeout, self.shutdown.clone()).ok()?;
        let exports = self.exports.clone();
        let opts = self.opts.clone();
        let shutdown = self.shutdown.clone();
        let conns = self.connections.clone();
        let buffers = self.buffers.clone();
        conns.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new().name("uraid-nbd-conn".into()).spawn(move || {
            // A panic (a bug) ends this connection only: its engine queue
            // lets its stripe locks go as it unwinds (see Queue's Drop), the
            // client sees the connection close, and the others go on.
            let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                connection(sock, &exports, opts, &shutdown, &buffers);
            }));
            if let Err(p) = served {
                let why = uraid_core::error::panic_message(&*p);
                let _ = writeln!(
                    std::io::stderr(),
                    "uraid serve: a connection's thread panicked ({why}); that connection is closed, the others go on"
                );
            }
            conns.fetch_sub(1, Ordering::Relaxed);
        });
        match spawned {
            Ok(t) => Some(t),
            Err(e) => {
                self.connections.fetch_sub(1, Ordering::Relaxed);
                eprintln!("uraid serve: cannot start a thread for a new connection ({e}); it is closed");
                None
            }
        }
    }
}

/// Tells a client over the connection limit so: the greeting, then
/// NBD_REP_ERR_POLICY to its first option (a client that sends
/// NBD_OPT_EXPORT_NAME, which cannot be refused, is just closed), then
/// closes. Bounded by [`REFUSAL_TIMEOUT`].
fn refuse(fd: OwnedFd, max: usize, shutdown: &Arc<AtomicBool>) {
    let Ok(mut s) = Sock::new(fd, REFUSAL_TIMEOUT, shutdown.clone()) else { return };
    s.set_deadline(Some(std::time::Instant::now() + REFUSAL_TIMEOUT));
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    if s.write_all(&hello).is_err() || read_u32(&mut s).is_err() {
        return;
    }
    let mut h = [0u8; 16];
    if s.read_exact(&mut h).is_err() {
        return;
    }
    let Some(opt) = parse_option_header(&h) else { return };
    if opt.option == OPT_EXPORT_NAME || opt.len > MAX_OPTION_LEN {
        return;
    }
    let mut data = vec![0u8; opt.len as usize];
    if s.read_exact(&mut data).is_err() {
        return;
    }
    let msg = format!("too many connections: this server serves at most {max} at once (uraid serve --max-connections); try again later");
    let _ = s.write_all(&option_reply(opt.option, REP_ERR_POLICY, msg.as_bytes()));
}

fn read_u32<R: Read>(s: &mut R) -> io::Result<u32> {
    let mut b = [0u8; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

/// Transmission flags of an export.
pub fn transmission_flags(read_only: bool) -> u16 {
    let mut f = TF_HAS_FLAGS
        | TF_SEND_FLUSH
        | TF_SEND_FUA
        | TF_SEND_TRIM
        | TF_SEND_WRITE_ZEROES
        | TF_SEND_FAST_ZERO
        | TF_CAN_MULTI_CONN;
    if read_only {
        f |= TF_READ_ONLY;
    }
    f
}

fn find<'a>(exports: &'a [Live], name: &str) -> Option<&'a Live> {
    if name.is_empty() {
        return exports.first();
    }
    exports.iter().find(|e| e.name == name)
}

fn info_replies(option: u32, e: &Live, items: &[u16], read_only: bool) -> Vec<u8> {
    let mut v = Vec::new();
    let mut export = Vec::with_capacity(12);
    export.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    export.extend_from_slice(&e.capacity.to_be_bytes());
    export.extend_from_slice(&transmission_flags(read_only).to_be_bytes());
    v.extend(option_reply(option, REP_INFO, &export));
    // The spec lets a server send block sizes unasked; clients that honour
    // them (qemu, libnbd) then never send misaligned requests.
    let min = e.block_size;
    let mut bs = Vec::with_capacity(14);
    bs.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    bs.extend_from_slice(&min.to_be_bytes());
    bs.extend_from_slice(&min.max(4096).to_be_bytes());
    bs.extend_from_slice(&MAX_PAYLOAD.to_be_bytes());
    v.extend(option_reply(option, REP_INFO, &bs));
    if items.contains(&INFO_NAME) {
        let mut n = INFO_NAME.to_be_bytes().to_vec();
        n.extend_from_slice(e.name.as_bytes());
        v.extend(option_reply(option, REP_INFO, &n));
    }
    if items.contains(&INFO_DESCRIPTION) {
        let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
        d.extend_from_slice(e.description.as_bytes());
        v.extend(option_reply(option, REP_INFO, &d));
    }
    v.extend(option_reply(option, REP_ACK, &[]));
    v
}

/// The outcome of a successful handshake: which export, and whether
/// structured replies were negotiated.
struct Negotiated<'a> {
    export: &'a Live,
    structured: bool,
}

/// Fixed newstyle negotiation. `Ok(None)` ends the connection (abort, a
/// client that does not speak fixed newstyle, an unknown export named with
/// EXPORT_NAME, a bad option magic).
fn handshake<'a>(
    s: &mut Wire,
    exports: &'a [Live],
    opts: &ServerOptions,
    shutdown: &AtomicBool,
) -> io::Result<Option<Negotiated<'a>>> {
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&hello)?;
    let cflags = read_u32(s)?;
    if cflags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Ok(None); // unknown client flags: the spec says to close
    }
    let no_zeroes = cflags & FLAG_C_NO_ZEROES != 0;
    let mut structured = false;
    let mut options = 0u32;
    loop {
        let mut h = [0u8; 16];
        s.read_exact(&mut h)?;
        let Some(opt) = parse_option_header(&h) else { return Ok(None) };
        options += 1;
        if options > MAX_OPTIONS {
            // A client that keeps negotiating holds a thread: end it.
            let msg = format!("more than {MAX_OPTIONS} options in one handshake");
            let _ = s.write_all(&option_reply(opt.option, REP_ERR_POLICY, msg.as_bytes()));
            return Ok(None);
        }
        if opt.len > MAX_OPTION_LEN {
            if opt.len > MAX_OPTION_SKIP {
                return Ok(None);
            }
            io::copy(&mut Read::by_ref(s).take(opt.len as u64), &mut io::sink())?;
            s.write_all(&option_reply(opt.option, REP_ERR_TOO_BIG, b"option data too large"))?;
            continue;
        }
        let mut data = vec![0u8; opt.len as usize];
        s.read_exact(&mut data)?;
        if shutdown.load(Ordering::Relaxed) && opt.option != OPT_ABORT {
            s.write_all(&option_reply(opt.option, REP_ERR_SHUTDOWN, b"server is shutting down"))?;
            continue;
        }
        if opts.tls.is_some() && !s.is_tls() && !matches!(opt.option, OPT_STARTTLS | OPT_ABORT) {
            if opt.option == OPT_EXPORT_NAME {
                return Ok(None); // cannot be refused politely: the spec says to close
            }
            s.write_all(&option_reply(opt.option, REP_ERR_TLS_REQD, b"this server requires TLS: send STARTTLS first"))?;
            continue;
        }
        match opt.option {
            OPT_EXPORT_NAME => {
                let Ok(name) = std::str::from_utf8(&data) else { return Ok(None) };
                let Some(e) = find(exports, name) else { return Ok(None) };
                let mut r = Vec::with_capacity(134);
                r.extend_from_slice(&e.capacity.to_be_bytes());
                r.extend_from_slice(&transmission_flags(opts.read_only).to_be_bytes());
                if !no_zeroes {
                    r.extend_from_slice(&[0u8; 124]);
                }
                s.write_all(&r)?;
                return Ok(Some(Negotiated { export: e, structured }));
            }
            OPT_ABORT => {
                let _ = s.write_all(&option_reply(opt.option, REP_ACK, &[]));
                return Ok(None);
            }
            OPT_LIST => {
                if !data.is_empty() {
                    s.write_all(&option_reply(opt.option, REP_ERR_INVALID, b"LIST takes no data"))?;
                    continue;
                }
                let mut r = Vec::new();
                for e in exports {
                    let mut d = (e.name.len() as u32).to_be_bytes().to_vec();
                    d.extend_from_slice(e.name.as_bytes());
                    d.extend_from_slice(e.description.as_bytes());
                    r.extend(option_reply(opt.option, REP_SERVER, &d));
                }
                r.extend(option_reply(opt.option, REP_ACK, &[]));
                s.write_all(&r)?;
            }
            OPT_STARTTLS => match &opts.tls {
                None => s.write_all(&option_reply(
                    opt.option,
                    REP_ERR_POLICY,
                    b"TLS is not configured on this server (start it with --tls-cert and --tls-key)",
                ))?,
                Some(_) if s.is_tls() || !data.is_empty() => {
                    s.write_all(&option_reply(opt.option, REP_ERR_INVALID, b"TLS is already up, or STARTTLS had data"))?
                }
                Some(cfg) => {
                    s.write_all(&option_reply(opt.option, REP_ACK, &[]))?;
                    s.start_tls(cfg.clone())?;
                }
            },
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    s.write_all(&option_reply(opt.option, REP_ERR_INVALID, b"STRUCTURED_REPLY takes no data"))?;
                    continue;
                }
                structured = true;
                s.write_all(&option_reply(opt.option, REP_ACK, &[]))?;
            }
            OPT_INFO | OPT_GO => {
                let Some(req) = parse_info_request(&data) else {
                    s.write_all(&option_reply(opt.option, REP_ERR_INVALID, b"malformed INFO/GO request"))?;
                    continue;
                };
                let Some(e) = find(exports, &req.name) else {
                    let known: Vec<&str> = exports.iter().map(|e| e.name.as_str()).collect();
                    let msg = format!("no export named '{}'; exports: {}", req.name, known.join(", "));
                    s.write_all(&option_reply(opt.option, REP_ERR_UNKNOWN, msg.as_bytes()))?;
                    continue;
                };
                s.write_all(&info_replies(opt.option, e, &req.items, opts.read_only))?;
                if opt.option == OPT_GO {
                    return Ok(Some(Negotiated { export: e, structured }));
                }
            }
            _ => {
                s.write_all(&option_reply(opt.option, REP_ERR_UNSUP, b"option not supported"))?;
            }
        }
    }
}

/// One connection, from the greeting to the last reply. Every way it can
/// end (the client leaves, a protocol error, a limit, a stop) just ends it.
fn connection(sock: Sock, exports: &[Live], opts: ServerOptions, shutdown: &AtomicBool, buffers: &Arc<AtomicUsize>) {
    let mut w = Wire::Plain(sock);
    if let Some(s) = w.sock_mut() {
        s.set_deadline(Some(std::time::Instant::now() + opts.handshake_timeout));
    }
    let Ok(Some(n)) = handshake(&mut w, exports, &opts, shutdown) else { return };
    if let Some(s) = w.sock_mut() {
        s.set_deadline(None);
        s.set_stop_grace(STOP_GRACE);
    }
    if let Ok(t) = Transmission::new(&mut w, n.export, n.structured, &opts, buffers.clone()) {
        t.run(shutdown);
    };
}

/// What one request in flight is waiting for.
#[derive(Clone, Copy)]
struct Pending {
    handle: u64,
    cmd: u16,
    offset: u64,
    /// Bytes of data a READ returns (its buffer may be larger).
    len: usize,
}

/// One reply, queued until the batch is sent.
struct Reply {
    /// Header (simple: 16 bytes; structured: 20, or 28 with the offset).
    hdr: [u8; 28],
    hlen: usize,
    /// READ data: the buffer and how many of its bytes to send.
    data: Option<(IoBuf, usize)>,
    /// An error message payload (structured replies).
    extra: Vec<u8>,
}

/// Size of the receive buffer; larger WRITE payloads are read straight
/// into their I/O buffer.
const INBUF: usize = 256 << 10;

/// Buffers a connection keeps for reuse, in bytes at most (the pool is
/// also bounded by the queue depth in count).
const POOL_BYTES: usize = 16 << 20;

struct Transmission<'s> {
    s: &'s mut Wire,
    fd: RawFd,
    live: &'s Live,
    vol: Arc<Volume>,
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
    /// Bytes of buffers every connection holds, and their limit.
    buffers: Arc<AtomicUsize>,
    buffer_limit: usize,
    /// A request read but not started: no buffer memory for it yet.
    stalled: Option<RequestHeader>,
    /// Payload bytes of a refused WRITE still to be read and dropped.
    skip: usize,
    /// Bytes received and not parsed yet: `inbuf[in_start..in_end]`. Many
    /// requests arrive in one recv(2), so one system call serves a batch.
    inbuf: Vec<u8>,
    in_start: usize,
    in_end: usize,
    /// The last receive returned less than it had room for.
    drained: bool,
    /// Replies waiting to go out in one writev(2) per batch.
    replies: Vec<Reply>,
    /// A WRITE whose payload is being read: header, buffer, bytes read.
    payload: Option<(RequestHeader, IoBuf, usize)>,
    /// Still reading requests (false after DISC, EOF, a protocol error or
    /// a shutdown).
    reading: bool,
    /// The socket failed: no more replies can be sent.
    broken: bool,
}

impl Drop for Transmission<'_> {
    /// Every buffer goes with the connection, also when its thread
    /// panicked: the server-wide buffer count gets them back.
    fn drop(&mut self) {
        self.buffers.fetch_sub(std::mem::take(&mut self.held), Ordering::Relaxed);
    }
}

impl<'s> Transmission<'s> {
    fn new(s: &'s mut Wire, live: &'s Live, structured: bool, opts: &ServerOptions, buffers: Arc<AtomicUsize>) -> io::Result<Self> {
        let depth = opts.queue_depth.max(1);
        let (vol, generation) = live.volume();
        let q = vol.queue(depth).map_err(|e| io::Error::other(e.to_string()))?;
        let fd = s.raw_fd();
        Ok(Transmission {
            s,
            fd,
            live,
            vol,
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
            buffers,
            buffer_limit: opts.buffer_bytes,
            stalled: None,
            skip: 0,
            inbuf: vec![0u8; INBUF],
            in_start: 0,
            in_end: 0,
            drained: false,
            replies: Vec::with_capacity(depth),
            payload: None,
            reading: true,
            broken: false,
        })
    }

    fn run(mut self, shutdown: &AtomicBool) {
        let mut out: Vec<Completion> = Vec::with_capacity(self.slots.len());
        loop {
            if shutdown.load(Ordering::Relaxed) {
                // Stop taking requests; answer those in flight, then close.
                self.reading = false;
            }
            // The export moved to another volume: finish what is in flight
            // here, then move before reading more.
            let moving = self.live.generation.load(Ordering::Acquire) != self.generation;
            if moving && self.q.in_flight() == 0 && !self.move_volume() {
                self.reading = false;
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
            self.q.wait_event(&mut out, poll, TICK);
            for c in out.drain(..) {
                self.complete(c);
            }
            self.flush_replies();
        }
        // Tell the client now, before the queue (whose ring may still poll
        // the socket) is dropped: the hang-up also ends that poll at once.
        if let Wire::Tls { tls, .. } = &mut *self.s {
            tls.conn.send_close_notify();
            let rustls::StreamOwned { conn, sock } = &mut **tls;
            let _ = conn.write_tls(sock);
        }
        // SAFETY: shutdown(2) on the connection's own, still open socket.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
        // Every buffer goes with this connection: see Drop.
    }

    /// Moves to the export's current volume (nothing in flight). False
    /// when its queue cannot be made (the connection then ends).
    fn move_volume(&mut self) -> bool {
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
    /// and the server's; None while neither has room (the request waits).
    fn take_buf(&mut self, len: usize) -> Option<IoBuf> {
        let class = len.next_power_of_two().max(4096);
        if let Some(i) = self.pool.iter().position(|b| b.len() == class) {
            self.pool_bytes -= class;
            return Some(self.pool.swap_remove(i));
        }
        loop {
            let limit = self.buffer_limit;
            let fits = self.held + class <= self.budget
                && self.buffers.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |g| (g + class <= limit).then_some(g + class)).is_ok();
            if fits {
                self.held += class;
                return Some(IoBuf::new(class));
            }
            // Room first from the buffers kept for reuse.
            let b = self.pool.pop()?;
            self.pool_bytes -= b.len();
            self.release(b);
        }
    }

    /// Gives a buffer back: kept for reuse while the pool has room, freed
    /// otherwise.
    fn give_buf(&mut self, b: IoBuf) {
        if self.pool.len() < self.slots.len() && self.pool_bytes + b.len() <= POOL_BYTES {
            self.pool_bytes += b.len();
            self.pool.push(b);
        } else {
            self.release(b);
        }
    }

    fn release(&mut self, b: IoBuf) {
        self.held -= b.len();
        self.buffers.fetch_sub(b.len(), Ordering::Relaxed);
    }

    /// Reads and dispatches requests until the socket has no more data, the
    /// queue is full, a request waits for buffer memory, enough replies
    /// are queued, or reading stopped.
    fn read_requests(&mut self) {
        while self.reading && !self.free.is_empty() && self.replies.len() < MAX_QUEUED_REPLIES {
            if let Some(h) = self.stalled.take() {
                if !self.start(h) {
                    self.stalled = Some(h);
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
            if let Some((h, mut buf, mut got)) = self.payload.take() {
                let want = h.len as usize;
                // Payload bytes already received come from the buffer...
                let take = (self.in_end - self.in_start).min(want - got);
                buf[got..got + take].copy_from_slice(&self.inbuf[self.in_start..self.in_start + take]);
                self.in_start += take;
                got += take;
                if got == want {
                    self.dispatch(h, Some(buf));
                    continue;
                }
                // ... the rest straight from the socket into the I/O buffer.
                match self.s.recv_nb(&mut buf[got..want]) {
                    Recv::Got(n) if got + n == want => self.dispatch(h, Some(buf)),
                    Recv::Got(n) => self.payload = Some((h, buf, got + n)),
                    Recv::Again => {
                        self.payload = Some((h, buf, got));
                        return;
                    }
                    Recv::Closed => {
                        self.payload = Some((h, buf, got));
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
                    self.in_end += n;
                    self.drained = n < room && !self.s.is_tls();
                }
                Recv::Again => return,
                Recv::Closed => self.reading = false,
            }
        }
    }

    fn on_header(&mut self, raw: &[u8; REQUEST_LEN]) {
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
            _ if !self.start(h) => self.stalled = Some(h),
            _ => {}
        }
    }

    /// Starts request `h` (its header read): a WRITE's payload is read
    /// next into a buffer of its own, a READ goes to the engine with its
    /// buffer, the rest at once. False when the buffer memory is not
    /// there yet (nothing was consumed: call again later). A refused WRITE
    /// gets its error now and its payload is read and dropped.
    fn start(&mut self, h: RequestHeader) -> bool {
        match h.cmd {
            CMD_WRITE | CMD_READ if h.len > 0 => {
                if let Err((err, msg)) = self.check(&h) {
                    self.reply_error(h.handle, err, msg);
                    if h.cmd == CMD_WRITE {
                        self.skip = h.len as usize;
                    }
                    return true;
                }
                let Some(buf) = self.take_buf(h.len as usize) else { return false };
                if h.cmd == CMD_WRITE {
                    self.payload = Some((h, buf, 0));
                } else {
                    self.dispatch(h, Some(buf));
                }
                true
            }
            _ => {
                self.dispatch(h, None);
                true
            }
        }
    }

    fn check(&self, h: &RequestHeader) -> Result<(), (u32, &'static str)> {
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
            if end.is_none_or(|e| e > self.vol.capacity()) {
                let err = if matches!(h.cmd, CMD_WRITE | CMD_WRITE_ZEROES) { ENOSPC } else { EINVAL };
                return Err((err, "request goes past the end of the export"));
            }
            if h.len > MAX_PAYLOAD && matches!(h.cmd, CMD_READ) {
                return Err((EINVAL, "request larger than the maximum block size"));
            }
            let bs = self.vol.block_size() as u64;
            if h.cmd != CMD_TRIM && (!h.offset.is_multiple_of(bs) || !(h.len as u64).is_multiple_of(bs)) {
                return Err((EINVAL, "request not aligned to the minimum block size"));
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, h: RequestHeader, buf: Option<IoBuf>) {
        if let Err((err, msg)) = self.check(&h) {
            if let Some(b) = buf {
                self.give_buf(b);
            }
            self.reply_error(h.handle, err, msg);
            return;
        }
        let fua = h.flags & CMD_FLAG_FUA != 0;
        let (op, offset, len, buf) = match h.cmd {
            CMD_READ | CMD_WRITE if h.len == 0 => {
                if let Some(b) = buf {
                    self.give_buf(b);
                }
                self.reply_ok(h.handle, h.cmd, h.offset, None);
                return;
            }
            CMD_READ => (Op::Read, h.offset, h.len as usize, buf),
            CMD_WRITE => (Op::Write, h.offset, h.len as usize, buf),
            CMD_FLUSH => (Op::Flush, 0, 0, None),
            CMD_TRIM => {
                // Round inwards to whole blocks, as the spec allows for TRIM.
                let bs = self.vol.block_size() as u64;
                let start = h.offset.next_multiple_of(bs);
                let end = (h.offset + h.len as u64) / bs * bs;
                // TRIM is a hint the server may ignore (NBD spec): once a
                // member has refused a discard, the engine would write
                // zeros on it, so an fstrim would write all free space;
                // md turns discard off for such an array too.
                if end <= start || self.vol.members().iter().any(|m| m.no_fallocate()) {
                    self.reply_ok(h.handle, h.cmd, h.offset, None);
                    return;
                }
                (Op::Discard, start, (end - start) as usize, None)
            }
            CMD_WRITE_ZEROES if h.len == 0 => {
                self.reply_ok(h.handle, h.cmd, h.offset, None);
                return;
            }
            CMD_WRITE_ZEROES => {
                let op = Op::WriteZeroes { no_hole: h.flags & CMD_FLAG_NO_HOLE != 0 };
                (op, h.offset, h.len as usize, None)
            }
            _ => {
                self.reply_error(h.handle, EINVAL, "unknown command");
                return;
            }
        };
        let tag = self.free.pop().expect("room was checked before reading");
        self.slots[tag] = Some(Pending { handle: h.handle, cmd: h.cmd, offset: h.offset, len: h.len as usize });
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
            self.reply_error(h.handle, nbd_errno(r.error.errno()), "request refused by the engine");
        }
    }

    fn complete(&mut self, c: Completion) {
        let tag = c.tag as usize;
        let Some(p) = self.slots[tag] else { return };
        match c.result {
            Ok(_) if p.cmd == CMD_READ && c.buf.is_some() => {
                self.slots[tag] = None;
                self.free.push(tag);
                let buf = c.buf.expect("checked");
                let len = p.len.min(buf.len());
                self.reply_ok(p.handle, p.cmd, p.offset, Some((buf, len)));
                return;
            }
            Ok(_) => self.reply_ok(p.handle, p.cmd, p.offset, None),
            // TRIM is a hint: a member that cannot discard is not an error.
            Err(e) if p.cmd == CMD_TRIM && e.errno() == libc::EOPNOTSUPP => self.reply_ok(p.handle, p.cmd, p.offset, None),
            Err(e) => {
                let msg = e.to_string();
                self.reply_error(p.handle, nbd_errno(e.errno()), &msg);
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
    fn flush_replies(&mut self) {
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
            let mut failed = false;
            for chunk in iov.chunks_mut(1024) {
                if self.s.send_all(chunk).is_err() {
                    failed = true;
                    break;
                }
            }
            if failed {
                // The client went away: finish what is in flight, send nothing.
                self.broken = true;
                self.reading = false;
            }
        }
        let replies = std::mem::take(&mut self.replies);
        for r in replies {
            if let Some((b, _)) = r.data {
                self.give_buf(b);
            }
        }
    }

    fn reply_ok(&mut self, handle: u64, cmd: u16, offset: u64, data: Option<(IoBuf, usize)>) {
        let data = if cmd == CMD_READ { data } else {
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
        self.replies.push(Reply { hdr, hlen, data, extra: Vec::new() });
    }

    fn reply_error(&mut self, handle: u64, err: u32, msg: &str) {
        let mut hdr = [0u8; 28];
        if self.structured {
            let b = structured_error(handle, err, msg);
            hdr[..20].copy_from_slice(&b[..20]);
            self.replies.push(Reply { hdr, hlen: 20, data: None, extra: b[20..].to_vec() });
        } else {
            hdr[..16].copy_from_slice(&simple_reply(handle, err));
            self.replies.push(Reply { hdr, hlen: 16, data: None, extra: Vec::new() });
        }
    }
}
