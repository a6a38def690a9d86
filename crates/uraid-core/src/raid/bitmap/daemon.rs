//! The bitmap daemon: a thread that clears the regions that saw no write
//! for a while (md's bitmap daemon), so that a resync after a crash covers
//! only what was being written.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::Bitmap;
#[cfg(doc)]
use super::BitmapStats;

impl Bitmap {
    /// Starts a thread that calls [`clear_idle`](Self::clear_idle) every
    /// `interval` (md's `bitmap daemon_sleep`, 5 s by default there). A
    /// failed call is counted in [`BitmapStats::clear_errors`] and the
    /// thread goes on; a panic is counted too, said on stderr, and ends
    /// the thread (bits then stay set: safe). The thread stops, and is joined, when the returned
    /// handle is dropped.
    pub fn start_daemon(self: &Arc<Self>, interval: Duration) -> BitmapDaemon {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (b, s) = (self.clone(), stop.clone());
        // On the starter's clock: a simulation's virtual time moves the
        // interval on (crate::clock::spawn, wait_timeout_while).
        let thread = crate::clock::spawn("uraid-bitmap", move || {
            let (lock, cv) = &*s;
            let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                stopped = crate::clock::wait_timeout_while(cv, stopped, interval, |s| !*s).0;
                if *stopped {
                    return;
                }
                drop(stopped);
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.clear_idle())) {
                    Ok(Ok(_)) => {}
                    Ok(Err(_)) => {
                        b.clear_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(p) => {
                        // Bits only ever stay set this way (a region
                        // resynced for nothing at worst); writes set
                        // their own bits on their callers' threads.
                        b.clear_errors.fetch_add(1, Ordering::Relaxed);
                        eprintln!(
                            "uraid: the write-intent bitmap's daemon panicked ({}); it stops: bits are no longer \
                             cleared until the next assemble",
                            crate::error::panic_message(&*p)
                        );
                        return;
                    }
                }
                stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
            }
        })
        .expect("cannot start the bitmap daemon thread");
        BitmapDaemon { stop, thread: Some(thread) }
    }
}

/// The thread started by [`Bitmap::start_daemon`]; dropping it stops and
/// joins the thread.
#[derive(Debug)]
pub struct BitmapDaemon {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for BitmapDaemon {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
