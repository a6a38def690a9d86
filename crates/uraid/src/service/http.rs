//! The HTTP servers of a served array (the metrics endpoint, the web
//! console): axum on a current-thread tokio runtime, on a thread of its
//! own so that no request runs on the data path's threads, stopped when
//! the service stops. With a TLS configuration (the export's certificate,
//! rustls through tokio-rustls) it speaks HTTPS only.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{Context, Result};

use super::Live;

/// A running HTTP server; dropping it waits for its thread, which ends
/// once the service's stop flag is set.
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

/// Listens on `sa` and serves `app` until `live.stop` is set (requests in
/// progress finish). `what` names the server in its errors and thread.
/// With `tls`, every connection must complete a TLS handshake first (within
/// [`HANDSHAKE_TIMEOUT`], at most [`HANDSHAKES`] at once, so that clients
/// that stall cannot hold the others off); a client that fails it is
/// closed.
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
            let stop = async move {
                while !live.stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            };
            match tls {
                None => {
                    let _ = axum::serve(l, app).with_graceful_shutdown(stop).await;
                }
                Some(cfg) => {
                    let l = TlsListener::new(l, cfg);
                    let _ = axum::serve(l, app).with_graceful_shutdown(stop).await;
                }
            }
        });
    })?;
    Ok(HttpServer { addr, thread: Some(thread) })
}

/// How long a client has to complete its TLS handshake.
pub(crate) const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How many TLS handshakes may be under way at once.
pub(crate) const HANDSHAKES: usize = 64;

/// A listener whose connections have completed a TLS handshake: a task
/// accepts TCP connections and runs each handshake in a task of its own;
/// the ones that succeed are handed to axum.
struct TlsListener {
    addr: SocketAddr,
    done: tokio::sync::mpsc::Receiver<(tokio_rustls::server::TlsStream<tokio::net::TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Starts accepting on `l` (on the current tokio runtime).
    fn new(l: tokio::net::TcpListener, cfg: Arc<rustls::ServerConfig>) -> TlsListener {
        let addr = l.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (tx, done) = tokio::sync::mpsc::channel(HANDSHAKES);
        let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
        let slots = Arc::new(tokio::sync::Semaphore::new(HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else { return };
                let (tcp, peer) = match l.accept().await {
                    Ok(c) => c,
                    Err(_) => {
                        // Out of file descriptors, or the like: wait, then go on.
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    if let Ok(Ok(s)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        drop(slot);
                        let _ = tx.send((s, peer)).await;
                    }
                });
            }
        });
        TlsListener { addr, done }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.done.recv().await {
            Some(c) => c,
            // The accepting task ended: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.addr)
    }
}
