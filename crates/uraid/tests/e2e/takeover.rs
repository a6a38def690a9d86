//! `uraid serve --ublk --takeover`: the refusals, which need no ublk
//! driver (the takeover itself, with a mounted filesystem on /dev/ublkbN,
//! is tests/vm/ublk_takeover.sh). With nothing serving the array, the new
//! serve says so and exits 1 without touching the members; with the array
//! served over NBD only, it is refused (a takeover keeps a block device
//! going, and there is none) and the running server goes on serving,
//! unchanged; the control command itself refuses the same, and a taker
//! that is no running process.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// `uraid ARGS` with the run directory `run` and no config.
fn cmd(dir: &Path, run: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(URAID);
    c.args(args).env("URAID_RUN_DIR", run).env("URAID_CONFIG", dir.join("none.conf")).env("URAID_STATE_DIR", dir.join("state"));
    c.stdin(Stdio::null());
    c
}

/// Runs `uraid ARGS`; its status code, stdout and stderr.
fn run(dir: &Path, rundir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let o = cmd(dir, rundir, args).output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// One control request line to `ctl`; the reply line as JSON.
fn ctl(path: &Path, req: &str) -> serde_json::Value {
    let mut s = UnixStream::connect(path).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(b"\n").unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply {line:?}: {e}"))
}

fn array(dir: &Path, name: &str) -> Vec<PathBuf> {
    let m = sparse_files(dir, name, 3, 64 << 20);
    uraid_ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", name], &strs(&m)));
    m
}

#[test]
fn takeover_with_nothing_serving_says_so_and_changes_nothing() {
    let _g = shared();
    let d = tmpdir();
    let rundir = d.path().join("run");
    std::fs::create_dir(&rundir).unwrap();
    let m = array(d.path(), "tk0");
    let before = Snapshot::take(&m);
    let (code, out, err) = run(d.path(), &rundir, &with(&["serve", "--takeover"], &strs(&m)));
    println!("serve --takeover with nothing serving: {err}");
    assert_eq!(code, Some(1), "serve --takeover with nothing serving: {out}{err}");
    assert_contains(&err, &["no `uraid serve` runs array 'tk0'", "nothing to take over", "uraid serve tk0 --ublk"], "serve --takeover");
    assert!(!out.contains("serving"), "it serves: {out}");
    let left: Vec<_> = std::fs::read_dir(&rundir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "serve --takeover left {left:?} in the run directory");
    before.assert_unchanged("serve --takeover with nothing serving");
}

#[test]
fn takeover_of_an_nbd_only_server_is_refused_and_it_keeps_serving() {
    let _g = shared();
    let d = tmpdir();
    let rundir = d.path().join("run");
    std::fs::create_dir(&rundir).unwrap();
    let m = array(d.path(), "tk1");
    let mut c = cmd(d.path(), &rundir, &with(&["serve"], &strs(&m)));
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = ChildGuard(c.spawn().unwrap());
    let ctl_path = rundir.join("tk1.ctl");
    let t0 = Instant::now();
    while UnixStream::connect(&ctl_path).is_err() {
        assert!(child.0.try_wait().unwrap().is_none(), "uraid serve ended before its control socket answered");
        assert!(t0.elapsed() < Duration::from_secs(30), "no control socket at {}", ctl_path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.0.id();

    // The new serve asks, is refused, and exits 1.
    for args in [with(&["serve", "--takeover"], &strs(&m)), with(&["serve", "--ublk", "--takeover"], &strs(&m))] {
        let (code, out, err) = run(d.path(), &rundir, &args);
        println!("{}: {err}", args.join(" "));
        assert_eq!(code, Some(1), "{}: {out}{err}", args.join(" "));
        assert_contains(&err, &[&format!("served by process {pid} without --ublk"), "Nothing was changed", "uraid stop tk1"], "takeover of NBD");
    }

    // The control command refuses the same, and a taker that is not running.
    let me = std::process::id();
    let r = ctl(&ctl_path, &format!(r#"{{"version": 1, "command": {{"takeover": {{"by": {me}}}}}}}"#));
    assert_eq!(r["ok"], false, "{r}");
    assert_contains(r["error"]["message"].as_str().unwrap(), &["without --ublk"], "takeover command");
    let r = ctl(&ctl_path, r#"{"version": 1, "command": {"takeover": {}}}"#);
    assert_eq!(r["ok"], false, "a takeover without its taker: {r}");

    // It serves on, unchanged.
    assert!(child.0.try_wait().unwrap().is_none(), "the NBD server ended");
    let r = ctl(&ctl_path, r#"{"version": 1, "command": "status"}"#);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["result"]["pid"].as_u64(), Some(pid as u64), "{r}");
    assert!(rundir.join("tk1.sock").exists(), "the NBD socket went");
    let r = ctl(&ctl_path, r#"{"version": 1, "command": "stop"}"#);
    assert_eq!(r["ok"], true, "{r}");
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "uraid serve did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(st.success(), "uraid serve ended with {st}");
    std::mem::forget(child);
}
