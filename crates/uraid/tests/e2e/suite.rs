//! The reviewers' suite: `uraid profiles`, `uraid suite` and `uraid tune`.
//!
//! - every profile's parameters against the table below;
//! - on emulated `mem:` drives with exact ceilings, every profile (timed
//!   tests, ATTO, linear surface) reaches the ceiling the drive model
//!   predicts, within 5%;
//! - on a raw file (on a drive with a ceiling), every CrystalDiskMark
//!   profile agrees with fio run with the same parameters, within 5%;
//! - charts are valid PNG and SVG with the expected series, and the HTML
//!   report holds every table;
//! - `uraid tune` picks the chunk size the drive model predicts;
//! - data patterns, the shared-device warning, and clear errors.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::util::*;

const MIB: u64 = 1 << 20;

fn json(o: &Out) -> Value {
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("`{}` printed no JSON ({e}):\n{}\n{}", o.cmdline, o.stdout, o.stderr))
}

/// (set, test, block, QD, threads, pattern, read %): CrystalDiskMark 8
/// (default, NVMe SSD, Peak under the default and under the NVMe SSD
/// settings, Real World, Mix at 70% read), Iometer, AS SSD. CrystalDiskMark
/// 8's source (DiskMarkDlg.cpp, DiskBench.cpp) runs its test slots 0-3 for
/// the default profile, 4-5 for Peak and 6-7 for Real World; the defaults
/// of slots 4-7 are SEQ1M Q8T1, RND4K Q32T1, SEQ1M Q1T1, RND4K Q1T1, and
/// the NVMe SSD settings make slot 5 RND4K Q32T16.
const PROFILES: &[(&str, &str, u64, u64, u64, &str, u64)] = &[
    ("cdm", "SEQ1M Q8T1 read", 1 << 20, 8, 1, "Seq", 100),
    ("cdm", "SEQ1M Q8T1 write", 1 << 20, 8, 1, "Seq", 0),
    ("cdm", "SEQ1M Q1T1 read", 1 << 20, 1, 1, "Seq", 100),
    ("cdm", "SEQ1M Q1T1 write", 1 << 20, 1, 1, "Seq", 0),
    ("cdm", "RND4K Q32T1 read", 4096, 32, 1, "Rand", 100),
    ("cdm", "RND4K Q32T1 write", 4096, 32, 1, "Rand", 0),
    ("cdm", "RND4K Q1T1 read", 4096, 1, 1, "Rand", 100),
    ("cdm", "RND4K Q1T1 write", 4096, 1, 1, "Rand", 0),
    ("nvme", "SEQ1M Q8T1 read", 1 << 20, 8, 1, "Seq", 100),
    ("nvme", "SEQ1M Q8T1 write", 1 << 20, 8, 1, "Seq", 0),
    ("nvme", "SEQ128K Q32T1 read", 128 << 10, 32, 1, "Seq", 100),
    ("nvme", "SEQ128K Q32T1 write", 128 << 10, 32, 1, "Seq", 0),
    ("nvme", "RND4K Q32T16 read", 4096, 32, 16, "Rand", 100),
    ("nvme", "RND4K Q32T16 write", 4096, 32, 16, "Rand", 0),
    ("nvme", "RND4K Q1T1 read", 4096, 1, 1, "Rand", 100),
    ("nvme", "RND4K Q1T1 write", 4096, 1, 1, "Rand", 0),
    ("peak", "SEQ1M Q8T1 read", 1 << 20, 8, 1, "Seq", 100),
    ("peak", "SEQ1M Q8T1 write", 1 << 20, 8, 1, "Seq", 0),
    ("peak", "RND4K Q32T1 read", 4096, 32, 1, "Rand", 100),
    ("peak", "RND4K Q32T1 write", 4096, 32, 1, "Rand", 0),
    ("peak-nvme", "SEQ1M Q8T1 read", 1 << 20, 8, 1, "Seq", 100),
    ("peak-nvme", "SEQ1M Q8T1 write", 1 << 20, 8, 1, "Seq", 0),
    ("peak-nvme", "RND4K Q32T16 read", 4096, 32, 16, "Rand", 100),
    ("peak-nvme", "RND4K Q32T16 write", 4096, 32, 16, "Rand", 0),
    ("realworld", "SEQ1M Q1T1 read", 1 << 20, 1, 1, "Seq", 100),
    ("realworld", "SEQ1M Q1T1 write", 1 << 20, 1, 1, "Seq", 0),
    ("realworld", "RND4K Q1T1 read", 4096, 1, 1, "Rand", 100),
    ("realworld", "RND4K Q1T1 write", 4096, 1, 1, "Rand", 0),
    ("mix", "SEQ1M Q8T1 mix R70/W30", 1 << 20, 8, 1, "Seq", 70),
    ("mix", "SEQ1M Q1T1 mix R70/W30", 1 << 20, 1, 1, "Seq", 70),
    ("mix", "RND4K Q32T1 mix R70/W30", 4096, 32, 1, "Rand", 70),
    ("mix", "RND4K Q1T1 mix R70/W30", 4096, 1, 1, "Rand", 70),
    ("iometer", "Iometer 4K Q32T1 mix R50/W50", 4096, 32, 1, "Rand", 50),
    ("asssd", "AS SSD Seq read", 16 << 20, 1, 1, "Seq", 100),
    ("asssd", "AS SSD Seq write", 16 << 20, 1, 1, "Seq", 0),
    ("asssd", "AS SSD 4K read", 4096, 1, 1, "Rand", 100),
    ("asssd", "AS SSD 4K write", 4096, 1, 1, "Rand", 0),
    ("asssd", "AS SSD 4K-64Thrd read", 4096, 1, 64, "Rand", 100),
    ("asssd", "AS SSD 4K-64Thrd write", 4096, 1, 64, "Rand", 0),
    ("asssd", "AS SSD Acc.time read", 512, 1, 1, "Rand", 100),
    ("asssd", "AS SSD Acc.time write", 512, 1, 1, "Rand", 0),
];

#[test]
fn suite_profiles_match_the_table() {
    let _g = shared();
    let j = json(&uraid_ok(&["profiles", "--json"]));
    let mut got = Vec::new();
    for set in j["sets"].as_array().expect("sets") {
        for t in set["tests"].as_array().expect("tests") {
            got.push((
                set["set"].as_str().unwrap().to_string(),
                t["name"].as_str().unwrap().to_string(),
                t["block"].as_u64().unwrap(),
                t["qd"].as_u64().unwrap(),
                t["threads"].as_u64().unwrap(),
                t["pattern"].as_str().unwrap().to_string(),
                t["read_pct"].as_u64().unwrap(),
            ));
        }
    }
    let want: Vec<_> =
        PROFILES.iter().map(|&(s, n, b, q, t, p, r)| (s.to_string(), n.to_string(), b, q, t, p.to_string(), r)).collect();
    assert_eq!(got, want, "profiles --json differs from the table");
    let sets: Vec<&str> = j["sets"].as_array().unwrap().iter().map(|s| s["set"].as_str().unwrap()).collect();
    assert_eq!(sets, ["cdm", "nvme", "peak", "peak-nvme", "realworld", "mix", "iometer", "asssd", "atto", "linear"]);
    // ATTO: 512 B to 64 MiB, QD4, 256 MiB, write then read; linear: 1 MiB at QD1.
    let a = &j["atto"];
    assert_eq!((a["min"].as_u64(), a["max"].as_u64(), a["qd"].as_u64(), a["area"].as_u64()), (Some(512), Some(64 << 20), Some(4), Some(256 << 20)));
    assert_eq!(a["order"], serde_json::json!(["write", "read"]));
    // One pass per size and direction; the cap only stops a pass that would run for minutes.
    assert_eq!((a["passes_per_size_and_direction"].as_u64(), a["cap_secs"].as_f64()), (Some(1), Some(60.0)));
    let l = &j["linear"];
    assert_eq!((l["block"].as_u64(), l["qd"].as_u64()), (Some(1 << 20), Some(1)));
    assert_eq!((l["covers"].as_str(), l["default"].as_str(), l["write_flag"].as_str()), (Some("the whole target"), Some("read"), Some("--linear-write")));
    // CrystalDiskMark's timing: 1 GiB, 5 runs of 5 s.
    let t = &j["timed"];
    assert_eq!((t["area"].as_u64(), t["runs"].as_u64(), t["run_secs"].as_f64()), (Some(1 << 30), Some(5), Some(5.0)));
    // The text form lists them too.
    let o = uraid_ok(&["profiles"]);
    assert_contains(&o.stdout, &["RND4K Q32T16 read", "AS SSD 4K-64Thrd", "Iometer 4K Q32T1 mix R50/W50", "ATTO"], "uraid profiles");
}

/// The drive model of `mem:` members: each I/O takes max(1/iops, bytes/bw)
/// on a drive that serves one I/O at a time.
fn service_secs(block: f64, bw: f64, iops: f64) -> f64 {
    (1.0 / iops).max(block / bw)
}

/// Bandwidth of suite_reaches_mem_ceilings's drive (bytes/s).
const BW: f64 = 1e9;
/// IOPS of that drive: 5 ms per I/O up to 5 MB, 1000 MB/s above. The
/// engine wakes up to ~150 µs late on a loaded VM to deliver a held
/// completion, which a queue depth of 1 sees in full: a slow I/O keeps
/// that under 5%.
const IOPS: f64 = 200.0;

#[test]
fn suite_reaches_mem_ceilings() {
    let _g = shared();
    // ATTO's own 256 MiB area: a 16 MiB transfer is then 16 samples per
    // pass, not 4, so one late wake-up on a busy machine does not decide
    // the figure.
    let drive = "mem:320M,bw=1000M,iops=200";
    // The model is a ceiling: a busy machine (the VM stage runs beside
    // the host tests) only makes a figure slower, never faster. So a
    // figure past the model fails at once, and one short of it is
    // measured again (up to 3 suite runs, the best of each figure kept,
    // as --best does within a run): the behaviour tested is that every
    // figure reaches its ceiling, not that the first run was undisturbed.
    let mut best: Vec<(String, f64, f64, &str)> = Vec::new();
    for attempt in 1..=3 {
        let figures = suite_figures(drive);
        if best.is_empty() {
            best = figures;
        } else {
            for (b, f) in best.iter_mut().zip(figures) {
                assert_eq!(b.0, f.0, "the suite's figures come in one order");
                // Closer to the model from the slow side: larger for
                // rates, smaller for latencies.
                let slow = |x: f64| if b.3 == "ms" { x / b.2 } else { b.2 / x };
                if slow(f.1) < slow(b.1) {
                    *b = f;
                }
            }
        }
        let ratio = |b: &(String, f64, f64, &str)| b.1 / b.2;
        let fast: Vec<String> = best.iter().filter(|b| if b.3 == "ms" { ratio(b) < 0.95 } else { ratio(b) > 1.05 }).map(line).collect();
        assert!(fast.is_empty(), "faster than the drive model allows (the model or the measurement is wrong):\n{}", fast.join("\n"));
        let short: Vec<String> = best.iter().filter(|b| !(0.95..=1.05).contains(&ratio(b))).map(line).collect();
        let report = best.iter().map(line).collect::<Vec<_>>().join("\n");
        eprintln!("mem: drive {drive}, run {attempt}, best figures against the drive model:\n{report}");
        if short.is_empty() {
            return;
        }
        assert!(attempt < 3, "off the model by more than 5% in 3 runs:\n{}\n\nall:\n{report}", short.join("\n"));
    }
}

/// One line of the report: name, figure, unit, the model's figure, ratio.
fn line(b: &(String, f64, f64, &str)) -> String {
    let (what, got, want, unit) = (&b.0, b.1, b.2, b.3);
    format!("{what:<34} {got:>10.2} {unit:<5} model {want:>10.2}  ratio {:.3}", got / want)
}

/// Runs `uraid suite` over `drive` once, checks what does not depend on
/// the machine's load (the tests, passes and bytes), and returns every
/// figure with the drive model's: (name, figure, model, unit).
fn suite_figures(drive: &str) -> Vec<(String, f64, f64, &'static str)> {
    let o = uraid_ok(&[
        "suite", "--json", "--sets", "all", "--best", "--runs", "2", "--time", "0.2", "--warmup", "0.05", "--size", "32M",
        "--atto-size", "256M", "--atto-cap", "0.4", drive,
    ]);
    let j = json(&o);
    let t = &j["targets"][0];
    let mut figures = Vec::new();
    let mut check = |what: String, got: f64, want: f64, unit: &'static str| figures.push((what, got, want, unit));
    let tests = t["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 25, "every timed test of every set, each once: {}", tests.len());
    for x in tests {
        let name = format!("{} {}", x["test"]["profile"]["name"].as_str().unwrap(), dir_name(&x["test"]["dir"]));
        let block = x["test"]["profile"]["block"].as_f64().unwrap();
        let s = service_secs(block, BW, IOPS);
        // --best: the best of the runs, which a busy machine disturbs least
        // (the model is a ceiling, not a figure the runs scatter around).
        let best = |k: &str| x["summary"][k].as_f64().unwrap();
        match x["metric"].as_str().unwrap() {
            "Mbps" => check(name, best("max"), block / s / 1e6, "MB/s"),
            "Iops" => check(name, best("max"), 1.0 / s, "IOPS"),
            "LatencyMs" => check(name, best("min"), s * 1e3, "ms"),
            m => panic!("unknown metric {m}"),
        }
    }
    let points = t["atto"]["points"].as_array().unwrap();
    assert_eq!(points.len(), 18, "512 B to 64 MiB");
    let atto_area = t["atto"]["area"].as_u64().unwrap();
    assert_eq!(atto_area, 256 * MIB);
    for p in points {
        let size = p["size"].as_f64().unwrap();
        let want = size / service_secs(size, BW, IOPS) / 1e6;
        for d in ["write", "read"] {
            check(format!("ATTO {} {d}", size as u64), p[d]["mbps"].as_f64().unwrap(), want, "MB/s");
            // One pass over the area per size and direction: a pass the cap
            // did not stop moved the area exactly once.
            if p[d]["capped"] == false {
                assert_eq!(p[d]["bytes"].as_u64(), Some(atto_area), "ATTO {size} {d}: {}", p[d]);
                assert_eq!(p[d]["ios"].as_u64(), Some(atto_area / size as u64), "ATTO {size} {d}: {}", p[d]);
            }
        }
    }
    // 0.4 s lets the 1 GB/s sizes finish (256 MiB takes 268 ms).
    assert_eq!(points[17]["read"]["capped"], false, "the 64M read pass was cut short: {}", points[17]);
    let surf = &t["surfaces"][0];
    let want = MIB as f64 / service_secs(MIB as f64, BW, IOPS) / 1e6;
    check("linear read (average)".into(), surf["total"]["mbps"].as_f64().unwrap(), want, "MB/s");
    let mut slices: Vec<f64> = surf["points"].as_array().unwrap().iter().map(|p| p["mbps"].as_f64().unwrap()).collect();
    assert!(slices.len() >= 50, "{} surface points", slices.len());
    slices.sort_by(f64::total_cmp);
    check("linear read (median slice)".into(), slices[slices.len() / 2], want, "MB/s");
    assert_eq!(surf["len"].as_u64(), Some(320 * MIB), "the whole device");
    assert_eq!(surf["total"]["bytes"].as_u64(), Some(320 * MIB), "one pass over the whole device");
    assert_eq!(surf["dir"], "Read", "the surface test reads unless --linear-write is given");
    assert_eq!(t["surfaces"].as_array().map(Vec::len), Some(1), "no write pass without --linear-write");
    // The AS SSD score follows from the figures.
    let sc = &t["asssd"];
    let mb = |b: f64| b / service_secs(b, BW, IOPS) / 1e6;
    let want_total = 0.15 * mb(16.0 * MIB as f64) + 0.1 * mb(16.0 * MIB as f64) + 2.0 * mb(4096.0) + mb(4096.0) + mb(4096.0) + 1.5 * mb(4096.0);
    check("AS SSD total score".into(), sc["total"].as_f64().unwrap(), want_total, "");
    figures
}

fn dir_name(d: &Value) -> String {
    match d {
        Value::String(s) => s.to_lowercase(),
        Value::Object(m) => {
            let r = m["Mix"].as_u64().unwrap();
            format!("mix R{r}/W{}", 100 - r)
        }
        _ => panic!("bad dir {d}"),
    }
}

/// fio with one CrystalDiskMark test's parameters; MB/s (bw_bytes / 1e6).
fn fio_mbps(t: &ThrottledFile, seq: bool, write: bool, bs: u64, qd: u64, threads: u64) -> f64 {
    let rw = match (seq, write) {
        (true, false) => "read",
        (true, true) => "write",
        (false, false) => "randread",
        (false, true) => "randwrite",
    };
    let mut cmd = t.cmd("fio");
    cmd.args(["--name=suite", "--size=256M", "--ioengine=io_uring", "--direct=1", "--thread", "--group_reporting", "--norandommap", "--randrepeat=0"])
        .arg(format!("--filename={}", s(&t.file)))
        .arg(format!("--rw={rw}"))
        .arg(format!("--bs={bs}"))
        .arg(format!("--iodepth={qd}"))
        .arg(format!("--numjobs={threads}"))
        .args(["--time_based", "--runtime=2", "--ramp_time=1", "--output-format=json"]);
    let out = run_tool(&mut cmd);
    let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("fio printed no JSON ({e}):\n{out}"));
    let job = &j["jobs"][0];
    assert_eq!(job["error"], 0, "fio reported an error: {job}");
    let bw = job[if write { "write" } else { "read" }]["bw_bytes"].as_f64().unwrap();
    assert!(bw > 0.0, "fio moved nothing: {job}");
    bw / 1e6
}

/// uraid's MB/s (median run) and profile per test name for `args`.
fn uraid_mbps(t: &ThrottledFile, args: &[&str]) -> HashMap<String, (f64, Value)> {
    let mut cmd = t.cmd(URAID);
    cmd.args(["suite", "--json", "--quiet", "--runs", "1", "--time", "2", "--warmup", "1", "--size", "256M"]).args(args).arg(&t.file);
    let out = run_tool(&mut cmd);
    let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("uraid suite printed no JSON ({e}):\n{out}"));
    let target = j["targets"][0]["description"].as_str().unwrap_or_default().to_string();
    assert!(!target.contains("buffered"), "uraid fell back to buffered I/O on {target}; fio runs with --direct=1");
    j["targets"][0]["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            let name = format!("{} {}", x["test"]["profile"]["name"].as_str().unwrap(), dir_name(&x["test"]["dir"]));
            (name, (x["median"]["mbps"].as_f64().unwrap(), x["test"]["profile"].clone()))
        })
        .collect()
}

#[test]
fn suite_cdm_profiles_agree_with_fio() {
    require_tool("fio", "fio");
    const TOLERANCE: f64 = 0.05;
    // Nothing else of this binary runs meanwhile.
    let _g = exclusive();
    let t = ThrottledFile::new(256 * MIB);
    // Round 1: every CrystalDiskMark profile (default and NVMe sets) in one
    // uraid run, then fio with the same parameters. Later rounds re-run
    // only the tests that disagree, fio first. A test agrees when, within
    // 5%, the medians of both sides agree, or their best figures (capped at
    // the ceiling), or the two figures of one round: the blkio throttle lets short bursts past
    // its ceiling now and then (fio's 16 jobs of RND4K Q32T16 see them
    // most), and a single noisy figure should not decide.
    let mut samples: HashMap<String, (Vec<f64>, Vec<f64>, Value)> = HashMap::new();
    let first = uraid_mbps(&t, &["--sets", "cdm,nvme"]);
    assert_eq!(first.len(), 12, "6 profiles, read and write: {:?}", first.keys());
    for (name, (u, p)) in first {
        samples.insert(name, (vec![u], vec![], p));
    }
    let fio_of = |p: &Value, name: &str| {
        fio_mbps(
            &t,
            p["pattern"] == "Seq",
            name.ends_with("write"),
            p["block"].as_u64().unwrap(),
            p["qd"].as_u64().unwrap(),
            p["threads"].as_u64().unwrap(),
        )
    };
    let close = |a: f64, b: f64| b > 0.0 && (a / b - 1.0).abs() <= TOLERANCE;
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 }
    };
    let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    // The throttle's ceiling for profile `p`, MB/s.
    let ceiling_of = |p: &Value| (FIO_BW as f64).min(FIO_IOPS as f64 * p["block"].as_f64().unwrap()) / 1e6;
    // Best figures are compared capped at the ceiling: a burst past it is
    // the throttle's, and a loaded machine only ever slows a run down.
    let agrees = |u: &[f64], f: &[f64], ceil: f64| {
        !f.is_empty()
            && (close(median(u), median(f))
                || close(best(u).min(ceil), best(f).min(ceil))
                || u.iter().zip(f).any(|(&a, &b)| close(a, b)))
    };
    let mut names: Vec<String> = samples.keys().cloned().collect();
    names.sort();
    for round in 0..3 {
        let todo: Vec<String> =
            names.iter().filter(|n| !agrees(&samples[*n].0, &samples[*n].1, ceiling_of(&samples[*n].2))).cloned().collect();
        if todo.is_empty() {
            break;
        }
        for n in &todo {
            let p = samples[n].2.clone();
            let f = fio_of(&p, n);
            samples.get_mut(n).unwrap().1.push(f);
            if round > 0 {
                let prof = p["name"].as_str().unwrap().replace(' ', "-");
                let only = if n.ends_with("write") { "--write-only" } else { "--read-only" };
                let u = uraid_mbps(&t, &["--sets", "none", "--profile", &prof, only])[n].0;
                samples.get_mut(n).unwrap().0.push(u);
            }
        }
    }
    let mut report = Vec::new();
    let mut failed = false;
    for n in &names {
        let (u, f, p) = &samples[n];
        let ceiling = ceiling_of(p);
        let ok = agrees(u, f, ceiling);
        failed |= !ok;
        report.push(format!(
            "{n:<20} uraid {:>7.1} MB/s  fio {:>7.1} MB/s  (medians; ceiling {ceiling:.1})  uraid/fio {:.3} {}  uraid runs {u:.1?}, fio runs {f:.1?}",
            median(u),
            median(f),
            median(u) / median(f),
            if ok { "ok" } else { "DISAGREE" },
        ));
    }
    let report = report.join("\n");
    eprintln!(
        "CrystalDiskMark profiles, uraid against fio on a 256 MiB file (ext4 on a loop device at {} MB/s and {} IOPS):\n{report}",
        FIO_BW / 1_000_000,
        FIO_IOPS
    );
    assert!(!failed, "uraid and fio disagree by more than {:.0}%:\n{report}", TOLERANCE * 100.0);
}

#[test]
fn suite_writes_charts_and_a_report_with_every_table() {
    let _g = shared();
    let dir = tmpdir();
    let out = dir.path().join("report");
    let drive = "mem:64M,bw=500M,iops=20000";
    let o = uraid_ok(&[
        "suite", "--json", "--sets", "cdm,asssd,atto,linear", "--runs", "2", "--time", "0.1", "--warmup", "0", "--size", "16M",
        "--atto-size", "16M", "--atto-max", "16M", "--atto-cap", "0.05", "--out", s(&out), &format!("one={drive}"),
        &format!("array={drive}+{drive}"),
    ]);
    let j = json(&o);
    let files: Vec<String> = j["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect();
    for name in ["report.html", "results.json"] {
        assert!(files.iter().any(|f| f.ends_with(name)), "{name} not written: {files:?}");
    }
    // Every chart as PNG and SVG, with its series.
    let charts: [(&str, &[&str]); 7] = [
        ("bars-mbps", &["one", "array", "SEQ1M Q8T1 read", "AS SSD Seq write"]),
        ("bars-iops", &["one", "array", "RND4K Q32T1 read", "RND4K Q1T1 write"]),
        ("bars-access", &["one", "array", "AS SSD Acc.time read"]),
        ("atto", &["one read", "one write", "array read", "array write", "512", "16M"]),
        ("linear", &["one read", "array read"]),
        ("latency-1", &["SEQ1M Q8T1 read", "RND4K Q1T1 write", "p99.9"]),
        ("latency-2", &["SEQ1M Q8T1 read", "p50"]),
    ];
    for (name, series) in charts {
        let png = std::fs::read(out.join(format!("{name}.png"))).unwrap_or_else(|e| panic!("{name}.png: {e}"));
        let (w, h) = uraid_bench::chart::png_size(&png).unwrap_or_else(|e| panic!("{name}.png: {e}"));
        assert!(w >= 640 && h >= 360, "{name}.png is {w}x{h}");
        let svg = std::fs::read_to_string(out.join(format!("{name}.svg"))).unwrap();
        let texts = uraid_bench::chart::svg_texts(&svg).unwrap_or_else(|e| panic!("{name}.svg: {e}"));
        for want in series {
            assert!(texts.iter().any(|t| t.contains(want)), "{name}.svg lacks {want:?}; its texts: {texts:?}");
        }
    }
    // The ATTO chart has a read and a write line per target (plotters draws
    // each series as one polyline).
    let svg = std::fs::read_to_string(out.join("atto.svg")).unwrap();
    assert!(svg.matches("<polyline").count() >= 4, "atto.svg has {} polylines", svg.matches("<polyline").count());
    // The report: self-contained, every table, every chart, the machine.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for needle in ["<script", "<img", "<link", "src=", "href=", "url(", "@import"] {
        assert!(!html.contains(needle), "the report is not self-contained: it holds {needle:?}");
    }
    // CrystalDiskMark's table and the summary lead, above every chart; the
    // machine's load during each target is stated.
    let cdm = html.find("CrystalDiskMark: median of 2 runs").expect("the CrystalDiskMark table");
    assert!(cdm < html.find("<svg").unwrap(), "the CrystalDiskMark table comes before the charts");
    let summary = j["summary"][0].as_str().unwrap();
    assert!(summary.starts_with("array: ") && summary.contains("x one on RND4K Q32T1 read") && summary.contains("on SEQ1M Q8T1 read"), "{summary}");
    assert!(html.find(summary).is_some_and(|i| i < cdm), "the summary line heads the report");
    assert!(html.contains("The machine while each target ran") && html.contains("other processes"), "the machine's load");
    assert!(j["targets"][1]["busy"]["others_pct"].as_f64().is_some_and(|p| p >= 0.0), "{}", j["targets"][1]["busy"]);
    for title in [
        "Other tests: median of 2 runs",
        "one: runs and CPU",
        "array: runs and CPU",
        "ATTO: QD4",
        "AS SSD",
        "Total score",
        "Linear surface",
        "Machine",
        "Targets and members",
        "kernel",
        "rotational",
        "sits on",
    ] {
        assert!(html.contains(title), "the report lacks {title:?}");
    }
    assert_eq!(html.matches("<table>").count(), 9, "CrystalDiskMark, other tests, 2 x runs, ATTO, AS SSD, linear, machine, members");
    assert_eq!(html.matches("<svg").count(), charts.len(), "every chart inline");
    let results = j["targets"][0]["tests"].as_array().unwrap();
    for x in results {
        let name = format!("{} {}", x["test"]["profile"]["name"].as_str().unwrap(), dir_name(&x["test"]["dir"]));
        assert!(html.contains(&format!("<td>{name}</td>")), "the report lacks the row {name}");
    }
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(html.contains(kernel.trim()), "the report does not name the kernel");
    // The same JSON was written beside it.
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(saved["targets"].as_array().map(Vec::len), Some(2));
    // Without --json the tables are printed, 'same' where the two agree:
    // one drive against RAID 0 x2 of the same drives at QD1 random (2 ms
    // per I/O, so the engine's wake-up jitter stays in the noise).
    let slow = "mem:64M,bw=500M,iops=500";
    let o = uraid_ok(&[
        "suite", "--quiet", "--sets", "realworld", "--read-only", "--runs", "3", "--time", "0.2", "--warmup", "0", "--size", "16M",
        &format!("one={slow}"), &format!("array={slow}+{slow}"),
    ]);
    assert_contains(&o.stdout, &["CrystalDiskMark: median of 3 runs", "RND4K Q1T1 read", "array: "], "suite tables");
    assert!(!o.stdout.contains("Other tests"), "only CrystalDiskMark tests ran: no second results table\n{}", o.stdout);
    let row = o.stdout.lines().find(|l| l.contains("RND4K Q1T1 read")).unwrap();
    // The array's figure against one drive's, "(1.0x)": on a loaded
    // machine three runs of 0.2 s may tell a few percent apart, so within 5%.
    let ratio = row.split('(').nth(1).and_then(|c| c.split('x').next()).and_then(|c| c.parse::<f64>().ok());
    assert!(ratio.is_some_and(|r| (0.95..=1.05).contains(&r)), "QD1 random reads on RAID 0 are as fast as on one drive: {row}");
}

#[test]
fn suite_tune_picks_the_chunk_the_model_predicts() {
    let _g = shared();
    // Each drive: 4 ms per I/O up to 250 KB, 62.5 MB/s above. With 4
    // drives: SEQ1M Q1T1 wants the 1 MiB request on all 4 drives (chunk <=
    // 256K: 250 MB/s; 512K: 125; 1M: 62.5); SEQ256K Q32T1 wants each
    // request on one drive (chunk >= 256K: 250 MB/s; 128K: 131; <= 64K:
    // 65.5). Only 256K is best on both.
    let drive = "mem:64M,bw=62500K,iops=250";
    let dir = tmpdir();
    let out = dir.path().join("tune");
    let o = uraid_ok(&[
        "tune", "--json", "--sets", "none", "--profile", "SEQ1M-Q1T1,SEQ256K-Q32T1", "--read-only", "--runs", "1", "--time", "0.3",
        "--warmup", "0.05", "--size", "32M", "--out", s(&out), drive, drive, drive, drive,
    ]);
    let j = json(&o);
    let reason = j["reason"].as_str().unwrap();
    assert_eq!(j["recommended"].as_u64(), Some(256 << 10), "tune recommended {} ({reason})", j["recommended"]);
    assert_eq!(j["candidates"], serde_json::json!([256 << 10]), "{reason}");
    let chunks: Vec<u64> = j["tuning"]["chunks"].as_array().unwrap().iter().map(|c| c["chunk"].as_u64().unwrap()).collect();
    assert_eq!(chunks, (12..=20).map(|b| 1u64 << b).collect::<Vec<_>>(), "every chunk size from 4K to 1M");
    assert_contains(reason, &["256K", "1M reaches", "against one drive"], "reason");
    // The model's figures: 256K reaches 4x one drive on both. The
    // emulated drives are a ceiling: never more than 5% above it, and on
    // a loaded machine (0.3 s runs) up to 15% below (236 MB/s was seen
    // while the suite ran beside other builds).
    let c256 = j["tuning"]["chunks"].as_array().unwrap().iter().find(|c| c["chunk"] == 256 << 10).unwrap();
    for x in c256["results"].as_array().unwrap() {
        let m = x["summary"]["median"].as_f64().unwrap();
        assert!(m / 250.0 < 1.05 && m / 250.0 > 0.85, "{}: {m} MB/s at 256K, the model says 250", x["test"]["profile"]["name"]);
    }
    for name in ["tune-mbps.png", "tune-mbps.svg", "report.html"] {
        assert!(out.join(name).exists(), "{name} not written");
    }
    let texts = uraid_bench::chart::svg_texts(&std::fs::read_to_string(out.join("tune-mbps.svg")).unwrap()).unwrap();
    for want in ["SEQ1M Q1T1 read", "SEQ256K Q32T1 read one drive", "256K"] {
        assert!(texts.iter().any(|t| t.contains(want)), "tune-mbps.svg lacks {want:?}: {texts:?}");
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("Recommended chunk size: 256K"), "the tune report lacks the recommendation");
}

#[test]
fn suite_data_patterns_are_written() {
    let _g = shared();
    let dir = tmpdir();
    let f = sparse_file(dir.path(), "pattern.img", 8 * MIB);
    let zeros = |p: &Path| {
        let b = std::fs::read(p).unwrap();
        b.iter().filter(|&&x| x == 0).count() as f64 / b.len() as f64
    };
    for (fill, lo, hi) in [("zero", 1.0, 1.0), ("compressible:25", 0.74, 0.76), ("random", 0.0, 0.01)] {
        uraid_ok(&[
            "suite", "--quiet", "--json", "--sets", "none", "--profile", "SEQ1M-Q1T1", "--write-only", "--fill", fill, "--runs", "1",
            "--time", "0.3", "--warmup", "0", "--size", "8M", "--overwrite", s(&f),
        ]);
        let z = zeros(&f);
        assert!((lo..=hi).contains(&z), "--fill {fill}: {:.1}% of the bytes are zero", z * 100.0);
    }
    // compressible:25 = a quarter random bytes, then zeros, in each 4 KiB.
    uraid_ok(&[
        "suite", "--quiet", "--sets", "none", "--profile", "SEQ1M-Q1T1", "--write-only", "--fill", "compressible:25", "--runs", "1",
        "--time", "0.3", "--warmup", "0", "--size", "8M", s(&f),
    ]);
    let b = std::fs::read(&f).unwrap();
    for piece in b.chunks(4096).take(64) {
        assert!(piece[1024..].iter().all(|&x| x == 0), "a 4 KiB piece has random bytes past its first quarter");
        assert!(piece[..1024].iter().filter(|&&x| x == 0).count() < 64, "a 4 KiB piece starts with zeros");
    }
}

#[test]
fn suite_linear_writes_only_with_its_flag() {
    let _g = shared();
    let dir = tmpdir();
    let f = written_file(dir.path(), "surface.img", 8 * MIB);
    let snap = Snapshot::take(&[&f]);
    // The linear set alone reads the whole target and writes nothing.
    let o = uraid_ok(&["suite", "--json", "--quiet", "--sets", "linear", "--linear-points", "8", s(&f)]);
    let j = json(&o);
    let surfaces = j["targets"][0]["surfaces"].as_array().unwrap();
    assert_eq!(surfaces.len(), 1);
    assert_eq!((surfaces[0]["dir"].as_str(), surfaces[0]["total"]["bytes"].as_u64()), (Some("Read"), Some(8 * MIB)));
    assert_eq!(surfaces[0]["points"].as_array().map(Vec::len), Some(8));
    snap.assert_unchanged("suite --sets linear");
    // With --linear-write it is read, then every byte of it written (zeros here).
    let o = uraid_ok(&["suite", "--json", "--quiet", "--sets", "linear", "--linear-write", "--fill", "zero", s(&f)]);
    let j = json(&o);
    let dirs: Vec<&str> = j["targets"][0]["surfaces"].as_array().unwrap().iter().map(|x| x["dir"].as_str().unwrap()).collect();
    assert_eq!(dirs, ["Read", "Write"]);
    assert!(std::fs::read(&f).unwrap().iter().all(|&b| b == 0), "--linear-write left bytes unwritten");
}

#[test]
fn suite_warns_about_members_on_one_device() {
    let _g = shared();
    // Two loop devices over files on one filesystem, hence one disk.
    let dir = tmpdir();
    let files = sparse_files(dir.path(), "d", 2, 16 * MIB);
    let l0 = LoopDev::attach(&files[0]);
    let l1 = LoopDev::attach(&files[1]);
    let target = format!("pair={}+{}", s(&l0.dev), s(&l1.dev));
    let o = uraid_ok(&[
        "suite", "--json", "--quiet", "--sets", "realworld", "--read-only", "--runs", "1", "--time", "0.1", "--warmup", "0",
        "--size", "4M", &target,
    ]);
    let j = json(&o);
    let t = &j["targets"][0];
    let warnings: Vec<&str> = t["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    assert!(
        warnings.iter().any(|w| w.contains("sit on the same device") && w.contains("cannot scale")),
        "no shared-device warning for two loop devices on one disk: {warnings:?}\nmembers: {}",
        t["members"]
    );
    let chain = t["members"][0]["sits_on"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect::<Vec<_>>().join(" -> ");
    assert_contains(&chain, &["loop device", s(&files[0])], "what member 0 sits on");
    // The warning is printed with the tables too.
    let o = uraid_ok(&["suite", "--quiet", "--sets", "realworld", "--read-only", "--runs", "1", "--time", "0.1", "--warmup", "0", "--size", "4M", &target]);
    assert!(o.stdout.contains("WARNING: pair: members"), "{}", o.stdout);
    // Emulated drives have their own ceilings: no warning about them (a
    // busy machine, as under the test suite, is said apart).
    let o = uraid_ok(&[
        "suite", "--json", "--quiet", "--sets", "realworld", "--read-only", "--runs", "1", "--time", "0.1", "--warmup", "0", "--size",
        "4M", "mem:16M+mem:16M",
    ]);
    let j = json(&o);
    let about_members: Vec<&serde_json::Value> =
        j["targets"][0]["warnings"].as_array().unwrap().iter().filter(|w| !w.as_str().unwrap().starts_with("the machine was busy")).collect();
    assert!(about_members.is_empty(), "{about_members:?}");
}

#[test]
fn suite_rejects_bad_input_clearly() {
    let _g = shared();
    let dir = tmpdir();
    let f = sparse_file(dir.path(), "t.img", 8 * MIB);
    let quick = ["--runs", "1", "--time", "0.1", "--warmup", "0", "--size", "4M"];
    let run = |extra: &[&str], needles: &[&str]| {
        let mut a = vec!["suite"];
        a.extend_from_slice(&quick);
        a.extend_from_slice(extra);
        uraid_fails(&a, needles);
    };
    run(&["--sets", "bogus", s(&f)], &["unknown set 'bogus'", "cdm", "asssd"]);
    run(&["--profile", "SEQ9X", s(&f)], &["unknown profile 'SEQ9X'", "SEQ<size>Q<depth>T<threads>"]);
    run(&["--fill", "compressible:150", s(&f)], &["unknown data pattern", "0 to 100"]);
    run(&["--sets", "none", "--profile", "SEQ64M-Q64T4", "mem:128M"], &["bytes of buffers", "the most is", "1 GiB"]);
    run(&["--sets", "atto", "--atto-qd", "256", "mem:128M"], &["more than 1 GiB of buffers"]);
    run(&["--mix-read", "0", "--sets", "mix", s(&f)], &["--mix-read must be from 1 to 99"]);
    uraid_fails(&["suite", "--runs", "0", s(&f)], &["--runs must be from 1 to 100"]);
    run(&["--sets", "linear", "--linear-write", "--read-only", s(&f)], &["cannot be combined with --read-only"]);
    run(&["--linear-write", s(&f)], &["needs the linear set"]);
    run(&["--sets", "atto", "--atto-size", "1M", s(&f)], &["smaller than its largest transfer"]);
    run(&["--chunk", "3K", "a=mem:8M+mem:8M"], &["chunk size", "power of two"]);
    run(&["a=mem:8M", "a=mem:8M"], &["two targets are labelled 'a'"]);
    run(&["x=", s(&f)], &["names no drive"]);
    run(&[&dir.path().join("missing.img").to_string_lossy()], &["missing.img"]);
    // A filesystem is not overwritten without --overwrite, and nothing is written.
    let fs = sparse_file(dir.path(), "ext4.img", 16 * MIB);
    mkfs_ext4(&fs);
    let snap = Snapshot::take(&[&fs]);
    run(&[s(&fs)], &["holds an ext2/ext3/ext4 filesystem", "Nothing was written", "--overwrite"]);
    run(&["--sets", "linear", "--linear-write", s(&fs)], &["Nothing was written"]);
    snap.assert_unchanged("suite on ext4 without --overwrite");
    // tune
    uraid_fails(&["tune", "--runs", "1", "--time", "0.1", "mem:8M"], &["at least two members"]);
    uraid_fails(&["tune", "--level", "5", "mem:8M", "mem:8M"], &["RAID 5 needs at least 3 members"]);
    uraid_fails(&["tune", "--level", "7", "mem:8M", "mem:8M"], &["unknown RAID level 7"]);
    uraid_fails(&["tune", "--chunks", "4K,3M", "mem:8M", "mem:8M"], &["chunk size", "power of two"]);
    uraid_fails(&["tune", "--sets", "atto", "mem:8M", "mem:8M"], &["sweep", "uraid suite"]);
}
