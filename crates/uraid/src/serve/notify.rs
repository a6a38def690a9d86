//! How `uraid serve` tells others that it serves and stops: systemd
//! (Type=notify: READY, STATUS, the watchdog, STOPPING) and, with
//! `--fork`, the parent process waiting for the server to be ready.

use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::{Context, Result};

use super::STOP;

/// Tells the service manager (systemd, Type=notify) that the array is
/// assembled and exported, and starts the watchdog pings it asks for
/// (every half of WatchdogSec). Nothing happens outside systemd.
pub(super) fn notify_ready(name: &str, uri: &str) {
    ready_to_parent();
    let status = format!("serving array '{name}' on {uri}");
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status(&status)]);
    if let Some(every) = sd_notify::watchdog_enabled() {
        std::thread::spawn(move || loop {
            std::thread::sleep(every / 2);
            if STOP.load(Ordering::Relaxed) {
                break;
            }
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
        });
    }
}

/// The write end of the pipe the parent of a `--fork`ed server waits on
/// (-1: not forked, or already told).
static READY_FD: AtomicI32 = AtomicI32::new(-1);

/// `serve --fork`: forks; the parent waits until the child serves (then
/// exits 0) or ends without serving (exits 1; the child said why on
/// stderr); the child returns and goes on. Called before any thread
/// starts: fork copies the calling thread only. Errors: the pipe or the
/// fork fails (no memory, too many processes).
pub(super) fn fork_until_ready() -> Result<()> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two new descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("--fork: cannot make a pipe");
    }
    // SAFETY: no other thread runs yet (see above), so the child is a
    // whole copy of this process.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()).context("--fork: cannot fork"),
        0 => {
            // SAFETY: the read end is this process's own and used nowhere else.
            unsafe { libc::close(fds[0]) };
            READY_FD.store(fds[1], Ordering::Relaxed);
            Ok(())
        }
        _ => {
            // SAFETY: both ends are this process's own; the write end is
            // closed so that the read ends when the child does.
            let mut rd = unsafe {
                libc::close(fds[1]);
                std::fs::File::from_raw_fd(fds[0])
            };
            let mut b = [0u8; 1];
            std::process::exit(if rd.read_exact(&mut b).is_ok() { 0 } else { 1 });
        }
    }
}

/// Tells the parent of a `--fork`ed server that the array is served.
fn ready_to_parent() {
    let fd = READY_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: `fd` is the pipe's write end, owned here alone (swapped
        // out above); the File closes it.
        let mut w = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let _ = std::io::Write::write_all(&mut w, b"1");
    }
}

/// Tells the service manager that the array is stopping (unless this
/// serve handed over to the new serve of a reload: crate::service::reload).
pub(super) fn notify_stopping() {
    if crate::service::reload::handed_to_child() {
        return; // the unit goes on: its main process is the new serve now
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping, sd_notify::NotifyState::Status("stopping: flushing and marking the members clean")]);
}
