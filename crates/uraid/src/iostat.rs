//! `uraid iostat NAME [INTERVAL [COUNT]]`: the member drives' I/O of a
//! served array, like `zpool iostat -v` and iostat(1): one table per
//! report, a row per member (reads and writes per second, MB/s, mean
//! read and write latency, p99 latency, errors) and a total row. The
//! first report covers the time since the service started, the later
//! ones each interval. The counters are the engine's per-member ones
//! (`uraid_core::raid::engine::counters`), read through the control
//! socket's `iostat` command; `--json` prints one object per report.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use uraid_core::control::array::MemberStatus;
use uraid_core::raid::engine::counters::MemberIo;

use crate::service::client;
use crate::service::proto::Command;

/// Arguments of `uraid iostat`.
#[derive(Args)]
pub(crate) struct IostatArgs {
    /// The served array's name (or UUID).
    #[arg(value_name = "NAME")]
    pub(crate) name: String,
    /// Seconds between reports (fractions allowed); without it, one report
    /// of the time since the service started.
    #[arg(value_name = "INTERVAL")]
    pub(crate) interval: Option<f64>,
    /// Reports to print (default: until interrupted).
    #[arg(value_name = "COUNT")]
    pub(crate) count: Option<u64>,
    /// One JSON object per report (per member: rates, latencies, errors by
    /// kind and the counters since the start).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Longest interval taken, seconds (a day).
const MAX_INTERVAL: f64 = 86_400.0;

/// One reading of the counters.
struct Reading {
    array: String,
    /// Seconds since the service started.
    seconds: f64,
    /// Role members: (label, counters).
    members: Vec<(String, MemberIo)>,
    at: Instant,
}

/// `uraid iostat`. Errors: the array is not served, the interval or count
/// is out of range, the server's answer is not understood.
pub(crate) fn cmd_iostat(a: IostatArgs) -> Result<()> {
    if let Some(i) = a.interval {
        if !(0.1..=MAX_INTERVAL).contains(&i) {
            bail!("INTERVAL {i} is out of range: give the seconds between reports, from 0.1 to {MAX_INTERVAL}");
        }
    }
    if a.count == Some(0) {
        bail!("COUNT 0 prints nothing: give how many reports to print (1 or more), or leave it out to print until interrupted");
    }
    let count = match a.interval {
        None => 1,
        Some(_) => a.count.unwrap_or(u64::MAX),
    };
    let mut labels = HashMap::new();
    let mut prev: Option<Reading> = None;
    for k in 0..count {
        if k > 0 {
            std::thread::sleep(Duration::from_secs_f64(a.interval.unwrap_or(1.0)));
        }
        let now = read(&a.name, &mut labels)?;
        let (seconds, since_start) = match &prev {
            Some(p) => (now.at.duration_since(p.at).as_secs_f64(), false),
            None => (now.seconds, true),
        };
        let rows: Vec<(String, MemberIo)> = now
            .members
            .iter()
            .map(|(l, c)| {
                let before = prev.as_ref().and_then(|p| p.members.iter().find(|(pl, _)| pl == l)).map(|(_, c)| c.clone()).unwrap_or_default();
                (l.clone(), c.delta(&before))
            })
            .collect();
        if a.json {
            println!("{}", serde_json::to_string(&report_json(&now, &rows, seconds, since_start))?);
        } else {
            print_report(&now.array, &rows, seconds, since_start);
        }
        prev = Some(now);
    }
    Ok(())
}

/// Asks the server of array `name` for the counters; `labels` caches each
/// device's label (its /dev/disk/by-id name where it has one).
fn read(name: &str, labels: &mut HashMap<String, String>) -> Result<Reading> {
    let c = client::find(&[name.to_string()]).with_context(|| {
        format!("array '{name}' is not served here: iostat reads the member counters of a running 'uraid serve {name}'; start it, or check the name with 'uraid scan'")
    })?;
    let at = Instant::now();
    let v = c.call(Command::Iostat, &mut |_| {})?;
    let members: Vec<MemberStatus> = serde_json::from_value(v["members"].clone()).context("the server's iostat answer has no member list")?;
    let members = members
        .into_iter()
        .filter_map(|m| {
            let role = m.role?;
            let dev = m.device.clone().unwrap_or_else(|| "-".to_string());
            let label = labels.entry(dev.clone()).or_insert_with(|| label_of(&dev)).clone();
            Some((format!("{role}: {label}"), m.io.unwrap_or_default()))
        })
        .collect();
    Ok(Reading { array: v["array"].as_str().unwrap_or(name).to_string(), seconds: v["seconds"].as_f64().unwrap_or(0.0), members, at })
}

/// What a member's row is called: its /dev/disk/by-id name where it has
/// one, else its path.
fn label_of(dev: &str) -> String {
    uraid_core::io::identity::identity_of_path(std::path::Path::new(dev))
        .and_then(|id| id.by_id)
        .map(|b| b.rsplit('/').next().unwrap_or(&b).to_string())
        .unwrap_or_else(|| dev.to_string())
}

/// Rates of one row over `seconds`.
struct Rates {
    r_s: f64,
    w_s: f64,
    r_mb_s: f64,
    w_mb_s: f64,
}

fn rates(c: &MemberIo, seconds: f64) -> Rates {
    let s = if seconds > 0.0 { seconds } else { 1.0 };
    Rates {
        r_s: c.reads as f64 / s,
        w_s: c.writes as f64 / s,
        r_mb_s: c.read_bytes as f64 / s / 1e6,
        w_mb_s: c.written_bytes as f64 / s / 1e6,
    }
}

/// The rows and the total row.
fn with_total(rows: &[(String, MemberIo)]) -> Vec<(String, MemberIo)> {
    let mut total = MemberIo::default();
    for (_, c) in rows {
        total.add(c);
    }
    let mut all = rows.to_vec();
    all.push(("total".to_string(), total));
    all
}

/// Prints one report as a table.
fn print_report(array: &str, rows: &[(String, MemberIo)], seconds: f64, since_start: bool) {
    let when = if since_start { format!("since the service started ({seconds:.1} s ago)") } else { format!("over the last {seconds:.1} s") };
    println!("array '{array}' member I/O {when}; latencies in us");
    let all = with_total(rows);
    let w = all.iter().map(|(l, _)| l.len()).max().unwrap_or(6).max(6);
    println!(
        "{:<w$} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "member", "r/s", "w/s", "rMB/s", "wMB/s", "r_await", "w_await", "p99", "errors"
    );
    for (i, (l, c)) in all.iter().enumerate() {
        if i + 1 == all.len() {
            println!("{}", "-".repeat(w + 78));
        }
        let r = rates(c, seconds);
        let kinds: Vec<String> = c.errors.by_kind().iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k} {n}")).collect();
        println!(
            "{l:<w$} {:>9.1} {:>9.1} {:>9.2} {:>9.2} {:>9.1} {:>9.1} {:>9.1} {:>7}{}",
            r.r_s,
            r.w_s,
            r.r_mb_s,
            r.w_mb_s,
            c.read_await_us,
            c.write_await_us,
            c.p99_us,
            c.errors.total(),
            if kinds.is_empty() { String::new() } else { format!(" ({})", kinds.join(", ")) }
        );
    }
    println!();
}

/// One report as JSON: per member (and `total`) the rates and latencies
/// over the report's time, its errors by kind, and the counts of the
/// report's time (`io`).
fn report_json(now: &Reading, rows: &[(String, MemberIo)], seconds: f64, since_start: bool) -> serde_json::Value {
    let row = |l: &str, c: &MemberIo| {
        let r = rates(c, seconds);
        serde_json::json!({
            "member": l,
            "reads_per_s": r.r_s,
            "writes_per_s": r.w_s,
            "read_mb_per_s": r.r_mb_s,
            "write_mb_per_s": r.w_mb_s,
            "read_await_us": c.read_await_us,
            "write_await_us": c.write_await_us,
            "p99_us": c.p99_us,
            "errors": c.errors,
            "io": c,
        })
    };
    let all = with_total(rows);
    let (total, members) = all.split_last().expect("with_total adds a row");
    serde_json::json!({
        "array": now.array,
        "seconds": seconds,
        "since_start": since_start,
        "members": members.iter().map(|(l, c)| row(l, c)).collect::<Vec<_>>(),
        "total": row(&total.0, &total.1),
    })
}

/// A member's counters in one line for `status`: reads and writes with
/// their bytes, mean latencies, p99, errors by kind.
pub(crate) fn member_io_line(c: &MemberIo) -> String {
    let kinds: Vec<String> = c.errors.by_kind().iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k} {n}")).collect();
    format!(
        "io: {} reads ({}), {} writes ({}), await read {:.1} us, write {:.1} us, p99 {:.1} us, errors {}{}",
        c.reads,
        uraid_core::units::fmt_size(c.read_bytes),
        c.writes,
        uraid_core::units::fmt_size(c.written_bytes),
        c.read_await_us,
        c.write_await_us,
        c.p99_us,
        c.errors.total(),
        if kinds.is_empty() { String::new() } else { format!(" ({})", kinds.join(", ")) }
    )
}
