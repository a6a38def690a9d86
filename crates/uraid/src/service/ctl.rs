//! The control socket of a served array, `RUN_DIR/NAME.ctl` (owner-only,
//! mode 0600; peers with another user id are refused too): one thread
//! accepts and reads the request lines of every connection
//! ([`proto`](super::proto); the whole line within [`REQUEST_TIMEOUT`]),
//! then one thread per request (at most [`MAX_CLIENTS`]) answers
//! `status`, `stop`, `monitor` and `test-message` itself and hands the
//! rest to the [`Manager`](super::Manager). A malformed, oversized,
//! unknown or slow request, or one that gives a key twice, gets an error
//! line and changes nothing.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::events::Events;
use super::proto::{Command, ErrorBody, Reply, Request, MAX_REQUEST_BYTES, PROTOCOL_VERSION};
use super::{Job, Live};

/// Control connections served at once; more are told so and closed.
pub(crate) const MAX_CLIENTS: usize = 16;

/// How long a client has to send its whole request line, from the
/// moment it connected (not per read: a byte every few seconds does not
/// keep a connection).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections still sending their request, at most; a new one then
/// drops the one that has been sending the longest.
const MAX_PENDING: usize = 64;

/// What the control socket answers `status` with besides the array's
/// status: the live figures of the exports (set by `serve`).
pub(crate) type Figures = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// The control socket of a served array; stops (and removes the socket)
/// when dropped.
pub(crate) struct CtlServer {
    path: PathBuf,
    live: Arc<Live>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CtlServer {
    /// Listens on `path` and serves until the service stops.
    ///
    /// Errors: the socket cannot be made (see
    /// [`bind_unix`](crate::sock::bind_unix): another server holds it, the
    /// directory is unsafe).
    pub(crate) fn start(path: &Path, live: Arc<Live>, jobs: Sender<Job>, events: Events, figures: Figures) -> Result<CtlServer> {
        let l = crate::sock::bind_unix(path, 0o600, None)?;
        l.set_nonblocking(true)?;
        let ctx = Arc::new(Ctx { live: live.clone(), jobs: Mutex::new(jobs), events, figures, clients: AtomicUsize::new(0) });
        let thread = std::thread::Builder::new().name("uraid-ctl".into()).spawn(move || accept_loop(l, ctx))?;
        Ok(CtlServer { path: path.to_path_buf(), live, thread: Some(thread) })
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        self.live.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop asleep in poll (it then sees the stop).
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

struct Ctx {
    live: Arc<Live>,
    jobs: Mutex<Sender<Job>>,
    events: Events,
    figures: Figures,
    clients: AtomicUsize,
}

/// A connection still sending its request line: read by the accepting
/// thread (no thread of its own), so that clients slow to send hold no
/// slot of [`MAX_CLIENTS`].
struct Pending {
    s: UnixStream,
    buf: Vec<u8>,
    /// When the whole request must have arrived: [`REQUEST_TIMEOUT`] after
    /// the connection was accepted, however the bytes trickle in.
    deadline: Instant,
}

/// The longest sleep of the idle accept loop (a look at the stop flag).
const IDLE_LOOK: Duration = Duration::from_secs(5);

fn accept_loop(l: UnixListener, ctx: Arc<Ctx>) {
    let mut pending: VecDeque<Pending> = VecDeque::new();
    while !ctx.live.stop.load(Ordering::Relaxed) {
        let mut fds: Vec<libc::pollfd> = std::iter::once(l.as_raw_fd())
            .chain(pending.iter().map(|p| p.s.as_raw_fd()))
            .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
            .collect();
        // Asleep until a client connects or sends, the first pending
        // request's deadline, or the stop (whose self-connect wakes it);
        // a look every 5 s besides.
        let now = Instant::now();
        let wait = pending.iter().map(|p| p.deadline.saturating_duration_since(now)).min().unwrap_or(IDLE_LOOK).min(IDLE_LOOK);
        // SAFETY: `fds` holds `fds.len()` initialised pollfd entries of
        // descriptors open for the call; poll writes only their revents.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait.as_millis() as i32 + 1) };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            std::thread::sleep(Duration::from_millis(50));
        }
        // The connections that sent something (from the last one, so that
        // the indices of the others stay valid while they are taken out).
        for i in (0..pending.len()).rev() {
            if fds[i + 1].revents == 0 {
                continue;
            }
            if let Some(done) = read_some(&mut pending[i]) {
                let p = pending.remove(i).expect("index in range");
                dispatch(p.s, done, &ctx);
            }
        }
        let now = Instant::now();
        while let Some(i) = pending.iter().position(|p| p.deadline <= now) {
            let p = pending.remove(i).expect("index in range");
            let msg = format!("no complete request line within {} s: send the whole request at once", REQUEST_TIMEOUT.as_secs());
            dispatch(p.s, Err(ErrorBody::new("Protocol", msg)), &ctx);
        }
        loop {
            match l.accept() {
                Ok((s, _)) => {
                    if s.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if !uraid_nbd::sock::peer_cred(s.as_raw_fd()).is_some_and(|c| crate::sock::trusted_uid(c.uid)) {
                        let e = ErrorBody::new("Protocol", "only the owner of the array's process (or root) may control it");
                        dispatch(s, Err(e), &ctx);
                        continue;
                    }
                    if pending.len() >= MAX_PENDING {
                        // The one that has had the longest to send its request.
                        let old = pending.pop_front().expect("full");
                        let msg = format!("{MAX_PENDING} control connections are sending their request; this one took too long");
                        dispatch(old.s, Err(ErrorBody::new("Busy", msg)), &ctx);
                    }
                    pending.push_back(Pending { s, buf: Vec::new(), deadline: Instant::now() + REQUEST_TIMEOUT });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    // Out of descriptors, most likely: the others go on.
                    std::thread::sleep(Duration::from_millis(50));
                    break;
                }
            }
        }
    }
}

/// Reads what `p`'s client has sent; the request (or why it cannot be
/// read) once it is complete (a line, or the client's end of it), `None`
/// while more is to come. At most [`MAX_REQUEST_BYTES`] are kept.
fn read_some(p: &mut Pending) -> Option<Result<Request, ErrorBody>> {
    let mut chunk = [0u8; 4096];
    loop {
        match (&p.s).read(&mut chunk) {
            Ok(0) if p.buf.is_empty() => return Some(Err(ErrorBody::new("Protocol", "no request: send one JSON object on one line"))),
            Ok(0) => return Some(parse_request(&p.buf)),
            Ok(k) => {
                let at = p.buf.len();
                p.buf.extend_from_slice(&chunk[..k]);
                if let Some(nl) = p.buf[at..].iter().position(|&b| b == b'\n') {
                    let end = at + nl + 1;
                    return Some(if end > MAX_REQUEST_BYTES { Err(too_long()) } else { parse_request(&p.buf[..end]) });
                }
                if p.buf.len() > MAX_REQUEST_BYTES {
                    return Some(Err(too_long()));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Some(Err(ErrorBody::new("Protocol", format!("cannot read the request: {e}")))),
        }
    }
}

fn too_long() -> ErrorBody {
    ErrorBody::new("Protocol", format!("the request is longer than {MAX_REQUEST_BYTES} bytes"))
}

/// Answers a connection whose request was read: an error line, "busy"
/// when [`MAX_CLIENTS`] are being served, else a thread of its own runs
/// the request.
fn dispatch(s: UnixStream, req: Result<Request, ErrorBody>, ctx: &Arc<Ctx>) {
    // A reply line fits in the socket's buffer; a client that reads
    // nothing cannot hold the accepting thread for longer than this.
    if s.set_nonblocking(false).is_err() || s.set_write_timeout(Some(Duration::from_secs(1))).is_err() {
        return;
    }
    let req = match req {
        Ok(r) => r,
        Err(e) => {
            let _ = send(&s, &Reply::failed(e));
            return;
        }
    };
    if ctx.clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
        ctx.clients.fetch_sub(1, Ordering::AcqRel);
        let _ = send(&s, &Reply::failed(ErrorBody::new("Busy", format!("{MAX_CLIENTS} control connections are open; try again"))));
        return;
    }
    let _ = s.set_write_timeout(None);
    let mine = ctx.clone();
    let spawned = std::thread::Builder::new().name("uraid-ctl-conn".into()).spawn(move || {
        let _ = serve_client(&s, req, &mine);
        mine.clients.fetch_sub(1, Ordering::AcqRel);
    });
    if spawned.is_err() {
        // The closure (and the count it would give back) is gone.
        ctx.clients.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Writes one reply line; a client that went away is an error.
fn send(mut s: &UnixStream, r: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    line.push(b'\n');
    s.write_all(&line)
}

/// Parses a request line. Errors: not JSON, a key given twice in an
/// object (serde_json would keep the last one silently), another
/// protocol version, or not a request of this version.
fn parse_request(line: &[u8]) -> Result<Request, ErrorBody> {
    // The version first, so that a client of another version is told that
    // rather than what this one does not know of its request.
    let v = match serde_json::from_slice::<Unique>(line) {
        Ok(Unique(v)) => v,
        Err(e) if e.is_data() => return Err(ErrorBody::new("Protocol", format!("not a valid request: {e}"))),
        Err(e) => {
            return Err(ErrorBody::new("Protocol", format!("the request is not JSON ({e}); send {{\"version\": 1, \"command\": \"status\"}}")))
        }
    };
    match v.get("version").and_then(|v| v.as_u64()) {
        Some(v) if v == PROTOCOL_VERSION as u64 => {}
        Some(v) => {
            return Err(ErrorBody::new("Protocol", format!("protocol version {v} is not spoken here; this uraid speaks version {PROTOCOL_VERSION}")))
        }
        None => return Err(ErrorBody::new("Protocol", format!("the request has no \"version\": give \"version\": {PROTOCOL_VERSION}"))),
    }
    serde_json::from_value(v).map_err(|e| ErrorBody::new("Protocol", format!("not a valid request: {e}; see docs/control-protocol.md")))
}

/// A JSON value whose objects were checked to give each key once.
struct Unique(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Unique, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<serde_json::Value, E> {
        Ok(b.into())
    }
    fn visit_i64<E>(self, n: i64) -> Result<serde_json::Value, E> {
        Ok(n.into())
    }
    fn visit_u64<E>(self, n: u64) -> Result<serde_json::Value, E> {
        Ok(n.into())
    }
    fn visit_f64<E>(self, n: f64) -> Result<serde_json::Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(serde_json::Value::Null, serde_json::Value::Number))
    }
    fn visit_str<E>(self, s: &str) -> Result<serde_json::Value, E> {
        Ok(s.into())
    }
    fn visit_string<E>(self, s: String) -> Result<serde_json::Value, E> {
        Ok(s.into())
    }
    fn visit_unit<E>(self) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_none<E>(self) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<serde_json::Value, D::Error> {
        serde::Deserialize::deserialize(d).map(|Unique(v)| v)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<serde_json::Value, A::Error> {
        let mut v = Vec::new();
        while let Some(Unique(x)) = a.next_element()? {
            v.push(x);
        }
        Ok(serde_json::Value::Array(v))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<serde_json::Value, A::Error> {
        let mut m = serde_json::Map::new();
        while let Some(k) = a.next_key::<String>()? {
            let Unique(v) = a.next_value()?;
            if m.contains_key(&k) {
                return Err(serde::de::Error::custom(format!("the key \"{k}\" is given twice; give each key once")));
            }
            m.insert(k, v);
        }
        Ok(serde_json::Value::Object(m))
    }
}

/// Runs request `req` of the client on `s` and writes its reply lines.
fn serve_client(s: &UnixStream, req: Request, ctx: &Ctx) -> std::io::Result<()> {
    match req.command {
        Command::Iostat => {
            let Some(st) = ctx.live.status_now() else {
                return send(s, &Reply::failed(ErrorBody::new("Busy", "the array is starting; try again")));
            };
            let seconds = ctx.live.started.elapsed().as_secs_f64();
            send(s, &Reply::done(serde_json::json!({"array": st.name, "seconds": seconds, "members": st.members})))
        }
        Command::Status => {
            let Some(st) = ctx.live.status_now() else {
                return send(s, &Reply::failed(ErrorBody::new("Busy", "the array is starting; try again")));
            };
            let v = serde_json::json!({
                "array": st,
                "pid": std::process::id(),
                "progress": ctx.live.progress(),
                "reshape": ctx.live.reshape(),
                "maintenance": ctx.live.maintenance(),
                "io": (ctx.figures)(),
                "exports": crate::ublk_export::annotate(ctx.live.exports()),
                "member_details": ctx.live.member_details(),
                "health": serde_json::to_value(&*ctx.live.health.lock().unwrap_or_else(|p| p.into_inner())).unwrap_or_default(),
            });
            send(s, &Reply::done(v))
        }
        Command::Stop => {
            // The answer first: once woken, the serve stops at once and
            // may close this connection before a later answer is sent
            // ("closed the control connection before answering 'stop'").
            let sent = send(s, &Reply::done(serde_json::json!({"pid": std::process::id()})));
            ctx.live.stop.store(true, Ordering::Relaxed);
            ctx.live.interrupt.store(true, Ordering::Relaxed);
            crate::service::wake::wake();
            sent
        }
        Command::TestMessage => {
            ctx.events.emit("TestMessage", None, "a test message from 'uraid monitor --test'");
            send(s, &Reply::done(serde_json::json!({})))
        }
        Command::Monitor => {
            let (recent, rx) = ctx.events.subscribe();
            for e in recent {
                send(s, &Reply::event(e))?;
            }
            loop {
                match rx.recv_timeout(Duration::from_secs(1)) {
                    Ok(e) => send(s, &Reply::event(e))?,
                    Err(RecvTimeoutError::Timeout) => {
                        if ctx.live.stop.load(Ordering::Relaxed) {
                            return send(s, &Reply::done(serde_json::json!({"stopped": true})));
                        }
                        // Find out whether the client is still there.
                        s.set_nonblocking(true)?;
                        let mut b = [0u8; 64];
                        let gone = matches!((&*s).read(&mut b), Ok(0));
                        s.set_nonblocking(false)?;
                        if gone {
                            return Ok(());
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => return Ok(()),
                }
            }
        }
        cmd => {
            let wants_progress = matches!(cmd, Command::Check { .. });
            let mut last = None;
            let r = run_job(&ctx.jobs, &ctx.live, cmd, &mut || {
                if wants_progress {
                    let p = ctx.live.progress();
                    if p.is_some() && p != last {
                        // A client that went away leaves the scrub running.
                        send(s, &Reply::progress(p.clone().expect("checked")))?;
                        last = p;
                    }
                }
                Ok(())
            })?;
            send(s, &r)
        }
    }
}

/// Hands `cmd` to the manager through `jobs` (pausing a rebuild or scrub
/// for it) and waits for its final reply, calling `tick` about twice a
/// second meanwhile (an error from `tick` ends the wait; the command goes
/// on). The one way every client (this socket, the web console) changes
/// the array.
pub(crate) fn run_job(
    jobs: &Mutex<Sender<Job>>,
    live: &Live,
    cmd: Command,
    tick: &mut dyn FnMut() -> std::io::Result<()>,
) -> std::io::Result<Reply> {
    let (tx, rx) = std::sync::mpsc::channel();
    let sent = jobs.lock().unwrap_or_else(|p| p.into_inner()).send(Job { cmd, reply: tx });
    if sent.is_err() {
        return Ok(Reply::failed(ErrorBody::new("Interrupted", "the array is stopping")));
    }
    live.interrupt.store(true, Ordering::Relaxed);
    loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(r) => return Ok(r),
            Err(RecvTimeoutError::Timeout) => tick()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Ok(Reply::failed(ErrorBody::new("Interrupted", "the array stopped before the command was done")))
            }
        }
    }
}
