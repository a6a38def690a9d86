//! A member's lock: an exclusive `flock` taken for this process, the count
//! of the locks this process holds through live handles, and how long to
//! wait for a holder that has exited (or is this very process) before
//! calling the member in use.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use super::Member;
use crate::{bail, Error, Result};

/// The members this process holds locked through a live handle, by (device,
/// inode), with how many locks each: so that a lock held by this process
/// with no live handle is known for one that goes once the kernel has torn
/// down the io_uring that keeps its file open (see `Member::lock`).
static LIVE_LOCKS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<(u64, u64), usize>>> =
    std::sync::LazyLock::new(Default::default);

/// A lock taken by this process on a member, counted in [`LIVE_LOCKS`]
/// until dropped.
#[derive(Debug)]
pub(super) struct HeldLock((u64, u64));

impl HeldLock {
    fn new(key: (u64, u64)) -> HeldLock {
        *LIVE_LOCKS.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_insert(0) += 1;
        HeldLock(key)
    }

    fn live(key: (u64, u64)) -> bool {
        LIVE_LOCKS.lock().unwrap_or_else(|e| e.into_inner()).get(&key).is_some_and(|&n| n > 0)
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let mut m = LIVE_LOCKS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.0);
            }
        }
    }
}

/// Retries of 20 ms for a member that is busy (about two seconds: the lock
/// of a process that just died goes only when the kernel has torn down its
/// io_uring, which holds the member files, and that work is deferred).
pub(super) const BUSY_RETRIES: u32 = 100;

/// How many 20 ms retries of a member's lock while its holder is a process
/// that has already exited (30 s): see `Member::lock`.
const EXITED_HOLDER_RETRIES: u32 = 1500;

/// Who holds the `flock` of the file (device, inode) `key`, as /proc/locks
/// names it: a process that has exited or is exiting (a zombie, or gone:
/// the lock is released as soon as the kernel drops its last file
/// reference), this process, or another one (or none can be named); or
/// none at all (`Gone`: released since the caller's try).
fn lock_holder((dev, ino): (u64, u64)) -> Holder {
    // /proc/locks prints MAJOR:MINOR in hex and the inode in decimal.
    let want = format!("{:02x}:{:02x}:{}", libc::major(dev), libc::minor(dev), ino);
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else { return Holder::Other };
    for line in locks.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF"; blocked
        // waiters have a "->" field and are skipped.
        if f.len() < 6 || f[1] != "FLOCK" || f[5] != want {
            continue;
        }
        let Ok(pid) = f[4].parse::<u32>() else { return Holder::Other };
        if pid == 0 {
            return Holder::Other;
        }
        if pid == std::process::id() {
            return Holder::ThisProcess;
        }
        return match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the command name's closing parenthesis.
            Ok(stat) if matches!(stat.rsplit_once(')').and_then(|(_, r)| r.trim_start().chars().next()), Some('Z' | 'X')) => Holder::Exited,
            Ok(_) => Holder::Other,
            Err(_) => Holder::Exited,
        };
    }
    Holder::Gone
}

/// Who holds a member's lock (see [`lock_holder`]).
enum Holder {
    /// A process that has exited or is exiting.
    Exited,
    /// This process.
    ThisProcess,
    /// Another process, or none could be named.
    Other,
    /// /proc/locks names no holder of the file's lock: it was just
    /// released (or the filesystem's device numbers differ there).
    Gone,
}

/// How many more tries of a member's lock when /proc/locks names no
/// holder right after the lock was refused ([`Holder::Gone`]).
const GONE_RETRIES: u32 = 5;

/// How many 20 ms retries of a member's lock while its holder is this very
/// process with no live handle on it (10 s): an array just dropped here
/// keeps its members' files open until the kernel has torn its io_uring
/// down, deferred work that a loaded machine can hold past two seconds (an
/// array assembled again at once, as the tests do, met it). A member this
/// process holds through a live handle is refused after the usual wait.
const OWN_HOLDER_RETRIES: u32 = 500;

impl Member {
    pub(super) fn lock(&mut self) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        // (device, inode): what /proc/locks names and LIVE_LOCKS counts.
        let key = self.file.metadata().ok().map(|md| (md.dev(), md.ino()));
        let mut tries = 0;
        let mut gone = 0;
        loop {
            // SAFETY: flock on a valid open descriptor.
            let r = unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r == 0 {
                self.held = key.map(|k| Arc::new(HeldLock::new(k)));
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            let busy = e.raw_os_error() == Some(libc::EWOULDBLOCK);
            let mut longer = || match key.map(lock_holder) {
                Some(Holder::Exited) => tries < EXITED_HOLDER_RETRIES,
                Some(Holder::ThisProcess) => tries < OWN_HOLDER_RETRIES && key.is_some_and(|k| !HeldLock::live(k)),
                // Released between the flock above and the look at
                // /proc/locks: the next try takes it. (A few times only:
                // a filesystem whose device /proc/locks names otherwise,
                // as btrfs subvolumes, never shows the holder.)
                Some(Holder::Gone) => {
                    gone += 1;
                    gone <= GONE_RETRIES
                }
                _ => false,
            };
            if busy && (tries < BUSY_RETRIES || longer()) {
                // See the retry in open_path: the holder may be exiting.
                // While /proc/locks names a holder that has already exited
                // (its io_uring keeps the file open until the kernel's exit
                // work ends, which can take seconds on a loaded machine),
                // keep waiting longer than for a live holder.
                tries += 1;
                crate::clock::sleep(std::time::Duration::from_millis(20));
                continue;
            }
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                bail!(
                    Busy,
                    "member {} is in use by another uraid process (it holds the member's lock); \
                     stop that process first, or pick another member (a process just killed keeps the lock \
                     until the kernel has ended its I/O: if it was killed, try again)",
                    self.name
                );
            }
            return Err(Error::io("cannot lock member", Path::new(&self.name), e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{MemberSpec, OpenMode};
    use super::*;
    use std::fs::File;

    /// A lock whose holder has exited but whose file is still open
    /// elsewhere (as a killed process's io_uring keeps it for a while) is
    /// waited for past the 2 s given to a live holder.
    #[test]
    fn a_lock_held_for_an_exited_process_is_waited_for() {
        use std::os::fd::AsRawFd;
        let dir = std::env::temp_dir().join(format!("uraid-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m0");
        std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
        let held = File::open(&path).unwrap();
        // SAFETY: the child only calls flock and _exit (async-signal-safe)
        // before it ends; the parent reaps it below.
        let pid = unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                // The lock belongs to the open file description shared with
                // the parent, and /proc/locks names this child as its holder.
                libc::flock(held.as_raw_fd(), libc::LOCK_EX);
                libc::_exit(0);
            }
            pid
        };
        // The child stays a zombie (not reaped) until the open below is
        // done: its pid cannot go to another process meanwhile, which
        // /proc/locks would then name as a live holder.
        while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| st.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z'))) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(5));
            drop(held);
        });
        let spec = MemberSpec::Path(path.clone());
        let t0 = std::time::Instant::now();
        let m = Member::open(&spec, OpenMode { write: true, exclusive: true });
        release.join().unwrap();
        let mut st = 0;
        // SAFETY: waitpid(2) on this test's own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(m.is_ok(), "after {:?}: {}", t0.elapsed(), m.unwrap_err());
        // A live holder (this process, through another descriptor) is still
        // refused after the short wait.
        let again = Member::open(&spec, OpenMode { write: true, exclusive: true }).unwrap_err();
        assert!(again.to_string().contains("in use by another uraid process"), "{again}");
        drop(m);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
