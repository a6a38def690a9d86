//! Boot without systemd and the monitor of the configured arrays:
//! `uraid scan --assemble --config FILE` starts a configured array with
//! all its settings (metrics endpoint, scrub schedule, rates) as `uraid
//! serve NAME` does; `uraid monitor --scan` reports a configured array
//! that is not served, one degraded at its start, stays up when an array
//! stops and follows one that starts later; `--oneshot` says by its exit
//! status whether anything needs attention, also with nothing served.
//!
//! Arrays are RAID 1 on small files in the test's directory; every run has
//! its own run, state and config paths, and unique array names.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::util::*;

const MIB: u64 = 1 << 20;

/// The paths of one test: run directory, state directory, config file.
struct Env {
    run: PathBuf,
    state: PathBuf,
    conf: PathBuf,
}

impl Env {
    fn new(dir: &Path) -> Env {
        Env { run: dir.join("run"), state: dir.join("state"), conf: dir.join("uraid.conf") }
    }

    /// `uraid ARGS` with this test's environment.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(URAID);
        c.args(args).env("URAID_RUN_DIR", &self.run).env("URAID_STATE_DIR", &self.state).env("URAID_CONFIG", &self.conf);
        c.stdin(Stdio::null());
        c
    }

    /// Runs `uraid ARGS`: exit success, stdout, stderr.
    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let o = self.cmd(args).output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
    }

    /// Runs `uraid ARGS`, panics unless it succeeds; stdout.
    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args);
        assert!(ok, "uraid {} failed:\n{out}{err}", args.join(" "));
        out
    }

    /// A RAID 1 named `name` on two 16 MiB files `DIR/NAME-0`, `-1`; its
    /// UUID.
    fn raid1(&self, dir: &Path, name: &str) -> String {
        let files = sparse_files(dir, &format!("{name}-"), 2, 16 * MIB);
        let out = self.ok(&with(&["create", "--level", "1", "--name", name], &strs(&files)));
        // "created array 'NAME' (UUID): ..."
        out.split(['(', ')']).nth(1).unwrap_or_else(|| panic!("no uuid in: {out}")).to_string()
    }

    /// Waits until the control socket of `name` answers.
    fn wait_served(&self, name: &str) {
        let ctl = self.run.join(format!("{name}.ctl"));
        let t0 = Instant::now();
        while std::os::unix::net::UnixStream::connect(&ctl).is_err() {
            let log = std::fs::read_to_string(self.run.join(format!("{name}.log"))).unwrap_or_default();
            assert!(t0.elapsed() < Duration::from_secs(60), "array {name} is not served after 60 s; its log:\n{log}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Stops the arrays named (with `uraid stop`) when dropped: they run
/// detached, and must not outlive a failed test.
struct Stopper<'a>(&'a Env, Vec<String>);

impl Drop for Stopper<'_> {
    fn drop(&mut self) {
        for n in &self.1 {
            let _ = self.0.cmd(&["stop", n]).output();
        }
    }
}

/// A TCP port free on 127.0.0.1 a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The body of `GET path` on 127.0.0.1:`port`, or why it failed.
fn http_get(port: u16, path: &str) -> Result<String, String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect to port {port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    Ok(text)
}

/// `scan --assemble --config FILE` (no systemd here) starts an array of
/// FILE by name with its settings: the metrics endpoint answers on the
/// configured port, and the live status shows the scrub schedule and the
/// rates of the config.
#[test]
fn scan_assemble_starts_a_configured_array_with_its_settings() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let members = d.path().join("members");
    std::fs::create_dir(&members).unwrap();
    let name = format!("bootcfg-{}", std::process::id());
    let uuid = env.raid1(&members, &name);
    let port = free_port();
    // The settings are in another file than $URAID_CONFIG: --config names it.
    let conf = d.path().join("boot.conf");
    std::fs::write(
        &conf,
        format!(
            "devices = [\"{}/*\"]\n[[array]]\nname = \"{name}\"\nuuid = \"{uuid}\"\nmetrics = \"127.0.0.1:{port}\"\n\
             scrub-every = \"7d\"\nrebuild-rate = \"50M\"\nscrub-rate = \"20M\"\n",
            members.display()
        ),
    )
    .unwrap();
    let out = env.ok(&["scan", "--assemble", &format!("--config={}", conf.display())]);
    let _stop = Stopper(&env, vec![name.clone()]);
    env.wait_served(&name);
    let log = || std::fs::read_to_string(env.run.join(format!("{name}.log"))).unwrap_or_default();
    let metrics = http_get(port, "/metrics").unwrap_or_else(|e| panic!("no metrics endpoint on port {port} ({e}); the array's log:\n{}", log()));
    assert_contains(&metrics, &["200 OK", &format!("array=\"{name}\"")], "GET /metrics");
    assert_contains(&out, &[&format!("started array '{name}' with its settings from {}", conf.display())], "scan --assemble");
    let st: serde_json::Value = serde_json::from_str(&env.ok(&["status", "--json", &name])).unwrap();
    let m = &st["maintenance"];
    assert_eq!(m["scrub_every"].as_u64(), Some(7 * 86_400), "{st}");
    assert_eq!((m["rebuild_rate"].as_u64(), m["scrub_rate"].as_u64()), (Some(50_000_000), Some(20_000_000)), "{st}");
    let next = m["next_check_unix"].as_u64().unwrap_or(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(next > now + 6 * 86_400 && next <= now + 7 * 86_400 + 60, "next check at {next}, now {now}: {st}");
    let text = env.ok(&["status", &name]);
    assert_contains(&text, &["maintenance: check every 7d (next in ", "scrub rate 20 MB/s, rebuild rate 50 MB/s"], "status");
    env.ok(&["stop", &name]);
}

/// The lines a running `uraid monitor` printed so far.
struct Lines(Arc<Mutex<String>>);

impl Lines {
    fn of(child: &mut std::process::Child) -> Lines {
        let out = child.stdout.take().unwrap();
        let all = Arc::new(Mutex::new(String::new()));
        let sink = all.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let mut a = sink.lock().unwrap();
                a.push_str(&l);
                a.push('\n');
            }
        });
        Lines(all)
    }

    /// Waits (at most 30 s) until a line holds every one of `needles`.
    fn wait_for(&self, needles: &[&str]) {
        let t0 = Instant::now();
        loop {
            let text = self.0.lock().unwrap().clone();
            if text.lines().any(|l| needles.iter().all(|n| l.contains(n))) {
                return;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no line of uraid monitor holds {needles:?} after 30 s:\n{text}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `uraid monitor --scan` with two configured arrays, one served (and
/// degraded) and one not: it reports the degraded one and the one not
/// served at its start, stays up when the served one is stopped (and says
/// so), and follows the second when it starts later.
#[test]
fn monitor_scan_watches_the_configured_arrays() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let members = d.path().join("members");
    std::fs::create_dir(&members).unwrap();
    let (a, b) = (format!("mon-a-{}", std::process::id()), format!("mon-b-{}", std::process::id()));
    let (ua, ub) = (env.raid1(&members, &a), env.raid1(&members, &b));
    std::fs::write(
        &env.conf,
        format!("devices = [\"{}/*\"]\n[[array]]\nname = \"{a}\"\nuuid = \"{ua}\"\n[[array]]\nname = \"{b}\"\nuuid = \"{ub}\"\n", members.display()),
    )
    .unwrap();
    let _stop = Stopper(&env, vec![a.clone(), b.clone()]);
    let serve = |n: &str| {
        let g = ChildGuard(env.cmd(&["serve", n]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
        env.wait_served(n);
        g
    };
    let mut srv_a = serve(&a);
    env.ok(&["fail", &a, "--member", "1"]);
    let mut mon = ChildGuard(env.cmd(&["monitor", "--scan", "--delay", "0.5"]).stdout(Stdio::piped()).spawn().unwrap());
    let lines = Lines::of(&mut mon.0);
    lines.wait_for(&["DeviceDisappeared", &b, "not served"]);
    lines.wait_for(&["DegradedArray", &a, "at the monitor's start"]);
    lines.wait_for(&["NewArray", &a]);

    env.ok(&["stop", &a]);
    let t0 = Instant::now();
    while srv_a.0.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(60), "uraid serve {a} did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    lines.wait_for(&["DeviceDisappeared", &a, "no longer served"]);
    // Several looks later it is still there.
    std::thread::sleep(Duration::from_secs(2));
    assert!(mon.0.try_wait().unwrap().is_none(), "uraid monitor --scan exited when {a} stopped:\n{}", lines.0.lock().unwrap());

    let _srv_b = serve(&b);
    lines.wait_for(&["NewArray", &b]);
    env.ok(&["fail", &b, "--member", "0"]);
    lines.wait_for(&["Fail", &b]);
    env.ok(&["stop", &b]);
    lines.wait_for(&["DeviceDisappeared", &b, "no longer served"]);
    let text = lines.0.lock().unwrap().clone();
    assert_eq!(text.lines().filter(|l| l.contains(&format!("DeviceDisappeared {a}"))).count(), 1, "{a} reported gone once:\n{text}");
    assert!(mon.0.try_wait().unwrap().is_none(), "uraid monitor --scan exited:\n{text}");
}

/// `monitor --oneshot` (with or without --scan) with nothing served names
/// every configured array and exits 1; with both served and healthy it
/// prints nothing and exits 0; with one degraded it names it and exits 1.
#[test]
fn monitor_oneshot_exit_status_says_whether_anything_needs_attention() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let members = d.path().join("members");
    std::fs::create_dir(&members).unwrap();
    let (a, b) = (format!("one-a-{}", std::process::id()), format!("one-b-{}", std::process::id()));
    let (ua, ub) = (env.raid1(&members, &a), env.raid1(&members, &b));
    std::fs::write(
        &env.conf,
        format!("devices = [\"{}/*\"]\n[[array]]\nname = \"{a}\"\nuuid = \"{ua}\"\n[[array]]\nname = \"{b}\"\nuuid = \"{ub}\"\n", members.display()),
    )
    .unwrap();
    for args in [&["monitor", "--scan", "--oneshot"][..], &["monitor", "--oneshot"][..]] {
        let (ok, out, err) = env.run(args);
        assert!(!ok, "uraid {} succeeded with nothing served:\n{out}{err}", args.join(" "));
        assert_contains(&out, &[&format!("DeviceDisappeared event on {a}"), &format!("DeviceDisappeared event on {b}"), "not served"], "oneshot");
        assert_contains(&err, &["2 of the 2 arrays watched need attention"], "oneshot");
    }
    let _stop = Stopper(&env, vec![a.clone(), b.clone()]);
    let mut servers = Vec::new();
    for n in [&a, &b] {
        servers.push(ChildGuard(env.cmd(&["serve", n]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()));
        env.wait_served(n);
    }
    let (ok, out, err) = env.run(&["monitor", "--scan", "--oneshot"]);
    assert!(ok && out.is_empty(), "both served and healthy:\n{out}{err}");
    env.ok(&["fail", &a, "--member", "1"]);
    let (ok, out, err) = env.run(&["monitor", "--scan", "--oneshot"]);
    assert!(!ok, "{a} degraded, yet exit 0:\n{out}{err}");
    assert_contains(&out, &[&format!("DegradedArray event on {a}: volume")], "oneshot");
    assert!(!out.contains(&b), "{b} is healthy: {out}");
    for n in [&a, &b] {
        env.ok(&["stop", n]);
    }
}
