//! The control socket of a served array, `RUN_DIR/NAME.ctl` (owner-only,
//! mode 0600; peers with another user id are refused too): one thread
//! accepts, one thread per connection (at most [`MAX_CLIENTS`]) reads a
//! request line ([`proto`](super::proto)), answers `status`, `stop`,
//! `monitor` and `test-message` itself and hands the rest to the
//! [`Manager`](super::Manager). A malformed, oversized, unknown or slow
//! request gets an error line and changes nothing.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;

use super::events::Events;
use super::proto::{Command, ErrorBody, Reply, Request, MAX_REQUEST_BYTES, PROTOCOL_VERSION};
use super::{Job, Live};

/// Control connections served at once; more are told so and closed.
pub(crate) const MAX_CLIENTS: usize = 16;

/// Seconds a client has to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

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

fn accept_loop(l: UnixListener, ctx: Arc<Ctx>) {
    while !ctx.live.stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                if ctx.clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
                    ctx.clients.fetch_sub(1, Ordering::AcqRel);
                    let _ = send(&s, &Reply::failed(ErrorBody::new("Busy", format!("{MAX_CLIENTS} control connections are open; try again"))));
                    continue;
                }
                let mine = ctx.clone();
                let spawned = std::thread::Builder::new().name("uraid-ctl-conn".into()).spawn(move || {
                    let _ = serve_client(&s, &mine);
                    mine.clients.fetch_sub(1, Ordering::AcqRel);
                });
                if spawned.is_err() {
                    // The closure (and the count it would give back) is gone.
                    ctx.clients.fetch_sub(1, Ordering::AcqRel);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Writes one reply line; a client that went away is an error.
fn send(mut s: &UnixStream, r: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    line.push(b'\n');
    s.write_all(&line)
}

/// The user id of the peer of `s` (SO_PEERCRED).
fn peer_uid(s: &UnixStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed ucred is a valid value; getsockopt writes at most
    // `len` bytes into it and the descriptor is open for the call.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        let r = libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred as *mut _ as *mut libc::c_void, &mut len);
        (r == 0).then_some(cred.uid)
    }
}

/// Reads the request line: at most [`MAX_REQUEST_BYTES`], within
/// [`REQUEST_TIMEOUT`].
fn read_request(s: &UnixStream) -> Result<Request, ErrorBody> {
    s.set_read_timeout(Some(REQUEST_TIMEOUT)).map_err(|e| ErrorBody::new("Protocol", e.to_string()))?;
    let mut line = Vec::new();
    let mut r = BufReader::new(s).take(MAX_REQUEST_BYTES as u64 + 1);
    match r.read_until(b'\n', &mut line) {
        Ok(_) if line.len() > MAX_REQUEST_BYTES => {
            return Err(ErrorBody::new("Protocol", format!("the request is longer than {MAX_REQUEST_BYTES} bytes")))
        }
        Ok(0) => return Err(ErrorBody::new("Protocol", "no request: send one JSON object on one line")),
        Ok(_) => {}
        Err(e) => return Err(ErrorBody::new("Protocol", format!("no complete request line within {} s: {e}", REQUEST_TIMEOUT.as_secs()))),
    }
    // The version first, so that a client of another version is told that
    // rather than what this one does not know of its request.
    let v: serde_json::Value = serde_json::from_slice(&line)
        .map_err(|e| ErrorBody::new("Protocol", format!("the request is not JSON ({e}); send {{\"version\": 1, \"command\": \"status\"}}")))?;
    match v.get("version").and_then(|v| v.as_u64()) {
        Some(v) if v == PROTOCOL_VERSION as u64 => {}
        Some(v) => {
            return Err(ErrorBody::new("Protocol", format!("protocol version {v} is not spoken here; this uraid speaks version {PROTOCOL_VERSION}")))
        }
        None => return Err(ErrorBody::new("Protocol", format!("the request has no \"version\": give \"version\": {PROTOCOL_VERSION}"))),
    }
    serde_json::from_value(v).map_err(|e| ErrorBody::new("Protocol", format!("not a valid request: {e}; see docs/control-protocol.md")))
}

fn serve_client(s: &UnixStream, ctx: &Ctx) -> std::io::Result<()> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match peer_uid(s) {
        Some(uid) if uid == me || uid == 0 => {}
        _ => return send(s, &Reply::failed(ErrorBody::new("Protocol", "only the owner of the array's process may control it"))),
    }
    let req = match read_request(s) {
        Ok(r) => r,
        Err(e) => return send(s, &Reply::failed(e)),
    };
    s.set_read_timeout(None)?;
    match req.command {
        Command::Status => {
            let Some(st) = ctx.live.status() else {
                return send(s, &Reply::failed(ErrorBody::new("Busy", "the array is starting; try again")));
            };
            let v = serde_json::json!({
                "array": st,
                "pid": std::process::id(),
                "progress": ctx.live.progress(),
                "reshape": ctx.live.reshape(),
                "maintenance": ctx.live.maintenance(),
                "io": (ctx.figures)(),
                "member_details": ctx.live.member_details(),
            });
            send(s, &Reply::done(v))
        }
        Command::Stop => {
            ctx.live.stop.store(true, Ordering::Relaxed);
            ctx.live.interrupt.store(true, Ordering::Relaxed);
            send(s, &Reply::done(serde_json::json!({"pid": std::process::id()})))
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
