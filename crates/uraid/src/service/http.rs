//! The HTTP servers of a served array (the metrics endpoint, the web
//! console): axum's router served by hyper (HTTP/1.1) on a current-thread
//! tokio runtime, on a thread of its own so that no request runs on the
//! data path's threads, stopped when the service stops. With a TLS
//! configuration (the export's certificate, rustls through tokio-rustls)
//! it speaks HTTPS only.
//!
//! No client can hold the server, the stop or the process's descriptors:
//! - at most [`MAX_CONNECTIONS`] connections are open at once; one more is
//!   answered `503 Service Unavailable` (plain HTTP) and closed at once, so
//!   that idle connections cannot take the descriptors the NBD export needs;
//! - a TLS handshake must end within [`HANDSHAKE_TIMEOUT`];
//! - a request's headers must arrive within [`HEADER_TIMEOUT`] of the
//!   connection's start or of the previous response (an idle keep-alive
//!   connection is closed then);
//! - a request's body must arrive within [`BODY_TIMEOUT`] (else `408`), and
//!   be at most [`MAX_BODY`] bytes (else `413`);
//! - a connection on which no byte moves for [`IDLE_TIMEOUT`] while no
//!   request is being handled (a client that does not read its response) is
//!   closed;
//! - at the stop, every connection is closed after its response in
//!   progress, and [`STOP_GRACE`] later whatever is left is dropped.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use hyper::service::Service as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Live;

/// How many connections one server holds at once.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// How long a client has to complete its TLS handshake.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send a request's headers, counted from the
/// connection's start or the end of the previous response.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send a request's body, counted from the end of
/// its headers.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may go without a byte read or written while no
/// request is being handled.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the stop waits for responses in progress before it drops
/// their connections.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(2);
/// The largest request body, bytes (the console's commands and forms are
/// far smaller).
pub(crate) const MAX_BODY: usize = 1 << 20;
/// How often a connection looks at its idle time and at the stop flag.
const TICK: Duration = Duration::from_millis(250);

/// A running HTTP server; dropping it waits for its thread, which ends
/// within [`STOP_GRACE`] (and a tick) of the service's stop flag.
pub(crate) struct HttpServer {
    /// The address it listens on (the port the kernel chose for port 0).
    pub addr: SocketAddr,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Listens on `sa` and serves `app` until `live.stop` is set, with the
/// limits of this module. `what` names the server in its errors. With
/// `tls`, every connection must complete a TLS handshake first; a client
/// that fails it is closed.
///
/// Errors: the address cannot be bound.
pub(crate) fn serve(what: &str, sa: SocketAddr, app: axum::Router, live: Arc<Live>, tls: Option<Arc<rustls::ServerConfig>>) -> Result<HttpServer> {
    let l = std::net::TcpListener::bind(sa).with_context(|| format!("cannot listen on {sa} for {what}"))?;
    l.set_nonblocking(true)?;
    let addr = l.local_addr()?;
    let what = what.to_string();
    let thread = std::thread::Builder::new().name("uraid-http".into()).spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("uraid serve: {what} cannot start: {e}");
                return;
            }
        };
        rt.block_on(async move {
            let Ok(l) = tokio::net::TcpListener::from_std(l) else { return };
            run(l, app, live.stop.clone(), tls.map(tokio_rustls::TlsAcceptor::from)).await;
        });
        // A command the console handed to a blocking thread may still run:
        // it is not waited for beyond this.
        rt.shutdown_timeout(Duration::from_millis(500));
    })?;
    Ok(HttpServer { addr, thread: Some(thread) })
}

/// The accept loop: one task per connection, at most [`MAX_CONNECTIONS`];
/// returns within [`STOP_GRACE`] (and a tick) of `stop`.
async fn run(l: tokio::net::TcpListener, app: axum::Router, stop: Arc<AtomicBool>, tls: Option<tokio_rustls::TlsAcceptor>) {
    let app = app.layer(axum::middleware::from_fn(read_body));
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut conns = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        let accepted = std::future::poll_fn(|cx| {
            // Finished connections are reaped as they end.
            while let Poll::Ready(Some(_)) = conns.poll_join_next(cx) {}
            while tick.poll_tick(cx).is_ready() {
                if stop.load(Ordering::Relaxed) {
                    return Poll::Ready(None);
                }
            }
            l.poll_accept(cx).map(Some)
        })
        .await;
        let tcp = match accepted {
            None => break,
            Some(Ok((tcp, _))) => tcp,
            Some(Err(_)) => {
                // Out of descriptors, or the like: wait, then go on.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Full: said at once (in clear only; a TLS client just sees
            // the close), the descriptor given back.
            if tls.is_none() {
                let _ = tcp.try_write(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\nRetry-After: 10\r\n\r\n");
            }
            continue;
        };
        let (app, stop, tls) = (app.clone(), stop.clone(), tls.clone());
        conns.spawn(async move {
            let act = Arc::new(Activity { start: Instant::now(), last_ms: AtomicU64::new(0), busy: AtomicUsize::new(0) });
            let _ = tcp.set_nodelay(true);
            let tcp = Tracked { io: tcp, act: act.clone() };
            match tls {
                None => connection(tcp, app, act, stop).await,
                Some(acceptor) => {
                    if let Ok(Ok(s)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        connection(s, app, act, stop).await;
                    }
                }
            }
            drop(slot);
        });
    }
    drop(l);
    // Every connection closes after its response in progress; what is
    // left after the grace is dropped with the tasks.
    let _ = tokio::time::timeout(STOP_GRACE, async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
}

/// Serves HTTP/1.1 on `io` until the client closes, a limit of this
/// module is reached, or the stop's grace ends.
async fn connection<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: I, app: axum::Router, act: Arc<Activity>, stop: Arc<AtomicBool>) {
    let svc = {
        let act = act.clone();
        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let (app, act) = (app.clone(), act.clone());
            act.busy.fetch_add(1, Ordering::Relaxed);
            async move {
                let r = hyper_util::service::TowerToHyperService::new(app).call(req).await;
                act.touch();
                act.busy.fetch_sub(1, Ordering::Relaxed);
                r
            }
        })
    };
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
    let conn = b.serve_connection(hyper_util::rt::TokioIo::new(io), svc);
    let mut conn = std::pin::pin!(conn);
    let mut tick = tokio::time::interval(TICK);
    let mut stopping = false;
    std::future::poll_fn(|cx| {
        if conn.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        while tick.poll_tick(cx).is_ready() {
            if !stopping && stop.load(Ordering::Relaxed) {
                stopping = true;
                conn.as_mut().graceful_shutdown();
                if conn.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            if act.busy.load(Ordering::Relaxed) == 0 && act.idle() >= IDLE_TIMEOUT {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    })
    .await;
}

/// Reads a request's whole body within [`BODY_TIMEOUT`] (at most
/// [`MAX_BODY`] bytes) before the handler runs: a client that stops
/// sending gets `408 Request Timeout` and its connection is closed.
async fn read_body(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let (parts, body) = req.into_parts();
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        (StatusCode::PAYLOAD_TOO_LARGE, [(header::CONNECTION, "close")], format!("a request's body may hold at most {MAX_BODY} bytes\n")).into_response()
    };
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large();
    }
    match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(b)) => next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(b))).await,
        Ok(Err(_)) if declared.is_none() => too_large(),
        Ok(Err(_)) => (StatusCode::BAD_REQUEST, [(header::CONNECTION, "close")], "the request's body could not be read\n").into_response(),
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            [(header::CONNECTION, "close")],
            format!("the request's body did not arrive within {} s\n", BODY_TIMEOUT.as_secs()),
        )
            .into_response(),
    }
}

/// What a connection did lately: when a byte last moved, and how many of
/// its requests are being handled.
struct Activity {
    start: Instant,
    /// When a byte was last read or written, ms after `start`.
    last_ms: AtomicU64,
    /// Requests whose handler runs (their response not yet begun).
    busy: AtomicUsize,
}

impl Activity {
    fn touch(&self) {
        self.last_ms.store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// How long since a byte last moved.
    fn idle(&self) -> Duration {
        self.start.elapsed().saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// A connection's stream that notes in its [`Activity`] every byte that
/// moves.
struct Tracked<I> {
    io: I,
    act: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Tracked<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            me.act.touch();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Tracked<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.io).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            me.act.touch();
        }
        r
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            me.act.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
