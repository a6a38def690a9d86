//! Time for the engine, the cache and the control path: the machine's
//! monotonic clock, or a virtual clock that a simulation installs on its
//! thread.
//!
//! Every clock read and every sleep in uraid-core goes through here
//! ([`now`], [`now_ns`], [`now_us`], [`sleep`], [`wall_secs`]), so that a
//! test can run the stack on virtual time: inside [`Virtual::install`] a
//! [`sleep`] returns at once after moving the virtual clock on, and a clock
//! read returns the virtual time. Threads the simulation starts see the
//! same clock when they call [`Virtual::install`] with a clone of it.
//! A layer's own thread is started with [`spawn`] (it keeps its starter's
//! clock) and waits for its period with [`wait_timeout_while`].
//! Outside a simulation the cost is one thread-local read per call (the
//! data path reads the clock about twice per I/O).
//!
//! The anchors are FoundationDB's simulation and TigerBeetle's VOPR: time
//! is an input, not a fact of the machine.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

thread_local! {
    /// The virtual clock of this thread, ns since [`epoch`]; None: the machine's.
    static VIRTUAL: RefCell<Option<Arc<AtomicU64>>> = const { RefCell::new(None) };
}

/// The instant every `*_ns` and `*_us` figure counts from: the first clock
/// read in this process.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Whether any thread ever installed a virtual clock: outside a
/// simulation this is false, and a clock read costs one relaxed load more
/// than the machine's clock (no thread-local lookup on the data path).
static ANY_VIRTUAL: AtomicBool = AtomicBool::new(false);

#[inline]
fn virtual_ns() -> Option<u64> {
    if !ANY_VIRTUAL.load(Ordering::Relaxed) {
        return None;
    }
    VIRTUAL.with(|v| v.borrow().as_ref().map(|t| t.load(Ordering::Acquire)))
}

/// Now, on this thread's clock (monotonic).
#[inline]
pub fn now() -> Instant {
    match virtual_ns() {
        Some(ns) => epoch() + Duration::from_nanos(ns),
        None => Instant::now(),
    }
}

/// Time from `t` (a [`now`]) to now on this thread's clock; zero when `t`
/// is later. Use it in place of `Instant::elapsed`, which reads the
/// machine's clock.
#[inline]
pub fn since(t: Instant) -> Duration {
    now().saturating_duration_since(t)
}

/// Nanoseconds on this thread's monotonic clock since the process's first
/// clock read.
#[inline]
pub fn now_ns() -> u64 {
    match virtual_ns() {
        Some(ns) => ns,
        None => epoch().elapsed().as_nanos() as u64,
    }
}

/// Microseconds on this thread's monotonic clock (CLOCK_MONOTONIC, or the
/// virtual clock's ns / 1000): only differences mean anything. What export
/// latencies are measured with: a timestamp is 8 bytes and a latency one
/// subtraction, and reading it costs about half of `Instant::now()` and
/// `elapsed()` together (no checked arithmetic on seconds and nanoseconds).
#[inline]
pub fn now_us() -> u64 {
    if let Some(ns) = virtual_ns() {
        return ns / 1_000;
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime(2) writes one timespec, which `ts` is.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// Waits `d` (a real sleep), or on a virtual clock moves it on by `d` and
/// returns at once.
pub fn sleep(d: Duration) {
    let moved = VIRTUAL.with(|v| {
        v.borrow().as_ref().map(|t| t.fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::AcqRel))
    });
    match moved {
        None => std::thread::sleep(d),
        // A thread that waits on a virtual clock lets the others run (the
        // one it waits for may be on the same core).
        Some(_) => std::thread::yield_now(),
    }
}

/// The calling thread's virtual clock, if one is installed there: what a
/// thread it starts should install ([`spawn`] does).
pub fn current() -> Option<Virtual> {
    VIRTUAL.with(|v| v.borrow().as_ref().map(|ns| Virtual { ns: ns.clone() }))
}

/// Starts a thread named `name` that runs `f` on the calling thread's
/// clock: a virtual clock installed here is installed there too, so that a
/// layer's thread (the cache's flusher, the bitmap's daemon) keeps time
/// with the simulation that built it. Errors: as
/// `std::thread::Builder::spawn`.
pub fn spawn<F, T>(name: &str, f: F) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let clock = current();
    std::thread::Builder::new().name(name.into()).spawn(move || {
        let _installed = clock.as_ref().map(Virtual::install);
        f()
    })
}

/// How long, in real time, a [`wait_timeout_while`] on a virtual clock
/// waits on its condition variable before it reads the virtual clock
/// again (the clock moves without notifying anyone).
const VIRTUAL_POLL: Duration = Duration::from_millis(1);

/// Waits on `cv` (with `guard` held, as `Condvar::wait_timeout_while`)
/// while `waiting` holds, at most `timeout` on this thread's clock.
/// Returns the guard and whether the time ran out with `waiting` still
/// true. On the machine's clock it is `Condvar::wait_timeout_while`; on a
/// virtual clock the timeout passes only when the clock is moved on (by
/// [`Virtual::advance`] or another thread's [`sleep`]), however long that
/// takes in real time: a daemon's period (the cache's flusher, the
/// bitmap's clearing) then runs on simulated time, and a notification
/// still wakes it at once. A poisoned mutex is taken as it is (the data
/// it guards is a flag or a counter here).
pub fn wait_timeout_while<'a, T, F>(cv: &Condvar, guard: MutexGuard<'a, T>, timeout: Duration, mut waiting: F) -> (MutexGuard<'a, T>, bool)
where
    F: FnMut(&mut T) -> bool,
{
    let Some(start) = virtual_ns() else {
        let (g, r) = cv.wait_timeout_while(guard, timeout, waiting).unwrap_or_else(|e| e.into_inner());
        return (g, r.timed_out());
    };
    let deadline = start.saturating_add(timeout.as_nanos().min(u64::MAX as u128) as u64);
    let mut g = guard;
    loop {
        if !waiting(&mut g) {
            return (g, false);
        }
        if virtual_ns().unwrap_or(u64::MAX) >= deadline {
            return (g, true);
        }
        g = cv.wait_timeout(g, VIRTUAL_POLL).unwrap_or_else(|e| e.into_inner()).0;
    }
}

/// Seconds since the Unix epoch (wall time, for superblock timestamps); on
/// a virtual clock, its seconds from 0.
pub fn wall_secs() -> u64 {
    match virtual_ns() {
        Some(ns) => ns / 1_000_000_000,
        None => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    }
}

/// A virtual clock: starts at the time it is made and moves only when a
/// thread it is installed on sleeps, or by [`Virtual::advance`]. Clones
/// share the one time.
#[derive(Clone, Debug)]
pub struct Virtual {
    ns: Arc<AtomicU64>,
}

impl Default for Virtual {
    fn default() -> Self {
        Self::new()
    }
}

impl Virtual {
    /// A virtual clock reading the machine's time now (so instants taken
    /// before and after it was installed still compare in order).
    pub fn new() -> Virtual {
        Virtual { ns: Arc::new(AtomicU64::new(epoch().elapsed().as_nanos() as u64)) }
    }

    /// Makes this the clock of the calling thread until the guard is
    /// dropped (then the thread's earlier clock is back).
    pub fn install(&self) -> Installed {
        ANY_VIRTUAL.store(true, Ordering::Relaxed);
        let before = VIRTUAL.with(|v| v.borrow_mut().replace(self.ns.clone()));
        Installed { before }
    }

    /// Moves the clock on by `d`.
    pub fn advance(&self, d: Duration) {
        self.ns.fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::AcqRel);
    }

    /// Nanoseconds of this clock (as [`now_ns`] reads it where installed).
    pub fn ns(&self) -> u64 {
        self.ns.load(Ordering::Acquire)
    }
}

/// While alive, a [`Virtual`] clock is the calling thread's clock.
#[must_use = "the virtual clock is uninstalled when this guard is dropped"]
pub struct Installed {
    before: Option<Arc<AtomicU64>>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let before = self.before.take();
        VIRTUAL.with(|v| *v.borrow_mut() = before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_clock_moves_only_by_sleeps_and_advances() {
        let c = Virtual::new();
        let g = c.install();
        let (t0, n0) = (now(), now_ns());
        let real = Instant::now();
        sleep(Duration::from_secs(3600));
        assert!(real.elapsed() < Duration::from_secs(5), "a virtual sleep waited");
        assert_eq!(now() - t0, Duration::from_secs(3600));
        assert_eq!(since(t0), Duration::from_secs(3600));
        assert_eq!(now_ns() - n0, 3_600_000_000_000);
        c.advance(Duration::from_millis(5));
        assert_eq!(now_us(), (n0 + 3_600_005_000_000) / 1000);
        drop(g);
        // back on the machine's clock: an hour was never real
        assert!(now() < t0 + Duration::from_secs(60));
    }

    #[test]
    fn threads_share_a_virtual_clock_when_installed_there() {
        let c = Virtual::new();
        let c2 = c.clone();
        let t = std::thread::spawn(move || {
            let _g = c2.install();
            sleep(Duration::from_secs(10));
            now_ns()
        });
        let after = t.join().unwrap();
        assert_eq!(after, c.ns());
        // this thread never installed it
        assert!(now_ns() < c.ns());
    }

    #[test]
    fn a_thread_started_through_spawn_keeps_its_starters_clock() {
        let c = Virtual::new();
        let before = c.ns();
        let (virt, real) = {
            let g = c.install();
            assert!(current().is_some());
            let t = spawn("sim-child", || {
                sleep(Duration::from_secs(100));
                now_ns()
            })
            .unwrap();
            let virt = t.join().unwrap();
            drop(g);
            // Without a virtual clock, the child is on the machine's.
            let real = spawn("real-child", current).unwrap().join().unwrap();
            (virt, real)
        };
        assert_eq!(virt, before + 100_000_000_000, "the child's sleep did not move the starter's clock");
        assert_eq!(c.ns(), virt);
        assert!(real.is_none());
    }
}
