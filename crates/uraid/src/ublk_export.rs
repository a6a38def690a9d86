//! `uraid serve NAME --ublk`: the served volume as `/dev/ublkbN` (see
//! the `uraid-ublk` crate), and the record that lets the next `serve`
//! find the device again.
//!
//! The record is `RUN_DIR/NAME.ublk`, JSON
//! `{"dev_id":N,"uuid":"<array uuid>","pid":P,"bdev":"/dev/ublkbN",
//! "volume":"<first volume's name>","volume_uuid":"<its UUID>"}`, the
//! first volume's device; a Matrix array (one device per volume) adds
//! `"volumes":[{"volume":NAME,"uuid":"<volume uuid>","dev_id":M,
//! "bdev":"/dev/ublkbM"}]` for the volumes after the first. It is written like the other state files (through the run directory's
//! descriptor, never through a symbolic link) once the device serves, and
//! removed by a clean stop, which also deletes the device. When `serve`
//! dies instead (kill -9, a crash), the device stays, its I/O waiting,
//! and the record with it: the next `serve NAME --ublk` re-attaches to
//! the device (user recovery), so a filesystem mounted on it goes on.
//! Other tools (the /dev/uraid/NAME links) read the record.
//!
//! A takeover (`uraid serve NAME --ublk --takeover`, e.g. a new binary
//! after an upgrade) goes the same way without a crash: the new process
//! asks the running one over the control socket ([`take_over`]); that one
//! pauses its ublk export until every request in flight is answered
//! ([`hand_over`]), stops taking new ones, flushes and closes the array
//! clean and exits without stopping the device ([`leave`]); the new one
//! waits for it to exit, assembles the array and re-attaches the device
//! (user recovery). The filesystem mounted on the device stays mounted;
//! NBD clients of the old process lose their connection and reconnect.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use uraid_core::export::Export as _;
use uraid_core::Volume;
use uraid_ublk::{Attach, UblkExport, UblkOptions, WeakUblkExport};

use crate::service::client::Client;
use crate::service::events::Events;
use crate::service::exports::Exports;
use crate::service::proto::{Command, ErrorBody};
use crate::service::Live;

/// How long the serving process has, by default, to answer the requests
/// in flight on its device when asked to hand it over (s).
pub(crate) const QUIET_SECONDS: u64 = 10;

/// How long a new `serve --takeover` waits for the old process to flush,
/// close the array and exit once it handed over (a large write-back cache
/// takes time to write back).
pub(crate) const EXIT_LIMIT: Duration = Duration::from_secs(300);

/// How long a device whose server just exited may stay live before the
/// kernel has quiesced it.
const QUIESCE_LIMIT: Duration = Duration::from_secs(10);

/// Set once this process has agreed to hand its ublk device over: its
/// stop leaves the device ([`leave`]) instead of deleting it.
static HANDING_OVER: AtomicBool = AtomicBool::new(false);

/// The ublk exports this process serves, for `status` ([`annotate`]).
static SERVED: Mutex<Vec<WeakUblkExport>> = Mutex::new(Vec::new());

/// The record of a served array's ublk devices: the first volume's at
/// the top (the whole record of an array of one volume), the others'
/// in `volumes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// N of /dev/ublkbN.
    pub dev_id: u32,
    /// The array's UUID (empty for a temporary `mem:` array).
    pub uuid: String,
    /// The serving process.
    pub pid: u32,
    /// The block device, `/dev/ublkbN`.
    pub bdev: String,
    /// The first volume's name (a Matrix array's only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub volume: String,
    /// The first volume's UUID (a Matrix array's only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub volume_uuid: String,
    /// The devices of the volumes after the first (a Matrix array), in
    /// the order of the volume table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeRecord>,
}

/// The device of a volume after the first, in a [`Record`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct VolumeRecord {
    /// The volume's name.
    pub volume: String,
    /// The volume's UUID, which its device keeps as its own (the first
    /// volume's device keeps the array's).
    pub uuid: String,
    /// N of /dev/ublkbN.
    pub dev_id: u32,
    /// The block device, `/dev/ublkbN`.
    pub bdev: String,
}

/// A volume to serve on a ublk device of its own.
pub(crate) struct Target {
    /// The volume's name.
    pub volume: String,
    /// The volume's UUID (empty for a temporary array).
    pub uuid: String,
    /// The volume.
    pub vol: Arc<Volume>,
}

/// Where the record of array `name` is: `RUN_DIR/NAME.ublk`.
pub(crate) fn record_path(name: &str) -> PathBuf {
    crate::runstate::run_dir().join(format!("{name}.ublk"))
}

/// The record of array `name`, if there is a trusted one.
pub(crate) fn read_record(name: &str) -> Option<Record> {
    crate::runstate::read_json(&record_path(name))
}

/// Checks, before anything is assembled, that this machine can make a
/// ublk device. Errors: what is missing and what to do
/// ([`uraid_ublk::support::check`]).
pub(crate) fn check() -> Result<()> {
    uraid_ublk::support::check()?;
    Ok(())
}

/// Serves each volume of `targets` (the volumes of array `name`, UUID
/// `uuid`, empty for a temporary array, in the order of its volume table)
/// on a ublk device of its own: the one the record names for it when a
/// server that died left it waiting, else a new one (`dev_id` for the
/// first volume, or the first free), and records them all. Returns the
/// exports in the order of `targets`.
///
/// Errors: another process serves one of the array's devices, the record
/// names a device of another array still waiting for its server, or a
/// device cannot be made or re-attached (the message says why). Then the
/// devices made here are deleted, those re-attached left waiting again
/// (as after a kill), and the record is left as it was.
pub(crate) fn start_all(name: &str, uuid: &str, targets: &[Target], read_only: bool, dev_id: Option<u32>) -> Result<Vec<UblkExport>> {
    let path = record_path(name);
    let me = std::process::id();
    let rec = read_record(name);
    // First every device's fate, so that a refusal changes nothing.
    let mut attach = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        // What the record says of this volume's device: (N, device, the
        // UUID the device keeps).
        let prior = rec.as_ref().and_then(|r| match i {
            0 => Some((r.dev_id, r.bdev.clone(), r.uuid.clone())),
            _ => r.volumes.iter().find(|v| v.uuid == t.uuid).map(|v| (v.dev_id, v.bdev.clone(), v.uuid.clone())),
        });
        let pid = rec.as_ref().map_or(me, |r| r.pid);
        let ident = if i == 0 { uuid } else { t.uuid.as_str() };
        attach.push(plan(name, &path, ident, prior, pid, if i == 0 { dev_id } else { None })?);
    }
    let mut started: Vec<(UblkExport, Attach)> = Vec::new();
    for (i, (t, &how)) in targets.iter().zip(&attach).enumerate() {
        let ident = if i == 0 { uuid } else { t.uuid.as_str() };
        let label = if i == 0 { name.to_string() } else { format!("{name}:{}", t.volume) };
        let opts = UblkOptions { uuid: ident.to_string(), name: label, attach: how, read_only, queues: 0, depth: 0 };
        match UblkExport::start(t.vol.clone(), &opts) {
            Ok(e) => started.push((e, how)),
            Err(e) => {
                abandon(started);
                let e = anyhow::Error::new(e);
                return Err(if targets.len() > 1 { e.context(format!("volume '{}' of array '{name}'", t.volume)) } else { e });
            }
        }
    }
    let more: Vec<VolumeRecord> = started
        .iter()
        .zip(targets)
        .skip(1)
        .map(|((e, _), t)| VolumeRecord { volume: t.volume.clone(), uuid: t.uuid.clone(), dev_id: e.dev_id(), bdev: e.bdev().to_string() })
        .collect();
    let (first, t0) = (&started[0].0, &targets[0]);
    let rec = Record {
        dev_id: first.dev_id(),
        uuid: uuid.to_string(),
        pid: me,
        bdev: first.bdev().to_string(),
        // An array of one volume: the record as before Matrix volumes
        // were served.
        volume: if targets.len() > 1 { t0.volume.clone() } else { String::new() },
        volume_uuid: if targets.len() > 1 { t0.uuid.clone() } else { String::new() },
        volumes: more,
    };
    if let Err(e) = crate::runstate::write_json(&path, &rec, me) {
        abandon(started);
        return Err(e.context(format!("cannot record the ublk devices in {}", path.display())));
    }
    for (e, how) in &started {
        if let Attach::Recover(_) = how {
            println!("re-attached {}: what its users wrote before the restart is there, and what they had in flight was issued again", e.bdev());
        }
    }
    SERVED.lock().unwrap_or_else(|p| p.into_inner()).extend(started.iter().map(|(e, _)| e.downgrade()));
    Ok(started.into_iter().map(|(e, _)| e).collect())
}

/// How the device of one volume is had: `prior`, what the record says of
/// it (N, device, the UUID the device keeps) as written by process `pid`;
/// `ident` the UUID it must keep; `dev_id` the N asked for a new one.
/// A device of ours stopped for good (or a temporary array's) is deleted
/// here. Errors: see [`start_all`].
fn plan(name: &str, path: &std::path::Path, ident: &str, prior: Option<(u32, String, String)>, pid: u32, dev_id: Option<u32>) -> Result<Attach> {
    let me = std::process::id();
    let mut attach = Attach::New(dev_id);
    if let Some((n, bdev, recorded)) = prior {
        let mut dev = uraid_ublk::probe(n)?;
        // Its server just exited (a takeover, a kill): the kernel
        // quiesces the device in a moment.
        let t0 = Instant::now();
        while dev.as_ref().is_some_and(|d| d.live() && pid != me && d.pid as u32 == pid && !crate::runstate::alive(pid)) && t0.elapsed() < QUIESCE_LIMIT {
            std::thread::sleep(Duration::from_millis(100));
            dev = uraid_ublk::probe(n)?;
        }
        match dev {
            // Gone (a reboot, or deleted): the record is stale.
            None => {}
            Some(d) if d.live() || (pid != me && crate::runstate::alive(pid)) => bail!(
                "{bdev} is served by process {} already ({} says so): two servers cannot attach to one device; \
                 stop that one first (uraid stop {name})",
                if d.live() { d.pid as u32 } else { pid },
                path.display()
            ),
            Some(d) if recorded != ident || d.uuid.as_deref().is_some_and(|u| u != ident) => bail!(
                "{} records {bdev} of another array named '{name}' (UUID {}), not this one ({ident}); it still waits \
                 for its server: serve that array to re-attach it, or remove {} once the device is gone",
                path.display(),
                d.uuid.unwrap_or(recorded),
                path.display()
            ),
            Some(d) if d.quiesced() && d.recoverable && !ident.is_empty() => attach = Attach::Recover(n),
            // Ours but stopped for good (or a temporary array's, whose
            // data is gone): it goes, and a new device is made.
            Some(_) => uraid_ublk::delete(n)?,
        }
    }
    if let (Attach::Recover(n), Some(want)) = (attach, dev_id) {
        if n != want {
            eprintln!("uraid serve: re-attaching to /dev/ublkb{n}, where the filesystem of '{name}' waits, not --ublk-id {want}");
        }
    }
    Ok(attach)
}

/// After a failed [`start_all`]: the devices made are deleted; those
/// re-attached are left to wait for the next server, as a kill leaves
/// them (their handles are never dropped, which would delete them; the
/// kernel quiesces them when this process ends).
fn abandon(started: Vec<(UblkExport, Attach)>) {
    for (e, how) in started {
        match how {
            Attach::New(_) => {
                let _ = e.stop();
            }
            Attach::Recover(_) => std::mem::forget(e),
        }
    }
}

/// A clean stop: every device is stopped and deleted, and the record
/// removed. Errors: the driver refused to delete a device (the others
/// are stopped all the same).
pub(crate) fn stop_all(exports: &[UblkExport], name: &str) -> Result<()> {
    SERVED.lock().unwrap_or_else(|p| p.into_inner()).retain(|w| w.upgrade().is_some_and(|s| exports.iter().all(|e| e.bdev() != s.bdev())));
    let errs: Vec<String> = exports.iter().filter_map(|e| e.stop().err().map(|m| format!("stopping {}: {m}", e.bdev()))).collect();
    let path = record_path(name);
    if read_record(name).is_some_and(|r| r.pid == std::process::id()) {
        let _ = std::fs::remove_file(&path);
    }
    match errs.is_empty() {
        true => Ok(()),
        false => bail!("{}", errs.join("; ")),
    }
}

/// Serving with no NBD listener: returns once `stop` is set (a signal,
/// `uraid stop`); the queue threads serve meanwhile. Asleep until the
/// one who sets `stop` unparks this thread (a look every 5 s besides).
pub(crate) fn wait(stop: &std::sync::atomic::AtomicBool) -> std::io::Result<()> {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::park_timeout(std::time::Duration::from_secs(5));
    }
    Ok(())
}

/// Whether this process agreed to hand its ublk device over (its stop
/// then calls [`leave`], not [`stop`]).
pub(crate) fn handing_over() -> bool {
    HANDING_OVER.load(Ordering::Acquire)
}

/// The stop of a process that hands its devices over: each device is
/// left quiesced for the new server (see [`UblkExport::leave`]), the
/// record and the /dev/uraid links kept for it. Call it with the exports
/// paused and quiet ([`hand_over`] left them so).
pub(crate) fn leave_all(exports: &[UblkExport], name: &str) {
    SERVED.lock().unwrap_or_else(|p| p.into_inner()).retain(|w| w.upgrade().is_some_and(|s| exports.iter().all(|e| e.bdev() != s.bdev())));
    for export in exports {
        export.leave();
        eprintln!(
            "uraid serve: {} is left to the new server of '{name}': it waits (quiesced) once this process exits, and is re-attached",
            export.bdev()
        );
    }
}

/// The manager's side of the `takeover` command: pauses every ublk
/// export of the served array `name` and waits until its requests in
/// flight are answered (at most `quiet_seconds`, default
/// [`QUIET_SECONDS`]), then marks this process as handing over, sends the
/// TakeOver event and stops the service (NBD connections close; the
/// array is flushed and closed clean; the device is left, see [`leave`]).
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
    if handing_over() {
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
    HANDING_OVER.store(true, Ordering::Release);
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
    crate::serve::wake();
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
/// device ([`start`]).
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
    check()?;
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

/// `status`'s list of exports (`[{"kind", "address"}]`) with, for each
/// ublk device of this process, the bytes the kernel's device has
/// (`device_bytes`) and, when the volume has grown past it (the driver
/// cannot resize a device before Linux 6.16), a `note` saying the device
/// keeps its old size until the export restarts.
pub(crate) fn annotate(mut exports: serde_json::Value) -> serde_json::Value {
    let served: Vec<UblkExport> = SERVED.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(|w| w.upgrade()).collect();
    for e in exports.as_array_mut().into_iter().flatten() {
        let Some(u) = served.iter().find(|u| e["kind"] == "ublk" && e["address"] == u.bdev()) else { continue };
        let (dev, vol) = (u.device_bytes(), u.volume().capacity());
        e["device_bytes"] = dev.into();
        if dev < vol {
            e["note"] = format!(
                "{} keeps {dev} bytes until the export restarts (the volume has {vol}): unmount it, `uraid stop` and \
                 `uraid serve --ublk` the array, then grow the filesystem",
                u.bdev()
            )
            .into();
        }
    }
    exports
}
