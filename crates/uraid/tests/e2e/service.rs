//! The always-on service: a served array managed through its control
//! socket (fail, add, check, stop), its events (monitor program, system
//! log), its metrics (scraped over HTTP, checked with promtool), the
//! systemd notifications, and hostile control clients. Real clients: an
//! ext4 on the export through nbdfuse + losetup, fio with verify=crc32c.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// A `uraid serve` started with `URAID_RUN_DIR=run` and
/// `URAID_CONFIG=conf`; killed on drop unless stopped.
struct Service {
    child: Option<ChildGuard>,
    stdout: Option<std::thread::JoinHandle<String>>,
    first_lines: std::sync::mpsc::Receiver<String>,
}

/// The environment of the tests' uraid commands.
struct Env {
    run: PathBuf,
    /// URAID_STATE_DIR (the scheduled check's stamps).
    state: PathBuf,
    conf: PathBuf,
    extra: Vec<(String, String)>,
}

impl Env {
    fn new(dir: &Path) -> Env {
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        Env { run, state: dir.join("state"), conf: dir.join("uraid.conf"), extra: Vec::new() }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(URAID);
        c.args(args).env("URAID_RUN_DIR", &self.run).env("URAID_STATE_DIR", &self.state).env("URAID_CONFIG", &self.conf);
        c.envs(self.extra.iter().map(|(k, v)| (k, v)));
        c.stdin(Stdio::null());
        c
    }

    /// Runs uraid; panics unless it succeeds; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.cmd(args).output().unwrap();
        let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
        assert!(o.status.success(), "uraid {} failed: {out}{err}", args.join(" "));
        out
    }

    /// Runs uraid; panics unless it fails naming every needle; returns stderr.
    fn fails(&self, args: &[&str], needles: &[&str]) -> String {
        let o = self.cmd(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success(), "uraid {} succeeded", args.join(" "));
        assert_contains(&err, needles, &format!("uraid {}", args.join(" ")));
        err
    }

    fn status(&self, name: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["status", "--json", name])).unwrap()
    }

    /// Starts `uraid serve ARGS`; returns when the control socket of
    /// `name` answers.
    fn serve(&self, name: &str, args: &[&str]) -> Service {
        let mut c = self.cmd(&[&["serve"], args].concat());
        c.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = ChildGuard(c.spawn().unwrap());
        let out = child.0.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut all = String::new();
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l.clone());
                all += &l;
                all.push('\n');
            }
            all
        });
        let ctl = self.run.join(format!("{name}.ctl"));
        let t0 = Instant::now();
        while UnixStream::connect(&ctl).is_err() {
            if let Ok(Some(st)) = child.0.try_wait() {
                panic!("uraid serve {args:?} exited ({st}) before its control socket answered");
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no control socket at {}", ctl.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        Service { child: Some(child), stdout: Some(reader), first_lines: rx }
    }
}

impl Service {
    /// The first stdout line that starts with `prefix`.
    fn line(&self, prefix: &str) -> String {
        loop {
            let l = self.first_lines.recv_timeout(Duration::from_secs(20)).expect("uraid serve printed no such line");
            if l.starts_with(prefix) {
                return l;
            }
        }
    }

    /// Waits for the process to exit (after `uraid stop`); its status and stdout.
    fn wait(mut self) -> (std::process::ExitStatus, String) {
        let mut g = self.child.take().unwrap();
        let t0 = Instant::now();
        loop {
            if let Some(st) = g.0.try_wait().unwrap() {
                std::mem::forget(g);
                return (st, self.stdout.take().unwrap().join().unwrap());
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "uraid serve did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Waits until `f` holds (polling every 100 ms), at most `secs`.
fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// GET `path` from 127.0.0.1:`port` (HTTP/1.0, body only).
fn http_get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").expect("an HTTP reply");
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// The value of the sample `name{labels...}` in a scrape (labels given
/// as `key="value"` strings it must contain).
pub(crate) fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.split(['{', ' ']).next() == Some(name) && labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Checks a scrape with promtool.
pub(crate) fn promtool_ok(text: &str) {
    require_tool("promtool", "prometheus");
    let mut c = Command::new("promtool").args(["check", "metrics"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// fio in `dir` on file `file`: writes `size` with crc32c checksums and
/// verifies them (`verify_only`: only reads back and verifies what an
/// earlier run of the same job wrote).
fn fio(dir: &Path, file: &str, size: &str, verify_only: bool) -> Command {
    require_tool("fio", "fio");
    let mut c = Command::new("fio");
    c.args(["--name=svc", "--rw=randwrite", "--bs=4k", "--iodepth=8", "--ioengine=psync", "--verify=crc32c", "--verify_state_save=0", "--randseed=7"])
        .arg(format!("--filename={}", dir.join(file).display()))
        .arg(format!("--size={size}"));
    if verify_only {
        c.arg("--verify_only");
    }
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

fn fio_ok(c: &mut Command) {
    let o = c.output().unwrap();
    assert!(o.status.success(), "fio failed: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("verify:") || !out.contains("bad"), "fio verify failed: {out}");
}

/// The monitor program: appends its arguments as one line to `log`.
fn event_program(dir: &Path) -> (PathBuf, PathBuf) {
    let log = dir.join("events.log");
    let prog = dir.join("on-event");
    std::fs::write(&prog, format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display())).unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(&mut std::fs::metadata(&prog).unwrap().permissions(), 0o755);
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (prog, log)
}

fn events_seen(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// A RAID 5 named `name` (chunk 64K) over the first four of `count` loop
/// devices on sparse files of `size` bytes; the loop devices and their
/// paths.
fn raid5_on_loops(env: &Env, dir: &Path, prefix: &str, count: usize, size: u64, name: &str) -> (Vec<LoopDev>, Vec<String>) {
    let files = sparse_files(dir, prefix, count, size);
    let loops: Vec<LoopDev> = files.iter().map(|f| LoopDev::attach(f)).collect();
    let devs: Vec<String> = loops.iter().map(|l| l.dev.display().to_string()).collect();
    env.ok(&[&["create", "--level", "5", "--chunk", "64K", "--name", name], &devs[..4].iter().map(String::as_str).collect::<Vec<_>>()[..]].concat());
    (loops, devs)
}

/// The user story of the issue, end to end: ext4 on a served RAID 5 of
/// loop devices, found by name from the config that `scan --config` wrote;
/// fio writes with checksums; a member is failed through the control
/// socket; the monitor program, the system log and `uraid monitor` get
/// Fail and DegradedArray; a spare is hot-added and rebuilt in the
/// background (status and metrics show it) while fio writes; the data
/// verifies; a live check finds no mismatch; `uraid stop` stops cleanly;
/// `uraid serve NAME` brings the array back with the filesystem intact.
#[test]
fn a_served_array_is_failed_rebuilt_checked_stopped_and_served_again_by_name() {
    let _g = shared();
    require_tool("nbdfuse", "libnbd-bin");
    let d = tmpdir();
    let env = Env::new(d.path());
    let name = format!("svc{}", std::process::id());
    let (loops, devs) = raid5_on_loops(&env, d.path(), "m", 5, 96 << 20, &name);
    // The config: the array as scan finds it, a monitor program.
    let (prog, log) = event_program(d.path());
    std::fs::write(&env.conf, format!("[monitor]\nprogram = \"{}\"\n", prog.display())).unwrap();
    let out = env.ok(&["scan", "--config"]);
    assert_contains(&out, &[&format!("name={name}"), "level=5", "members=4/4"], "scan");
    let conf = std::fs::read_to_string(&env.conf).unwrap();
    assert_contains(&conf, &[&format!("name = \"{name}\""), &devs[0], "[monitor]"], "the config");
    // The system log: a datagram socket standing in for /dev/log.
    let syslog_path = d.path().join("log.sock");
    let syslog = UnixDatagram::bind(&syslog_path).unwrap();
    syslog.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut env = env;
    env.extra.push(("URAID_SYSLOG_SOCKET".into(), syslog_path.display().to_string()));

    let srv = env.serve(&name, &["--rebuild-rate", "12", "--metrics", "127.0.0.1:0", &name]);
    let port: u16 = srv.line("metrics: ").trim_end_matches("/metrics").rsplit(':').next().unwrap().parse().unwrap();
    let sock = env.run.join(format!("{name}.sock"));
    let uri = format!("nbd+unix:///{name}?socket={}", sock.display());
    let mut fs = FsOnNbd::attach(&uri, d.path(), true);
    let mut monitor = env.cmd(&["monitor", &name]).stdout(Stdio::piped()).spawn().map(ChildGuard).unwrap();

    // Data with checksums before the failure.
    fio_ok(&mut fio(&fs.mnt, "before", "24M", false));
    let st = env.status(&name);
    assert_eq!(st["volumes"][0]["state"].as_str(), Some("clean"), "{st}");

    // Fail role 1 through the control socket.
    let out = env.ok(&["fail", &name, "--member", "1"]);
    assert_contains(&out, &[&format!("role 1 of array '{name}' marked faulty"), "degraded"], "fail");
    wait_until(10, "Fail and DegradedArray at the program", || {
        let e = events_seen(&log);
        e.contains(&format!("Fail {name} {}", devs[1])) && e.contains(&format!("DegradedArray {name}"))
    });
    let st = env.status(&name);
    assert_eq!((st["members"][1]["state"].as_str(), st["volumes"][0]["state"].as_str()), (Some("faulty"), Some("degraded")), "{st}");

    // Hot-add a spare: it takes over role 1, rebuilt in the background
    // (12 MB/s: about 8 s) while fio writes more.
    let out = env.ok(&["add", &name, "--spare", &devs[4]]);
    assert_contains(&out, &["takes over role 1", "rebuilt in the background"], "add");
    let during = fio(&fs.mnt, "during", "16M", false).spawn().unwrap();
    let mut saw_status = false;
    let mut saw_metrics = false;
    wait_until(120, "the rebuild's progress in status and metrics", || {
        let st = env.status(&name);
        if st["progress"]["action"].as_str() == Some("rebuild") && st["progress"]["done"].as_u64() > Some(0) {
            saw_status = true;
        }
        let m = http_get(port, "/metrics");
        if sample(&m, "uraid_sync_progress_ratio", &["action=\"rebuild\""]).is_some_and(|r| r > 0.0 && r < 1.0) {
            assert_eq!(sample(&m, "uraid_md_state", &["state=\"recovering\""]), Some(1.0), "{m}");
            promtool_ok(&m);
            saw_metrics = true;
        }
        saw_status && saw_metrics
    });
    let text = env.ok(&["status", &name]);
    assert_contains(&text, &["rebuild of role 1", "MB/s", "I/O over the last", &format!("exported as: nbd nbd+unix:///{name}?socket=")], "status while rebuilding");
    wait_until(180, "RebuildFinished", || events_seen(&log).contains(&format!("RebuildFinished {name} {}", devs[4])));
    let o = during.wait_with_output().unwrap();
    assert!(o.status.success(), "fio during the rebuild: {}", String::from_utf8_lossy(&o.stderr));
    let e = events_seen(&log);
    assert_contains(&e, &[&format!("RebuildStarted {name}"), &format!("SpareActive {name} {}", devs[4])], "events");
    // Everything written before and during the failure reads back.
    fio_ok(&mut fio(&fs.mnt, "before", "24M", true));
    fio_ok(&mut fio(&fs.mnt, "during", "16M", true));
    // A live scrub while the filesystem is mounted.
    let out = env.ok(&["check", "--json", &name]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((r[0]["report"]["mismatches"].as_u64(), r[0]["report"]["stripes_unchecked"].as_u64()), (Some(0), Some(0)), "{out}");
    assert!(r[0]["report"]["stripes_checked"].as_u64() > Some(0), "{out}");
    let m = http_get(port, "/metrics");
    assert_eq!(sample(&m, "uraid_mismatches", &[&format!("volume=\"{name}\"")]), Some(0.0), "{m}");
    assert_eq!(sample(&m, "uraid_md_disks", &["state=\"active\""]), Some(4.0), "{m}");
    assert!(sample(&m, "uraid_volume_writes_completed_total", &[]).unwrap() > 0.0, "{m}");
    promtool_ok(&m);
    // The system log got the events too.
    let mut logged = String::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = syslog.recv(&mut buf) {
        logged += &String::from_utf8_lossy(&buf[..n]);
        logged.push('\n');
    }
    assert_contains(&logged, &[&format!("Fail event on array {name}"), "RebuildFinished event", "uraid["], "system log");

    // Stop: unmount first (the filesystem's writes must reach the array).
    fs.detach();
    let out = env.ok(&["stop", &name]);
    assert_contains(&out, &[&format!("array '{name}' stopped")], "stop");
    let (st, _) = srv.wait();
    assert!(st.success(), "uraid serve exited with {st}");
    let mon = monitor.0.wait_with_output_guarded();
    assert_contains(&mon, &["NewArray", "Fail", "DegradedArray", "RebuildStarted", "Rebuild20", "RebuildFinished", "SpareActive"], "uraid monitor");
    let st: serde_json::Value = serde_json::from_str(&env.ok(&["status", "--json", &name])).unwrap();
    assert_eq!(st["state"].as_str(), Some("clean"), "stopped cleanly: {st}");

    // Back from the config: the replaced member is found by UUID, the
    // failed one left out as stale.
    let srv = env.serve(&name, &[&name]);
    let mut fs = FsOnNbd::attach(&uri, d.path(), false);
    fio_ok(&mut fio(&fs.mnt, "before", "24M", true));
    fio_ok(&mut fio(&fs.mnt, "during", "16M", true));
    let st = env.status(&name);
    let members: Vec<&str> = st["members"].as_array().unwrap().iter().map(|m| m["device"].as_str().unwrap_or("")).collect();
    assert_eq!(members, vec![&devs[0][..], &devs[4], &devs[2], &devs[3]], "{st}");
    fs.detach();
    env.ok(&["stop", &name]);
    assert!(srv.wait().0.success());
    drop(loops);
}

trait WaitGuarded {
    fn wait_with_output_guarded(&mut self) -> String;
}

impl WaitGuarded for std::process::Child {
    /// The stdout of a child that is about to exit by itself.
    fn wait_with_output_guarded(&mut self) -> String {
        let t0 = Instant::now();
        while self.try_wait().unwrap().is_none() {
            assert!(t0.elapsed() < Duration::from_secs(20), "the child did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut s = String::new();
        self.stdout.take().unwrap().read_to_string(&mut s).unwrap();
        s
    }
}

/// Metrics of a known workload, exactly: fio's nbd engine writes 128 x
/// 64 KiB and reads them back; the counters say so; promtool accepts the
/// scrape.
#[test]
fn metrics_count_a_known_workload() {
    let _g = shared();
    require_tool("fio", "fio");
    let d = tmpdir();
    let env = Env::new(d.path());
    let files = sparse_files(d.path(), "k", 3, 40 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "known"], &f));
    let srv = env.serve("known", &with(&["--metrics", "127.0.0.1:0"], &f));
    let port: u16 = srv.line("metrics: ").trim_end_matches("/metrics").rsplit(':').next().unwrap().parse().unwrap();
    let uri = format!("nbd+unix:///known?socket={}", env.run.join("known.sock").display());
    for rw in ["write", "read"] {
        let o = Command::new("fio")
            .args(["--name=k", "--ioengine=nbd", "--bs=64k", "--size=8M", "--iodepth=4"])
            .arg(format!("--rw={rw}"))
            .arg(format!("--uri={uri}"))
            .output()
            .unwrap();
        assert!(o.status.success(), "fio: {}", String::from_utf8_lossy(&o.stderr));
    }
    // The counters are sampled once a second.
    let mut m = String::new();
    wait_until(10, "the reads in the metrics", || {
        m = http_get(port, "/metrics");
        sample(&m, "uraid_volume_reads_completed_total", &[]) == Some(128.0)
    });
    let l = ["array=\"known\"", "volume=\"known\""];
    assert_eq!(sample(&m, "uraid_volume_writes_completed_total", &l), Some(128.0), "{m}");
    assert_eq!(sample(&m, "uraid_volume_written_bytes_total", &l), Some(8388608.0), "{m}");
    assert_eq!(sample(&m, "uraid_volume_read_bytes_total", &l), Some(8388608.0), "{m}");
    assert_eq!(sample(&m, "uraid_volume_read_latency_seconds_count", &l), Some(128.0), "{m}");
    assert_eq!(sample(&m, "uraid_volume_read_latency_seconds_bucket", &["le=\"+Inf\""]), Some(128.0), "{m}");
    assert_eq!(sample(&m, "uraid_volume_errors_total", &l), Some(0.0), "{m}");
    // fio's nbd engine opens a connection to learn the size, then its own.
    assert!(sample(&m, "uraid_nbd_connections_accepted_total", &l).is_some_and(|n| n >= 2.0), "{m}");
    assert_eq!(sample(&m, "uraid_nbd_connections", &l), Some(0.0), "{m}");
    // The same figures per export: the one NBD export did it all.
    let e = ["array=\"known\"", "volume=\"known\"", "export=\"nbd\""];
    assert_eq!(sample(&m, "uraid_export_info", &e), Some(1.0), "{m}");
    assert_eq!(sample(&m, "uraid_export_reads_completed_total", &e), Some(128.0), "{m}");
    assert_eq!(sample(&m, "uraid_export_written_bytes_total", &e), Some(8388608.0), "{m}");
    assert_eq!(sample(&m, "uraid_export_write_latency_seconds_count", &e), Some(128.0), "{m}");
    assert!(m.contains("address=\"nbd+unix:///known?socket="), "{m}");
    assert_eq!(sample(&m, "uraid_md_disks_required", &["array=\"known\""]), Some(3.0), "{m}");
    promtool_ok(&m);
    env.ok(&["stop", "known"]);
    assert!(srv.wait().0.success());
}

/// The systemd notifications on a real notify socket: READY=1 once the
/// export listens, WATCHDOG=1 pings, STOPPING=1 on SIGTERM, and the
/// process (metrics endpoint included) exits.
#[test]
fn serve_tells_systemd_when_it_is_ready_and_stopping() {
    let _g = shared();
    let d = tmpdir();
    let mut env = Env::new(d.path());
    let files = sparse_files(d.path(), "n", 2, 24 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "1", "--chunk", "64K", "--name", "notify"], &f));
    let sock_path = d.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    env.extra.push(("NOTIFY_SOCKET".into(), sock_path.display().to_string()));
    env.extra.push(("WATCHDOG_USEC".into(), "400000".into()));
    // With the metrics endpoint too: SIGTERM must stop it as well.
    let srv = env.serve("notify", &with(&["--metrics", "127.0.0.1:0"], &f));
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.iter().any(|m: &String| m.contains("WATCHDOG=1")) {
        let n = sock.recv(&mut buf).expect("a notification within 20 s");
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(got[0].contains("READY=1") && got[0].contains("STATUS=serving array 'notify'"), "{got:?}");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(srv.child.as_ref().unwrap().0.id() as i32, libc::SIGTERM) };
    loop {
        let n = sock.recv(&mut buf).expect("STOPPING=1 within 20 s");
        if String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1") {
            break;
        }
    }
    assert!(srv.wait().0.success());
}

/// Sends `line` to the control socket; returns the reply lines.
fn ctl_raw(ctl: &Path, line: &[u8]) -> Vec<serde_json::Value> {
    let mut s = UnixStream::connect(ctl).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(line);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("reply {l:?} is not JSON: {e}"))).collect()
}

/// Malformed and hostile control requests get an error and change
/// nothing; an idle connection does not hold up the others.
#[test]
fn hostile_control_clients_get_errors_and_change_nothing() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let files = sparse_files(d.path(), "h", 3, 24 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "hostile"], &f));
    let srv = env.serve("hostile", &f);
    let ctl = env.run.join("hostile.ctl");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&ctl).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the control socket is owner-only");
    let before = env.status("hostile");
    let _idle = UnixStream::connect(&ctl).unwrap();
    let huge = vec![b'x'; 100 << 10];
    let cases: Vec<(&[u8], &str)> = vec![
        (b"not json\n", "not JSON"),
        (b"{\"version\": 2, \"command\": \"status\"}\n", "version 2"),
        (b"{\"command\": \"status\"}\n", "no \"version\""),
        (b"{\"version\": 1, \"command\": \"format\"}\n", "not a valid request"),
        (b"{\"version\": 1, \"command\": {\"fail\": {\"member\": \"1\", \"bogus\": true}}}\n", "bogus"),
        (b"{\"version\": 1, \"command\": {\"fail\": {\"member\": \"1\", \"force\": \"yes\"}}}\n", "not a valid request"),
        (b"{\"version\": 1, \"command\": {\"fail\": {\"member\": \"7\"}}}\n", "no role 7"),
        (b"{\"version\": 1, \"command\": {\"fail\": {\"member\": \"/etc/passwd\"}}}\n", "not a member"),
        (b"{\"version\": 1, \"command\": {\"add\": {\"device\": \"/nonexistent\"}}}\n", "/nonexistent"),
        (b"{\"version\": 1, \"command\": {\"check\": {\"rate\": 0}}}\n", "rate of 0"),
        (b"{\"version\": 1, \"command\": {\"config\": {\"mode\": \"journal\"}}}\n", "needs its journal device"),
        (b"{\"version\": 1, \"command\": {\"config\": {\"mode\": \"fast\"}}}\n", "unknown cache mode"),
        (b"{\"version\": 1, \"command\": {\"config\": {\"mode\": \"writeback\", \"cache_size\": 4096}}}\n", "volume 'hostile'"),
        (&huge, "longer than"),
        (b"", "no request"),
    ];
    for (req, needle) in cases {
        let r = ctl_raw(&ctl, req);
        let last = r.last().unwrap_or_else(|| panic!("no reply to {:?}", String::from_utf8_lossy(&req[..req.len().min(80)])));
        assert_eq!(last["ok"].as_bool(), Some(false), "{last}");
        assert_contains(last["error"]["message"].as_str().unwrap(), &[needle], &String::from_utf8_lossy(&req[..req.len().min(80)]));
    }
    // Failing the last redundancy without force is refused too.
    env.ok(&["fail", "hostile", "--member", "0"]);
    env.fails(&["fail", "hostile", "--member", "1"], &["lose the data", "--force"]);
    let after = env.status("hostile");
    assert_eq!(after["events"].as_u64(), before["events"].as_u64().map(|e| e + 1), "only the one fail changed the array");
    assert_eq!(after["members"][1]["state"].as_str(), Some("active"));
    env.ok(&["stop", "hostile"]);
    assert!(srv.wait().0.success());
}



/// The cache mode of a served array changes live while fio writes with
/// checksums: off -> writeback -> writethrough -> off, each time the
/// export pauses, the old cache writes back what it holds and the volume
/// resumes with the new one; every write reads back. On a degraded array
/// too, whose faulty member misses the new volume table: it still
/// assembles afterwards.
#[test]
fn the_cache_mode_changes_live_and_no_write_is_lost() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let files = sparse_files(d.path(), "c", 4, 64 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "cachelive"], &f));
    let srv = env.serve("cachelive", &f);
    env.ok(&["fail", "cachelive", "--member", "0"]);
    let uri = format!("nbd+unix:///cachelive?socket={}", env.run.join("cachelive.sock").display());
    require_tool("fio", "fio");
    let job = |verify_only: bool| {
        let mut c = Command::new("fio");
        c.args(["--name=c", "--ioengine=nbd", "--rw=randwrite", "--bs=4k", "--iodepth=16", "--size=96M", "--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0", "--randseed=3"])
            .arg(format!("--uri={uri}"));
        if verify_only {
            c.arg("--verify_only");
        }
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    };
    let writer = job(false).spawn().unwrap();
    for mode in ["writeback", "writethrough", "off", "writeback"] {
        std::thread::sleep(Duration::from_millis(300));
        let out = env.ok(&["config", "cachelive", "--cache", mode]);
        assert_contains(&out, &[&format!("cache {mode} from now on (changed live)")], "config");
        let st = env.status("cachelive");
        assert_eq!(st["volumes"][0]["cache"]["mode"].as_str(), Some(mode), "{st}");
    }
    let o = writer.wait_with_output().unwrap();
    assert!(o.status.success(), "fio across the mode changes: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let o = job(true).output().unwrap();
    assert!(o.status.success(), "fio verify after the mode changes: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    env.ok(&["stop", "cachelive"]);
    assert!(srv.wait().0.success());
    // The faulty member (role 0) has the old volume table: assemble and
    // status still take the array, with the new cache mode.
    let st: serde_json::Value = serde_json::from_str(&env.ok(&with(&["status", "--json"], &f))).unwrap();
    assert_eq!((st["volumes"][0]["cache"]["mode"].as_str(), st["members"][0]["state"].as_str()), (Some("writeback"), Some("faulty")), "{st}");
    env.ok(&with(&["assemble"], &f));
}

/// A write-back cache that cannot write its dirty lines back (the member
/// under it fails its writes: the URAID_FAILPOINT_FAIL_WRITES failpoint)
/// has lost acknowledged writes: CacheLost reaches the monitor program.
#[test]
fn a_write_back_cache_that_cannot_write_back_reports_cache_lost() {
    let _g = shared();
    require_tool("fio", "fio");
    let d = tmpdir();
    let mut env = Env::new(d.path());
    let files = sparse_files(d.path(), "w", 2, 48 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "0", "--chunk", "64K", "--name", "lossy", "--cache", "writeback"], &f));
    let (prog, log) = event_program(d.path());
    env.extra.push(("URAID_FAILPOINT_FAIL_WRITES".into(), format!("{}@{}-{}", f[1], 1u64 << 20, 48u64 << 20)));
    let srv = env.serve("lossy", &with(&["--program", s(&prog)], &f));
    let uri = format!("nbd+unix:///lossy?socket={}", env.run.join("lossy.sock").display());
    // Acknowledged from the cache; the write-back to member 1 fails.
    let _ = Command::new("fio")
        .args(["--name=w", "--ioengine=nbd", "--rw=write", "--bs=64k", "--size=8M", "--iodepth=4"])
        .arg(format!("--uri={uri}"))
        .output()
        .unwrap();
    wait_until(30, "CacheLost at the program", || events_seen(&log).contains("CacheLost lossy"));
    env.ok(&["stop", "lossy"]);
    let _ = srv.wait();
}

/// The scheduled scrub (`--scrub-every`) finds a copy that was changed
/// behind the array's back and reports MismatchesFound; `uraid monitor
/// --test` sends a TestMessage that the mail command gets (mdadm's
/// MAILADDR); `monitor --oneshot` reports a degraded array.
#[test]
fn a_scheduled_scrub_reports_mismatches_and_monitor_test_mails() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let files = sparse_files(d.path(), "s", 2, 24 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "1", "--chunk", "64K", "--name", "sched"], &f));
    // Write through the array, then change one copy behind its back.
    let srv = env.serve("sched", &f);
    let uri = format!("nbd+unix:///sched?socket={}", env.run.join("sched.sock").display());
    run_tool(Command::new("qemu-io").args(["-f", "raw", "-c", "write -P 0x61 0 1M", "-c", "flush"]).arg(&uri));
    env.ok(&["stop", "sched"]);
    assert!(srv.wait().0.success());
    {
        use std::os::unix::fs::FileExt;
        let m1 = std::fs::OpenOptions::new().write(true).open(&files[1]).unwrap();
        m1.write_all_at(&[0x62; 4096], (1 << 20) + 8192).unwrap();
    }
    let mail_log = d.path().join("mail.txt");
    let mailer = d.path().join("sendmail");
    std::fs::write(&mailer, format!("#!/bin/sh\necho \"ARGS $@\" >> {0}\ncat >> {0}\n", mail_log.display())).unwrap();
    std::fs::set_permissions(&mailer, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (prog, log) = event_program(d.path());
    let srv = env.serve(
        "sched",
        &with(&["--scrub-every", "1s", "--program", s(&prog), "--mail", "ops@example.com", "--mail-command", &format!("{} -t", mailer.display())], &f),
    );
    wait_until(30, "MismatchesFound from the scheduled scrub", || events_seen(&log).contains("MismatchesFound sched"));
    assert_contains(&events_seen(&log), &["CheckStarted sched"], "events");
    let out = env.ok(&["monitor", "--test", "--oneshot", "sched"]);
    assert!(!out.contains("DegradedArray"), "not degraded yet: {out}");
    wait_until(10, "the TestMessage mail", || std::fs::read_to_string(&mail_log).unwrap_or_default().contains("TestMessage event on sched"));
    let mail = std::fs::read_to_string(&mail_log).unwrap();
    assert_contains(&mail, &["ARGS -t", "To: ops@example.com", "Subject: TestMessage event on sched"], "mail");
    env.ok(&["fail", "sched", "--member", "1"]);
    let o = env.cmd(&["monitor", "--oneshot", "sched"]).output().unwrap();
    assert!(!o.status.success(), "monitor --oneshot exits 1 when an array is degraded");
    assert_contains(&String::from_utf8_lossy(&o.stdout), &["DegradedArray event on sched"], "monitor --oneshot");
    wait_until(10, "the Fail mail", || std::fs::read_to_string(&mail_log).unwrap_or_default().contains("Subject: Fail event on sched"));
    env.ok(&["stop", "sched"]);
    assert!(srv.wait().0.success());
}

/// The scheduled check counts from the end of the last one across
/// restarts, from its stamp (as systemd's persistent timers keep theirs):
/// a serve whose check fell due while it was down checks at once and
/// touches the stamp when the check ends; restarted just after, it waits.
#[test]
fn the_check_schedule_counts_from_the_last_check_across_restarts() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let files = sparse_files(d.path(), "c", 2, 24 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "1", "--chunk", "64K", "--name", "stamped"], &f));
    let st: serde_json::Value = serde_json::from_str(&env.ok(&with(&["status", "--json"], &f))).unwrap();
    let uuid = st["uuid"].as_str().unwrap_or_else(|| panic!("no uuid in {st}")).to_string();
    let stamp = env.state.join(format!("check-{uuid}.stamp"));
    std::fs::create_dir_all(&env.state).unwrap();
    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::create(&stamp).unwrap().set_modified(two_hours_ago).unwrap();
    let (prog, log) = event_program(d.path());
    let args = with(&["--scrub-every", "1h", "--program", s(&prog)], &f);
    let srv = env.serve("stamped", &args);
    wait_until(30, "CheckStarted at once: the hourly check was due", || events_seen(&log).contains("CheckStarted stamped"));
    let modified = || std::fs::metadata(&stamp).and_then(|m| m.modified()).unwrap();
    wait_until(60, "the stamp touched when the check ended", || modified() > two_hours_ago + Duration::from_secs(3600));
    env.ok(&["stop", "stamped"]);
    assert!(srv.wait().0.success());
    // Restarted: the last check ended moments ago, the next is an hour away.
    std::fs::remove_file(&log).unwrap();
    let srv = env.serve("stamped", &args);
    wait_until(30, "NewArray from the restarted serve", || events_seen(&log).contains("NewArray stamped"));
    std::thread::sleep(Duration::from_secs(2));
    assert!(!events_seen(&log).contains("CheckStarted"), "a check started though the last ended just before: {}", events_seen(&log));
    env.ok(&["stop", "stamped"]);
    assert!(srv.wait().0.success());
}

/// The web console in a real browser (chromium + chromedriver through
/// Python selenium: crates/uraid/tests/console/console_test.py) against a
/// served RAID 5 on loop devices with fio writing through the export:
/// healthy, live charts, fail member 1 (degraded in the page and in `uraid
/// status`), a refusal shown, add spare (the rebuild's bar reaches 100%),
/// a check with 0 mismatches, the write-back warning, keyboard reach, no
/// console errors; requests without the token or with a forged action are
/// refused; the charts show the history from before the page was opened,
/// times in the browser's zone (Asia/Kolkata), failed members with their
/// identity until removed, the replace and grow wizards; the members'
/// health from the recorded smartctl JSON of real drives (one with a
/// critical warning) in the member rows and the drives panel; the create
/// wizard (its refusals with the core's text, then a RAID 1 that `uraid
/// examine` reads). Screenshots go to target/console-screenshots.
#[test]
fn the_console_in_a_real_browser() {
    let _g = shared();
    require_tool("chromium", "chromium");
    require_tool("chromedriver", "chromium-driver");
    require_tool("fio", "fio");
    let py = Command::new("python3").args(["-c", "import selenium"]).status().unwrap();
    assert!(py.success(), "python3 has no selenium: pip install selenium (scripts/test does)");
    let d = tmpdir();
    let mut env = Env::new(d.path());
    let files = sparse_files(d.path(), "b", 10, 64 << 20);
    let loops: Vec<LoopDev> = files.iter().map(|f| LoopDev::attach(f)).collect();
    let devs: Vec<String> = loops.iter().map(|l| l.dev.display().to_string()).collect();
    let name = format!("web{}", std::process::id());
    // The members' health: smartctl answers with the recorded output of a
    // real drive per member (member 1: critical warning 0x10, SMART FAILED;
    // member 2: 75% used); the loop members are polled through the failpoint.
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/smartctl");
    let recorded = ["nvme-null-Samsung_SSD_970_EVO_Plus_250GB-nvme0.json", "nvme-null-SAMSUNG_MZWLL3T2HAJQ-00005-nvme0.json",
        "nvme-null-INTEL_SSDPE2KX020T7-nvme6.json", "nvme-null-INTEL_SSDPEDMD800G4-nvme0.json"];
    let mut sh = String::from("#!/bin/sh\n# smartctl --json -a DEVICE\neval dev=\\${$#}\ncase \"$dev\" in\n");
    for (dev, f) in devs.iter().zip(recorded) {
        sh += &format!("  {dev}) exec cat {} ;;\n", data.join(f).display());
    }
    sh += "esac\necho '{\"smartctl\": {\"exit_status\": 2}}'\nexit 2\n";
    let smartctl = d.path().join("smartctl");
    std::fs::write(&smartctl, sh).unwrap();
    std::fs::set_permissions(&smartctl, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    env.extra.push(("URAID_SMARTCTL".into(), s(&smartctl).into()));
    env.extra.push(("URAID_FAILPOINT_HEALTH_POLL".into(), devs[..4].join(",")));
    env.ok(&[&["create", "--level", "5", "--chunk", "64K", "--name", &name], &devs[..4].iter().map(String::as_str).collect::<Vec<_>>()[..]].concat());
    let token = "t0k3n-for-the-browser-test";
    let srv = env.serve(
        &name,
        &[&["--console", "127.0.0.1:0", "--console-token", token, "--rebuild-rate", "16", "--reports", s(&d.path().join("reports"))], &devs[..4].iter().map(String::as_str).collect::<Vec<_>>()[..]].concat(),
    );
    let url = srv.line("console: ");
    let base = url.trim_start_matches("console: ").split("/ ").next().unwrap().to_string();
    let uri = format!("nbd+unix:///{name}?socket={}", env.run.join(format!("{name}.sock")).display());
    let fio = Command::new("fio")
        .args(["--name=w", "--thread", "--ioengine=nbd", "--rw=randrw", "--bs=4k", "--iodepth=4", "--rate_iops=1500", "--size=128M", "--time_based", "--runtime=600"])
        .arg(format!("--uri={uri}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(ChildGuard)
        .unwrap();
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/console-screenshots");
    let o = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/console_test.py"))
        .env("URAID", URAID)
        .env("URAID_RUN_DIR", &env.run)
        .env("URAID_CONFIG", &env.conf)
        .env("CONSOLE", &base)
        .env("TOKEN", token)
        .env("ARRAY", &name)
        .env("SPARE", &devs[4])
        .env("REPLACEMENT", &devs[5])
        .env("GROW", &devs[6])
        .env("CREATE", devs[7..].join(","))
        .env("SHOTS", &shots)
        .output()
        .unwrap();
    drop(fio);
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    println!("{out}");
    assert!(o.status.success() && out.contains("console test: passed"), "the browser test failed:\n{out}");
    env.ok(&["stop", &name]);
    assert!(srv.wait().0.success());
    drop(loops);
}

/// `uraid check NAME --stop` stops a running scrub of a served array (md's
/// `idle`): the waiting `uraid check` is told, and another check can start.
#[test]
fn a_running_check_is_stopped_on_request() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let files = sparse_files(d.path(), "x", 3, 64 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "idle"], &f));
    let srv = env.serve("idle", &f);
    env.fails(&["check", "--stop", "idle"], &["runs no check or repair"]);
    // 1 MB/s: about two minutes for the volume.
    let check = env.cmd(&["check", "--quiet", "--rate", "1", "idle"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_until(30, "the check's progress", || env.status("idle")["progress"]["action"].as_str() == Some("check"));
    let out = env.ok(&["check", "--stop", "idle"]);
    assert_contains(&out, &["the check was stopped at"], "check --stop");
    let o = check.wait_with_output().unwrap();
    assert!(!o.status.success(), "the stopped check's client succeeded");
    assert_contains(&String::from_utf8_lossy(&o.stderr), &["stopped by request"], "the waiting check");
    assert!(env.status("idle")["progress"].is_null());
    let r: serde_json::Value = serde_json::from_str(&env.ok(&["check", "--json", "idle"])).unwrap();
    assert_eq!(r[0]["report"]["mismatches"].as_u64(), Some(0), "{r}");
    env.ok(&["stop", "idle"]);
    assert!(srv.wait().0.success());
}

/// The console's settings from uraid.conf: `serve NAME` opens the console
/// at the config's address with the config's token, and only that token
/// gets in.
#[test]
fn the_console_takes_its_address_and_token_from_the_config() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let files = sparse_files(d.path(), "k", 2, 24 << 20);
    let f = strs(&files);
    let out = env.ok(&with(&["create", "--level", "1", "--chunk", "64K", "--name", "confweb"], &f));
    // "created array 'NAME' (UUID): ..."
    let uuid = out.split(['(', ')']).nth(1).expect("create names the uuid");
    std::fs::write(
        &env.conf,
        format!(
            "[[array]]\nname = \"confweb\"\nuuid = \"{uuid}\"\nmembers = [\"{}\", \"{}\"]\nconsole = \"127.0.0.1:0\"\nconsole-token = \"fromconf-0123456789abcdef\"\n",
            f[0], f[1]
        ),
    )
    .unwrap();
    let srv = env.serve("confweb", &["confweb"]);
    let line = srv.line("console: ");
    assert!(line.ends_with("/ (access token as configured)") && !line.contains("fromconf"), "{line}");
    let port: u16 = line.split("127.0.0.1:").nth(1).and_then(|r| r.split('/').next()).unwrap().parse().unwrap();
    let get = |cookie: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET /api/status HTTP/1.0\r\nHost: localhost\r\nCookie: uraid_token={cookie}\r\n\r\n").unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        r
    };
    assert!(get("fromconf-0123456789abcdef").starts_with("HTTP/1.0 200"), "the config's token is let in");
    assert!(get("other").starts_with("HTTP/1.0 401"), "another token is refused");
    env.ok(&["stop", "confweb"]);
    assert!(srv.wait().0.success());
}

/// A member that the data path fails while a rebuild runs (its writes
/// fail: the URAID_FAILPOINT_FAIL_WRITES failpoint) gets its Fail event,
/// and the rebuild of the other role (RAID 6 tolerates both) finishes.
#[test]
fn a_member_failing_during_a_rebuild_is_reported() {
    let _g = shared();
    let d = tmpdir();
    let mut env = Env::new(d.path());
    let files = sparse_files(d.path(), "r", 5, 64 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "6", "--chunk", "64K", "--name", "twofail"], &f[..4]));
    let (prog, log) = event_program(d.path());
    // Member 2's writes fail past member byte 40M, which only the write
    // made during the rebuild reaches.
    env.extra.push(("URAID_FAILPOINT_FAIL_WRITES".into(), format!("{}@{}-{}", f[2], 40u64 << 20, 64u64 << 20)));
    let srv = env.serve("twofail", &with(&["--program", s(&prog), "--rebuild-rate", "4"], &f[..4]));
    let uri = format!("nbd+unix:///twofail?socket={}", env.run.join("twofail.sock").display());
    // Data to reconstruct, so that the rebuild takes a while.
    run_tool(Command::new("qemu-io").args(["-f", "raw", "-c", "write -P 0x33 0 32M", "-c", "flush"]).arg(&uri));
    env.ok(&["fail", "twofail", "--member", "1"]);
    env.ok(&["add", "twofail", "--spare", f[4]]);
    wait_until(30, "the rebuild", || env.status("twofail")["progress"]["action"].as_str() == Some("rebuild"));
    // A client write (whole stripes, so every member) past member byte 40M.
    run_tool(Command::new("qemu-io").args(["-f", "raw", "-c", "write -P 0x5a 100M 2M", "-c", "flush"]).arg(&uri));
    wait_until(120, "RebuildFinished", || events_seen(&log).contains("RebuildFinished twofail"));
    wait_until(10, "the Fail of member 2", || events_seen(&log).contains(&format!("Fail twofail {}", f[2])));
    env.ok(&["stop", "twofail"]);
    assert!(srv.wait().0.success());
}

/// A console on an address that is not loopback: refused without TLS
/// (before anything is assembled: the members are unchanged); with the
/// export's certificate it speaks HTTPS only, with a login page, in a real
/// browser and through a client that verifies the certificate
/// (crates/uraid/tests/console/console_login_test.py).
#[test]
fn the_console_over_https_with_a_login() {
    let _g = shared();
    require_tool("chromium", "chromium");
    require_tool("chromedriver", "chromium-driver");
    let d = tmpdir();
    let env = Env::new(d.path());
    let files = sparse_files(d.path(), "h", 2, 24 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "1", "--chunk", "64K", "--name", "webtls"], &f));
    let before: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let err = env.fails(&with(&["serve", "--console", "0.0.0.0:0"], &f), &["not a loopback address", "--tls-cert and --tls-key", "ssh -L"]);
    assert!(!err.contains("console:"), "{err}");
    let after: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(before == after, "the refused serve changed a member");

    let (cert, key) = self_signed_cert(d.path());
    let token = "a-password-from-the-config";
    let srv = env.serve("webtls", &with(&["--console", "0.0.0.0:0", "--console-token", token, "--tls-cert", s(&cert), "--tls-key", s(&key)], &f));
    let line = srv.line("console: ");
    assert!(line.starts_with("console: https://0.0.0.0:"), "{line}");
    let port = line.trim_start_matches("console: https://0.0.0.0:").split('/').next().unwrap().to_string();
    let o = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/console_login_test.py"))
        .env("CONSOLE", format!("https://127.0.0.1:{port}"))
        .env("CA", &cert)
        .env("TOKEN", token)
        .env("ARRAY", "webtls")
        .env("SHOTS", Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/console-screenshots"))
        .output()
        .unwrap();
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    println!("{out}");
    assert!(o.status.success() && out.contains("console login test: passed"), "the login test failed:\n{out}");
    env.ok(&["stop", "webtls"]);
    assert!(srv.wait().0.success());
}

/// `uraid grow --add` of a served RAID 5 while ext4 on its export is
/// mounted and fio writes with checksums: the reshape runs in the
/// background (status, metrics and the Reshape events show it; a
/// membership change meanwhile is refused), the files verify, new
/// connections see the larger size, resize2fs grows the filesystem onto
/// it, a live check finds no mismatch, and the array
/// stops clean with five members and serves again.
#[test]
fn a_served_array_grows_while_its_filesystem_is_in_use() {
    let _g = shared();
    require_tool("nbdfuse", "libnbd-bin");
    require_tool("resize2fs", "e2fsprogs");
    let d = tmpdir();
    let env = Env::new(d.path());
    let name = format!("grow{}", std::process::id());
    let (loops, devs) = raid5_on_loops(&env, d.path(), "g", 5, 80 << 20, &name);
    let (prog, log) = event_program(d.path());
    std::fs::write(&env.conf, format!("[monitor]\nprogram = \"{}\"\n", prog.display())).unwrap();
    env.ok(&["scan", "--config"]);
    let srv = env.serve(&name, &["--metrics", "127.0.0.1:0", &name]);
    let port: u16 = srv.line("metrics: ").trim_end_matches("/metrics").rsplit(':').next().unwrap().parse().unwrap();
    let sock = env.run.join(format!("{name}.sock"));
    let uri = format!("nbd+unix:///{name}?socket={}", sock.display());
    let mut fs = FsOnNbd::attach(&uri, d.path(), true);
    fio_ok(&mut fio(&fs.mnt, "before", "24M", false));
    let cap0 = env.status(&name)["volumes"][0]["capacity"].as_u64().unwrap();

    // 20 MB/s: the 5-member layout's ~300 MB take about 15 s.
    let out = env.ok(&["grow", &name, "--add", &devs[4], "--rate", "20"]);
    assert_contains(&out, &["is being reshaped from 4 to 5 members", "in the background"], "grow");
    let during = fio(&fs.mnt, "during", "16M", false).spawn().unwrap();
    let (mut saw_status, mut saw_metrics) = (false, false);
    wait_until(120, "the reshape's progress in status and metrics", || {
        let st = env.status(&name);
        if st["progress"]["action"].as_str() == Some("reshape") && st["reshape"]["position"].as_u64() > Some(0) {
            saw_status = true;
        }
        let m = http_get(port, "/metrics");
        if sample(&m, "uraid_sync_progress_ratio", &["action=\"reshape\""]).is_some_and(|r| r > 0.0 && r < 1.0) {
            promtool_ok(&m);
            saw_metrics = true;
        }
        saw_status && saw_metrics
    });
    let text = env.ok(&["status", &name]);
    assert_contains(&text, &["reshape from 4 to 5 members", "reshape of volume", "MB/s"], "status while reshaping");
    env.fails(&["fail", &name, "--member", "1"], &["being reshaped", "Nothing was written"]);
    wait_until(180, "ReshapeFinished", || events_seen(&log).contains(&format!("ReshapeFinished {name}")));
    let o = during.wait_with_output().unwrap();
    assert!(o.status.success(), "fio during the reshape: {}", String::from_utf8_lossy(&o.stderr));
    let e = events_seen(&log);
    assert_contains(&e, &[&format!("ReshapeStarted {name}"), &format!("Reshape20 {name}"), &format!("Reshape80 {name}")], "events");
    fio_ok(&mut fio(&fs.mnt, "before", "24M", true));
    fio_ok(&mut fio(&fs.mnt, "during", "16M", true));
    let st = env.status(&name);
    let cap1 = st["volumes"][0]["capacity"].as_u64().unwrap();
    assert_eq!((st["member_count"].as_u64(), st["reshape"].is_null()), (Some(5), true), "{st}");
    assert_eq!(cap1, cap0 / 3 * 4, "RAID 5 over 5 members holds 4/3 of 4 members' data: {st}");

    // A new connection sees the new size; the mounted ext4 grows onto it.
    fs.detach();
    let fs = FsOnNbd::attach(&uri, d.path(), false);
    let blocks = |fs: &FsOnNbd| -> u64 {
        let o = Command::new("df").args(["--output=size", "-B1"]).arg(&fs.mnt).output().unwrap();
        String::from_utf8_lossy(&o.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
    };
    let before = blocks(&fs);
    let lo = fs.loop_device().display().to_string();
    // Offline (this sandbox refuses ext4's online resize ioctl): unmount,
    // check, resize, mount again.
    run_tool(Command::new("umount").arg(&fs.mnt));
    run_tool(Command::new("e2fsck").args(["-f", "-y"]).arg(&lo));
    run_tool(Command::new("resize2fs").arg(&lo));
    run_tool(Command::new("mount").arg(&lo).arg(&fs.mnt));
    let after = blocks(&fs);
    assert!(after > before + (cap1 - cap0) / 2, "resize2fs did not grow the filesystem: {before} -> {after} bytes");
    fio_ok(&mut fio(&fs.mnt, "before", "24M", true));
    fio_ok(&mut fio(&fs.mnt, "after", "8M", false));
    let out = env.ok(&["check", "--json", &name]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((r[0]["report"]["mismatches"].as_u64(), r[0]["report"]["stripes_unchecked"].as_u64()), (Some(0), Some(0)), "{out}");
    let mut fs = fs;
    fs.detach();
    env.ok(&["stop", &name]);
    assert!(srv.wait().0.success());
    let st = env.status(&name);
    assert_eq!((st["state"].as_str(), st["member_count"].as_u64()), (Some("clean"), Some(5)), "{st}");
    // Served again from its members (the config still names four: the
    // array is found by UUID, and the fifth given by hand).
    let srv = env.serve(&name, &devs.iter().map(String::as_str).collect::<Vec<_>>());
    let mut fs = FsOnNbd::attach(&uri, d.path(), false);
    fio_ok(&mut fio(&fs.mnt, "during", "16M", true));
    fio_ok(&mut fio(&fs.mnt, "after", "8M", true));
    fs.detach();
    env.ok(&["stop", &name]);
    assert!(srv.wait().0.success());
    drop(loops);
}
