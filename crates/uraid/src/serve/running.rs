//! The service phase of `uraid serve`, from the exports started to the
//! service stopped: the shared state and the events, the watcher that
//! turns a signal or a `stop` into the stop of everything, the manager
//! that owns the array with its control socket, the sampler of the
//! exports' counters, the metrics endpoint and the console; then the
//! export serves until the stop, and each part is stopped in turn.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, Scope, ScopedJoinHandle};

use anyhow::Result;
use uraid_core::control::array::Array;

use super::setup::Settings;
use super::{notify, ServeArgs, Started, STOP};
use crate::service::events::Events;
use crate::service::exports::Exports;
use crate::service::figures::Window;
use crate::service::http::HttpServer;
use crate::service::wake::wait_wake;
use crate::service::{Job, Live};

/// How the service phase ended.
pub(super) struct Ran {
    /// The export's end: an error of the listening socket.
    pub res: std::io::Result<()>,
    /// The array, back from the manager (`None`: a temporary array); an
    /// error when the service could not start (the array was stopped) or
    /// the manager panicked.
    pub arr: Result<Option<Array>>,
    /// Every export of every volume, for the final flush.
    pub exports: Exports,
}

/// Each served volume's live I/O figures: `(index, name, window)`; the
/// first volume's window is also the console's.
type Windows = Vec<(usize, String, Arc<Window>)>;

/// What the parts of the service share.
struct Shared<'a> {
    a: &'a ServeArgs,
    set: Settings,
    name: &'a str,
    live: Arc<Live>,
    events: Events,
    jobs_tx: Sender<Job>,
    /// Set to stop the exports (and so everything).
    flag: Arc<AtomicBool>,
    /// Set to stop the service's parts (metrics, control socket, manager).
    stop_service: Arc<AtomicBool>,
    exports: Exports,
    windows: Windows,
    /// The first volume's window (the console's).
    window: Arc<Window>,
}

/// The manager's thread and its control socket.
type Managed<'s> = (ScopedJoinHandle<'s, Array>, crate::service::ctl::CtlServer);

/// Runs the service of array `name` (`arr`; `None`: temporary) over the
/// exports `started` until a signal or a `stop`, then stops its parts;
/// `taken`: the process it took the array over from. Errors: the exports'
/// list could not be made (nothing was served).
pub(super) fn run(
    a: &ServeArgs,
    set: Settings,
    name: &str,
    arr: Option<Array>,
    started: &Started,
    taken: Option<crate::service::takeover::TakenOver>,
) -> Result<Ran> {
    let stop_service = Arc::new(AtomicBool::new(false));
    let live = Live::new(stop_service.clone());
    let events = Events::new(name, set.sinks.clone());
    if let Some(t) = &taken {
        let on = started.served_on_each[0].join(" and ");
        events.emit("TakeOver", None, format!("process {} took {on} over from process {}", std::process::id(), t.pid));
    }
    let (jobs_tx, jobs_rx) = std::sync::mpsc::channel();
    let flag = started.nbd.shutdown_flag();
    // Every export of every volume, as the manager, status and metrics
    // see them.
    let list = super::exports_of(&started.served, &started.nbd, started.ublk.as_deref())?;
    let exports = Exports::new(list, flag.clone());
    live.set_exports(&exports);
    let reload = (name.to_string(), started.ublk.is_some());
    let watcher = watch(flag.clone(), stop_service.clone(), live.clone(), started.nbd.listener_fd(), reload);
    let window = Arc::new(Window::default());
    let windows: Windows =
        started.served.iter().map(|s| (s.index, s.name.clone(), if s.index == 0 { window.clone() } else { Default::default() })).collect();
    let sh = Shared { a, set, name, live, events, jobs_tx, flag, stop_service, exports, windows, window };
    let (res, arr) = std::thread::scope(|sc| serve(sc, &sh, arr, jobs_rx, started));
    notify::notify_stopping();
    let _ = watcher.join();
    Ok(Ran { res, arr, exports: sh.exports })
}

/// The watcher: asleep until a signal or a stop command wakes it (see
/// `crate::service::wake`; a SIGHUP starts a reload there:
/// `crate::service::reload`); a look every 5 s for any other setter of the
/// flags. It then sets them all and wakes the main thread (in
/// `ublk_export::wait`) and the NBD listener (`lfd`).
fn watch(
    flag: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    live: Arc<Live>,
    lfd: Option<std::os::fd::RawFd>,
    (reload_name, has_ublk): (String, bool),
) -> JoinHandle<()> {
    let main = std::thread::current();
    std::thread::spawn(move || {
        while !STOP.load(Ordering::Relaxed) && !flag.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
            wait_wake(std::time::Duration::from_secs(5));
            if crate::service::reload::take_request() {
                crate::service::reload::start(&reload_name, has_ublk);
            }
        }
        live.interrupt.store(true, Ordering::Relaxed);
        flag.store(true, Ordering::Relaxed);
        main.unpark();
        if let Some(fd) = lfd {
            // SAFETY: the listener outlives this thread (joined before
            // it is dropped); shutdown wakes the server's poll on it.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    })
}

/// Inside the scope of the service's threads: starts them, serves until
/// the stop, stops them; the export's end and the array.
fn serve<'s>(
    sc: &'s Scope<'s, '_>,
    sh: &'s Shared<'_>,
    mut arr: Option<Array>,
    jobs_rx: Receiver<Job>,
    started: &Started,
) -> (std::io::Result<()>, Result<Option<Array>>) {
    let manager = match arr.take() {
        Some(x) if !sh.a.read_only => match start_manager(sc, sh, x, jobs_rx) {
            Ok(m) => Some(m),
            Err(e) => return (Ok(()), Err(e)),
        },
        other => {
            arr = other;
            None
        }
    };
    let sampler = spawn_sampler(sc, sh);
    let health = spawn_health(sc, sh);
    let metrics = match start_metrics(sh) {
        Ok(m) => m,
        Err(e) => {
            sh.flag.store(true, Ordering::Relaxed);
            sh.stop_service.store(true, Ordering::Relaxed);
            let _ = sampler.join();
            if let Some(h) = health {
                h.thread().unpark();
                let _ = h.join();
            }
            if let Some((m, ctl)) = manager {
                drop(ctl);
                let _ = m.join();
            }
            return (Ok(()), Err(e));
        }
    };
    // A token made here is written to a file only root reads, never printed.
    let token_file = (sh.a.console.is_some() && manager.is_some() && sh.a.console_token.is_none()).then(|| crate::service::console::token_path(sh.name));
    let console = start_console(sh, manager.is_some(), token_file.as_deref(), &started.uri);
    notify::notify_ready(sh.name, &started.served_on_each[0].join(" and "));
    let res = match started.nbd.listens() {
        true => started.nbd.run(),
        false => crate::ublk_export::wait(&sh.flag),
    };
    sh.flag.store(true, Ordering::Relaxed);
    // Everything that waits for the service's stop (the metrics
    // endpoint, the control socket, the manager) is told first.
    sh.stop_service.store(true, Ordering::Relaxed);
    drop(metrics);
    drop(console);
    if let Some(p) = &token_file {
        let _ = std::fs::remove_file(p);
    }
    sampler.thread().unpark();
    let _ = sampler.join();
    if let Some(h) = health {
        h.thread().unpark();
        let _ = h.join();
    }
    sh.live.interrupt.store(true, Ordering::Relaxed);
    let managed = manager.map(|(m, ctl)| {
        drop(ctl);
        // Wakes the idle manager, which then sees the stop.
        let _ = sh.jobs_tx.send(Job::wake());
        m.join().map_err(|_| anyhow::anyhow!("the array manager thread panicked"))
    });
    (res, managed.transpose().map(|m| m.or(arr)))
}

/// Starts the manager of `x` and its control socket. Errors: the control
/// socket cannot be opened (the array is stopped again, as it came).
fn start_manager<'s>(sc: &'s Scope<'s, '_>, sh: &'s Shared<'_>, x: Array, jobs_rx: Receiver<Job>) -> Result<Managed<'s>> {
    let check_stamp = Some(crate::runstate::check_stamp(&x.uuid()));
    let set = &sh.set;
    let opts = crate::service::ManagerOptions { rebuild_rate: set.rebuild_rate, scrub_rate: set.scrub_rate, scrub_every: set.scrub_every, check_stamp };
    // A member the data path fails wakes the manager at once (its
    // events, the live status, a spare's takeover).
    x.health().read_errors().set_max(set.max_read_errors);
    let wake = Mutex::new(sh.jobs_tx.clone());
    x.health().set_notify(move || {
        let _ = wake.lock().unwrap_or_else(|p| p.into_inner()).send(Job::wake());
    });
    let m = crate::service::Manager::new(x, sh.exports.clone(), opts, jobs_rx, sh.live.clone(), sh.events.clone());
    let ctl_path = crate::service::client::ctl_path(sh.name);
    match crate::service::ctl::CtlServer::start(&ctl_path, sh.live.clone(), sh.jobs_tx.clone(), sh.events.clone(), figures(&sh.windows)) {
        Ok(ctl) => Ok((sc.spawn(move || m.run()), ctl)),
        Err(e) => {
            sh.flag.store(true, Ordering::Relaxed);
            // Nothing was served: the array goes back as it came.
            let stopped = m.into_array().stop();
            let e = e.context("cannot open the control socket");
            Err(match stopped {
                Ok(()) => e,
                Err(s) => e.context(format!("and the array could not be stopped cleanly: {s}")),
            })
        }
    }
}

/// Each served volume's figures for `uraid status`, from `windows`.
fn figures(windows: &Windows) -> crate::service::ctl::Figures {
    let windows = windows.clone();
    Arc::new(move || {
        let each = windows.iter().map(|(_, n, w)| (n.clone(), serde_json::json!(w.figures(crate::service::figures::STATUS_SECONDS))));
        serde_json::Value::Object(each.collect())
    })
}

/// The exports' counters, once a second, for status and metrics.
fn spawn_sampler<'s>(sc: &'s Scope<'s, '_>, sh: &'s Shared<'_>) -> ScopedJoinHandle<'s, ()> {
    sc.spawn(move || {
        while !sh.flag.load(Ordering::Relaxed) {
            for (i, _, w) in &sh.windows {
                w.push(sh.exports.stats_of(*i));
            }
            // Woken at the stop (unparked by the caller).
            std::thread::park_timeout(std::time::Duration::from_secs(1));
        }
    })
}

/// The health poller (`service::health`), unless its interval is 0: every
/// interval, each member that is a drive (by the live status's devices)
/// is read with smartctl; what crosses a limit is an event; the readings
/// go to [`crate::service::live::Live`] for status, metrics and console.
fn spawn_health<'s>(sc: &'s Scope<'s, '_>, sh: &'s Shared<'_>) -> Option<ScopedJoinHandle<'s, ()>> {
    use crate::service::health;
    let every = std::time::Duration::from_secs(sh.set.health_interval);
    if every.is_zero() {
        return None;
    }
    Some(sc.spawn(move || {
        let smartctl = health::smartctl();
        let mut watches: std::collections::HashMap<String, health::Watch> = Default::default();
        // The first poll waits for the manager's first status.
        let mut next = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while !sh.flag.load(Ordering::Relaxed) {
            let now = std::time::Instant::now();
            if now < next {
                // Woken at the stop (unparked by the caller).
                std::thread::park_timeout(next - now);
                continue;
            }
            let Some(st) = sh.live.status() else {
                next = now + std::time::Duration::from_secs(1);
                continue;
            };
            let drives: Vec<String> = st
                .members
                .iter()
                .filter_map(|m| m.device.clone())
                .filter(|d| uraid_core::io::identity::identity_of_path(std::path::Path::new(d)).is_some() || health::polled_anyway(d))
                .collect();
            let mut readings = Vec::new();
            for d in &drives {
                if sh.flag.load(Ordering::Relaxed) {
                    return;
                }
                let w = watches.entry(d.clone()).or_default();
                for (ev, detail) in w.take(health::read(&smartctl, d), &sh.set.health_limits) {
                    sh.events.emit(ev, Some(d), detail);
                }
                if let Some(h) = w.last() {
                    readings.push(h.clone());
                }
            }
            watches.retain(|d, _| drives.contains(d));
            *sh.live.health.lock().unwrap_or_else(|p| p.into_inner()) = readings;
            next = std::time::Instant::now() + every;
        }
    }))
}

/// The metrics endpoint with `--metrics`. Errors: it cannot listen.
fn start_metrics(sh: &Shared<'_>) -> Result<Option<HttpServer>> {
    let Some(addr) = &sh.a.metrics else { return Ok(None) };
    let source = crate::service::metrics::Source {
        array: sh.name.to_string(),
        exported: sh.windows.clone(),
        exports: Some(sh.exports.clone()),
        live: sh.live.clone(),
    };
    let m = crate::service::metrics::start(addr, sh.a.metrics_insecure, source)?;
    println!("metrics: http://{}/metrics", m.addr);
    Ok(Some(m))
}

/// The console with `--console`, when there is a manager to act on the
/// array (`managed`); its token from the flag or config, else a new one
/// written to `token_file`. A console that cannot start is said, and the
/// array is served without it.
fn start_console(sh: &Shared<'_>, managed: bool, token_file: Option<&std::path::Path>, uri: &str) -> Option<HttpServer> {
    let addr = sh.a.console.as_ref()?;
    if !managed {
        eprintln!("uraid serve: no console: a read-only or temporary array has no manager to act on it");
        return None;
    }
    let token = match sh.a.console_token.clone().map(Ok).unwrap_or_else(crate::service::console::new_token) {
        Ok(t) => match token_file.map(|p| crate::service::console::write_token(p, &t)) {
            Some(Err(e)) => {
                eprintln!("uraid serve: no console: {e:#}");
                String::new()
            }
            _ => t,
        },
        Err(e) => {
            eprintln!("uraid serve: {e:#}");
            String::new()
        }
    };
    let https = sh.set.console_tls.is_some();
    let source = crate::service::console::Source {
        array: sh.name.to_string(),
        token: token.clone(),
        live: sh.live.clone(),
        jobs: Mutex::new(sh.jobs_tx.clone()),
        events: sh.events.clone(),
        exported: (sh.windows[0].1.clone(), sh.window.clone()),
        reports: sh.a.reports.clone().unwrap_or_else(|| PathBuf::from("/var/lib/uraid/reports")),
        bench: Mutex::new(None),
        tls: sh.set.console_tls.clone(),
        guesses: crate::service::console::Guesses::new(),
        files_dir: sh.a.console_files_dir.clone(),
        export_uri: uri.to_string(),
        known: Default::default(),
    };
    match (token.is_empty(), crate::service::console::start(addr, source)) {
        (false, Ok(c)) => {
            let told = token_file.map_or("as configured".to_string(), |p| format!("in {}", p.display()));
            println!("console: {}://{}/ (access token {told})", if https { "https" } else { "http" }, c.addr);
            Some(c)
        }
        (_, Err(e)) => {
            eprintln!("uraid serve: no console: {e:#}");
            None
        }
        (true, Ok(_)) => None,
    }
}
