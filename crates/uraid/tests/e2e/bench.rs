//! `uraid bench`: its figures agree with fio's on the same raw file, and it
//! never writes over a filesystem or a uraid superblock without --overwrite.


use serde_json::Value;

use crate::util::*;

const MIB: u64 = 1 << 20;
/// Largest relative difference allowed between uraid's and fio's MB/s.
const TOLERANCE: f64 = 0.10;
/// Rounds of (uraid 3 runs, fio 3 runs), alternating which goes first; more
/// rounds only while the figures disagree. Each side is judged by the median
/// of all its runs so far, so one disturbed run does not decide either way.
const MAX_ROUNDS: usize = 4;

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// Best-of-3 MB/s of `uraid bench` (2 s runs after a 1 s warm-up).
fn uraid_mbps(t: &ThrottledFile, profile: &str) -> (f64, Vec<f64>) {
    let file = &t.file;
    let mut cmd = t.cmd(URAID);
    cmd.args(["bench", "--json", "--quiet", "--profile", profile, "--read-only", "--runs", "3", "--time", "2", "--warmup", "1", "--size", "1G"])
        .arg(file);
    let out = run_tool(&mut cmd);
    let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("bench --json: {e}:\n{out}"));
    let target = j["target"].as_str().unwrap_or_default();
    assert!(target.contains(s(file)), "bench ran on {target:?}");
    assert!(!target.contains("buffered"), "uraid fell back to buffered I/O on {target}; fio runs with --direct=1");
    let results = j["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "--read-only with one profile runs one test: {j}");
    let r = &results[0];
    assert_eq!(r["test"]["dir"], "Read");
    assert_eq!(r["test"]["profile"]["name"].as_str().unwrap().replace(' ', "-"), profile);
    let runs: Vec<f64> = r["runs"].as_array().unwrap().iter().map(|x| x["mbps"].as_f64().unwrap()).collect();
    assert_eq!(runs.len(), 3);
    let best = r["best"]["mbps"].as_f64().unwrap();
    assert!(best > 0.0 && runs.iter().all(|&m| m <= best), "best {best} is not the best of {runs:?}");
    (best, runs)
}

/// Best-of-3 MB/s (bw_bytes / 1e6) of fio with the same load (the first run
/// after a 1 s ramp, as uraid's warm-up).
fn fio_mbps(t: &ThrottledFile, load: &[&str]) -> (f64, Vec<f64>) {
    let file = &t.file;
    let mut runs = Vec::new();
    for i in 0..3 {
        let mut cmd = t.cmd("fio");
        cmd.args(["--name=e2e", "--readonly", "--size=1G", "--ioengine=io_uring", "--direct=1", "--numjobs=1"])
            .arg(format!("--filename={}", s(file)))
            .args(load)
            .args(["--time_based", "--runtime=2", "--output-format=json"]);
        if i == 0 {
            cmd.arg("--ramp_time=1");
        }
        let out = run_tool(&mut cmd);
        let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("fio printed no JSON ({e}):\n{out}"));
        let job = &j["jobs"][0];
        assert_eq!(job["error"], 0, "fio reported an error: {job}");
        let bw = job["read"]["bw_bytes"].as_f64().unwrap_or_else(|| panic!("no read.bw_bytes in fio's output: {job}"));
        assert!(bw > 0.0, "fio read nothing: {job}");
        runs.push(bw / 1e6);
    }
    (runs.iter().cloned().fold(0.0, f64::max), runs)
}

#[test]
fn bench_agrees_with_fio() {
    require_tool("fio", "fio");
    // No other test of this binary runs meanwhile.
    let _g = exclusive();
    // A raw file on a drive with ceilings (400 MB/s, 10k IOPS), as the
    // issue's comparison wants: both tools then measure the drive. On a bare
    // file in RAM the CPU is the drive, and uraid's queue (registered files,
    // completions run in its own waits) measured 4-18% above fio's there,
    // which says who spends less per I/O, not who measures right.
    let t = ThrottledFile::new(1 << 30);
    let loads: [(&str, &[&str]); 2] = [
        ("SEQ1M-Q8T1", &["--rw=read", "--bs=1M", "--iodepth=8"]),
        ("RND4K-Q32T1", &["--rw=randread", "--bs=4k", "--iodepth=32", "--norandommap"]),
    ];
    let mut report = Vec::new();
    let mut failed = false;
    for (profile, load) in loads {
        let (mut all_u, mut all_f) = (Vec::new(), Vec::new());
        let (mut med_u, mut med_f) = (0.0, 1.0);
        let mut log = Vec::new();
        for round in 0..MAX_ROUNDS {
            let (u, f) = if round % 2 == 0 {
                let u = uraid_mbps(&t, profile);
                (u, fio_mbps(&t, load))
            } else {
                let f = fio_mbps(&t, load);
                (uraid_mbps(&t, profile), f)
            };
            all_u.extend_from_slice(&u.1);
            all_f.extend_from_slice(&f.1);
            (med_u, med_f) = (median(&all_u), median(&all_f));
            log.push(format!("round {}: uraid runs {:.0?} MB/s, fio runs {:.0?} MB/s", round + 1, u.1, f.1));
            if (med_u / med_f - 1.0).abs() <= TOLERANCE {
                break;
            }
        }
        let diff = med_u / med_f - 1.0;
        let ok = diff.abs() <= TOLERANCE;
        failed |= !ok;
        report.push(format!(
            "{profile}: medians uraid {med_u:.1} MB/s, fio {med_f:.1} MB/s, uraid/fio = {:.3} ({:+.1}%, limit ±{:.0}%) {}\n    {}",
            med_u / med_f,
            diff * 100.0,
            TOLERANCE * 100.0,
            if ok { "ok" } else { "DISAGREE" },
            log.join("\n    ")
        ));
    }
    let report = report.join("\n");
    eprintln!("bench vs fio on a 1 GiB file on a drive with ceilings ({}):\n{report}", t.file.display());
    assert!(!failed, "uraid bench and fio disagree by more than {:.0}%:\n{report}", TOLERANCE * 100.0);
}

const QUICK: [&str; 10] = ["--profile", "RND4K-Q1T1", "--runs", "1", "--time", "0.2", "--warmup", "0", "--size", "4M"];

fn bench_args<'a>(extra: &[&'a str], targets: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["bench"];
    a.extend_from_slice(&QUICK);
    a.extend_from_slice(extra);
    a.extend_from_slice(targets);
    a
}

#[test]
fn bench_refuses_writes_on_filesystem_or_superblock() {
    let _g = shared();
    let dir = tmpdir();

    // A raw file holding ext4.
    let ext4 = sparse_file(dir.path(), "ext4.img", 16 * MIB);
    mkfs_ext4(&ext4);
    let snap = Snapshot::take(&[&ext4]);
    let needles = [s(&ext4), "holds an ext2/ext3/ext4 filesystem", "write tests would destroy it", "Nothing was written", "--overwrite"];
    for extra in [&[][..], &["--write-only"], &["--json"], &["--raw"]] {
        uraid_fails(&bench_args(extra, &[s(&ext4)]), &needles);
        snap.assert_unchanged(&format!("bench {extra:?} on ext4"));
    }
    // Read tests are allowed and write nothing.
    let o = uraid_ok(&bench_args(&["--read-only", "--json"], &[s(&ext4)]));
    let j: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(j["results"].as_array().map(Vec::len), Some(1), "{j}");
    assert!(j["results"][0]["best"]["ios"].as_u64().unwrap() > 0, "the read test read nothing: {j}");
    snap.assert_unchanged("bench --read-only on ext4");

    // Members of an array, benchmarked as raw drives: they hold superblocks.
    let m = sparse_files(dir.path(), "m", 2, 16 * MIB);
    uraid_ok(&["create", "--level", "0", "--chunk", "64K", "--name", "members", s(&m[0]), s(&m[1])]);
    let snap = Snapshot::take(&m);
    let needles = ["holds a uraid superblock", "write tests would destroy it", "Nothing was written", "--overwrite"];
    uraid_fails(&bench_args(&["--raw"], &[s(&m[0])]), &needles);
    uraid_fails(&bench_args(&["--raw", "--write-only"], &[s(&m[1]), s(&m[0])]), &needles);
    snap.assert_unchanged("bench --raw on uraid members");
    uraid_ok(&bench_args(&["--raw", "--read-only"], &[s(&m[0])]));
    snap.assert_unchanged("bench --raw --read-only on a uraid member");

    // Read tests on the array itself read through the engine and leave
    // the data area alone. (Assembling updates the superblocks' event
    // counter, so only the bytes after them are compared.)
    uraid_ok(&bench_args(&["--read-only"], &[s(&m[1]), s(&m[0])]));
    for (i, f) in m.iter().enumerate() {
        let now = std::fs::read(f).unwrap();
        assert!(now[SB_SIZE..] == snap.bytes(i)[SB_SIZE..], "bench --read-only wrote into the data area of {}", f.display());
    }

    // With --overwrite the write tests run: the refusals above were the
    // guard at work, not a failure to write.
    let o = uraid_ok(&bench_args(&["--overwrite", "--json"], &[s(&ext4)]));
    let j: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(j["results"].as_array().map(Vec::len), Some(2), "read and write tests: {j}");
    let now = std::fs::read(&ext4).unwrap();
    assert_ne!(&now[1080..1082], &[0x53, 0xEF], "bench --overwrite did not write the test area");
    // (Sequential, so the first write lands on offset 0 whatever the speed.)
    uraid_ok(&["bench", "--raw", "--overwrite", "--write-only", "--profile", "SEQ1M-Q1T1", "--runs", "1", "--time", "0.2", "--warmup", "0", "--size", "4M", s(&m[0])]);
    assert_ne!(&std::fs::read(&m[0]).unwrap()[..8], MAGIC, "bench --raw --overwrite did not write over the superblock");
}

/// An array whose volume holds a filesystem: `uraid bench` on its members
/// must refuse the write tests and leave every member exactly as it was.
#[test]
fn bench_refuses_writes_on_array_holding_filesystem() {
    let _g = shared();
    let dir = tmpdir();
    let m = sparse_files(dir.path(), "m", 2, 16 * MIB);
    uraid_ok(&["create", "--level", "0", "--chunk", "64K", "--name", "withfs", s(&m[0]), s(&m[1])]);
    // Put a real ext4 image on the array's volume.
    let img = sparse_file(dir.path(), "fs.img", 8 * MIB);
    mkfs_ext4(&img);
    let image = std::fs::read(&img).unwrap();
    let arr = uraid_core::control::array::assemble(&specs(&m)).unwrap();
    arr.volume().write_at(0, &image).unwrap();
    arr.stop().unwrap();
    let snap = Snapshot::take(&m);
    let events = raw_superblock(&m[0]).events;
    let needles = ["array 'withfs' holds an ext2/ext3/ext4 filesystem", "write tests would destroy it", "Nothing was written"];
    uraid_fails(&bench_args(&[], &[s(&m[0]), s(&m[1])]), &needles);
    // The data area first, then the superblocks, for a precise message.
    for (i, f) in m.iter().enumerate() {
        let now = std::fs::read(f).unwrap();
        assert!(now[SB_SIZE..] == snap.bytes(i)[SB_SIZE..], "bench wrote into the data area of {}", f.display());
        let sb = raw_superblock(f);
        assert!(
            now[..SB_SIZE] == snap.bytes(i)[..SB_SIZE],
            "`uraid bench` refused the write tests and said \"Nothing was written\", but it rewrote the superblock of {} \
             (events {events} -> {}, state {} (0 clean, 1 active))",
            f.display(),
            sb.events,
            sb.state
        );
    }
    snap.assert_unchanged("bench on an array holding ext4");
    // The filesystem on the volume is intact.
    let arr = uraid_core::control::array::assemble(&specs(&m)).unwrap();
    assert!(arr.volume().read_at(0, image.len()).unwrap() == image, "the ext4 image on the volume changed");
    arr.stop().unwrap();
}

/// `uraid bench` on an array whose volume has a write-back cache: the target
/// line names the cache mode, and the report ends with the cache's counters
/// (in the text and in --json); a raw file has no cache and no such line.
#[test]
fn bench_reports_the_cache_of_the_volume() {
    let _g = shared();
    let dir = tmpdir();
    let m = sparse_files(dir.path(), "m", 3, 24 * MIB);
    uraid_ok(&["create", "--level", "5", "--chunk", "64K", "--name", "cached", "--cache", "writeback", "--cache-size", "16M", "--dirty-limit", "8M", s(&m[0]), s(&m[1]), s(&m[2])]);
    let run = ["bench", "--overwrite", "--write-only", "--profile", "SEQ1M-Q1T1", "--runs", "1", "--time", "0.2", "--warmup", "0", "--size", "4M"];
    let mut args = run.to_vec();
    args.extend([s(&m[0]), s(&m[1]), s(&m[2])]);
    let o = uraid_ok(&args);
    let target = o.stderr.lines().find(|l| l.starts_with("target:")).unwrap_or_else(|| panic!("no target line: {}", o.stderr));
    assert_contains(target, &["array 'cached'", "RAID 5 over 3 members", "cache writeback 16M"], "bench target line");
    let line = o.stdout.lines().find(|l| l.starts_with("cache ")).unwrap_or_else(|| panic!("no cache counters in the report:\n{}", o.stdout));
    assert_contains(line, &["cache writeback 16M, dirty limit 8M:", "dirty", "hit ratio", "merged", "written back", "whole stripes"], "bench cache line");
    let writes: u64 = line
        .split("writes ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no write count in {line:?}"));
    assert!(writes > 0, "the write test wrote nothing through the cache: {line}");

    args.insert(1, "--json");
    let o = uraid_ok(&args);
    let j: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("bench --json: {e}:\n{}", o.stdout));
    assert_contains(j["target"].as_str().unwrap_or_default(), &["cache writeback 16M"], "bench --json target");
    assert_eq!(j["cache"]["mode"], "writeback", "{j}");
    assert!(j["cache"]["writes"].as_u64().unwrap_or(0) > 0 && j["cache"]["full_lines"].is_u64(), "{j}");

    // The journal mode: the journal device given with the members is part
    // of the array (not a fourth member of a temporary RAID 0), and every
    // write is recorded in it.
    let j = sparse_file(dir.path(), "journal", 72 * MIB);
    uraid_ok(&["config", "--cache", "journal", "--journal", s(&j), "--cache-size", "16M", "--dirty-limit", "8M", s(&m[0]), s(&m[1]), s(&m[2])]);
    let mut args = run.to_vec();
    args.insert(1, "--json");
    args.extend([s(&m[0]), s(&m[1]), s(&m[2]), s(&j)]);
    let o = uraid_ok(&args);
    let v: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("bench --json: {e}:\n{}", o.stdout));
    assert_contains(v["target"].as_str().unwrap_or_default(), &["array 'cached'", "RAID 5 over 3 members", "cache journal 16M"], "bench --json target");
    assert_eq!(v["cache"]["mode"], "journal", "{v}");
    assert!(v["cache"]["journal_records"].as_u64().unwrap_or(0) > 0, "no write was recorded in the journal: {v}");

    // A raw file: no cache, no counters.
    let raw = sparse_file(dir.path(), "raw", 16 * MIB);
    let mut args = run.to_vec();
    args.push(s(&raw));
    let o = uraid_ok(&args);
    assert!(!o.stdout.lines().any(|l| l.starts_with("cache ")), "a raw file has no cache: {}", o.stdout);
    args.insert(1, "--json");
    let j: Value = serde_json::from_str(&uraid_ok(&args).stdout).unwrap();
    assert!(j["cache"].is_null(), "{j}");
}
