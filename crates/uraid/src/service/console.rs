//! The web console of a served array (`uraid serve --console ADDR`): an
//! HTTP server (axum, on a thread of its own with a current-thread tokio
//! runtime) in the serving process that shows the array live and acts on
//! it through the same commands as the control socket
//! ([`ctl::run_job`](super::ctl::run_job)): it adds no second way to change
//! an array. It listens on loopback by default; any other address needs
//! TLS (the export's `--tls-cert`/`--tls-key`), and with TLS it speaks
//! HTTPS only, on any address.
//!
//! Routes (every one but the login page and the stylesheet needs the
//! access token, as Jupyter does: open `/?token=TOKEN` once, or type the
//! token into the login page, and a cookie keeps it). The token is 128
//! random bits that `serve` writes to `RUN_DIR/NAME.console-token` (mode
//! 0600; [`token_path`]) and never prints, or a configured one of at least
//! [`MIN_TOKEN_CHARS`] characters. Every request that carries a token (the
//! cookie, `Authorization: Bearer`, `?token=`, the login form,
//! `X-Uraid-Token`) goes through one limit, [`Guesses`]: a wrong one is
//! answered after [`LOGIN_DELAY`], and at most [`GUESS_BURST`] plus
//! [`GUESS_RATE`] a second are compared at all; past that, every request
//! that carries a token, right or wrong, is answered 429 before any
//! comparison, so a 429 says nothing about the token:
//! - `GET /`: the page (`crates/uraid/console/index.html`, `app.js`,
//!   `app.css`; uPlot vendored in `console/vendor/`, all compiled in), or
//!   the login page (`console/login.html`) without the token;
//! - `POST /login` (form field `token`), `POST /logout`: set or clear the
//!   cookie;
//! - `GET /static/NAME`: those files;
//! - `GET /api/status`: what `uraid status --json NAME` prints, live;
//! - `GET /api/history?seconds=N`: the exported volume's I/O of the last
//!   N seconds (at most [`HISTORY_SECONDS`](super::figures::HISTORY_SECONDS), an
//!   hour; default 300), a point a second, as columns for the charts
//!   ([`history`]);
//! - `GET /api/stream`: server-sent events: `status` once a second (the
//!   status, the background operation, the I/O figures of the last second
//!   for the charts) and `event` for each event of the array;
//! - `GET /api/reports`, `GET /reports/DIR/FILE`: the benchmark reports
//!   kept (`uraid suite --out` directories under `--reports`);
//! - `GET|POST /api/bench`: a benchmark (`uraid suite`) on a target that
//!   holds no live data (`mem:`, a free block device, a file under
//!   `--console-files-dir`), or of the served array (read-only unless it is
//!   empty and the request confirms), its progress, its report
//!   (these two: `console_bench`);
//! - `POST /api/create`: a new array from free drives, checked (and with
//!   `confirm` created) as `uraid create` does (`console_create`);
//! - `POST /api/command`: a control-protocol request
//!   (docs/control-protocol.md); a device it names (add, replace, grow)
//!   must be free, as a benchmark's target; it also needs the `X-Uraid-Token` header,
//!   which only the page served to an authenticated user knows, so another
//!   site cannot forge one through the browser's cookie.
//!
//! The API in full, with its JSON and units: docs/console-api.md.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};

use super::events::Events;
use super::figures::Window;
use super::proto::{Command, ErrorBody, Reply, Request, PROTOCOL_VERSION};
use super::console_bench::{bench_start, bench_state, report_file, reports, BenchRun};
use super::{Job, Live};

const INDEX: &str = include_str!("../../console/index.html");
const LOGIN: &str = include_str!("../../console/login.html");
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
    /// Where benchmark reports are kept (`uraid suite --out` directories).
    pub reports: std::path::PathBuf,
    /// The benchmark started from the console, if any.
    pub bench: Mutex<Option<BenchRun>>,
    /// The certificate and key when the console speaks HTTPS (the
    /// export's; its cookie is then `Secure`); `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The limit on wrong tokens, shared by every route.
    pub guesses: Guesses,
    /// The one directory whose regular files the console may write
    /// (benchmark targets, spares): `--console-files-dir`; `None`: no
    /// file, block devices only.
    pub files_dir: Option<std::path::PathBuf>,
    /// The export's NBD URI: what a benchmark of the served array runs on.
    pub export_uri: String,
    /// Who each device seen as a member is ([`member_identity`]), kept so
    /// that a failed member keeps its identity on the page until removed.
    pub known: Mutex<std::collections::BTreeMap<String, serde_json::Value>>,
}

/// The most devices [`Source::known`] holds (past it, it starts again).
const KNOWN_MAX: usize = 1024;

/// Who each device of `st`'s members is, by device: its entry of the
/// members' details (`details`, what `uraid status` shows: model, size,
/// what it sits on, [`Identity`](uraid_core::io::identity::Identity)),
/// remembered from when it was a working member; for a device never seen
/// there, its identity read from sysfs now. A failed member thus keeps
/// showing who it is (model, serial, by-id name) until it is removed.
fn member_identity(src: &Source, st: &uraid_core::control::array::ArrayStatus, details: &serde_json::Value) -> serde_json::Value {
    let mut known = src.known.lock().unwrap_or_else(|p| p.into_inner());
    if known.len() > KNOWN_MAX {
        known.clear();
    }
    for m in details["members"].as_array().into_iter().flatten() {
        if let Some(name) = m["name"].as_str() {
            if known.get(name) != Some(m) {
                known.insert(name.to_string(), m.clone());
            }
        }
    }
    let mut out = serde_json::Map::new();
    for d in st.members.iter().filter_map(|m| m.device.as_deref()) {
        let v = known.entry(d.to_string()).or_insert_with(|| {
            let p = std::path::Path::new(d);
            let id = uraid_core::io::identity::identity_of_path(p);
            // A loop device: the file behind it.
            let backing = std::fs::canonicalize(p)
                .ok()
                .and_then(|r| r.file_name().map(|n| n.to_string_lossy().into_owned()))
                .and_then(|n| uraid_core::io::identity::read_trim(format!("/sys/block/{n}/loop/backing_file")));
            serde_json::json!({ "name": d, "identity": id, "sits_on": backing.map(|b| vec![format!("file {b}")]).unwrap_or_default() })
        });
        out.insert(d.to_string(), v.clone());
    }
    serde_json::Value::Object(out)
}

/// How long the answer to a wrong token takes.
pub(crate) const LOGIN_DELAY: Duration = Duration::from_secs(1);
/// How many wrong tokens may be compared in a burst.
pub(crate) const GUESS_BURST: f64 = 3.0;
/// How many wrong tokens may be compared a second, past the burst.
pub(crate) const GUESS_RATE: f64 = 1.0;
/// The shortest access token accepted, characters: 22 base64 characters
/// hold 128 bits (`openssl rand -hex 16` makes 32 hex digits).
pub(crate) const MIN_TOKEN_CHARS: usize = 22;

/// The limit on wrong tokens of one console, shared by all its routes: a
/// token bucket of [`GUESS_BURST`] comparisons, refilled at [`GUESS_RATE`]
/// a second. A request that carries a token takes one before its token is
/// compared (none left: 429) and gives it back unless the token was wrong,
/// so that requests at once cannot compare more than the bucket holds.
pub(crate) struct Guesses(Mutex<(f64, Instant)>);

impl Guesses {
    /// A full bucket.
    pub(crate) fn new() -> Guesses {
        Guesses(Mutex::new((GUESS_BURST, Instant::now())))
    }

    /// Takes one comparison; false when none is left.
    fn take(&self) -> bool {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        g.0 = (g.0 + now.duration_since(g.1).as_secs_f64() * GUESS_RATE).min(GUESS_BURST);
        g.1 = now;
        if g.0 < 1.0 {
            return false;
        }
        g.0 -= 1.0;
        true
    }

    /// Gives back a comparison taken for a request with no wrong token.
    fn give_back(&self) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.0 = (g.0 + 1.0).min(GUESS_BURST);
    }
}

tokio::task_local! {
    /// Set when the request being handled carried a wrong token.
    static WRONG: std::cell::Cell<bool>;
}

/// Where `serve` writes the token it made for array `array`:
/// `RUN_DIR/ARRAY.console-token` (`$URAID_RUN_DIR`, else `/run/uraid`).
pub(crate) fn token_path(array: &str) -> std::path::PathBuf {
    crate::runstate::run_dir().join(format!("{array}.console-token"))
}

/// Writes `token` and a newline to `path`, readable by its owner only
/// (mode 0600), replacing the file there; a symbolic link there is never
/// followed (the file is created anew, `O_EXCL`).
///
/// Errors: the directory cannot be written, or something recreated the
/// file meanwhile.
pub(crate) fn write_token(path: &std::path::Path, token: &str) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e).with_context(|| format!("cannot replace {}", path.display())),
        _ => {}
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("cannot write the console's token to {}", path.display()))?;
    writeln!(f, "{token}").with_context(|| format!("cannot write the console's token to {}", path.display()))
}

/// Checks a configured access token: at least [`MIN_TOKEN_CHARS`]
/// characters, at least 8 different ones, and only characters that go in a
/// cookie and a header unchanged (letters, digits, `-._~+/=`).
///
/// Errors: a token that fails one of these, saying what to do.
pub(crate) fn check_token(t: &str) -> Result<()> {
    let fix = format!(
        "give a random one of at least {MIN_TOKEN_CHARS} characters (`openssl rand -hex 16` makes one), or give none: \
         serve then makes a random one and writes it to {} (readable by root only)",
        token_path("NAME").display()
    );
    if let Some(c) = t.chars().find(|c| !c.is_ascii_alphanumeric() && !"-._~+/=".contains(*c)) {
        bail!("the console token holds {c:?}, which a cookie or a header cannot carry unchanged: use letters, digits and -._~+/= only; {fix}");
    }
    let distinct = t.bytes().collect::<std::collections::BTreeSet<u8>>().len();
    if t.len() < MIN_TOKEN_CHARS || distinct < 8 {
        bail!(
            "the console token is too easy to guess ({} characters, {distinct} different): the console changes the array, and \
             its token is all that guards it; {fix}",
            t.len()
        );
    }
    Ok(())
}

/// A new random access token: 32 hex digits (128 bits) from the kernel's random source.
pub(crate) fn new_token() -> Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b)).context("cannot read /dev/urandom for the console's token")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Listens on `addr` and serves until `source.live` says stop: HTTPS with
/// `source.tls`, plain HTTP on loopback without.
///
/// Errors: an address that is not loopback without TLS (the token and the
/// pages would cross the network in clear), or that cannot be bound.
pub(crate) fn start(addr: &str, source: Source) -> Result<super::http::HttpServer> {
    let sa = parse_addr(addr, source.tls.is_some())?;
    let tls = source.tls.as_ref().map(|cfg| {
        // The same certificate as the export, without the export's client
        // certificates (a browser logs in with the token) and with HTTP's ALPN.
        let mut c = (**cfg).clone();
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(c)
    });
    let live = source.live.clone();
    let src = Arc::new(source);
    let app = axum::Router::new()
        .route("/", axum::routing::get(index))
        .route("/login", axum::routing::post(login))
        .route("/logout", axum::routing::post(logout))
        .route("/static/{file}", axum::routing::get(static_file))
        // The reports' pages ask for one: nothing, without an error.
        .route("/favicon.ico", axum::routing::get(|| async { StatusCode::NO_CONTENT }))
        .route("/api/status", axum::routing::get(status))
        .route("/api/stream", axum::routing::get(stream))
        .route("/api/history", axum::routing::get(history))
        .route("/api/command", axum::routing::post(command))
        .route("/api/drives", axum::routing::get(drives))
        .route("/api/create", axum::routing::post(super::console_create::create))
        .route("/api/bench", axum::routing::get(bench_state).post(bench_start))
        .route("/api/reports", axum::routing::get(reports))
        .route("/reports/{dir}/{file}", axum::routing::get(report_file))
        .with_state(src.clone());
    let app = app.layer(axum::middleware::from_fn_with_state(src, limit_guesses));
    super::http::serve("the console", sa, app, live, tls)
}

/// The console's address, checked: `HOST:PORT`, loopback unless `tls`.
///
/// Errors: not an address, or not loopback without TLS (the message says
/// what to do).
pub(crate) fn parse_addr(addr: &str, tls: bool) -> Result<SocketAddr> {
    let sa: SocketAddr = addr.parse().with_context(|| format!("--console '{addr}' is not an address like 127.0.0.1:8109"))?;
    if !sa.ip().is_loopback() && !tls {
        bail!(
            "--console {sa} is not a loopback address: the console changes the array, and without TLS its token and \
             pages would cross the network in clear. Give --tls-cert and --tls-key (the console then speaks HTTPS with \
             the export's certificate), or listen on 127.0.0.1 and reach it through an SSH tunnel \
             (ssh -L 8109:127.0.0.1:8109 HOST)"
        );
    }
    Ok(sa)
}

pub(super) type S = State<Arc<Source>>;

/// Whether `given` is the token, in time that depends on the length of
/// `given` alone (not on where it differs). A wrong one is noted for
/// [`limit_guesses`].
pub(super) fn token_ok(src: &Source, given: &str) -> bool {
    let (secret, b) = (src.token.as_bytes(), given.as_bytes());
    let mut diff = u8::from(secret.len() != b.len() || secret.is_empty());
    for (i, y) in b.iter().enumerate() {
        diff |= y ^ secret.get(i % secret.len().max(1)).copied().unwrap_or(0);
    }
    let ok = std::hint::black_box(diff) == 0;
    if !ok {
        let _ = WRONG.try_with(|w| w.set(true));
    }
    ok
}

/// Whether a request carries something a route compares with the token.
fn carries_token(req: &axum::extract::Request) -> bool {
    let h = req.headers();
    let cookie = h.get_all(header::COOKIE).iter().any(|v| v.as_bytes().windows(12).any(|w| w == b"uraid_token="));
    cookie
        || h.contains_key(header::AUTHORIZATION)
        || h.contains_key("x-uraid-token")
        || req.uri().query().is_some_and(|q| q.contains("token"))
        || req.method() == axum::http::Method::POST
}

/// The one limit on token guesses, around every route: a request that
/// carries a token takes a comparison from [`Guesses`] first (none left:
/// 429 at once, whatever the token, so a 429 says nothing about it); if
/// the route found a token wrong, the answer waits [`LOGIN_DELAY`] and the
/// comparison stays taken, else it is given back.
async fn limit_guesses(State(src): S, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if !carries_token(&req) {
        return next.run(req).await;
    }
    let page = matches!(req.uri().path(), "/" | "/login");
    if !src.guesses.take() {
        let msg = "Too many wrong tokens were tried: tokens are not compared for a moment. Wait a second and try again.";
        let mut r = if page { login_page(&src, StatusCode::TOO_MANY_REQUESTS, msg) } else { (StatusCode::TOO_MANY_REQUESTS, format!("{msg}\n")).into_response() };
        r.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        return r;
    }
    let (wrong, r) = WRONG
        .scope(std::cell::Cell::new(false), async {
            let r = next.run(req).await;
            (WRONG.with(|w| w.get()), r)
        })
        .await;
    if wrong {
        tokio::time::sleep(LOGIN_DELAY).await;
    } else {
        src.guesses.give_back();
    }
    r
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

pub(super) fn authorized(src: &Source, h: &HeaderMap) -> bool {
    carried(h).is_some_and(|t| token_ok(src, &t))
}

pub(super) fn refused() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        "<!doctype html><title>uraid console</title><p>This console needs its access token: log in at \
         <a href=\"/\">the console's first page</a> (<code>uraid serve --console</code> writes it to \
         <code>RUN_DIR/NAME.console-token</code>, readable by root only), or send it as <code>Authorization: Bearer</code>.</p>",
    )
        .into_response()
}

/// The login page, with `message` (an error, or nothing).
fn login_page(src: &Source, status: StatusCode, message: &str) -> Response {
    let page = LOGIN
        .replace("{{ARRAY}}", &html_escape(&src.array))
        .replace("{{TOKEN_FILE}}", &html_escape(&token_path(&src.array).display().to_string()))
        .replace("{{MESSAGE}}", &html_escape(message));
    (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], page).into_response()
}

/// A wrong token (its delay and limit are [`limit_guesses`]'s): the
/// login page, saying where the token is.
async fn wrong_token(src: &Source) -> Response {
    let msg = format!(
        "That is not the access token of this console. uraid serve --console writes it to {} (readable by root only), \
         or the config sets it as console-token.",
        token_path(&src.array).display()
    );
    login_page(src, StatusCode::UNAUTHORIZED, &msg)
}

/// Keeps the token in a cookie and goes to the console's page.
fn logged_in(src: &Source, t: &str) -> Response {
    let secure = if src.tls.is_some() { "; Secure" } else { "" };
    let cookie = format!("uraid_token={t}; HttpOnly; SameSite=Strict; Path=/{secure}");
    (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie), (header::LOCATION, "/".to_string())]).into_response()
}

#[derive(serde::Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

async fn index(State(src): S, Query(q): Query<TokenQuery>, h: HeaderMap) -> Response {
    if let Some(t) = q.token {
        if !token_ok(&src, &t) {
            return wrong_token(&src).await;
        }
        // Keep it in a cookie and drop it from the address bar.
        return logged_in(&src, &t);
    }
    if !authorized(&src, &h) {
        return login_page(&src, StatusCode::UNAUTHORIZED, "");
    }
    let page = INDEX.replace("{{ARRAY}}", &html_escape(&src.array)).replace("{{TOKEN}}", &src.token);
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], page).into_response()
}

async fn login(State(src): S, axum::Form(q): axum::Form<TokenQuery>) -> Response {
    match q.token {
        Some(t) if token_ok(&src, &t) => logged_in(&src, &t),
        _ => wrong_token(&src).await,
    }
}

async fn logout(State(src): S) -> Response {
    let secure = if src.tls.is_some() { "; Secure" } else { "" };
    let cookie = format!("uraid_token=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{secure}");
    (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie), (header::LOCATION, "/".to_string())]).into_response()
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

async fn static_file(State(src): S, axum::extract::Path(file): axum::extract::Path<String>, h: HeaderMap) -> Response {
    // The stylesheet is the login page's too: it holds nothing of the array.
    if file != "app.css" && !authorized(&src, &h) {
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
    out["exports"] = src.live.exports();
    out["mismatches"] = serde_json::to_value(src.live.mismatches()).unwrap_or_default();
    out["member_details"] = src.live.member_details();
    out["member_identity"] = member_identity(src, &st, &out["member_details"]);
    out["maintenance"] = src.live.maintenance();
    if let Some(m) = out["maintenance"].as_object_mut() {
        // What a reshape started without a rate moves a second (the wizards' cost).
        m.insert("reshape_rate".into(), super::reshape::DEFAULT_RESHAPE_RATE.into());
    }
    out["health"] = serde_json::to_value(&*src.live.health.lock().unwrap_or_else(|p| p.into_inner())).unwrap_or_default();
    out["unix_ms"] = serde_json::json!(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0));
    out
}

async fn status(State(src): S, h: HeaderMap) -> Response {
    if !authorized(&src, &h) {
        return refused();
    }
    axum::Json(status_json(&src, super::figures::STATUS_SECONDS)).into_response()
}

#[derive(serde::Deserialize)]
struct HistoryQuery {
    seconds: Option<String>,
}

/// The exported volume's I/O of the last `?seconds=N` (default 300, at
/// most [`HISTORY_SECONDS`](super::figures::HISTORY_SECONDS)), a point a
/// second, as columns: `{"volume", "seconds", "t" (s since the epoch,
/// UTC), "read_iops", "write_iops", "read_mb_s", "write_mb_s",
/// "read_mean_us", "read_p99_us", "write_mean_us", "write_p99_us"}`.
/// Errors: 400 when N is not a whole number of seconds.
async fn history(State(src): S, Query(q): Query<HistoryQuery>, h: HeaderMap) -> Response {
    use super::figures::HISTORY_SECONDS;
    if !authorized(&src, &h) {
        return refused();
    }
    let seconds = match q.seconds.as_deref().map(str::parse::<u64>) {
        None => 300,
        Some(Ok(n)) => n.min(HISTORY_SECONDS as u64),
        Some(Err(_)) => {
            let msg = format!("seconds={:?} is not a whole number of seconds: give one from 1 to {HISTORY_SECONDS}", q.seconds.unwrap_or_default());
            return (StatusCode::BAD_REQUEST, msg).into_response();
        }
    };
    use super::figures::POINT_BYTES;
    let pts = src.exported.1.history(seconds);
    let col = |f: &dyn Fn(&super::figures::Point) -> f32| pts.iter().map(|p| f(p)).collect::<Vec<f32>>();
    axum::Json(serde_json::json!({
        "volume": src.exported.0,
        "seconds": seconds,
        "kept_seconds": HISTORY_SECONDS,
        "bytes_per_point": POINT_BYTES,
        "t": pts.iter().map(|p| p.unix_ms as f64 / 1000.0).collect::<Vec<f64>>(),
        "read_iops": col(&|p| p.iops[0]),
        "write_iops": col(&|p| p.iops[1]),
        "read_mb_s": col(&|p| p.mb_s[0]),
        "write_mb_s": col(&|p| p.mb_s[1]),
        "read_mean_us": col(&|p| p.read_us[0]),
        "read_p99_us": col(&|p| p.read_us[1]),
        "write_mean_us": col(&|p| p.write_us[0]),
        "write_p99_us": col(&|p| p.write_us[1]),
    }))
    .into_response()
}

/// The drives panel: every drive of the machine, who it is and what uses
/// it (`super::drives`), read off the console's thread.
async fn drives(State(src): S, h: HeaderMap) -> Response {
    if !authorized(&src, &h) {
        return refused();
    }
    let Some(st) = src.live.status() else { return axum::Json(serde_json::json!([])).into_response() };
    let health = src.live.health.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match tokio::task::spawn_blocking(move || super::drives::list(&st, &health)).await {
        Ok(list) => axum::Json(list).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "the drives could not be listed").into_response(),
    }
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
    let devices: Vec<&String> = match &req.command {
        Command::Add { device, .. } => vec![device],
        Command::Replace { new, .. } => vec![new],
        Command::Grow { add, .. } => add.iter().collect(),
        _ => Vec::new(),
    };
    let devices: Vec<String> = devices.into_iter().cloned().collect();
    if let Err(e) = may_use_all(&src, devices, false).await {
        return axum::Json(Reply::failed(e)).into_response();
    }
    let reply = match req.command {
        Command::Status | Command::Monitor => Reply::failed(ErrorBody::new("Protocol", "use GET /api/status or /api/stream")),
        Command::Stop => {
            src.live.stop.store(true, Ordering::Relaxed);
            src.live.interrupt.store(true, Ordering::Relaxed);
            crate::service::wake::wake();
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

/// Whether the console may write `device` (a benchmark's target with
/// `mem_ok`, a spare, a replacement, a new member): a `mem:` drive (for a
/// benchmark), a block device that is free by the checks `create` makes
/// ([`open_free`](uraid_core::control::array::open_free): not mounted,
/// no filesystem, partition table, LVM physical volume, swap or array on
/// it, not held by another process or device), or a regular file only
/// under [`Source::files_dir`] and holding nothing known. The console
/// runs as root: a path typed into it must never overwrite a file.
///
/// Errors: why not, as the reply's error (`InvalidInput`, `Busy`,
/// `WouldDestroy`).
fn may_use(src: &Source, device: &str, mem_ok: bool) -> Result<(), ErrorBody> {
    use std::os::unix::fs::FileTypeExt;
    use uraid_core::control::array::{self, Examination};
    let spec: uraid_core::MemberSpec = device.parse().map_err(|e: uraid_core::Error| ErrorBody::from(e))?;
    let path = match &spec {
        uraid_core::MemberSpec::Mem(_) | uraid_core::MemberSpec::Null(_) if mem_ok => return Ok(()),
        uraid_core::MemberSpec::Mem(_) | uraid_core::MemberSpec::Null(_) => {
            return Err(ErrorBody::new("InvalidInput", format!("{device} is an emulated drive in memory: give a block device")))
        }
        uraid_core::MemberSpec::Path(p) => p,
    };
    let md = std::fs::metadata(path).map_err(|e| ErrorBody::new("InvalidInput", format!("cannot use {device}: {e}")))?;
    if let Ok(Examination::Member(sb)) = array::examine(&spec) {
        let what = if sb.name == src.array { "this array" } else { "another array" };
        return Err(ErrorBody::new(
            "WouldDestroy",
            format!("{device} is a member of array '{}' ({what}): nothing was done; pick an unused device", sb.name),
        ));
    }
    if md.file_type().is_file() {
        let allowed = src.files_dir.as_ref().and_then(|d| d.canonicalize().ok());
        let real = path.canonicalize().map_err(|e| ErrorBody::new("InvalidInput", format!("cannot use {device}: {e}")))?;
        match allowed {
            Some(dir) if real.starts_with(&dir) => {}
            Some(dir) => {
                return Err(ErrorBody::new(
                    "InvalidInput",
                    format!(
                        "{device} is a regular file outside {}, the only directory whose files the console may write \
                         (console-files-dir): nothing was done. Give a block device, or a file in that directory",
                        dir.display()
                    ),
                ))
            }
            None => {
                return Err(ErrorBody::new(
                    "InvalidInput",
                    format!(
                        "{device} is a regular file: the console writes only block devices that are free, never a file \
                         (it may hold anything). Nothing was done. Give a block device, or set console-files-dir in \
                         uraid.conf (serve --console-files-dir DIR) to let it use the files of one directory"
                    ),
                ))
            }
        }
    } else if !md.file_type().is_block_device() {
        return Err(ErrorBody::new("InvalidInput", format!("{device} is neither a block device nor a regular file")));
    }
    // Taken as create takes a member, checked as create checks it, let go.
    let m = array::open_free(&spec, false)?;
    match array::probe(&m)? {
        Some(sig) => Err(ErrorBody::new(
            "WouldDestroy",
            format!("{device} holds {sig}: the console writes only devices with nothing on them. Nothing was done; pick another device"),
        )),
        None => Ok(()),
    }
}

/// [`may_use`] on each of `devices`, off the console's thread (opening a
/// device waits while another process lets it go).
pub(super) async fn may_use_all(src: &Arc<Source>, devices: Vec<String>, mem_ok: bool) -> Result<(), ErrorBody> {
    let src = src.clone();
    tokio::task::spawn_blocking(move || devices.iter().try_for_each(|d| may_use(&src, d, mem_ok)))
        .await
        .unwrap_or_else(|_| Err(ErrorBody::new("Interrupted", "the check of the device failed")))
}
