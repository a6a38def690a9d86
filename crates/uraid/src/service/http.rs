//! The HTTP servers of a served array (the metrics endpoint, the web
//! console): axum on a current-thread tokio runtime, on a thread of its
//! own so that no request runs on the data path's threads, stopped when
//! the service stops.

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
///
/// Errors: the address cannot be bound.
pub(crate) fn serve(what: &str, sa: SocketAddr, app: axum::Router, live: Arc<Live>) -> Result<HttpServer> {
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
            let _ = axum::serve(l, app).with_graceful_shutdown(stop).await;
        });
    })?;
    Ok(HttpServer { addr, thread: Some(thread) })
}
