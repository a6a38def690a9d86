//! Per-member I/O counters of a served array (issue 32, item 3): bytes
//! written and read through the NBD export show on every member in
//! `uraid iostat NAME INTERVAL COUNT` (text and `--json`), in `status`
//! (text and `--json`) and in the metrics (promtool-clean).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::service::{promtool_ok, sample};
use crate::util::*;

/// The uraid commands' environment: run directory, state, an empty config.
struct Env {
    dir: PathBuf,
}

impl Env {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(URAID);
        c.args(args)
            .env("URAID_RUN_DIR", self.dir.join("run"))
            .env("URAID_STATE_DIR", self.dir.join("state"))
            .env("URAID_CONFIG", self.dir.join("uraid.conf"))
            .stdin(Stdio::null());
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.cmd(args).output().unwrap();
        let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
        assert!(o.status.success(), "uraid {} failed: {out}{err}", args.join(" "));
        out
    }
}

/// The members' `io` objects of `status --json` (role order).
fn status_io(env: &Env, name: &str) -> Vec<Value> {
    let st: Value = serde_json::from_str(&env.ok(&["status", "--json", name])).unwrap();
    st["members"].as_array().unwrap().iter().filter(|m| m["role"].is_u64()).map(|m| m["io"].clone()).collect()
}

/// GET /metrics from 127.0.0.1:`port`.
fn scrape(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r.split_once("\r\n\r\n").expect("an HTTP reply").1.to_string()
}

/// A RAID 1 of two files, served; 4 MiB written through the NBD export
/// (1 MiB requests) and 2 MiB read back: every member's written bytes
/// grew by at least 4 MiB (and by less than 4 MiB more: the bitmap and
/// superblock are written too) in `uraid iostat NAME 1 2 --json` (first
/// report since the start, then one over an interval), in `status
/// --json` and in the metrics; the members' reads add up to the 2 MiB;
/// the text forms show the rows, the total and the `io:` lines.
#[test]
fn bytes_written_through_the_export_show_per_member_in_iostat_status_and_metrics() {
    let _g = shared();
    let d = tmpdir();
    let env = Env { dir: d.path().to_path_buf() };
    std::fs::create_dir_all(d.path().join("run")).unwrap();
    let name = format!("iost{}", std::process::id());
    let files = sparse_files(d.path(), "m", 2, 64 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "1", "--name", &name], &f));
    let mut c = env.cmd(&with(&["serve", "--metrics", "127.0.0.1:0"], &f));
    c.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = ChildGuard(c.spawn().unwrap());
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let (mut uri, mut port) = (String::new(), 0u16);
    while uri.is_empty() || port == 0 {
        let l = lines.next().expect("uraid serve printed no export and metrics address").unwrap();
        if let Some(rest) = l.strip_prefix("serving ") {
            uri = rest.rsplit(" on ").next().unwrap().to_string();
        }
        if let Some(rest) = l.strip_prefix("metrics: http://127.0.0.1:") {
            port = rest.split('/').next().unwrap().parse().unwrap();
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    let before: Vec<u64> = status_io(&env, &name).iter().map(|io| io["written_bytes"].as_u64().unwrap_or(0)).collect();
    let reads_before: u64 = status_io(&env, &name).iter().map(|io| io["read_bytes"].as_u64().unwrap_or(0)).sum();

    const WRITTEN: u64 = 4 << 20;
    const READ: u64 = 2 << 20;
    {
        use uraid_core::{BlockDevice, BlockQueue};
        let dev = uraid_nbd::client::NbdDevice::connect(&uri.parse().unwrap()).unwrap();
        let mut q = dev.open_queue(1).unwrap();
        for i in 0..WRITTEN >> 20 {
            q.write_at(i << 20, &vec![i as u8 + 1; 1 << 20]).unwrap();
        }
        dev.flush().unwrap();
        for i in 0..READ >> 20 {
            let back = q.read_at(i << 20, 1 << 20).unwrap();
            assert!(back.iter().all(|&b| b == i as u8 + 1), "MiB {i} read back wrong");
        }
    }

    // iostat, JSON: two reports.
    let out = env.ok(&["iostat", &name, "1", "2", "--json"]);
    let reports: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(reports.len(), 2, "{out}");
    assert_eq!((reports[0]["since_start"].as_bool(), reports[1]["since_start"].as_bool()), (Some(true), Some(false)), "{out}");
    assert!(reports[1]["seconds"].as_f64().unwrap() >= 0.9, "{out}");
    let members = reports[0]["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{out}");
    for (m, b) in members.iter().zip(&before) {
        let w = m["io"]["written_bytes"].as_u64().unwrap();
        assert!((b + WRITTEN..b + 2 * WRITTEN).contains(&w), "iostat: member {} wrote {w} bytes (before: {b}): {out}", m["member"]);
        assert!(m["writes_per_s"].as_f64().unwrap() > 0.0 && m["io"]["writes"].as_u64().unwrap() >= 4, "{m}");
        assert!(m["write_await_us"].as_f64().unwrap() > 0.0 && m["p99_us"].as_f64().unwrap() > 0.0, "{m}");
        assert_eq!(m["errors"]["read"].as_u64(), Some(0), "{m}");
    }
    let total = &reports[0]["total"];
    assert!(total["io"]["written_bytes"].as_u64().unwrap() >= 2 * WRITTEN, "{total}");
    let read: u64 = members.iter().map(|m| m["io"]["read_bytes"].as_u64().unwrap()).sum();
    assert!(read >= reads_before + READ, "the members read {read} bytes (before: {reads_before}), {READ} were read through the export: {out}");
    println!("iostat --json, first report: total {total}");

    // iostat, text: a table per report, a row per member and a total.
    let text = env.ok(&["iostat", &name, "1", "2"]);
    println!("{text}");
    assert_eq!(text.matches("member I/O").count(), 2, "{text}");
    assert!(text.contains("since the service started") && text.contains("over the last"), "{text}");
    for (i, p) in f.iter().enumerate() {
        let row = text.lines().find(|l| l.starts_with(&format!("{i}: {p}"))).unwrap_or_else(|| panic!("no row for {p}:\n{text}"));
        let w_s: f64 = row[format!("{i}: {p}").len()..].split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(w_s > 0.0, "{row}");
    }
    assert_eq!(text.lines().filter(|l| l.starts_with("total")).count(), 2, "{text}");

    // status --json and text.
    for (io, b) in status_io(&env, &name).iter().zip(&before) {
        let w = io["written_bytes"].as_u64().unwrap();
        assert!((b + WRITTEN..b + 2 * WRITTEN).contains(&w), "status --json: {io}");
        assert!(io["write_latency"]["count"].as_u64().unwrap() >= 1, "{io}");
    }
    let text = env.ok(&["status", &name]);
    assert_eq!(text.lines().filter(|l| l.trim_start().starts_with("io: ")).count(), 2, "{text}");

    // Metrics.
    let m = scrape(port);
    promtool_ok(&m);
    for (i, b) in before.iter().enumerate() {
        let role = format!("slot=\"role {i}\"");
        let w = sample(&m, "uraid_member_written_bytes_total", &[&role]).unwrap_or_else(|| panic!("no uraid_member_written_bytes_total for role {i}:\n{m}"));
        assert!(w >= (b + WRITTEN) as f64, "{w}");
        assert!(sample(&m, "uraid_member_writes_total", &[&role]).unwrap() >= 4.0);
        assert!(sample(&m, "uraid_member_reads_total", &[&role]).is_some());
        assert_eq!(sample(&m, "uraid_member_errors_total", &[&role, "kind=\"read\""]), Some(0.0));
        // One member I/O in 16 is timed (the first of each thread).
        assert!(sample(&m, "uraid_member_latency_seconds_count", &[&role, "op=\"write\""]).unwrap() >= 1.0);
        assert!(sample(&m, "uraid_member_latency_seconds_bucket", &[&role, "op=\"write\"", "le=\"+Inf\""]).unwrap() >= 1.0);
    }
    env.ok(&["stop", &name]);
    let t0 = std::time::Instant::now();
    while child.0.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(30), "uraid serve did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `uraid iostat` of an array nobody serves, and a bad interval or count,
/// say what was wrong and what to do.
#[test]
fn iostat_refuses_an_array_not_served_and_bad_intervals() {
    let d = tmpdir();
    let env = Env { dir: d.path().to_path_buf() };
    let o = env.cmd(&["iostat", "nosuch"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("is not served here") && err.contains("uraid serve nosuch"), "{err}");
    for (args, needle) in [(&["iostat", "x", "0"][..], "INTERVAL 0 is out of range"), (&["iostat", "x", "1", "0"][..], "COUNT 0 prints nothing")] {
        let o = env.cmd(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(needle), "{args:?}: {err}");
    }
}
