//! `systemctl reload uraid@NAME` (SIGHUP): an upgrade of the running
//! `uraid serve` without unmounting, as a takeover inside the unit.
//!
//! On SIGHUP a serve with a ublk export starts the uraid binary now at the
//! path it was started from (so a freshly installed one) as
//! `uraid serve ARGS... --takeover`, in the same unit (its cgroup) and with
//! the same environment. That process asks this one to hand the device
//! over (crate::service::takeover); when this one agrees, it tells systemd
//! that the new process is the unit's main process (`MAINPID=`, which the
//! unit's main process may send with `NotifyAccess=main`) instead of
//! `STOPPING=1`, flushes, closes the array clean and exits. The new one
//! re-attaches the device and says `READY=1`. When the new one cannot take
//! over (requests in flight not answered in time, ublk unusable), it exits
//! with the reason in the journal and this one keeps serving.
//!
//! The unit runs it with `ExecReload=/bin/kill -HUP $MAINPID`: systemd 252
//! has no `Type=notify-reload`, so `systemctl reload` returns once the
//! signal is sent; `systemctl status` shows the new main PID when done.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;

/// Set by the SIGHUP handler; taken by [`take_request`].
static REQUESTED: AtomicBool = AtomicBool::new(false);
/// The pid of the `serve --takeover` a reload started (0: none running).
static CHILD: AtomicU32 = AtomicU32::new(0);
/// Whether this process handed its devices over to [`CHILD`].
static HANDED_TO_CHILD: AtomicBool = AtomicBool::new(false);
/// The binary's path and the arguments this serve was started with.
static START: OnceLock<(std::path::PathBuf, Vec<std::ffi::OsString>)> = OnceLock::new();

extern "C" fn on_sighup(_: libc::c_int) {
    REQUESTED.store(true, Ordering::Relaxed);
    super::wake::wake();
}

/// Remembers how this serve was started (the binary's path now, before
/// an upgrade replaces the file, and argv) and makes SIGHUP request a
/// reload (else SIGHUP would end the process). Call once, early in serve.
pub(crate) fn install() {
    let exe = std::env::current_exe().unwrap_or_else(|_| std::path::PathBuf::from("/proc/self/exe"));
    let _ = START.set((exe, std::env::args_os().skip(1).collect()));
    // SAFETY: a zeroed sigaction whose handler only stores to an atomic
    // and writes one byte to a pipe (async-signal-safe); empty mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sighup as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGHUP, &sa, std::ptr::null_mut());
    }
}

/// Whether a reload was requested since the last call (and clears it).
pub(crate) fn take_request() -> bool {
    REQUESTED.swap(false, Ordering::Relaxed)
}

/// The arguments of the new process: this serve's, without `--fork` (the
/// new process is the unit's main process itself) and `--takeover`, then
/// `--takeover`.
fn child_args(args: &[std::ffi::OsString]) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = args.iter().filter(|a| *a != "--fork" && *a != "--takeover").cloned().collect();
    v.push("--takeover".into());
    v
}

/// Starts `uraid serve ... --takeover` for a reload of array `name`, unless
/// one runs already; `has_ublk`: whether this serve has a ublk export (a
/// reload of an NBD-only serve is refused: the takeover keeps a block
/// device, and there is none). Logs what happens; a thread reaps the new
/// process and logs its failure (this serve then keeps serving).
pub(crate) fn start(name: &str, has_ublk: bool) {
    let log = |m: String| {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "uraid serve: reload: {m}");
    };
    if !has_ublk {
        log(format!(
            "SIGHUP ignored: array '{name}' has no ublk export, and a reload is a takeover of the block device. \
             To run a new uraid: `systemctl restart uraid@{name}` (NBD clients reconnect)"
        ));
        return;
    }
    if CHILD.load(Ordering::Relaxed) != 0 {
        log(format!("SIGHUP ignored: process {} is taking over already", CHILD.load(Ordering::Relaxed)));
        return;
    }
    let Some((exe, args)) = START.get() else { return };
    let mut cmd = std::process::Command::new(exe);
    cmd.args(child_args(args));
    // The watchdog is the main process's: the new one pings once it is.
    cmd.env_remove("WATCHDOG_PID");
    match cmd.spawn() {
        Err(e) => log(format!("cannot start {} for the takeover: {e}; this process keeps serving", exe.display())),
        Ok(mut child) => {
            let pid = child.id();
            CHILD.store(pid, Ordering::Relaxed);
            log(format!("started {} (pid {pid}) to take array '{name}' over", exe.display()));
            std::thread::spawn(move || {
                let status = child.wait();
                if !HANDED_TO_CHILD.load(Ordering::Relaxed) {
                    log(format!(
                        "the new serve (pid {pid}) ended ({}) without taking over; this process keeps serving",
                        status.map_or_else(|e| e.to_string(), |s| s.to_string())
                    ));
                }
                CHILD.store(0, Ordering::Relaxed);
            });
        }
    }
}

/// Called when this serve hands its devices over to process `by`: when
/// `by` is the process a reload started, tells systemd (if it runs this
/// serve) that `by` is now the unit's main process. Returns whether it was.
pub(crate) fn handing_over_to(by: u32) -> bool {
    if by == 0 || CHILD.load(Ordering::Relaxed) != by {
        return false;
    }
    HANDED_TO_CHILD.store(true, Ordering::Relaxed);
    let status = format!("reload: handing over to process {by}");
    let _ = sd_notify::notify(&[sd_notify::NotifyState::MainPid(by), sd_notify::NotifyState::Status(&status)]);
    true
}

/// Whether this serve handed its devices to a process a reload started
/// (then it must not say `STOPPING=1`: the unit goes on).
pub(crate) fn handed_to_child() -> bool {
    HANDED_TO_CHILD.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_new_process_gets_the_same_arguments_without_fork_and_with_takeover() {
        let a: Vec<std::ffi::OsString> = ["serve", "r5", "--ublk", "--fork", "--metrics", "127.0.0.1:9199"].iter().map(Into::into).collect();
        let c = child_args(&a);
        assert_eq!(c, ["serve", "r5", "--ublk", "--metrics", "127.0.0.1:9199", "--takeover"].map(std::ffi::OsString::from));
        let again = child_args(&c);
        assert_eq!(again, c, "--takeover is given once");
    }

    #[test]
    fn a_pid_no_reload_started_is_not_made_the_main_process() {
        assert!(!handing_over_to(0));
        assert!(!handing_over_to(std::process::id()));
        assert!(!handed_to_child());
    }
}
