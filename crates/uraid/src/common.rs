//! Helpers every subcommand shares: reading member names from the command
//! line, or an array's name in their place.

use anyhow::Result;
use uraid_core::MemberSpec;

/// Parses member names (paths or `mem:` specs) as given on the command line,
/// or one array NAME or UUID in their place ([`crate::scan::member_args`]:
/// the configuration file, else a scan of the machine).
/// Errors: an array name not found (or found twice), the first name that is
/// not a valid member spec, with why.
pub(crate) fn specs(names: &[String]) -> Result<Vec<MemberSpec>> {
    crate::scan::member_args(names)?.iter().map(|n| n.parse::<MemberSpec>().map_err(Into::into)).collect()
}


/// A level's name from its superblock number, as status prints it:
/// `raid5`, `draid5` (`raidN` for a number uraid does not know).
pub(crate) fn level_name(n: u32) -> String {
    uraid_core::Level::from_number(n).map(|l| l.to_string()).unwrap_or_else(|_| format!("raid{n}"))
}

/// `unix_s` (seconds since 1970 UTC) as local time in ISO 8601 with the
/// offset from UTC, as `date --iso-8601=seconds` prints it:
/// `2026-11-27T00:15:03+01:00` (TZ and /etc/localtime decide the zone).
pub(crate) fn local_iso8601(unix_s: i64) -> String {
    let secs = unix_s as libc::time_t;
    // SAFETY: a zeroed tm is valid; localtime_r only writes into it (glibc
    // reads TZ once, at its first call).
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&secs, &mut tm);
        tm
    };
    let off = tm.tm_gmtoff / 60;
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{}{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        if off < 0 { '-' } else { '+' },
        off.abs() / 60,
        off.abs() % 60
    )
}

/// Waits for `child` to exit, at most `limit` (checking every 20 ms);
/// past that, or if it cannot be waited for, kills and reaps it. Returns
/// whether it exited by itself: how a helper program that may hang (on a
/// device that does not answer) is run without hanging its caller. A child
/// spawned as the leader of its own process group
/// (`CommandExt::process_group(0)`) is killed with its whole group, so a
/// wrapper script's own children cannot keep its output pipe open.
pub(crate) fn wait_or_kill(child: &mut std::process::Child, limit: std::time::Duration) -> bool {
    let t0 = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if t0.elapsed() < limit => std::thread::sleep(std::time::Duration::from_millis(20)),
            _ => break,
        }
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) touches no memory. The child is not reaped yet,
        // so its pid (and the group of the same number, if it leads one)
        // still names it; where it leads no group the call fails with
        // ESRCH and changes nothing.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}
