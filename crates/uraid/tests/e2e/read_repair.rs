//! Read errors repaired from redundancy through `uraid serve` (issue 32
//! item 4): a member whose reads of a few sectors fail (the
//! URAID_FAILPOINT_FAIL_READS failpoint: EIO until written, as a drive's
//! pending sector) gives the right data to an NBD client (qemu-io), stays
//! in the array, and its corrected read error is counted in `status`
//! (text and --json) and sent as a ReadErrorCorrected event; with
//! `--max-read-errors 0` the same error fails it, and the Fail event says
//! why.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::*;

const MIB: u64 = 1 << 20;

/// The environment of the test's uraid commands (run directory, config).
fn env_in(dir: &Path) -> Vec<(&'static str, OsString)> {
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    vec![
        ("URAID_RUN_DIR", run.into()),
        ("URAID_CONFIG", dir.join("uraid.conf").into()),
        ("URAID_STATE_DIR", dir.join("state").into()),
    ]
}

fn run<S: AsRef<OsStr>>(args: &[S], env: &[(&'static str, OsString)]) -> String {
    let e: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let o = uraid_env(args, &e);
    assert!(
        o.status.success(),
        "`{}` failed: {}{}",
        o.cmdline,
        o.stdout,
        o.stderr
    );
    o.stdout
}

/// `uraid serve --tcp` of `files` with `extra` flags and `env`; the child
/// and the NBD URI. Its stderr (the event lines) goes to `log`.
fn serve(
    files: &[PathBuf],
    extra: &[&str],
    env: &[(&'static str, OsString)],
    log: &Path,
) -> (ChildGuard, String) {
    let mut args: Vec<&OsStr> = vec!["serve".as_ref(), "--tcp".as_ref(), "127.0.0.1:0".as_ref()];
    args.extend(extra.iter().map(OsStr::new));
    args.extend(files.iter().map(|m| m.as_os_str()));
    let e: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let (child, port) = serve_logged(&args, &e, log);
    (child, format!("nbd://127.0.0.1:{port}"))
}

fn stop(name: &str, mut child: ChildGuard, env: &[(&'static str, OsString)]) {
    run(&["stop", name], env);
    let t0 = Instant::now();
    while child.0.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "uraid serve did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_served_read_error_is_repaired_counted_and_evented() {
    let _g = shared();
    require_tool("qemu-io", "qemu-utils");
    let d = tmpdir();
    let env = env_in(d.path());
    let files = sparse_files(d.path(), "r", 3, 24 * MIB);
    let f = strs(&files);
    run(
        &with(
            &["create", "--level", "5", "--chunk", "64K", "--name", "rrep"],
            &f,
        ),
        &env,
    );
    // Known data first (RAID 5 over 3, left-symmetric: logical [0, 64K) is
    // member 0's first chunk, at the volume's member_start).
    let log = d.path().join("serve.log");
    let (child, uri) = serve(&files, &[], &env, &log);
    run_tool(
        Command::new("qemu-io")
            .args(["-f", "raw", "-c", "write -P 0x5a 0 256k", "-c", "flush"])
            .arg(&uri),
    );
    let st: serde_json::Value =
        serde_json::from_str(&run(&["status", "--json", "rrep"], &env)).unwrap();
    let start = st["volumes"][0]["member_start"]
        .as_u64()
        .expect("member_start");
    stop("rrep", child, &env);

    // Member 0 cannot read 4 KiB of it, 8 KiB into that chunk.
    let events = d.path().join("events.log");
    let prog = d.path().join("on-event");
    std::fs::write(
        &prog,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", events.display()),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut env_bad = env.clone();
    env_bad.push((
        "URAID_FAILPOINT_FAIL_READS",
        format!("{}@{}-{}", f[0], start + 8192, start + 12288).into(),
    ));
    let (child, uri) = serve(&files, &["--program", s(&prog)], &env_bad, &log);
    run_tool(
        Command::new("qemu-io")
            .args(["-f", "raw", "-c", "read -P 0x5a 0 128k"])
            .arg(&uri),
    );
    // The served status is refreshed by the manager every second.
    let json = || -> serde_json::Value {
        serde_json::from_str(&run(&["status", "--json", "rrep"], &env)).unwrap()
    };
    wait_for(30, "the corrected read error in status", || {
        json()["members"][0]["read_errors_corrected"].as_u64() == Some(1)
    });
    let st = json();
    assert_eq!(st["members"][0]["state"].as_str(), Some("active"), "{st}");
    assert_eq!(
        st["members"][0]["read_errors_corrected"].as_u64(),
        Some(1),
        "{st}"
    );
    assert_eq!(
        st["members"][1]["read_errors_corrected"].as_u64(),
        Some(0),
        "{st}"
    );
    let text = run(&["status", "rrep"], &env);
    assert_contains(&text, &["1 read errors corrected"], "status");
    wait_for(30, "ReadErrorCorrected at the program", || {
        std::fs::read_to_string(&events)
            .unwrap_or_default()
            .contains("ReadErrorCorrected rrep")
    });
    // Rewritten: the next read of the range passes without an error.
    run_tool(
        Command::new("qemu-io")
            .args(["-f", "raw", "-c", "read -P 0x5a 8k 4k"])
            .arg(&uri),
    );
    let st: serde_json::Value =
        serde_json::from_str(&run(&["status", "--json", "rrep"], &env)).unwrap();
    assert_eq!(
        st["members"][0]["read_errors_corrected"].as_u64(),
        Some(1),
        "{st}"
    );
    stop("rrep", child, &env);

    // With --max-read-errors 0 the first read error fails the member.
    let mut env_bad = env.clone();
    env_bad.push((
        "URAID_FAILPOINT_FAIL_READS",
        format!("{}@{}-{}", f[0], start + 16384, start + 20480).into(),
    ));
    let (child, uri) = serve(
        &files,
        &["--max-read-errors", "0", "--program", s(&prog)],
        &env_bad,
        &log,
    );
    run_tool(
        Command::new("qemu-io")
            .args(["-f", "raw", "-c", "read -P 0x5a 0 64k"])
            .arg(&uri),
    );
    let json = || -> serde_json::Value {
        serde_json::from_str(&run(&["status", "--json", "rrep"], &env)).unwrap()
    };
    wait_for(30, "member 0 faulty in status", || {
        json()["members"][0]["state"].as_str() == Some("faulty")
    });
    wait_for(30, "the Fail event", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("max-read-errors 0")
    });
    assert_contains(
        &std::fs::read_to_string(&events).unwrap(),
        &["Fail rrep"],
        "events",
    );
    stop("rrep", child, &env);
}
