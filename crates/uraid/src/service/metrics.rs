//! The Prometheus endpoint of a served array (`uraid serve --metrics
//! ADDR`, loopback by default): `GET /metrics` in the Prometheus text
//! format, written with the prometheus-client crate (the Prometheus
//! project's Rust client) and served by axum (tokio's HTTP framework) on a
//! thread of its own, so that a scrape never runs on the data path.
//!
//! Every figure is read at scrape time from what the service already keeps
//! (the manager's status, the export's counters): nothing is counted for
//! the metrics alone. Names follow node_exporter's md collector where it
//! has one (`uraid_md_disks{state}`, `uraid_md_disks_required`,
//! `uraid_md_state{state}`), with an `array` label instead of `device`:
//!
//! - array and members: `uraid_md_disks`, `uraid_md_disks_required`,
//!   `uraid_md_state`, `uraid_member_state` (1 per member, its state as a
//!   label), `uraid_distributed_spare` (1 per distributed spare in use:
//!   spare, role and whether it is rebuilt as labels), `uraid_member_info`
//!   (1 per member that is a drive: model, serial, firmware, WWID and
//!   by-id name as labels, as
//!   smartctl_exporter's `smartctl_device`),
//!   `uraid_member_read_errors_{corrected,uncorrected}_total` (read errors
//!   repaired from redundancy, and those that failed a read), `uraid_events` (the
//!   superblock event counter);
//! - per member (labels as `uraid_member_state`'s: `slot`, `device`), the
//!   engine's counters read at the scrape: `uraid_member_reads_total`,
//!   `uraid_member_writes_total`, `uraid_member_read_bytes_total`,
//!   `uraid_member_written_bytes_total`, `uraid_member_errors_total{kind}`
//!   (read, write, vanished, timeout, other) and
//!   `uraid_member_latency_seconds{op}` (a histogram, log2 buckets);
//! - per volume: `uraid_volume_state`, `uraid_volume_size_bytes`,
//!   `uraid_volume_live_bytes` (what may hold data: the live-data map),
//!   `uraid_volume_{reads,writes,flushes,trims,write_zeroes}_completed_total`,
//!   `uraid_volume_{read,written}_bytes_total`, `uraid_volume_errors_total`,
//!   `uraid_volume_requests_in_flight`,
//!   `uraid_volume_{read,write}_latency_seconds` (histograms);
//! - background work: `uraid_sync_progress_ratio{action}` (rebuild, check,
//!   repair), `uraid_sync_completed_bytes`, `uraid_sync_total_bytes`,
//!   `uraid_sync_speed_bytes_per_second`, `uraid_mismatches` (md's
//!   `mismatch_cnt`: stripes that disagreed in the last check);
//! - cache: `uraid_cache_dirty_bytes`, `uraid_cache_hit_ratio`;
//! - per export (`volume` label: the volume it serves, each volume of a
//!   Matrix array having its own; `export`: its kind, `nbd` or `ublk`;
//!   `address`: where clients find it): `uraid_export_info`,
//!   `uraid_export_{reads,writes,flushes,trims,write_zeroes}_completed_total`,
//!   `uraid_export_{read,written}_bytes_total`, `uraid_export_errors_total`,
//!   `uraid_export_requests_in_flight`, `uraid_export_{read,write}_latency_seconds`;
//!   the `uraid_volume_*` I/O figures are their sums;
//! - NBD: `uraid_nbd_connections`, `uraid_nbd_connections_accepted_total`;
//! - member drive health, named as smartctl_exporter names them (with an
//!   `array` label): `smartctl_device_smart_status`,
//!   `smartctl_device_critical_warning`, `smartctl_device_temperature`,
//!   `smartctl_device_percentage_used`, `smartctl_device_available_spare`,
//!   `smartctl_device_available_spare_threshold`,
//!   `smartctl_device_media_errors`, `smartctl_device_num_err_log_entries`,
//!   `smartctl_device_power_on_seconds`, `smartctl_device_power_cycles` (its
//!   `smartctl_device_power_cycle_count`, which promtool's lint refuses),
//!   `smartctl_device_smartctl_exit_status`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::figures::Window;
use super::proto::Progress;
use uraid_core::control::array::ArrayStatus;
use super::http::HttpServer;
use super::Live;

/// What the endpoint reads from.
pub(crate) struct Source {
    /// The array's name.
    pub array: String,
    /// Each exported volume's index and name, and its exports' counters
    /// (summed, sampled once a second; used when `exports` is None).
    pub exported: Vec<(usize, String, Arc<Window>)>,
    /// The exported volumes' exports, read live for the per-export
    /// figures.
    pub exports: Option<super::exports::Exports>,
    /// The service's shared state.
    pub live: Arc<Live>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "metrics of array {}", self.array)
    }
}

/// Listens on `addr` (`HOST:PORT`; a non-loopback address needs
/// `insecure`) and serves `/metrics` from `source` until `source.live`
/// says stop.
///
/// Errors: a bad or refused address, or one that cannot be bound.
pub(crate) fn start(addr: &str, insecure: bool, source: Source) -> Result<HttpServer> {
    let sa: SocketAddr = addr.parse().with_context(|| format!("--metrics '{addr}' is not an address like 127.0.0.1:9109"))?;
    if !sa.ip().is_loopback() && !insecure {
        bail!(
            "--metrics {sa} is not a loopback address: anyone who can reach it would read the array's state. Use \
             127.0.0.1 (and a reverse proxy with TLS), or add --metrics-insecure if the network is trusted"
        );
    }
    let live = source.live.clone();
    let source = Arc::new(source);
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let source = source.clone();
                async move {
                    match render(source) {
                        Ok(body) => {
                            ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
                        }
                        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                    }
                }
            }),
        )
        .route("/", axum::routing::get(|| async { "uraid metrics: GET /metrics\n" }));
    super::http::serve("the metrics endpoint", sa, app, live, None)
}

use axum::response::IntoResponse as _;

/// The text of one scrape.
pub(crate) fn render(source: Arc<Source>) -> std::result::Result<String, std::fmt::Error> {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(source));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &reg)?;
    Ok(out)
}

/// A histogram given by its buckets (upper bound, count in that bucket
/// alone), sum and count.
struct ConstHistogram {
    sum: f64,
    count: u64,
    buckets: Vec<(f64, u64)>,
}

impl EncodeMetric for ConstHistogram {
    fn encode(&self, mut e: MetricEncoder) -> std::result::Result<(), std::fmt::Error> {
        e.encode_histogram::<Vec<(String, String)>>(self.sum, self.count, &self.buckets, None)
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// A latency histogram of the export (µs buckets) in seconds.
fn histogram(h: &uraid_core::export::stats::LatencyHistogram) -> ConstHistogram {
    let mut buckets: Vec<(f64, u64)> =
        uraid_core::export::stats::LATENCY_BOUNDS_US.iter().zip(&h.counts).map(|(&b, &n)| (b as f64 / 1e6, n)).collect();
    buckets.push((f64::MAX, h.counts.get(uraid_core::export::stats::LATENCY_BOUNDS_US.len()).copied().unwrap_or(0)));
    ConstHistogram { sum: h.sum_us as f64 / 1e6, count: h.count, buckets }
}

/// Writes family `name` with one sample per (labels, metric).
fn family<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: &[(Vec<(&str, String)>, M)],
) -> std::result::Result<(), std::fmt::Error> {
    let Some((_, first)) = samples.first() else { return Ok(()) };
    let mut fe = enc.encode_descriptor(name, help, None, first.metric_type())?;
    for (labels, m) in samples {
        let labels: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        m.encode(fe.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Source {
    /// The figures of each export, from `taken` (each export with its
    /// snapshot of this scrape), labelled with its volume.
    fn encode_exports(
        &self,
        enc: &mut DescriptorEncoder,
        taken: &[(&super::exports::Exported, uraid_core::export::StatsSnapshot)],
    ) -> std::result::Result<(), std::fmt::Error> {
        let all: Vec<_> = taken
            .iter()
            .map(|(x, s)| {
                let e = &x.export;
                let labels =
                    vec![("array", self.array.clone()), ("volume", x.volume_name.clone()), ("export", e.kind().to_string()), ("address", e.address())];
                (labels, e.kind(), s, x.volume_name.clone())
            })
            .collect();
        let each = |f: &dyn Fn(&uraid_core::export::StatsSnapshot) -> u64| {
            all.iter().map(|(l, _, s, _)| (l.clone(), ConstCounter::new(f(s)))).collect::<Vec<_>>()
        };
        family(enc, "uraid_export_info", "1 for each export of a volume: its kind and address as labels.", &all.iter().map(|(l, _, _, _)| (l.clone(), ConstGauge::new(1))).collect::<Vec<_>>())?;
        family(enc, "uraid_export_reads_completed", "Reads completed through this export.", &each(&|s| s.reads))?;
        family(enc, "uraid_export_writes_completed", "Writes completed through this export.", &each(&|s| s.writes))?;
        family(enc, "uraid_export_flushes_completed", "Flushes completed through this export.", &each(&|s| s.flushes))?;
        family(enc, "uraid_export_trims_completed", "Trims (discards) completed through this export.", &each(&|s| s.trims))?;
        family(enc, "uraid_export_write_zeroes_completed", "Write-zeroes completed through this export.", &each(&|s| s.write_zeroes))?;
        family(enc, "uraid_export_read_bytes", "Bytes read through this export.", &each(&|s| s.read_bytes))?;
        family(enc, "uraid_export_written_bytes", "Bytes written through this export.", &each(&|s| s.write_bytes))?;
        family(enc, "uraid_export_errors", "Requests of this export completed with an error.", &each(&|s| s.errors))?;
        family(
            enc,
            "uraid_export_requests_in_flight",
            "Requests of this export received and not yet answered.",
            &all.iter().map(|(l, _, s, _)| (l.clone(), ConstGauge::new(s.in_flight as i64))).collect::<Vec<_>>(),
        )?;
        family(enc, "uraid_export_read_latency_seconds", "Read latency through this export.", &all.iter().map(|(l, _, s, _)| (l.clone(), histogram(&s.read_latency))).collect::<Vec<_>>())?;
        family(enc, "uraid_export_write_latency_seconds", "Write latency through this export.", &all.iter().map(|(l, _, s, _)| (l.clone(), histogram(&s.write_latency))).collect::<Vec<_>>())?;
        // NBD connections per volume: of the NBD exports only (a ublk
        // device has none).
        let mut open = Vec::new();
        let mut total = Vec::new();
        for (_, _, s, v) in all.iter().filter(|(_, k, _, _)| *k == "nbd") {
            let vol = vec![("array", self.array.clone()), ("volume", v.clone())];
            open.push((vol.clone(), ConstGauge::new(s.connections as i64)));
            total.push((vol, ConstCounter::new(s.connections_total)));
        }
        family(enc, "uraid_nbd_connections", "NBD connections open.", &open)?;
        family(enc, "uraid_nbd_connections_accepted", "NBD connections accepted since the start.", &total)?;
        Ok(())
    }
}

impl Collector for Source {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::result::Result<(), std::fmt::Error> {
        if !self.exported.is_empty() {
            self.encode_volumes(&mut enc)?;
        }
        // A temporary array of `mem:` drives has no manager: I/O figures only.
        let Some(st) = self.live.status() else { return Ok(()) };
        let progress = self.live.progress();
        self.encode_array(&mut enc, &st, progress.as_ref())?;
        self.encode_upkeep(&mut enc, &st, progress.as_ref())?;
        self.encode_health(&mut enc)
    }
}

impl Source {
    /// The members' I/O counters (read now; see
    /// `uraid_core::raid::engine::counters`), one sample per role, with
    /// the slot and device labels of `uraid_member_state`.
    fn encode_member_io(&self, enc: &mut DescriptorEncoder, st: &ArrayStatus) -> std::result::Result<(), std::fmt::Error> {
        use uraid_core::raid::engine::counters::{Latency, MemberIo, BUCKETS};
        let now = self.live.member_io();
        let rows: Vec<(Vec<(&str, String)>, MemberIo)> = st
            .members
            .iter()
            .filter_map(|m| {
                let r = m.role?;
                let io = now.as_ref().and_then(|v| v.get(r as usize).cloned()).or_else(|| m.io.clone())?;
                let labels = vec![("array", self.array.clone()), ("slot", format!("role {r}")), ("device", m.device.clone().unwrap_or_default())];
                Some((labels, io))
            })
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        let c = |f: &dyn Fn(&MemberIo) -> u64| rows.iter().map(|(l, s)| (l.clone(), ConstCounter::new(f(s)))).collect::<Vec<_>>();
        family(enc, "uraid_member_reads", "Member reads completed (member I/Os, not requests).", &c(&|s| s.reads))?;
        family(enc, "uraid_member_writes", "Member writes completed.", &c(&|s| s.writes))?;
        family(enc, "uraid_member_read_bytes", "Bytes read from the member.", &c(&|s| s.read_bytes))?;
        family(enc, "uraid_member_written_bytes", "Bytes written to the member.", &c(&|s| s.written_bytes))?;
        let errors: Vec<_> = rows
            .iter()
            .flat_map(|(l, s)| s.errors.by_kind().map(|(k, n)| ({ let mut l = l.clone(); l.push(("kind", k.to_string())); l }, ConstCounter::new(n))))
            .collect();
        family(enc, "uraid_member_errors", "Member I/O errors by kind (read, write, vanished, timeout, other).", &errors)?;
        // Buckets below 1 µs (2^10 ns) are folded into the first.
        const FIRST: usize = 10;
        let hist = |h: &Latency| {
            let b = |i: usize| h.buckets.get(i).copied().unwrap_or(0);
            let mut buckets = vec![((1u64 << (FIRST + 1)) as f64 / 1e9, (0..=FIRST).map(b).sum())];
            buckets.extend((FIRST + 1..BUCKETS - 1).map(|i| ((1u64 << (i + 1)) as f64 / 1e9, b(i))));
            buckets.push((f64::MAX, b(BUCKETS - 1)));
            ConstHistogram { sum: h.sum_ns as f64 / 1e9, count: h.count, buckets }
        };
        let lat: Vec<_> = rows
            .iter()
            .flat_map(|(l, s)| {
                [("read", &s.read_latency), ("write", &s.write_latency)]
                    .map(|(op, h)| ({ let mut l = l.clone(); l.push(("op", op.to_string())); l }, hist(h)))
            })
            .collect();
        family(enc, "uraid_member_latency_seconds", "Member I/O latency, from submission to completion.", &lat)
    }

    /// `uraid_member_info`: who each member drive is, read from sysfs and
    /// udev at the scrape (no I/O to the drive); labels as
    /// smartctl_exporter's smartctl_device. Files, mem: and stacked
    /// devices have none.
    fn encode_member_info(&self, enc: &mut DescriptorEncoder, st: &ArrayStatus) -> std::result::Result<(), std::fmt::Error> {
        let a = || ("array", self.array.clone());
        let infos: Vec<_> = st
            .members
            .iter()
            .filter_map(|m| {
                let dev = m.device.clone()?;
                let id = uraid_core::io::identity::identity_of_path(std::path::Path::new(&dev))?;
                let slot = match m.role {
                    Some(r) => format!("role {r}"),
                    None => format!("slot {}", m.slot),
                };
                let labels = vec![
                    a(),
                    ("slot", slot),
                    ("device", dev),
                    ("model_name", id.model.unwrap_or_default()),
                    ("serial_number", id.serial.unwrap_or_default()),
                    ("firmware_version", id.firmware.unwrap_or_default()),
                    ("wwid", id.wwid.unwrap_or_default()),
                    ("by_id", id.by_id.unwrap_or_default()),
                ];
                Some((labels, ConstGauge::new(1)))
            })
            .collect();
        if !infos.is_empty() {
            family(enc, "uraid_member_info", "1 for each member that is a drive, who it is as labels (model, serial, firmware, WWID, by-id name).", &infos)?;
        }
        Ok(())
    }

    /// The member drives' last health readings (`service::health`), as
    /// smartctl_exporter names them, with an `array` label beside its
    /// `device`: none before the first poll or with polling off.
    fn encode_health(&self, enc: &mut DescriptorEncoder) -> std::result::Result<(), std::fmt::Error> {
        let readings = self.live.health.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if readings.is_empty() {
            return Ok(());
        }
        let dev = |h: &crate::service::health::Health| vec![("array", self.array.clone()), ("device", h.device.clone())];
        type Pick = fn(&crate::service::health::Health) -> Option<i64>;
        let gauges: [(&str, &str, Pick); 10] = [
            ("smartctl_device_smart_status", "General smart status (1: passed).", |h| h.smart_passed.map(i64::from)),
            ("smartctl_device_critical_warning", "NVMe critical warning bits.", |h| h.critical_warning.map(i64::from)),
            ("smartctl_device_percentage_used", "NVMe percentage of rated endurance used.", |h| h.percentage_used.map(|v| v as i64)),
            ("smartctl_device_available_spare", "NVMe available spare, percent.", |h| h.available_spare.map(|v| v as i64)),
            ("smartctl_device_available_spare_threshold", "NVMe available spare threshold, percent.", |h| h.available_spare_threshold.map(|v| v as i64)),
            ("smartctl_device_media_errors", "NVMe media and data integrity errors.", |h| h.media_errors.map(|v| v as i64)),
            ("smartctl_device_num_err_log_entries", "NVMe error information log entries.", |h| h.error_log_entries.map(|v| v as i64)),
            ("smartctl_device_power_on_seconds", "Power-on time, seconds.", |h| h.power_on_hours.map(|v| v as i64 * 3600)),
            // smartctl_exporter's smartctl_device_power_cycle_count, without
            // the `_count` suffix promtool reserves for histograms and summaries.
            ("smartctl_device_power_cycles", "Power cycles.", |h| h.power_cycles.map(|v| v as i64)),
            ("smartctl_device_smartctl_exit_status", "smartctl's exit status.", |h| Some(h.smartctl_exit_status)),
        ];
        for (name, help, pick) in gauges {
            let samples: Vec<_> = readings.iter().filter_map(|h| pick(h).map(|v| (dev(h), ConstGauge::new(v)))).collect();
            if !samples.is_empty() {
                family(enc, name, help, &samples)?;
            }
        }
        let temps: Vec<_> = readings
            .iter()
            .filter_map(|h| h.temperature.map(|t| ({ let mut l = dev(h); l.push(("temperature_type", "current".to_string())); l }, ConstGauge::new(t))))
            .collect();
        if !temps.is_empty() {
            family(enc, "smartctl_device_temperature", "Device temperature, °C.", &temps)?;
        }
        Ok(())
    }

    /// Each served volume's I/O figures (and each export's, where the
    /// exports are at hand).
    fn encode_volumes(&self, enc: &mut DescriptorEncoder) -> std::result::Result<(), std::fmt::Error> {
        let vol = |v: &str| vec![("array", self.array.clone()), ("volume", v.to_string())];
        // Live where the exports are at hand: each export's snapshot is
        // taken once, and each volume's figures are the sum of its
        // exports', so that the sums agree with the per-export figures
        // of the same scrape.
        let taken: Option<Vec<_>> = self.exports.as_ref().map(|x| x.list().iter().map(|e| (e, e.export.stats())).collect());
        let per: Vec<(Vec<(&str, String)>, uraid_core::export::StatsSnapshot)> = self
            .exported
            .iter()
            .map(|(i, name, w)| {
                let s = match &taken {
                    Some(t) => super::exports::sum(t.iter().filter(|(e, _)| e.volume == *i).map(|(_, s)| s.clone())),
                    None => w.latest(),
                };
                (vol(name), s)
            })
            .collect();
        let c = |f: &dyn Fn(&uraid_core::export::StatsSnapshot) -> u64| per.iter().map(|(l, s)| (l.clone(), ConstCounter::new(f(s)))).collect::<Vec<_>>();
        family(enc, "uraid_volume_reads_completed", "Reads completed through the exports.", &c(&|s| s.reads))?;
        family(enc, "uraid_volume_writes_completed", "Writes completed through the exports.", &c(&|s| s.writes))?;
        family(enc, "uraid_volume_flushes_completed", "Flushes completed through the exports.", &c(&|s| s.flushes))?;
        family(enc, "uraid_volume_trims_completed", "Trims completed through the exports.", &c(&|s| s.trims))?;
        family(enc, "uraid_volume_write_zeroes_completed", "Write-zeroes completed through the exports.", &c(&|s| s.write_zeroes))?;
        family(enc, "uraid_volume_read_bytes", "Bytes read through the exports.", &c(&|s| s.read_bytes))?;
        family(enc, "uraid_volume_written_bytes", "Bytes written through the exports.", &c(&|s| s.write_bytes))?;
        family(enc, "uraid_volume_errors", "Requests completed with an error.", &c(&|s| s.errors))?;
        let g = per.iter().map(|(l, s)| (l.clone(), ConstGauge::new(s.in_flight as i64))).collect::<Vec<_>>();
        family(enc, "uraid_volume_requests_in_flight", "Requests received and not yet answered.", &g)?;
        let h = per.iter().map(|(l, s)| (l.clone(), histogram(&s.read_latency))).collect::<Vec<_>>();
        family(enc, "uraid_volume_read_latency_seconds", "Read latency, from request to reply.", &h)?;
        let h = per.iter().map(|(l, s)| (l.clone(), histogram(&s.write_latency))).collect::<Vec<_>>();
        family(enc, "uraid_volume_write_latency_seconds", "Write latency, from request to reply.", &h)?;
        if let Some(t) = &taken {
            self.encode_exports(enc, t)?;
        }
        
        Ok(())
    }

    /// The members by state (`uraid_md_disks`, node_exporter's
    /// node_md_disks, plus `spared`: a role a declustered volume's
    /// distributed spare holds, its device failed) and the roles
    /// (`uraid_md_disks_required`), of the manager's last status `st`.
    fn encode_disks(&self, enc: &mut DescriptorEncoder, st: &ArrayStatus) -> std::result::Result<(), std::fmt::Error> {
        let a = || ("array", self.array.clone());
        let n = st.member_count as usize;
        let count = |f: &dyn Fn(&str, Option<u32>) -> bool| st.members.iter().filter(|m| f(&m.state, m.role)).count() as i64;
        let disks = [
            ("active", count(&|s, r| s == "active" && r.is_some())),
            ("failed", count(&|s, _| s == "faulty")),
            ("spare", count(&|s, _| s == "spare")),
            ("rebuilding", count(&|s, _| s == "rebuilding")),
            ("missing", count(&|s, _| s == "missing")),
            ("spared", count(&|s, _| s == "spared")),
        ];
        family(
            enc,
            "uraid_md_disks",
            "Members of the array by state (node_exporter's node_md_disks; spared: a role in a distributed spare).",
            &disks.iter().map(|(s, c)| (vec![a(), ("state", s.to_string())], ConstGauge::new(*c))).collect::<Vec<_>>(),
        )?;
        family(enc, "uraid_md_disks_required", "Members the array is made of (roles).", &[(vec![a()], ConstGauge::new(n as i64))])
    }

    /// The array's members, states, events and volumes (from the
    /// manager's last status `st`; `progress`: the rebuild or scrub running).
    fn encode_array(&self, enc: &mut DescriptorEncoder, st: &ArrayStatus, progress: Option<&Progress>) -> std::result::Result<(), std::fmt::Error> {
        let a = || ("array", self.array.clone());
        let vol = |v: &str| vec![a(), ("volume", v.to_string())];
        self.encode_disks(enc, st)?;
        let worst = if st.volumes.iter().any(|v| v.state == "failed") {
            "failed"
        } else if st.volumes.iter().any(|v| v.state != "clean") {
            "degraded"
        } else {
            "active"
        };
        let action = progress.map(|p| p.action.as_str());
        let states = [
            ("active", worst == "active"),
            ("degraded", worst == "degraded"),
            ("failed", worst == "failed"),
            ("recovering", action == Some("rebuild")),
            ("check", matches!(action, Some("check") | Some("repair"))),
        ];
        family(
            enc,
            "uraid_md_state",
            "The array's state: 1 for the states it is in (node_exporter's node_md_state).",
            &states.iter().map(|(s, on)| (vec![a(), ("state", s.to_string())], ConstGauge::new(*on as i64))).collect::<Vec<_>>(),
        )?;
        family(
            enc,
            "uraid_member_state",
            "1 for each member, with its role or spare slot, device and state as labels.",
            &st.members
                .iter()
                .map(|m| {
                    let slot = match (m.role, m.former_role) {
                        (Some(r), _) => format!("role {r}"),
                        // A faulty device a spare replaced, until removed.
                        (None, Some(r)) => format!("faulty {} (was role {r})", m.slot),
                        (None, None) => format!("spare {}", m.slot),
                    };
                    (vec![a(), ("slot", slot), ("device", m.device.clone().unwrap_or_default()), ("state", m.state.clone())], ConstGauge::new(1))
                })
                .collect::<Vec<_>>(),
        )?;
        self.encode_member_info(enc, st)?;
        self.encode_member_io(enc, st)?;
        // Read errors per member (roles only): repaired from redundancy, and
        // those that failed the read.
        let by_role = |f: &dyn Fn(&uraid_core::control::array::MemberStatus) -> u64| {
            st.members
                .iter()
                .filter(|m| m.role.is_some())
                .map(|m| (vec![a(), ("device", m.device.clone().unwrap_or_default())], ConstCounter::new(f(m))))
                .collect::<Vec<_>>()
        };
        family(
            enc,
            "uraid_member_read_errors_corrected",
            "Read errors of each member repaired from the other copy or the parity (the range rewritten, the member kept).",
            &by_role(&|m| m.read_errors_corrected),
        )?;
        family(
            enc,
            "uraid_member_read_errors_uncorrected",
            "Read errors of each member that failed the read (nothing left to repair them from).",
            &by_role(&|m| m.read_errors_uncorrected),
        )?;
        family(enc, "uraid_events", "The superblocks' event counter.", &[(vec![a()], ConstGauge::new(st.events as i64))])?;
        family(
            enc,
            "uraid_volume_state",
            "1 for each volume, its state (clean, degraded, rebuilding, failed) as a label.",
            &st.volumes.iter().map(|v| ({ let mut l = vol(&v.name); l.push(("state", v.state.clone())); l }, ConstGauge::new(1))).collect::<Vec<_>>(),
        )?;
        family(
            enc,
            "uraid_volume_size_bytes",
            "Usable bytes of each volume.",
            &st.volumes.iter().map(|v| (vol(&v.name), ConstGauge::new(v.capacity as i64))).collect::<Vec<_>>(),
        )?;
        family(
            enc,
            "uraid_volume_live_bytes",
            "Bytes of each volume that may hold data (live-data map); the rest reads as zeros and rebuilds skip it.",
            &st.volumes.iter().map(|v| (vol(&v.name), ConstGauge::new(v.live_bytes.unwrap_or(v.capacity) as i64))).collect::<Vec<_>>(),
        )?;
        Ok(())
    }

    /// The rebuild or scrub running (`progress`), the last checks'
    /// mismatches, the caches (of `st`'s volumes).
    fn encode_upkeep(&self, enc: &mut DescriptorEncoder, st: &ArrayStatus, progress: Option<&Progress>) -> std::result::Result<(), std::fmt::Error> {
        let a = || ("array", self.array.clone());
        let vol = |v: &str| vec![a(), ("volume", v.to_string())];
        if let Some(p) = progress {
            let l = vec![a(), ("action", p.action.clone()), ("target", p.target.clone())];
            family(enc, "uraid_sync_progress_ratio", "Progress of the rebuild, check or repair running (0 to 1).", &[(l.clone(), ConstGauge::new(p.percent() / 100.0))])?;
            family(enc, "uraid_sync_completed_bytes", "Bytes done by the rebuild, check or repair running.", &[(l.clone(), ConstGauge::new(p.done as i64))])?;
            family(enc, "uraid_sync_total_bytes", "Bytes the running rebuild, check or repair covers.", &[(l.clone(), ConstGauge::new(p.total as i64))])?;
            family(enc, "uraid_sync_speed_bytes_per_second", "Rate of the running rebuild, check or repair.", &[(l, ConstGauge::new(p.mb_per_s * 1e6))])?;
        }
        family(
            enc,
            "uraid_distributed_spare",
            "1 for each distributed spare in use (draid5, draid6): the spare, the role it holds and whether it is rebuilt as labels.",
            &st.distributed_spares
                .iter()
                .map(|u| {
                    let state = if u.recovery_offset.is_some() { "rebuilding" } else { "rebuilt" };
                    (vec![a(), ("spare", u.spare.to_string()), ("role", u.role.to_string()), ("state", state.to_string())], ConstGauge::new(1))
                })
                .collect::<Vec<_>>(),
        )?;
        let checked = self.live.mismatches();
        family(
            enc,
            "uraid_mismatches",
            "Stripes whose copies or parity disagreed in the last check of each volume (md's mismatch_cnt).",
            &checked.iter().map(|(v, m)| (vol(v), ConstGauge::new(*m as i64))).collect::<Vec<_>>(),
        )?;
        let cached: Vec<_> = st.volumes.iter().filter_map(|v| v.cache_stats.map(|c| (v.name.clone(), c))).collect();
        family(
            enc,
            "uraid_cache_dirty_bytes",
            "Bytes in the volume cache not yet written to the members.",
            &cached.iter().map(|(v, c)| (vol(v), ConstGauge::new(c.dirty_bytes as i64))).collect::<Vec<_>>(),
        )?;
        family(
            enc,
            "uraid_cache_hit_ratio",
            "Reads the volume cache answered, as a ratio of all reads.",
            &cached.iter().map(|(v, c)| (vol(v), ConstGauge::new(c.hit_ratio))).collect::<Vec<_>>(),
        )?;
        Ok(())
    }
}
