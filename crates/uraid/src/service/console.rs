//! The web console of a served array (`uraid serve --console ADDR`): an
//! HTTP server (axum, on a thread of its own with a current-thread tokio
//! runtime) in the serving process, loopback only, that shows the array
//! live and acts on it through the same commands as the control socket
//! ([`ctl::run_job`](super::ctl::run_job)): it adds no second way to change
//! an array.
//!
//! Routes (every one needs the access token, as Jupyter does: open
//! `/?token=TOKEN` once and a cookie keeps it):
//! - `GET /`: the page (`crates/uraid/console/index.html`, `app.js`,
//!   `app.css`; uPlot vendored in `console/vendor/`, all compiled in);
//! - `GET /static/NAME`: those files;
//! - `GET /api/status`: what `uraid status --json NAME` prints, live;
//! - `GET /api/stream`: server-sent events: `status` once a second (the
//!   status, the background operation, the I/O figures of the last second
//!   for the charts) and `event` for each event of the array;
//! - `POST /api/command`: a control-protocol request
//!   (docs/control-protocol.md); it also needs the `X-Uraid-Token` header,
//!   which only the page served to an authenticated user knows, so another
//!   site cannot forge one through the browser's cookie.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};

use super::events::Events;
use super::figures::Window;
use super::proto::{Command, ErrorBody, Reply, Request, PROTOCOL_VERSION};
use super::{Job, Live};

const INDEX: &str = include_str!("../../console/index.html");
const APP_JS: &str = include_str!("../../console/app.js");
const APP_CSS: &str = include_str!("../../console/app.css");
const UPLOT_JS: &str = include_str!("../../console/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../console/vendor/uplot/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("../../console/vendor/uplot/LICENSE");

/// What the console reads and where its commands go.
pub(crate) struct Source {
    /// The array's name.
    pub array: String,
    /// The access token.
    pub token: String,
    /// The service's shared state.
    pub live: Arc<Live>,
    /// The manager's command queue.
    pub jobs: Mutex<Sender<Job>>,
    /// The array's events.
    pub events: Events,
    /// The exported volume's name and counters.
    pub exported: (String, Arc<Window>),
}

/// The console; it stops when the service does.
pub(crate) struct ConsoleServer {
    /// Where it listens.
    pub addr: SocketAddr,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ConsoleServer {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A new random access token: 32 hex digits from the kernel's random source.
pub(crate) fn new_token() -> Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b)).context("cannot read /dev/urandom for the console's token")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Listens on `addr` (loopback only: a console elsewhere needs TLS, which
/// is not there yet) and serves until `source.live` says stop.
///
/// Errors: an address that is not loopback, or that cannot be bound.
pub(crate) fn start(addr: &str, source: Source) -> Result<ConsoleServer> {
    let sa: SocketAddr = addr.parse().with_context(|| format!("--console '{addr}' is not an address like 127.0.0.1:8109"))?;
    if !sa.ip().is_loopback() {
        bail!(
            "--console {sa} is not a loopback address: the console changes the array, and without TLS its token and \
             pages would cross the network in clear. Listen on 127.0.0.1 and reach it through an SSH tunnel \
             (ssh -L 8109:127.0.0.1:8109 HOST)"
        );
    }
    let l = std::net::TcpListener::bind(sa).with_context(|| format!("cannot listen on {sa} for the console"))?;
    l.set_nonblocking(true)?;
    let addr = l.local_addr()?;
    let source = Arc::new(source);
    let thread = std::thread::Builder::new().name("uraid-console".into()).spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("uraid serve: the console cannot start: {e}");
                return;
            }
        };
        rt.block_on(async move {
            let Ok(l) = tokio::net::TcpListener::from_std(l) else { return };
            let live = source.live.clone();
            let app = axum::Router::new()
                .route("/", axum::routing::get(index))
                .route("/static/{file}", axum::routing::get(static_file))
                .route("/api/status", axum::routing::get(status))
                .route("/api/stream", axum::routing::get(stream))
                .route("/api/command", axum::routing::post(command))
                .with_state(source);
            let stop = async move {
                while !live.stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            };
            let _ = axum::serve(l, app).with_graceful_shutdown(stop).await;
        });
    })?;
    Ok(ConsoleServer { addr, thread: Some(thread) })
}

type S = State<Arc<Source>>;

/// Whether `given` is the token, in time independent of where it differs.
fn token_ok(src: &Source, given: &str) -> bool {
    let (a, b) = (src.token.as_bytes(), given.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token a request carries: the `uraid_token` cookie or an
/// `Authorization: Bearer` header.
fn carried(h: &HeaderMap) -> Option<String> {
    let bearer = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer ")).map(str::to_string);
    bearer.or_else(|| {
        h.get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|c| c.trim().strip_prefix("uraid_token=").map(str::to_string))
    })
}

fn authorized(src: &Source, h: &HeaderMap) -> bool {
    carried(h).is_some_and(|t| token_ok(src, &t))
}

fn refused() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        "<!doctype html><title>uraid console</title><p>This console needs its access token: open the address that \
         <code>uraid serve --console</code> printed (it ends in <code>?token=...</code>).</p>",
    )
        .into_response()
}

#[derive(serde::Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

async fn index(State(src): S, Query(q): Query<TokenQuery>, h: HeaderMap) -> Response {
    if let Some(t) = q.token {
        if !token_ok(&src, &t) {
            return refused();
        }
        // Keep it in a cookie and drop it from the address bar.
        let cookie = format!("uraid_token={t}; HttpOnly; SameSite=Strict; Path=/");
        return (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie), (header::LOCATION, "/".to_string())]).into_response();
    }
    if !authorized(&src, &h) {
        return refused();
    }
    let page = INDEX.replace("{{ARRAY}}", &html_escape(&src.array)).replace("{{TOKEN}}", &src.token);
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], page).into_response()
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

async fn static_file(State(src): S, axum::extract::Path(file): axum::extract::Path<String>, h: HeaderMap) -> Response {
    if !authorized(&src, &h) {
        return refused();
    }
    let (body, kind) = match file.as_str() {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "app.css" => (APP_CSS, "text/css; charset=utf-8"),
        "uPlot.iife.min.js" => (UPLOT_JS, "text/javascript; charset=utf-8"),
        "uPlot.min.css" => (UPLOT_CSS, "text/css; charset=utf-8"),
        "uPlot.LICENSE.txt" => (UPLOT_LICENSE, "text/plain; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// What `uraid status --json NAME` prints for a served array.
fn status_json(src: &Source, io_seconds: f64) -> serde_json::Value {
    let Some(st) = src.live.status() else { return serde_json::Value::Null };
    let mut out = serde_json::to_value(&st).unwrap_or_default();
    out["served_by"] = serde_json::json!({ "pid": std::process::id() });
    out["progress"] = serde_json::to_value(src.live.progress()).unwrap_or_default();
    out["io"] = serde_json::json!({ src.exported.0.as_str(): src.exported.1.figures(io_seconds) });
    out["mismatches"] = serde_json::to_value(src.live.mismatches()).unwrap_or_default();
    out["member_details"] = src.live.member_details();
    out["unix_ms"] = serde_json::json!(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0));
    out
}

async fn status(State(src): S, h: HeaderMap) -> Response {
    if !authorized(&src, &h) {
        return refused();
    }
    axum::Json(status_json(&src, super::figures::STATUS_SECONDS)).into_response()
}

async fn stream(State(src): S, h: HeaderMap) -> Response {
    if !authorized(&src, &h) {
        return refused();
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<std::result::Result<SseEvent, Infallible>>(64);
    let (recent, events) = src.events.subscribe();
    tokio::spawn(async move {
        for e in recent {
            if tx.send(Ok(SseEvent::default().event("event").json_data(e).unwrap_or_default())).await.is_err() {
                return;
            }
        }
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let mut n = 0u64;
        while !src.live.stop.load(Ordering::Relaxed) {
            tick.tick().await;
            while let Ok(e) = events.try_recv() {
                if tx.send(Ok(SseEvent::default().event("event").json_data(e).unwrap_or_default())).await.is_err() {
                    return;
                }
            }
            n += 1;
            if n % 4 == 1 {
                let st = status_json(&src, 1.0);
                if tx.send(Ok(SseEvent::default().event("status").json_data(st).unwrap_or_default())).await.is_err() {
                    return;
                }
            }
        }
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx)).keep_alive(KeepAlive::default()).into_response()
}

async fn command(State(src): S, h: HeaderMap, body: String) -> Response {
    if !authorized(&src, &h) {
        return refused();
    }
    // The page's own header: a request another site makes the browser
    // send carries the cookie but cannot know this.
    if !h.get("x-uraid-token").and_then(|v| v.to_str().ok()).is_some_and(|t| token_ok(&src, t)) {
        return (StatusCode::FORBIDDEN, axum::Json(Reply::failed(ErrorBody::new("Protocol", "the X-Uraid-Token header is missing or wrong")))).into_response();
    }
    let req: Request = match serde_json::from_str(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, axum::Json(Reply::failed(ErrorBody::new("Protocol", format!("not a valid request: {e}"))))).into_response(),
    };
    if req.version != PROTOCOL_VERSION {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(Reply::failed(ErrorBody::new("Protocol", format!("protocol version {} is not spoken here; this uraid speaks version {PROTOCOL_VERSION}", req.version)))),
        )
            .into_response();
    }
    let reply = match req.command {
        Command::Status | Command::Monitor => Reply::failed(ErrorBody::new("Protocol", "use GET /api/status or /api/stream")),
        Command::Stop => {
            src.live.stop.store(true, Ordering::Relaxed);
            src.live.interrupt.store(true, Ordering::Relaxed);
            Reply::done(serde_json::json!({"pid": std::process::id()}))
        }
        Command::TestMessage => {
            src.events.emit("TestMessage", None, "a test message from the web console");
            Reply::done(serde_json::json!({}))
        }
        cmd => {
            let src2 = src.clone();
            match tokio::task::spawn_blocking(move || super::ctl::run_job(&src2.jobs, &src2.live, cmd, &mut || Ok(()))).await {
                Ok(Ok(r)) => r,
                _ => Reply::failed(ErrorBody::new("Interrupted", "the command's worker failed")),
            }
        }
    };
    axum::Json(reply).into_response()
}
