//! `uraid serve NAME --ublk`: the served volume as `/dev/ublkbN` (see
//! the `uraid-ublk` crate), and the record that lets the next `serve`
//! find the device again.
//!
//! The record is `RUN_DIR/NAME.ublk`, JSON
//! `{"dev_id":N,"uuid":"<array uuid>","pid":P,"bdev":"/dev/ublkbN"}`,
//! written like the other state files (through the run directory's
//! descriptor, never through a symbolic link) once the device serves, and
//! removed by a clean stop, which also deletes the device. When `serve`
//! dies instead (kill -9, a crash), the device stays, its I/O waiting,
//! and the record with it: the next `serve NAME --ublk` re-attaches to
//! the device (user recovery), so a filesystem mounted on it goes on.
//! Other tools (the /dev/uraid/NAME links) read the record.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use uraid_core::Volume;
use uraid_ublk::{Attach, UblkExport, UblkOptions};

/// The record of a served ublk device.
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

/// Serves `volume` of array `name` (`uuid`, empty for a temporary array)
/// on a ublk device: the one its record names when a server that died
/// left it waiting, else a new one (`dev_id`, or the first free), and
/// records it. Errors: another process serves the array's device, the
/// record names a device of another array still waiting for its server,
/// or the device cannot be made or re-attached (the message says why).
pub(crate) fn start(name: &str, uuid: &str, volume: Arc<Volume>, read_only: bool, dev_id: Option<u32>) -> Result<UblkExport> {
    let path = record_path(name);
    let me = std::process::id();
    let mut attach = Attach::New(dev_id);
    if let Some(r) = read_record(name) {
        let dev = uraid_ublk::probe(r.dev_id)?;
        match dev {
            // Gone (a reboot, or deleted): the record is stale.
            None => {}
            Some(d) if d.live() || (r.pid != me && crate::runstate::alive(r.pid)) => bail!(
                "{} is served by process {} already ({} says so): two servers cannot attach to one device; \
                 stop that one first (uraid stop {name})",
                r.bdev,
                if d.live() { d.pid as u32 } else { r.pid },
                path.display()
            ),
            Some(d) if r.uuid != uuid || d.uuid.as_deref().is_some_and(|u| u != uuid) => bail!(
                "{} records {} of another array named '{name}' (UUID {}), not this one ({uuid}); it still waits \
                 for its server: serve that array to re-attach it, or remove {} once the device is gone",
                path.display(),
                r.bdev,
                d.uuid.unwrap_or(r.uuid),
                path.display()
            ),
            Some(d) if d.quiesced() && d.recoverable && !uuid.is_empty() => attach = Attach::Recover(r.dev_id),
            // Ours but stopped for good (or a temporary array's, whose
            // data is gone): it goes, and a new device is made.
            Some(_) => uraid_ublk::delete(r.dev_id)?,
        }
    }
    if let (Attach::Recover(n), Some(want)) = (attach, dev_id) {
        if n != want {
            eprintln!("uraid serve: re-attaching to /dev/ublkb{n}, where the filesystem of '{name}' waits, not --ublk-id {want}");
        }
    }
    let opts = UblkOptions { uuid: uuid.to_string(), name: name.to_string(), attach, read_only, queues: 0, depth: 0 };
    let export = UblkExport::start(volume, &opts)?;
    let rec = Record { dev_id: export.dev_id(), uuid: uuid.to_string(), pid: me, bdev: export.bdev().to_string() };
    if let Err(e) = crate::runstate::write_json(&path, &rec, me) {
        let _ = export.stop();
        return Err(e.context(format!("cannot record the ublk device in {}", path.display())));
    }
    if let Attach::Recover(_) = attach {
        println!("re-attached {}: what its users wrote before the restart is there, and what they had in flight was issued again", export.bdev());
    }
    Ok(export)
}

/// A clean stop: the device is stopped and deleted, and its record
/// removed. Errors: the driver refused to delete it.
pub(crate) fn stop(export: &UblkExport, name: &str) -> Result<()> {
    export.stop().with_context(|| format!("stopping {}", export.bdev()))?;
    let path = record_path(name);
    if read_record(name).is_some_and(|r| r.pid == std::process::id()) {
        let _ = std::fs::remove_file(&path);
    }
    Ok(())
}

/// Serving with no NBD listener: returns once `stop` is set (a signal,
/// `uraid stop`); the queue threads serve meanwhile.
pub(crate) fn wait(stop: &std::sync::atomic::AtomicBool) -> std::io::Result<()> {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}
