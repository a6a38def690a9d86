//! What the administrator sees of a served array (issue 28, items 8 to
//! 10): a failed member stays listed as faulty with its device in every
//! view until it is removed; the views follow a background rebuild (not
//! only its progress line) and agree with it; `check` shows its progress
//! on a terminal that is not one; `serve` tells what the assemble at its
//! start did, as `uraid assemble` does, and why a dirty degraded start is
//! refused.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::*;

/// A long enough console token (128 bits in hex).
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// The uraid commands' environment: run directory, state, an empty config.
struct Env {
    run: PathBuf,
    dir: PathBuf,
}

impl Env {
    fn new(dir: &Path) -> Env {
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        Env { run, dir: dir.to_path_buf() }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(URAID);
        c.args(args)
            .env("URAID_RUN_DIR", &self.run)
            .env("URAID_STATE_DIR", self.dir.join("state"))
            .env("URAID_CONFIG", self.dir.join("uraid.conf"))
            .stdin(Stdio::null());
        c
    }

    /// Runs uraid; panics unless it succeeds; (stdout, stderr).
    fn ok(&self, args: &[&str]) -> (String, String) {
        let o = self.cmd(args).output().unwrap();
        let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
        assert!(o.status.success(), "uraid {} failed: {out}{err}", args.join(" "));
        (out, err)
    }

    fn status(&self, name: &str) -> Value {
        serde_json::from_str(&self.ok(&["status", "--json", name]).0).unwrap()
    }

    /// `uraid serve ARGS` with stdout and stderr collected; returns once
    /// the control socket of `name` answers.
    fn serve(&self, name: &str, args: &[&str]) -> Served {
        let mut c = self.cmd(&[&["serve"], args].concat());
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = ChildGuard(c.spawn().unwrap());
        let collect = |r: Box<dyn Read + Send>| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for l in BufReader::new(r).lines().map_while(Result::ok) {
                    let _ = tx.send(l);
                }
            });
            rx
        };
        let out = collect(Box::new(child.0.stdout.take().unwrap()));
        let err = collect(Box::new(child.0.stderr.take().unwrap()));
        let ctl = self.run.join(format!("{name}.ctl"));
        let t0 = Instant::now();
        while UnixStream::connect(&ctl).is_err() {
            if let Ok(Some(st)) = child.0.try_wait() {
                panic!("uraid serve {args:?} exited ({st}) before its control socket answered: {}", err.try_iter().collect::<Vec<_>>().join("\n"));
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no control socket at {}", ctl.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        Served { child, out, err, out_seen: Vec::new() }
    }
}

/// A running `uraid serve` and what it printed.
struct Served {
    child: ChildGuard,
    out: std::sync::mpsc::Receiver<String>,
    err: std::sync::mpsc::Receiver<String>,
    out_seen: Vec<String>,
}

impl Served {
    /// The port of the first stdout line starting with `prefix` (an
    /// address `127.0.0.1:PORT` in it).
    fn port(&mut self, prefix: &str) -> u16 {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.out_seen.iter().find(|l| l.starts_with(prefix)) {
                let rest = l.split("127.0.0.1:").nth(1).unwrap_or_else(|| panic!("no address in {l:?}"));
                return rest.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap();
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "uraid serve printed no {prefix:?} line: {:?}", self.out_seen);
            if let Ok(l) = self.out.recv_timeout(Duration::from_millis(100)) {
                self.out_seen.push(l);
            }
        }
    }

    /// Stderr lines printed so far (waiting `settle` for more).
    fn stderr(&self, settle: Duration) -> String {
        std::thread::sleep(settle);
        self.err.try_iter().collect::<Vec<_>>().join("\n")
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

/// GET `path` from 127.0.0.1:`port` with the console's token; the body.
fn get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\nCookie: uraid_token={TOKEN}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").expect("an HTTP reply");
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
    body.to_string()
}

/// The sample lines of metric `name` in a scrape.
fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines().filter(|l| !l.starts_with('#') && l.split(['{', ' ']).next() == Some(name)).collect()
}

/// Checks a scrape with promtool.
fn promtool_ok(text: &str) {
    require_tool("promtool", "prometheus");
    let mut c = Command::new("promtool").args(["check", "metrics"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "promtool check metrics: {}{}\n{text}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
}

/// The member of status `st` (JSON) whose device is `dev`.
fn member<'a>(st: &'a Value, dev: &str) -> Option<&'a Value> {
    st["members"].as_array().unwrap().iter().find(|m| m["device"].as_str() == Some(dev))
}

/// Item 8: a RAID 5 with a spare, served; a member is failed live, the
/// spare takes over its role; the failed drive is listed as faulty, with
/// its path and the role it held, by `uraid status`, `--json`, the
/// metrics (promtool-clean) and the console's /api/status until
/// `uraid remove` takes it out of every view.
#[test]
fn a_failed_member_stays_listed_as_faulty_until_removed() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let files = sparse_files(d.path(), "f", 4, 48 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "faultyview"], &f[..3]));
    let mut srv = env.serve(
        "faultyview",
        &with(&["--metrics", "127.0.0.1:0", "--console", "127.0.0.1:0", "--console-token", TOKEN], &f[..3]),
    );
    let (metrics, console) = (srv.port("metrics: "), srv.port("console: "));
    env.ok(&["add", "faultyview", "--spare", f[3]]);
    env.ok(&["fail", "faultyview", "--member", f[1]]);
    // The spare takes role 1 over (rebuilt in the background).
    wait_until(30, "the spare in role 1", || env.status("faultyview")["members"][1]["device"].as_str() == Some(f[3]));
    wait_until(120, "the rebuild's end", || env.status("faultyview")["volumes"][0]["state"].as_str() == Some("clean"));

    let st = env.status("faultyview");
    let m = member(&st, f[1]).unwrap_or_else(|| panic!("{} is gone from status --json: {st}", f[1]));
    assert_eq!((m["state"].as_str(), m["role"].as_u64(), m["former_role"].as_u64()), (Some("faulty"), None, Some(1)), "{st}");
    let slot = m["slot"].as_u64().unwrap();
    let (text, _) = env.ok(&["status", "faultyview"]);
    assert!(text.lines().any(|l| l.contains(f[1]) && l.contains("faulty") && l.contains("(F)")), "status lists no faulty {}:\n{text}", f[1]);
    let scrape = get(metrics, "/metrics");
    promtool_ok(&scrape);
    let line = samples(&scrape, "uraid_member_state").into_iter().find(|l| l.contains(&format!("device=\"{}\"", f[1])));
    assert!(line.is_some_and(|l| l.contains("state=\"faulty\"")), "metrics list no faulty {}:\n{scrape}", f[1]);
    assert!(samples(&scrape, "uraid_md_disks").iter().any(|l| l.contains("state=\"failed\"") && l.ends_with(" 1")), "{scrape}");
    // Nothing was written: no live data (the live-data map), in status and
    // in the metrics.
    assert_eq!(st["volumes"][0]["live_bytes"].as_u64(), Some(0), "{st}");
    let live = samples(&scrape, "uraid_volume_live_bytes");
    assert!(live.len() == 1 && live[0].contains("volume=\"faultyview\"") && live[0].ends_with(" 0"), "{scrape}");
    let api: Value = serde_json::from_str(&get(console, "/api/status")).unwrap();
    assert_eq!(member(&api, f[1]).map(|m| m["state"].clone()), Some(Value::from("faulty")), "console /api/status: {api}");
    println!("listed as faulty: slot {slot}, {}", line.unwrap());

    // Pulled and removed: gone from every view.
    let (out, _) = env.ok(&["remove", "faultyview", "--member", f[1]]);
    assert!(out.contains(&format!("slot {slot} removed")), "{out}");
    let st = env.status("faultyview");
    assert!(member(&st, f[1]).is_none(), "{} is still listed after remove: {st}", f[1]);
    let (text, _) = env.ok(&["status", "faultyview"]);
    assert!(!text.contains(f[1]), "{text}");
    wait_until(10, "the metrics without it", || !get(metrics, "/metrics").contains(&format!("device=\"{}\"", f[1])));
    let api: Value = serde_json::from_str(&get(console, "/api/status")).unwrap();
    assert!(member(&api, f[1]).is_none(), "{api}");
    env.ok(&["stop", "faultyview"]);
}

/// The percents of the plain `uraid status` text: the volume's
/// `rebuild = X%` and the progress line's `rebuild of role R: Y%`.
fn text_percents(text: &str) -> Option<(f64, f64)> {
    let vol = text.lines().find_map(|l| l.trim().strip_prefix("rebuild = "))?.trim_end_matches('%').parse().ok()?;
    let line = text.lines().find(|l| l.trim_start().starts_with("rebuild of role"))?;
    let p = line.split(": ").nth(1)?.split('%').next()?.parse().ok()?;
    Some((vol, p))
}

/// Item 9: during a background rebuild (slowed by --rebuild-rate), two
/// looks a while apart: the member's "rebuilt up to", the volume's
/// rebuild percent and the event counter move in `status --json`, the
/// console and the metrics, and agree with the progress line (within 10
/// points: the looks are not taken at one instant). Then `uraid check`
/// with stderr not a terminal prints a line per step.
#[test]
fn the_live_view_follows_a_rebuild_and_check_shows_progress() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    // No bitmap: every region is reconstructed, at the rate given.
    let files = sparse_files(d.path(), "r", 4, 200 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "5", "--chunk", "64K", "--no-bitmap", "--name", "liveview"], &f[..3]));
    let mut srv = env.serve(
        "liveview",
        &with(&["--rebuild-rate", "20", "--metrics", "127.0.0.1:0", "--console", "127.0.0.1:0", "--console-token", TOKEN], &f[..3]),
    );
    let (metrics, console) = (srv.port("metrics: "), srv.port("console: "));
    env.ok(&["fail", "liveview", "--member", "1"]);
    env.ok(&["add", "liveview", "--spare", f[3]]);
    // A look: (status --json, console status, scrape, status text).
    let look = || {
        let st = env.status("liveview");
        let api: Value = serde_json::from_str(&get(console, "/api/status")).unwrap();
        (st, api, get(metrics, "/metrics"), env.ok(&["status", "liveview"]).0)
    };
    let percent = |st: &Value| {
        let p = &st["progress"];
        (p["action"].as_str() == Some("rebuild")).then(|| p["done"].as_f64().unwrap() * 100.0 / p["total"].as_f64().unwrap())
    };
    // The first look with the progress in `range` (percent).
    let look_within = |range: std::ops::Range<f64>| {
        let mut seen = None;
        wait_until(120, &format!("the rebuild within {range:?}%"), || {
            let l = look();
            let ok = percent(&l.0).is_some_and(|p| range.contains(&p));
            if ok {
                seen = Some(l);
            }
            ok
        });
        seen.unwrap()
    };
    let a = look_within(2.0..25.0);
    let b = look_within(45.0..100.0);
    let events = |scrape: &str| samples(scrape, "uraid_events").first().and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse::<u64>().ok());
    for (label, (st, api, scrape, text)) in [("first", &a), ("second", &b)] {
        let p = percent(st).unwrap();
        let vol = st["volumes"][0]["rebuild_percent"].as_f64().unwrap_or(-1.0);
        let tp = text_percents(text);
        println!("{label} look: progress {p:.1}%, volume rebuild = {vol:.1}%, status text {tp:?}, role 1 rebuilt up to {}", st["members"][1]["recovery_offset"]);
        assert!((vol - p).abs() <= 10.0, "{label}: the volume says {vol}% beside a progress of {p}%: {st}");
        let (tv, tpp) = tp.unwrap_or_else(|| panic!("{label}: no rebuild figures in:\n{text}"));
        assert!((tv - tpp).abs() <= 10.0, "{label}: status shows rebuild = {tv}% beside {tpp}%:\n{text}");
        assert!(api["members"][1]["recovery_offset"].is_u64(), "{label}: {api}");
        assert!(events(scrape).is_some(), "{scrape}");
    }
    let off = |v: &Value| v["members"][1]["recovery_offset"].as_u64().unwrap_or(0);
    assert!(off(&b.0) > off(&a.0), "rebuilt up to did not move in status --json: {} then {}", a.0, b.0);
    assert!(off(&b.1) > off(&a.1), "rebuilt up to did not move in the console: {} then {}", a.1, b.1);
    assert!(
        b.0["volumes"][0]["rebuild_percent"].as_f64() > a.0["volumes"][0]["rebuild_percent"].as_f64(),
        "the volume's rebuild percent did not move: {} then {}",
        a.0,
        b.0
    );
    // A checkpoint (every 64 MiB) bumped the event counter meanwhile.
    assert!(b.0["events"].as_u64() > a.0["events"].as_u64(), "events did not move: {} then {}", a.0["events"], b.0["events"]);
    assert!(events(&b.2) > events(&a.2), "uraid_events did not move in the metrics");

    wait_until(120, "the rebuild's end", || env.status("liveview")["volumes"][0]["state"].as_str() == Some("clean"));
    // check, its stderr a pipe: a line per step.
    let (out, err) = env.ok(&["check", "liveview", "--rate", "100"]);
    let steps: Vec<&str> = err.lines().filter(|l| l.contains("check of") && l.contains('%')).collect();
    println!("check printed {} progress line(s):\n{}", steps.len(), steps.join("\n"));
    assert!(steps.len() >= 3, "uraid check printed no progress lines on a pipe:\n{err}\n{out}");
    assert!(out.contains("mismatches 0"), "{out}");
    env.ok(&["stop", "liveview"]);
    drop(srv.child);
}

/// The event log of a `--program` that appends its arguments.
fn event_program(dir: &Path) -> (PathBuf, PathBuf) {
    let log = dir.join("events.log");
    let prog = dir.join("on-event");
    std::fs::write(&prog, format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display())).unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (prog, log)
}

/// Item 10: `uraid serve` killed with SIGKILL while a client writes; the
/// members copied, `uraid assemble` of the copies prints its warnings
/// (regions resynced); `uraid serve` of the originals prints the same
/// ones and sends each as an AssembleWarning event. Then a served RAID 5
/// killed while a spare is rebuilt in role 1: the start is refused as
/// dirty and degraded, naming the rebuilding member, without asking for
/// a missing member.
#[test]
fn serve_says_what_assemble_did_after_a_crash() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let files = sparse_files(d.path(), "c", 3, 32 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "5", "--chunk", "64K", "--no-bitmap", "--name", "crashview"], &f));
    let mut srv = env.serve("crashview", &f);
    let uri = format!("nbd+unix:///crashview?socket={}", env.run.join("crashview.sock").display());
    require_tool("qemu-io", "qemu-utils");
    let mut writer = Command::new("qemu-io")
        .args(["-f", "raw", "-c", "write -P 0x5a 0 16M", "-c", "write -P 0x33 1M 16M", "-c", "write -P 0x44 2M 16M"])
        .arg(&uri)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    srv.child.kill_and_release(&files);
    let _ = writer.wait();
    // What assemble says, on copies of the members.
    let copies: Vec<PathBuf> = files
        .iter()
        .map(|p| {
            let c = p.with_extension("copy");
            std::fs::copy(p, &c).unwrap();
            c
        })
        .collect();
    let (_, err) = env.ok(&with(&["assemble"], &strs(&copies)));
    let said: Vec<&str> = err.lines().filter_map(|l| l.strip_prefix("uraid: warning: ")).collect();
    println!("uraid assemble: {said:?}");
    assert!(said.iter().any(|w| w.contains("not stopped cleanly") && w.contains("resynced")), "{err}");
    // What serve says.
    let (prog, log) = event_program(d.path());
    let srv = env.serve("crashview", &with(&["--program", s(&prog)], &f));
    let err = srv.stderr(Duration::from_millis(500));
    let told: Vec<&str> = err.lines().filter_map(|l| l.strip_prefix("uraid serve: warning: ")).collect();
    assert_eq!(told, said, "uraid serve's warnings differ from uraid assemble's:\n{err}");
    wait_until(10, "the AssembleWarning events", || {
        std::fs::read_to_string(&log).unwrap_or_default().lines().filter(|l| l.starts_with("AssembleWarning crashview")).count() == said.len()
    });
    env.ok(&["stop", "crashview"]);
    drop(srv.child);

    // Dirty and degraded with the member present and rebuilding.
    let files = sparse_files(d.path(), "g", 4, 64 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "5", "--chunk", "64K", "--no-bitmap", "--name", "holeview"], &f[..3]));
    let mut srv = env.serve("holeview", &with(&["--rebuild-rate", "1"], &f[..3]));
    env.ok(&["add", "holeview", "--spare", f[3]]);
    env.ok(&["fail", "holeview", "--member", "1"]);
    wait_until(30, "the rebuild onto the spare", || env.status("holeview")["progress"]["action"].as_str() == Some("rebuild"));
    srv.child.kill_and_release(&files);
    let members = [f[0], f[2], f[3]];
    let o = env.cmd(&with(&["serve"], &members)).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    println!("uraid serve refused: {err}");
    assert!(!o.status.success(), "a dirty degraded start was not refused: {err}");
    assert_contains(&err, &["not stopped cleanly and is degraded", "write hole", f[3], "being rebuilt", "--force"], "the refusal");
    assert!(!err.contains("Give the missing member"), "asks for a missing member that is present: {err}");
}

/// Issue 33: a served draid5 (4d+1p, one distributed spare) in every
/// view: a member failed live goes into the distributed spare, rebuilt in
/// the background; then `status --json` and the console's /api/status
/// list the layout and the spare in use, `uraid status` the role as
/// spared in distributed spare 0, and the metrics (promtool-clean) the
/// member spared (`uraid_member_state`, `uraid_md_disks{state="spared"}`:
/// the states add up to the roles), the spare in use
/// (`uraid_distributed_spare`) and the volume clean; the program gets
/// the SpareActive event.
#[test]
fn a_served_draid5_shows_its_distributed_spare_in_every_view() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let files = sparse_files(d.path(), "d", 8, 24 << 20);
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "draid5", "--data", "4", "--spares", "1", "--chunk", "64K", "--name", "draidview"], &f));
    let (prog, log) = event_program(d.path());
    let mut srv = env.serve(
        "draidview",
        &with(&["--metrics", "127.0.0.1:0", "--console", "127.0.0.1:0", "--console-token", TOKEN, "--program", s(&prog)], &f),
    );
    let (metrics, console) = (srv.port("metrics: "), srv.port("console: "));
    env.ok(&["fail", "draidview", "--member", "3"]);
    let want = serde_json::json!([{"spare": 0, "role": 3, "recovery_offset": null}]);
    wait_until(60, "role 3 rebuilt into the distributed spare", || env.status("draidview")["distributed_spares"] == want);

    let layout = "draid5 4d+1p, 1 distributed spare, layout 1";
    let st = env.status("draidview");
    assert_eq!((st["volumes"][0]["layout"].as_str(), st["volumes"][0]["state"].as_str()), (Some(layout), Some("clean")), "{st}");
    assert_eq!(st["members"][3]["state"], "spared", "{st}");
    let api: Value = serde_json::from_str(&get(console, "/api/status")).unwrap();
    assert_eq!(api["distributed_spares"], want, "console /api/status: {api}");
    assert_eq!((api["volumes"][0]["layout"].as_str(), api["members"][3]["state"].as_str()), (Some(layout), Some("spared")), "{api}");
    let (text, _) = env.ok(&["status", "draidview"]);
    assert!(text.lines().any(|l| l.contains("role 3:") && l.contains("spared in distributed spare 0")), "status:\n{text}");
    assert!(text.contains(layout), "status:\n{text}");

    let scrape = get(metrics, "/metrics");
    promtool_ok(&scrape);
    let role3 = samples(&scrape, "uraid_member_state").into_iter().find(|l| l.contains("slot=\"role 3\""));
    assert!(role3.is_some_and(|l| l.contains("state=\"spared\"")), "metrics: role 3 not spared:\n{scrape}");
    let disks: Vec<&str> = samples(&scrape, "uraid_md_disks");
    assert!(disks.iter().any(|l| l.contains("state=\"spared\"") && l.ends_with(" 1")), "{scrape}");
    let total: i64 = disks.iter().filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok()).sum();
    assert_eq!(total, 8, "uraid_md_disks add up to the 8 roles: {disks:?}");
    let spares = samples(&scrape, "uraid_distributed_spare");
    assert!(
        spares.len() == 1 && spares[0].contains("spare=\"0\"") && spares[0].contains("role=\"3\"") && spares[0].contains("state=\"rebuilt\""),
        "{scrape}"
    );
    assert!(samples(&scrape, "uraid_volume_state").iter().any(|l| l.contains("state=\"clean\"")), "{scrape}");
    wait_until(10, "the SpareActive event", || std::fs::read_to_string(&log).is_ok_and(|e| e.contains("SpareActive")));
    env.ok(&["stop", "draidview"]);
    drop(srv.child);
}
