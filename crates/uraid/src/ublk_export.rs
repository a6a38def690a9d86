//! `uraid serve NAME --ublk`: the served volume as `/dev/ublkbN` (see
//! the `uraid-ublk` crate), and the record that lets the next `serve`
//! find the device again.
//!
//! The record is `RUN_DIR/NAME.ublk`, JSON
//! `{"dev_id":N,"uuid":"<array uuid>","pid":P,"bdev":"/dev/ublkbN",
//! "volume":"<first volume's name>","volume_uuid":"<its UUID>"}`, the
//! first volume's device; a Matrix array (one device per volume) adds
//! `"volumes":[{"volume":NAME,"uuid":"<volume uuid>","dev_id":M,
//! "bdev":"/dev/ublkbM"}]` for the volumes after the first;
//! `"user_copy":true` when the devices were made with UBLK_F_USER_COPY
//! (uraid moves the data, off the queue threads: the default where the
//! driver has it; `URAID_UBLK_USER_COPY=0` in serve's environment
//! leaves the copy to the kernel). It is written like the other state files (through the run directory's
//! descriptor, never through a symbolic link) once the device serves, and
//! removed by a clean stop, which also deletes the device. When `serve`
//! dies instead (kill -9, a crash), the device stays, its I/O waiting,
//! and the record with it: the next `serve NAME --ublk` re-attaches to
//! the device (user recovery), so a filesystem mounted on it goes on.
//! Other tools (the /dev/uraid/NAME links) read the record.
//!
//! A takeover (`uraid serve NAME --ublk --takeover`, e.g. a new binary
//! after an upgrade) goes the same way without a crash: the new process
//! asks the running one over the control socket (crate::service::takeover::take_over); that one
//! pauses its ublk export until every request in flight is answered
//! (crate::service::takeover::hand_over), stops taking new ones, flushes and closes the array
//! clean and exits without stopping the device ([`leave_all`]); the new one
//! waits for it to exit, assembles the array and re-attaches the device
//! (user recovery). The filesystem mounted on the device stays mounted;
//! NBD clients of the old process lose their connection and reconnect.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use uraid_core::export::Export as _;
use uraid_core::Volume;
use uraid_ublk::{Attach, UblkExport, UblkOptions, WeakUblkExport};


/// How long a device whose server just exited may stay live before the
/// kernel has quiesced it.
const QUIESCE_LIMIT: Duration = Duration::from_secs(10);

/// Set once this process has agreed to hand its ublk device over: its
/// stop leaves the device ([`leave_all`]) instead of deleting it.
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
    /// The first device was made with UBLK_F_USER_COPY.
    #[serde(default)]
    pub user_copy: bool,
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
        user_copy: first.user_copy(),
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
/// then calls [`leave_all`], not [`stop_all`]).
pub(crate) fn handing_over() -> bool {
    HANDING_OVER.load(Ordering::Acquire)
}

/// The stop of a process that hands its devices over: each device is
/// left quiesced for the new server (see [`UblkExport::leave`]), the
/// record and the /dev/uraid links kept for it. Call it with the exports
/// paused and quiet (crate::service::takeover::hand_over left them so).
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

/// Marks this process as handing its devices over: its stop then calls
/// [`leave_all`], not [`stop_all`] (see crate::service::takeover).
pub(crate) fn set_handing_over() {
    HANDING_OVER.store(true, Ordering::Release);
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
