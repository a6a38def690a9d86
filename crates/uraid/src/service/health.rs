//! Drive health (issue 32): each member drive's SMART / NVMe health log,
//! read with smartmontools (`smartctl --json -a DEVICE`, its JSON format
//! version 1, as smartctl_exporter reads it), polled by `uraid serve`
//! every `health_interval` (default [`DEFAULT_INTERVAL`]), turned into
//! events when something crosses a limit, and published for `status`, the
//! metrics (smartctl_exporter's names) and the console.
//!
//! The events, each sent once when its condition starts (and again only
//! after it cleared and came back; a worse bad-block count sends
//! MediaErrors again):
//! - `HealthWarning`: the NVMe critical warning byte is not 0 (bits, NVMe
//!   base specification 2.0, SMART / Health Information log: 0 spare below
//!   threshold, 1 temperature, 2 reliability degraded, 3 read-only, 4
//!   volatile memory backup failed), or the drive's own SMART verdict is
//!   FAILED;
//! - `TemperatureHigh`: the composite temperature at or above the limit
//!   (the config's `temperature_warn`, else the drive's own warning
//!   threshold when smartctl gives it, else 70 °C);
//! - `WearOut`: NVMe percentage used at or above `wear_warn` (default 80 %);
//! - `SpareLow`: available spare below the drive's threshold, or below
//!   `spare_warn` when set;
//! - `MediaErrors`: the bad-block count went up (NVMe media and data
//!   integrity errors; ATA reallocated + pending + offline uncorrectable
//!   sectors, attributes 5, 197, 198; SCSI grown defect list).
//!
//! Only members that are drives are polled (see
//! `uraid_core::io::identity`: not files, `mem:`, loop or dm devices).
//! smartctl is run with a time limit, so a drive that hangs its admin
//! commands cannot hang the service; a drive smartctl cannot read is
//! reported as such, once.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// Default interval between two polls of every drive, seconds (smartd
/// polls every 30 min; drives update their logs about once a minute).
pub(crate) const DEFAULT_INTERVAL: u64 = 300;

/// How long one smartctl run may take before it is killed.
const SMARTCTL_TIMEOUT: Duration = Duration::from_secs(30);

/// What one poll of one drive found. Every field is what smartctl
/// reported; `None` where the drive or protocol has no such figure.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub(crate) struct Health {
    /// The device polled (the member's path).
    pub device: String,
    /// `NVMe`, `ATA` or `SCSI`.
    pub protocol: String,
    /// The drive's own overall verdict (SMART PASSED = true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smart_passed: Option<bool>,
    /// NVMe critical warning bits (0: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub critical_warning: Option<u8>,
    /// Current (composite) temperature, °C.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<i64>,
    /// The drive's own warning temperature (NVMe WCTEMP), °C.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature_warning: Option<i64>,
    /// NVMe percentage of rated endurance used (may exceed 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percentage_used: Option<u64>,
    /// NVMe available spare, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_spare: Option<u64>,
    /// NVMe available spare threshold, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_spare_threshold: Option<u64>,
    /// NVMe media and data integrity errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_errors: Option<u64>,
    /// ATA reallocated (5) + current pending (197) + offline uncorrectable
    /// (198) sectors, raw values; SCSI grown defects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bad_sectors: Option<u64>,
    /// NVMe error information log entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_log_entries: Option<u64>,
    /// NVMe unsafe shutdowns (ATA attribute 174 where it exists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsafe_shutdowns: Option<u64>,
    /// Power-on hours.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_on_hours: Option<u64>,
    /// Power cycles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_cycles: Option<u64>,
    /// smartctl's exit status (a bit mask, smartctl(8) "RETURN VALUES").
    pub smartctl_exit_status: i64,
}

impl Health {
    /// The count whose increase is a MediaErrors event: NVMe media errors,
    /// else the ATA/SCSI bad sectors.
    pub(crate) fn bad_blocks(&self) -> Option<u64> {
        self.media_errors.or(self.bad_sectors)
    }
}

/// Limits of the health events (the config's `[monitor]` table).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Limits {
    /// TemperatureHigh at or above this, °C; `None`: the drive's warning
    /// threshold, else 70.
    pub temperature: Option<i64>,
    /// WearOut at or above this percentage used; `None`: 80.
    pub wear: Option<u64>,
    /// SpareLow below this available spare, percent; `None`: the drive's
    /// own threshold.
    pub spare: Option<u64>,
}

/// Parses smartctl's JSON (`smartctl --json -a`) of `device`. Missing or
/// odd fields are `None`; nothing in the JSON can make it panic.
pub(crate) fn parse(device: &str, v: &Value) -> Health {
    let u = |x: &Value| x.as_u64();
    let nv = &v["nvme_smart_health_information_log"];
    let ata_raw = |id: u64| -> Option<u64> {
        v["ata_smart_attributes"]["table"].as_array()?.iter().find(|a| a["id"].as_u64() == Some(id)).and_then(|a| a["raw"]["value"].as_u64())
    };
    let bad_sectors = {
        let ata: Vec<u64> = [5, 197, 198].iter().filter_map(|&i| ata_raw(i)).collect();
        if !ata.is_empty() {
            Some(ata.iter().sum())
        } else {
            u(&v["scsi_grown_defect_list"])
        }
    };
    Health {
        device: device.to_string(),
        protocol: v["device"]["protocol"].as_str().unwrap_or("").to_string(),
        smart_passed: v["smart_status"]["passed"].as_bool(),
        critical_warning: u(&nv["critical_warning"]).map(|w| w.min(255) as u8),
        temperature: v["temperature"]["current"].as_i64().or_else(|| nv["temperature"].as_i64()),
        temperature_warning: v["nvme_composite_temperature_threshold"]["warning"].as_i64().filter(|&t| t > 0),
        percentage_used: u(&nv["percentage_used"]),
        available_spare: u(&nv["available_spare"]),
        available_spare_threshold: u(&nv["available_spare_threshold"]),
        media_errors: u(&nv["media_errors"]),
        bad_sectors,
        error_log_entries: u(&nv["num_err_log_entries"]),
        unsafe_shutdowns: u(&nv["unsafe_shutdowns"]).or_else(|| ata_raw(174)),
        power_on_hours: u(&v["power_on_time"]["hours"]),
        power_cycles: u(&v["power_cycle_count"]),
        smartctl_exit_status: v["smartctl"]["exit_status"].as_i64().unwrap_or(0),
    }
}

/// The smartctl to run: `$URAID_SMARTCTL`, else `smartctl` on PATH, else
/// /usr/sbin/smartctl.
pub(crate) fn smartctl() -> PathBuf {
    if let Some(p) = std::env::var_os("URAID_SMARTCTL") {
        return PathBuf::from(p);
    }
    let on_path = std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join("smartctl")).find(|c| c.exists()));
    on_path.unwrap_or_else(|| PathBuf::from("/usr/sbin/smartctl"))
}

/// The `URAID_FAILPOINT_HEALTH_POLL=PATH[,PATH...]` failpoint (end-to-end
/// tests only): members polled although they are no drives (loop
/// devices, files), so that a test can give them the recorded smartctl
/// JSON of real drives through `URAID_SMARTCTL`
/// (crates/uraid/tests/data/smartctl).
pub(crate) fn polled_anyway(device: &str) -> bool {
    std::env::var("URAID_FAILPOINT_HEALTH_POLL").is_ok_and(|v| v.split(',').any(|p| p == device))
}

/// Reads the health of `device` with `smartctl --json -a`. Errors (as
/// text for the event): smartctl missing, killed after
/// [`SMARTCTL_TIMEOUT`], or its output is no JSON, or it could not open or
/// query the device (exit status bits 1 and 2).
pub(crate) fn read(smartctl: &Path, device: &str) -> Result<Health, String> {
    read_within(smartctl, device, SMARTCTL_TIMEOUT)
}

/// [`read`] with `limit` in place of [`SMARTCTL_TIMEOUT`]. smartctl runs
/// in a process group of its own, killed whole at the limit, so that
/// nothing it started (a wrapper script's `sleep`) holds its output open.
fn read_within(smartctl: &Path, device: &str, limit: Duration) -> Result<Health, String> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(smartctl)
        .args(["--json", "-a", device])
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {} ({e}); install smartmontools", smartctl.display()))?;
    let mut out = child.stdout.take().expect("piped");
    // Read on a thread so that a hung smartctl can be killed.
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        // At most 4 MiB: smartctl's JSON is a few KiB.
        let _ = std::io::Read::read_to_end(&mut std::io::Read::take(&mut out, 4 << 20), &mut buf);
        buf
    });
    if !crate::common::wait_or_kill(&mut child, limit) {
        return Err(format!("smartctl did not answer within {} s (the drive does not answer admin commands?)", limit.as_secs()));
    }
    let bytes = reader.join().unwrap_or_default();
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| format!("smartctl's output is not JSON ({e}); smartmontools 7.0 or later is needed"))?;
    let h = parse(device, &v);
    if h.smartctl_exit_status & 0b11 != 0 {
        let msg = v["smartctl"]["messages"].as_array().and_then(|m| m.first()).and_then(|m| m["string"].as_str()).unwrap_or("").to_string();
        return Err(format!("smartctl cannot read the drive (exit status {}): {msg}", h.smartctl_exit_status));
    }
    Ok(h)
}

/// The NVMe critical warning bits in words.
fn warning_bits(w: u8) -> String {
    const BITS: [&str; 5] = ["available spare below threshold", "temperature beyond a threshold", "reliability degraded (media or internal errors)", "media in read-only mode", "volatile memory backup device failed"];
    let mut v: Vec<String> = BITS.iter().enumerate().filter(|(i, _)| w & (1 << i) != 0).map(|(_, s)| s.to_string()).collect();
    if w >> 5 != 0 {
        v.push(format!("other bits 0x{:02x}", w & 0xe0));
    }
    v.join(", ")
}

/// The events that `now` raises after `prev` (the last poll of the same
/// drive; `None` at the first poll): `(event, detail)`, each once per
/// start of its condition (see the module docs).
pub(crate) fn assess(prev: Option<&Health>, now: &Health, lim: &Limits) -> Vec<(&'static str, String)> {
    let mut ev = Vec::new();
    let warned = |h: &Health| h.critical_warning.unwrap_or(0) != 0 || h.smart_passed == Some(false);
    if warned(now) && (prev.is_none_or(|p| !warned(p) || p.critical_warning != now.critical_warning)) {
        let mut why = Vec::new();
        if let Some(w) = now.critical_warning.filter(|&w| w != 0) {
            why.push(format!("NVMe critical warning 0x{w:02x}: {}", warning_bits(w)));
        }
        if now.smart_passed == Some(false) {
            why.push("the drive's SMART overall-health self-assessment is FAILED".to_string());
        }
        ev.push(("HealthWarning", format!("{}; back up and replace the drive", why.join("; "))));
    }
    let temp_limit = |h: &Health| lim.temperature.or(h.temperature_warning).unwrap_or(70);
    let hot = |h: &Health| h.temperature.is_some_and(|t| t > 0 && t >= temp_limit(h));
    if hot(now) && !prev.is_some_and(hot) {
        ev.push(("TemperatureHigh", format!("{} °C, at or above the limit of {} °C; check the cooling and airflow", now.temperature.unwrap_or(0), temp_limit(now))));
    }
    let wear_limit = lim.wear.unwrap_or(80);
    let worn = |h: &Health| h.percentage_used.is_some_and(|p| p >= wear_limit);
    if worn(now) && !prev.is_some_and(worn) {
        ev.push(("WearOut", format!("{}% of its rated endurance used (limit {wear_limit}%); plan its replacement", now.percentage_used.unwrap_or(0))));
    }
    let spare_low = |h: &Health| match (h.available_spare, lim.spare.or(h.available_spare_threshold)) {
        (Some(s), Some(t)) => s < t,
        _ => false,
    };
    if spare_low(now) && !prev.is_some_and(spare_low) {
        ev.push((
            "SpareLow",
            format!(
                "available spare {}% is below {}%; the drive is running out of spare blocks, replace it",
                now.available_spare.unwrap_or(0),
                lim.spare.or(now.available_spare_threshold).unwrap_or(0)
            ),
        ));
    }
    if let Some(b) = now.bad_blocks().filter(|&b| b > 0) {
        let before = prev.and_then(Health::bad_blocks).unwrap_or(0);
        if b > before {
            let what = if now.media_errors.is_some() { "media and data integrity errors" } else { "bad sectors (reallocated, pending, uncorrectable)" };
            ev.push(("MediaErrors", format!("{b} {what} (was {before}); redundancy covers them, but watch the drive")));
        }
    }
    ev
}

/// One drive's health state across polls: the last reading, or the error
/// of the last poll (reported once until it changes).
#[derive(Debug, Clone, Default)]
pub(crate) struct Watch {
    last: Option<Health>,
    error: Option<String>,
}

impl Watch {
    /// Takes the result of one poll; returns the events it raises, and
    /// `("HealthWarning", ...)` for a drive smartctl could not read (once
    /// per distinct error).
    pub(crate) fn take(&mut self, r: Result<Health, String>, lim: &Limits) -> Vec<(&'static str, String)> {
        match r {
            Ok(h) => {
                let ev = assess(self.last.as_ref(), &h, lim);
                self.last = Some(h);
                self.error = None;
                ev
            }
            Err(e) => {
                let new = self.error.as_deref() != Some(e.as_str());
                self.error = Some(e.clone());
                if new {
                    vec![("HealthWarning", format!("health not known: {e}"))]
                } else {
                    vec![]
                }
            }
        }
    }

    /// The last reading.
    pub(crate) fn last(&self) -> Option<&Health> {
        self.last.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded `smartctl --json -a` output of real drives, from
    /// smartctl_exporter's test data (see tests/data/smartctl/README.md).
    fn recorded(name: &str) -> Health {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/smartctl").join(name);
        let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        parse("/dev/x", &v)
    }

    fn names(ev: &[(&str, String)]) -> Vec<String> {
        ev.iter().map(|(e, _)| e.to_string()).collect()
    }

    #[test]
    fn a_healthy_nvme_drive_raises_nothing() {
        let h = recorded("nvme-null-Samsung_SSD_970_EVO_Plus_250GB-nvme0.json");
        assert_eq!(h.protocol, "NVMe");
        assert_eq!((h.smart_passed, h.critical_warning, h.temperature), (Some(true), Some(0), Some(35)));
        assert_eq!((h.available_spare, h.available_spare_threshold, h.percentage_used, h.media_errors), (Some(100), Some(10), Some(0), Some(0)));
        assert!(assess(None, &h, &Limits::default()).is_empty());
    }

    #[test]
    fn a_critical_warning_is_a_health_warning_once() {
        // A Samsung PM1725a whose volatile memory backup failed (bit 4),
        // smart_status FAILED.
        let h = recorded("nvme-null-SAMSUNG_MZWLL3T2HAJQ-00005-nvme0.json");
        let ev = assess(None, &h, &Limits::default());
        assert_eq!(names(&ev), ["HealthWarning"]);
        assert!(ev[0].1.contains("0x10: volatile memory backup device failed") && ev[0].1.contains("FAILED"), "{ev:?}");
        // The next poll, same state: nothing new.
        assert!(assess(Some(&h), &h, &Limits::default()).is_empty());
        // Through a Watch: once.
        let mut w = Watch::default();
        assert_eq!(names(&w.take(Ok(h.clone()), &Limits::default())), ["HealthWarning"]);
        assert!(w.take(Ok(h), &Limits::default()).is_empty());
    }

    #[test]
    fn wear_spare_and_temperature_limits() {
        // An Intel P4510 at 75% used: WearOut at a 70% limit, not at 80%.
        let h = recorded("nvme-null-INTEL_SSDPE2KX020T7-nvme6.json");
        assert_eq!(h.percentage_used, Some(75));
        assert!(assess(None, &h, &Limits::default()).is_empty());
        assert_eq!(names(&assess(None, &h, &Limits { wear: Some(70), ..Default::default() })), ["WearOut"]);
        // An Intel P3700 with 93% spare: SpareLow under a 95% limit only.
        let h = recorded("nvme-null-INTEL_SSDPEDMD800G4-nvme0.json");
        assert_eq!((h.available_spare, h.available_spare_threshold), (Some(93), Some(10)));
        assert!(assess(None, &h, &Limits::default()).is_empty());
        let lim = Limits { spare: Some(95), ..Default::default() };
        let ev = assess(None, &h, &lim);
        assert_eq!(names(&ev), ["SpareLow"], "{ev:?}");
        assert!(ev[0].1.contains("93% is below 95%"));
        // An Intel S3520 (SATA) at 47 °C: TemperatureHigh at a 45 °C limit.
        let h = recorded("sat-INTEL_SSDSCKJB240G7R-sdm.json");
        assert_eq!((h.protocol.as_str(), h.temperature), ("ATA", Some(47)));
        assert!(assess(None, &h, &Limits::default()).is_empty());
        let lim = Limits { temperature: Some(45), ..Default::default() };
        assert_eq!(names(&assess(None, &h, &lim)), ["TemperatureHigh"]);
        // Still hot at the next poll: not again; cooled, then hot: again.
        assert!(assess(Some(&h), &h, &lim).is_empty());
        let cool = Health { temperature: Some(30), ..h.clone() };
        assert_eq!(names(&assess(Some(&cool), &h, &lim)), ["TemperatureHigh"]);
    }

    #[test]
    fn more_bad_sectors_are_media_errors() {
        // An Intel S4500 (SATA) with 4 reallocated sectors.
        let h = recorded("sat-INTEL_SSDSC2KB240G7-sdd.json");
        assert_eq!(h.bad_sectors, Some(4));
        assert_eq!(h.unsafe_shutdowns, Some(7));
        let ev = assess(None, &h, &Limits::default());
        assert_eq!(names(&ev), ["MediaErrors"]);
        assert!(ev[0].1.starts_with("4 bad sectors"), "{ev:?}");
        assert!(assess(Some(&h), &h, &Limits::default()).is_empty());
        let worse = Health { bad_sectors: Some(6), ..h.clone() };
        let ev = assess(Some(&h), &worse, &Limits::default());
        assert!(ev.len() == 1 && ev[0].1.contains("(was 4)"), "{ev:?}");
    }

    #[test]
    fn odd_json_and_failing_smartctl() {
        // Nothing in the JSON makes it panic.
        for v in [serde_json::json!(null), serde_json::json!({"nvme_smart_health_information_log": {"critical_warning": -1, "temperature": "x"}}), serde_json::json!([1, 2])] {
            let h = parse("/dev/x", &v);
            assert!(assess(None, &h, &Limits::default()).is_empty(), "{h:?}");
        }
        // A smartctl that is not there: an error naming the fix.
        let e = read(Path::new("/nonexistent/smartctl"), "/dev/x").unwrap_err();
        assert!(e.contains("install smartmontools"), "{e}");
        // The real smartctl on something that is no drive.
        if Path::new(&smartctl()).exists() {
            let e = read(&smartctl(), "/dev/null").unwrap_err();
            assert!(e.contains("cannot read the drive"), "{e}");
            let mut w = Watch::default();
            assert_eq!(names(&w.take(Err(e.clone()), &Limits::default())), ["HealthWarning"]);
            assert!(w.take(Err(e), &Limits::default()).is_empty());
        }
    }

    /// A smartctl that hangs is killed at the limit with what it started,
    /// and the poll says so: here a wrapper script whose `sleep` (its
    /// child) would otherwise live on, holding the output pipe and a
    /// reader thread, at every poll.
    #[test]
    fn a_hung_smartctl_is_killed_with_its_children() {
        let dir = std::env::temp_dir().join(format!("uraid-hung-smartctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("smartctl");
        let pidfile = dir.join("sleep.pid");
        std::fs::write(&fake, format!("#!/bin/sh\nsleep 600 &\necho $! > {}\nwait\n", pidfile.display())).unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let e = read_within(&fake, "/dev/x", Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("did not answer within 1 s"), "{e}");
        let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_string();
        // Killed: gone, or a zombie until its new parent reaps it.
        let alive = || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'));
        let t0 = std::time::Instant::now();
        while alive() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let left = alive();
        match pid.parse::<i32>() {
            Ok(p) if left && p > 0 => {
                // SAFETY: kill(2) touches no memory; cleans up what the test started.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            _ => {}
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!left, "smartctl's child {pid} outlived the kill");
    }
}
