//! `uraid serve NAME --ublk --takeover`: the old server's side (the
//! manager's `takeover` command: pause, answer what is in flight, leave
//! the ublk devices quiesced, stop) and the new server's (ask, wait for
//! the old process to exit). The devices themselves are
//! crate::ublk_export's; the new server re-attaches them there (user
//! recovery).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::client::Client;
use super::events::Events;
use super::exports::Exports;
use super::proto::{Command, ErrorBody};
use super::Live;

/// How long the serving process has, by default, to answer the requests
/// in flight on its device when asked to hand it over (s).
pub(crate) const QUIET_SECONDS: u64 = 10;

/// How long a new `serve --takeover` waits for the old process to flush,
/// close the array and exit once it handed over (a large write-back cache
/// takes time to write back).
pub(crate) const EXIT_LIMIT: Duration = Duration::from_secs(300);

/// The manager's side of the `takeover` command: pauses every ublk
/// export of the served array `name` and waits until its requests in
/// flight are answered (at most `quiet_seconds`, default
/// [`QUIET_SECONDS`]), then marks this process as handing over, sends the
/// TakeOver event and stops the service (NBD connections close; the
/// array is flushed and closed clean; the device is left, see crate::ublk_export::leave_all).
/// Returns `{"pid", "devices", "nbd"}`.
///
/// Errors (nothing changes, the array keeps being served): no ublk
/// export (a takeover keeps a block device's users going, and there is
/// none: NBD clients would only lose their connection), `by` is no
/// running process other than this one, or requests still in flight
/// after the wait.
pub(crate) fn hand_over(exports: &Exports, live: &Live, events: &Events, name: &str, quiet_seconds: Option<u64>, by: u32) -> Result<serde_json::Value, ErrorBody> {
    let me = std::process::id();
    let ublk: Vec<_> = exports.list().iter().map(|e| &e.export).filter(|e| e.kind() == "ublk").collect();
    let nbd: Vec<String> = exports.list().iter().map(|e| &e.export).filter(|e| e.kind() != "ublk").map(|e| e.address()).collect();
    if ublk.is_empty() {
        return Err(ErrorBody::new("InvalidInput", no_ublk(name, me)));
    }
    if by == me || !crate::runstate::alive(by) {
        return Err(ErrorBody::new(
            "InvalidInput",
            format!("process {by} is not running: only the new server (`uraid serve {name} --ublk --takeover`) takes the device over"),
        ));
    }
    if crate::ublk_export::handing_over() {
        return Err(ErrorBody::new("Busy", format!("process {me} is handing array '{name}' over already")));
    }
    let limit = Duration::from_secs(quiet_seconds.unwrap_or(QUIET_SECONDS).clamp(1, 3600));
    ublk.iter().for_each(|e| e.pause());
    let t0 = Instant::now();
    while !ublk.iter().all(|e| e.is_quiet()) {
        if t0.elapsed() > limit {
            ublk.iter().for_each(|e| e.resume());
            return Err(ErrorBody::new(
                "Busy",
                format!(
                    "the requests in flight on {} were not answered within {} s (a member is slow?): process {me} \
                     keeps serving, nothing was changed; try again",
                    ublk.iter().map(|e| e.address()).collect::<Vec<_>>().join(", "),
                    limit.as_secs()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    crate::ublk_export::set_handing_over();
    // A reload's new serve becomes the unit's main process (MAINPID=).
    super::reload::handing_over_to(by);
    let devices: Vec<String> = ublk.iter().map(|e| e.address()).collect();
    events.emit(
        "TakeOver",
        None,
        format!(
            "process {me} hands {} over to process {by}: requests in flight answered, the array is flushed and closed clean, \
             the device waits for the new server{}",
            devices.join(", "),
            if nbd.is_empty() { String::new() } else { format!("; NBD clients of {} are disconnected (they reconnect)", nbd.join(", ")) }
        ),
    );
    live.stop.store(true, Ordering::Relaxed);
    live.interrupt.store(true, Ordering::Relaxed);
    super::wake::wake();
    Ok(serde_json::json!({"pid": me, "devices": devices, "nbd": nbd}))
}

/// Why array `name`, served by process `pid` without a ublk device, is
/// not taken over.
fn no_ublk(name: &str, pid: u32) -> String {
    format!(
        "array '{name}' is served by process {pid} without --ublk: a takeover keeps a block device and its mounts \
         going, and there is none (its NBD clients would only lose their connection). Nothing was changed. To move it \
         to a new uraid: `uraid stop {name}`, then `uraid serve {name} ...` (NBD clients reconnect)"
    )
}

/// What the process serving array `name` handed over ([`take_over`]).
#[derive(Debug, Clone)]
pub(crate) struct TakenOver {
    /// The old process.
    pub pid: u32,
    /// Its ublk devices, left waiting for this process.
    pub devices: Vec<String>,
    /// Its NBD addresses, whose clients were disconnected.
    pub nbd: Vec<String>,
}

/// `serve --takeover`: asks the process that serves array `members` (its
/// name, or its members' paths) to hand its ublk device over, and waits
/// until it has flushed, closed the array and exited. Prints what
/// happens. The caller then assembles the array and re-attaches the
/// devices (crate::ublk_export::start_all).
///
/// Errors: no process serves the array; it serves it without ublk
/// (refused: nothing to keep); ublk is unusable here; it did not get its
/// requests in flight answered within [`QUIET_SECONDS`] (it keeps
/// serving, nothing changed); it handed over but did not exit within
/// [`EXIT_LIMIT`].
pub(crate) fn take_over(members: &[String]) -> Result<TakenOver> {
    let Some(c) = crate::service::client::find(members) else {
        // The array's name when members were given (their superblock's).
        let what = members
            .iter()
            .filter_map(|m| m.parse::<uraid_core::MemberSpec>().ok())
            .find_map(|spec| match uraid_core::control::array::examine(&spec) {
                Ok(uraid_core::control::array::Examination::Member(sb)) => Some(sb.name),
                _ => None,
            })
            .unwrap_or_else(|| members.join(" "));
        bail!(
            "no `uraid serve` runs array '{what}' here (no control socket in {} answers for it): there is nothing to take over. \
             Serve it with `uraid serve {what} --ublk` (without --takeover)",
            crate::runstate::run_dir().display()
        );
    };
    let name = c.name.clone();
    let st = c.call(Command::Status, &mut |_| {}).with_context(|| format!("cannot ask the server of array '{name}' how it serves"))?;
    let pid = st["pid"].as_u64().unwrap_or(0) as u32;
    let has_ublk = st["exports"].as_array().is_some_and(|l| l.iter().any(|e| e["kind"] == "ublk"));
    if !has_ublk {
        bail!("{}", no_ublk(&name, pid));
    }
    // The new side must be able to re-attach before the old one lets go.
    crate::ublk_export::check()?;
    let Some(c) = Client::connect(&name) else {
        bail!("the server of array '{name}' (process {pid}) went away before the takeover: serve it with `uraid serve {name} --ublk`");
    };
    let me = std::process::id();
    println!("asking process {pid}, which serves '{name}', to hand its device over");
    let r = c
        .call(Command::Takeover { quiet_seconds: Some(QUIET_SECONDS), by: me }, &mut |_| {})
        .with_context(|| format!("process {pid} did not hand array '{name}' over; it keeps serving it"))?;
    let strs = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().map(|l| l.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
    };
    let t = TakenOver { pid: r["pid"].as_u64().map_or(pid, |p| p as u32), devices: strs(&r["devices"]), nbd: strs(&r["nbd"]) };
    println!(
        "process {} handed {} over: its requests in flight were answered, new ones wait in the kernel; it now flushes and closes '{name}'",
        t.pid,
        t.devices.join(", ")
    );
    if !t.nbd.is_empty() {
        println!(
            "its NBD clients ({}) lost their connection: they reconnect to this server (nbd-client -persist, qemu's reconnect-delay)",
            t.nbd.join(", ")
        );
    }
    let t0 = Instant::now();
    while crate::runstate::alive(t.pid) {
        if t0.elapsed() > EXIT_LIMIT {
            bail!(
                "process {} handed '{name}' over but has not exited within {} s (still writing back its cache?): its device \
                 waits; once it has exited, `uraid serve {name} --ublk` re-attaches it",
                t.pid,
                EXIT_LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("process {} exited after {:.1} s; assembling '{name}' and re-attaching", t.pid, t0.elapsed().as_secs_f64());
    Ok(t)
}

