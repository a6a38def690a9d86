//! The NBD server: listening, the fixed newstyle handshake and the
//! transmission phase.
//!
//! One thread per connection, each with its own engine [`Queue`](uraid_core::Queue) (its own
//! io_uring). The thread reads requests from the socket without blocking,
//! hands them to the queue, and writes each reply as its I/O completes, so
//! many requests are in flight and replies go out of order. The socket's
//! readiness is one more event on the same ring (a poll), so one wait
//! covers both the client and the drives.
//!
//! Flush semantics hold across connections (`NBD_FLAG_CAN_MULTI_CONN`): a
//! FLUSH on any connection syncs every member, which covers every write
//! any connection has completed.

use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use uraid_core::Volume;

use crate::proto::{
    option_reply, parse_option_header, FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES, IHAVEOPT, MAX_OPTION_LEN, MAX_PAYLOAD, NBDMAGIC,
    OPT_EXPORT_NAME, REP_ERR_POLICY,
};
use uraid_core::export::stats::{ExportStats, StatsSnapshot};
use crate::wire::{Sock, Wire};

mod handshake;
mod transmission;

pub use handshake::transmission_flags;
use handshake::{find, handshake, read_u32};
use transmission::Transmission;

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
/// while it serves (see [`Server::replace_volume`]); the block size stays
/// the first volume's, the capacity may only grow (new connections are
/// told the new one; a connection keeps the one it was told).
#[derive(Debug)]
struct Live {
    name: String,
    description: String,
    /// Bytes, as new connections are told.
    capacity: AtomicU64,
    block_size: u32,
    current: std::sync::Mutex<Arc<Volume>>,
    /// Bumped by every replacement and pause; connections compare it with
    /// theirs.
    generation: AtomicU64,
    /// Set by [`Server::pause`]: connections answer what they have in
    /// flight and read no more requests until [`Server::resume`].
    paused: std::sync::atomic::AtomicBool,
    /// Connections in transmission, and those of them parked by a pause
    /// (nothing in flight, reading nothing).
    active: AtomicUsize,
    parked: AtomicUsize,
    /// I/O statistics, of the export's name (they outlive replacements).
    stats: ExportStats,
}

impl Live {
    fn volume(&self) -> (Arc<Volume>, u64) {
        let v = self.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (v, self.generation.load(Ordering::Acquire))
    }

    /// See [`Server::replace_volume`].
    fn replace(&self, vol: Arc<Volume>) -> Result<(), String> {
        let told = self.capacity.load(Ordering::Acquire);
        let caps = vol.caps();
        if caps.capacity < told || caps.block_size != self.block_size {
            return Err(format!(
                "the new volume of export '{}' has {} bytes in blocks of {}, the clients were told {} in blocks of {}",
                self.name, caps.capacity, caps.block_size, told, self.block_size
            ));
        }
        let grown = caps.capacity;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = vol;
        self.capacity.store(grown, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// See [`Server::pause`] and [`Server::resume`].
    fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// See [`Server::is_quiet`].
    fn is_quiet(&self) -> bool {
        self.paused.load(Ordering::Acquire) && self.parked.load(Ordering::Acquire) == self.active.load(Ordering::Acquire)
    }
}

/// One export of a [`Server`] as the control path drives it (from
/// [`Server::handle`]); the same as the server's methods of that name.
#[derive(Debug, Clone)]
pub struct NbdExport {
    exports: Arc<Vec<Live>>,
    index: usize,
    address: String,
}

impl uraid_core::export::Export for NbdExport {
    fn kind(&self) -> &'static str {
        "nbd"
    }
    fn address(&self) -> String {
        self.address.clone()
    }
    fn volume(&self) -> Arc<Volume> {
        self.exports[self.index].volume().0
    }
    fn stats(&self) -> StatsSnapshot {
        self.exports[self.index].stats.snapshot()
    }
    fn replace_volume(&self, vol: Arc<Volume>) -> Result<(), String> {
        self.exports[self.index].replace(vol)
    }
    fn pause(&self) {
        self.exports[self.index].set_paused(true);
    }
    fn is_quiet(&self) -> bool {
        self.exports[self.index].is_quiet()
    }
    fn resume(&self) {
        self.exports[self.index].set_paused(false);
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
    pub tls: Option<Tls>,
    /// Connections served at once; the next one is answered with
    /// NBD_REP_ERR_POLICY ("too many connections") and closed.
    pub max_connections: usize,
    /// Time a client has for the whole handshake (from connecting to
    /// NBD_OPT_GO), TLS included.
    pub handshake_timeout: Duration,
    /// Longest a client may leave the server unable to send (its replies
    /// unread) before it is disconnected (the server says so on stderr).
    pub client_timeout: Duration,
    /// Longest a WRITE payload may stop arriving: once the client has
    /// sent no byte of a payload the server is reading (or of a refused
    /// one it is skipping) for this long, the connection is closed and
    /// its buffers freed, and the server says so on stderr. A payload
    /// that keeps moving, however slowly, is waited for.
    pub payload_timeout: Duration,
    /// Bytes of I/O buffers one connection may hold (READ data waiting to
    /// be sent, WRITE payloads, buffers kept for reuse); requests beyond it
    /// wait unread in the socket. At least [`MAX_PAYLOAD`] (32 MiB).
    pub conn_buffer_bytes: usize,
    /// Bytes of I/O buffers all connections together may hold: the
    /// server's buffer memory bound. Each connection in transmission is
    /// guaranteed a reserve of its own, (`buffer_bytes` -
    /// `conn_buffer_bytes`) / `max_connections` rounded down to a power
    /// of two, at most 1 MiB and at least 4 KiB ([`Server::reserve_bytes`]):
    /// a request that fits it is served whatever the other connections
    /// hold (a client whose WRITE payloads stall cannot starve the
    /// others). The rest, `buffer_bytes` - `max_connections` x reserve, is
    /// shared first come first served, each connection up to
    /// `conn_buffer_bytes`; when a connection waits for shared room, the
    /// others give back the buffers they keep for reuse beyond their
    /// reserve. Raised to at least `conn_buffer_bytes` + 4 KiB x
    /// `max_connections`.
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
            payload_timeout: Duration::from_secs(30),
            conn_buffer_bytes: 64 << 20,
            buffer_bytes: 512 << 20,
        }
    }
}

/// How the server speaks TLS after NBD_OPT_STARTTLS.
#[derive(Debug, Clone)]
pub enum Tls {
    /// Certificates (rustls): the server's own, and the client's when the
    /// configuration's verifier asks for one ([`crate::tls_config`] with a
    /// client CA): a client without a valid one fails the TLS handshake.
    Certificate(Arc<rustls::ServerConfig>),
    /// Pre-shared keys (OpenSSL, [`crate::psk`]): a client names a user
    /// and proves it holds that user's key, or fails the TLS handshake.
    Psk(Arc<crate::psk::PskConfig>),
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
    /// The I/O buffer memory the connections share.
    buffers: Arc<Buffers>,
}

/// The I/O buffer memory every connection draws from
/// ([`ServerOptions::buffer_bytes`]): a reserve per connection, the rest
/// shared.
#[derive(Debug)]
struct Buffers {
    /// Bytes every connection holds together.
    held: AtomicUsize,
    /// Bytes the connections hold beyond their reserves, and the most
    /// they may together.
    shared: AtomicUsize,
    shared_limit: usize,
    /// Bytes each connection may hold whatever the others hold.
    reserve: usize,
    /// Bumped whenever a connection waits for shared room: connections
    /// then give back the buffers they keep for reuse beyond their
    /// reserve.
    pressure: AtomicU64,
}

impl Buffers {
    /// The pool for `opts` (already normalized: `buffer_bytes` at least
    /// `conn_buffer_bytes` + [`MIN_RESERVE`] x `max_connections`).
    fn new(opts: &ServerOptions) -> Buffers {
        let each = (opts.buffer_bytes - opts.conn_buffer_bytes) / opts.max_connections;
        let reserve = each.clamp(MIN_RESERVE, MAX_RESERVE);
        // A power of two: buffers are, so a request that fits it is served.
        let reserve = 1usize << (usize::BITS - 1 - reserve.leading_zeros());
        Buffers {
            held: AtomicUsize::new(0),
            shared: AtomicUsize::new(0),
            shared_limit: opts.buffer_bytes.saturating_sub(reserve.saturating_mul(opts.max_connections)),
            reserve,
            pressure: AtomicU64::new(0),
        }
    }

    /// Bytes of a connection's `held` bytes beyond its reserve.
    fn over(&self, held: usize) -> usize {
        held.saturating_sub(self.reserve)
    }

    /// Counts `len` more bytes for a connection that holds `held`: false
    /// (nothing counted) when the shared part has no room for them.
    fn take(&self, held: usize, len: usize) -> bool {
        let more = self.over(held + len) - self.over(held);
        let limit = self.shared_limit;
        if more > 0 && self.shared.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |g| (g + more <= limit).then_some(g + more)).is_err() {
            return false;
        }
        self.held.fetch_add(len, Ordering::Relaxed);
        true
    }

    /// Gives back `len` of the `held` bytes of a connection.
    fn give(&self, held: usize, len: usize) {
        self.shared.fetch_sub(self.over(held) - self.over(held - len), Ordering::Relaxed);
        self.held.fetch_sub(len, Ordering::Relaxed);
    }
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
/// Bounds of the buffer memory reserved for each connection, bytes (see
/// [`ServerOptions::buffer_bytes`]).
const MIN_RESERVE: usize = 4 << 10;
const MAX_RESERVE: usize = 1 << 20;

impl Server {
    /// A server for `exports` (the first one is the default export, used
    /// when a client asks for the empty name).
    pub fn new(exports: Vec<Export>, mut opts: ServerOptions) -> Server {
        let exports = exports
            .into_iter()
            .map(|e| (e.volume.caps(), e))
            .map(|(caps, e)| Live {
                capacity: AtomicU64::new(caps.capacity),
                block_size: caps.block_size,
                name: e.name,
                description: e.description,
                current: std::sync::Mutex::new(e.volume),
                generation: AtomicU64::new(0),
                paused: std::sync::atomic::AtomicBool::new(false),
                active: AtomicUsize::new(0),
                parked: AtomicUsize::new(0),
                stats: ExportStats::default(),
            })
            .collect();
        opts.conn_buffer_bytes = opts.conn_buffer_bytes.max(MAX_PAYLOAD as usize);
        opts.max_connections = opts.max_connections.max(1);
        let floor = opts.max_connections.saturating_mul(MIN_RESERVE).saturating_add(opts.conn_buffer_bytes);
        opts.buffer_bytes = opts.buffer_bytes.max(floor);
        let buffers = Arc::new(Buffers::new(&opts));
        Server {
            exports: Arc::new(exports),
            opts,
            shutdown: Arc::new(AtomicBool::new(false)),
            connections: Arc::new(AtomicUsize::new(0)),
            buffers,
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
        self.buffers.held.load(Ordering::Relaxed)
    }

    /// Bytes of I/O buffers each connection is guaranteed, whatever the
    /// others hold (see [`ServerOptions::buffer_bytes`]): 1 MiB with the
    /// defaults.
    pub fn reserve_bytes(&self) -> usize {
        self.buffers.reserve
    }

    /// The volume export `name` serves now (`""`: the default export).
    pub fn volume(&self, name: &str) -> Option<Arc<Volume>> {
        find(&self.exports, name).map(|e| e.volume().0)
    }

    /// Export `name` (`""`: the default export) as the control path drives
    /// it ([`uraid_core::export::Export`]), told where clients find it
    /// (`address`, e.g. the server's URI). None when there is no such
    /// export.
    pub fn handle(&self, name: &str, address: &str) -> Option<NbdExport> {
        let wanted = find(&self.exports, name)?;
        let index = self.exports.iter().position(|e| std::ptr::eq(e, wanted))?;
        Some(NbdExport { exports: self.exports.clone(), index, address: address.to_string() })
    }

    /// I/O statistics of export `name` (`""`: the default export) since
    /// the server started, over every connection and every volume it has
    /// served; None when there is no such export. Take two and
    /// [`delta`](StatsSnapshot::delta) them for rates.
    pub fn stats(&self, name: &str) -> Option<StatsSnapshot> {
        find(&self.exports, name).map(|e| e.stats.snapshot())
    }

    /// Makes export `name` serve `vol` from now on: each connection
    /// answers the requests it has in flight on the old volume, then moves
    /// to the new one before it reads another request (so no request runs
    /// on the old volume once every connection has moved: the caller can
    /// tell by the old volume's `Arc` count). Used when a spare takes over
    /// a member's role while the array is exported, and when a reshape
    /// grew the volume: connections made from then on are told its new
    /// capacity, those made before keep the one they were told.
    ///
    /// Errors: no such export, or `vol` is smaller or has another block
    /// size (clients were told those at the handshake).
    pub fn replace_volume(&self, name: &str, vol: Arc<Volume>) -> Result<(), String> {
        find(&self.exports, name).ok_or_else(|| format!("no export named '{name}'"))?.replace(vol)
    }

    /// Quiesces export `name`: every connection answers the requests it
    /// has in flight and reads no more until [`resume`](Self::resume)
    /// (clients wait; nothing is refused). Returns at once. Used
    /// to swap a volume whose cache must be drained first (a cache mode
    /// change of a served array): pause, wait for
    /// [`is_quiet`](Self::is_quiet), drain, [`replace_volume`](Self::replace_volume),
    /// resume. Errors: no such export.
    pub fn pause(&self, name: &str) -> Result<(), String> {
        find(&self.exports, name).ok_or_else(|| format!("no export named '{name}'"))?.set_paused(true);
        Ok(())
    }

    /// Whether paused export `name` is quiet: every connection has
    /// answered what it had in flight and reads nothing (so nothing uses
    /// its volume until [`resume`](Self::resume)). False for an export
    /// that is not paused or does not exist.
    pub fn is_quiet(&self, name: &str) -> bool {
        find(&self.exports, name).is_some_and(Live::is_quiet)
    }

    /// Ends a [`pause`](Self::pause): connections move to the export's
    /// current volume and read requests again. Errors: no such export.
    pub fn resume(&self, name: &str) -> Result<(), String> {
        find(&self.exports, name).ok_or_else(|| format!("no export named '{name}'"))?.set_paused(false);
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
            // Asleep until a client connects or a second passes (a
            // shutdown of the listener by the stopper wakes it too).
            unsafe { libc::poll(&mut pfd, 1, 1000) };
            if self.shutdown.load(Ordering::Relaxed) {
                break;
            }
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

/// One connection, from the greeting to the last reply. Every way it can
/// end (the client leaves, a protocol error, a limit, a stop) just ends it.
fn connection(sock: Sock, exports: &[Live], opts: ServerOptions, shutdown: &AtomicBool, buffers: &Arc<Buffers>) {
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
