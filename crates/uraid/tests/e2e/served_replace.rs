//! `uraid replace` on a served array (issue 30, item 1): the service runs
//! the core's one replace (`Array::replace`, `Replacement::AsSpare`) and
//! its takeover moves the new device in. Refusals change nothing (a spare
//! added before a refused fail is taken out again); a faulty member named
//! by its path and an active one named by its number are replaced and
//! rebuilt in the background; the array stops cleanly.

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use crate::util::*;

const MIB: u64 = 1 << 20;

/// Runs uraid in the test's run directory; its stdout, or its stderr when
/// `ok` is false (then it must fail).
fn run(env: &[(&str, &OsStr)], args: &[&str], ok: bool) -> String {
    let o = uraid_env(args, env);
    assert_eq!(o.status.success(), ok, "{}: {}{}", o.cmdline, o.stdout, o.stderr);
    if ok {
        o.stdout
    } else {
        o.stderr
    }
}

fn status(env: &[(&str, &OsStr)], name: &str) -> serde_json::Value {
    serde_json::from_str(&run(env, &["status", "--json", name], true)).unwrap()
}

/// Waits until role `role` is `device` and active (the rebuild onto it ended).
fn wait_active(env: &[(&str, &OsStr)], name: &str, role: usize, device: &str) {
    let t0 = Instant::now();
    loop {
        let st = status(env, name);
        let m = &st["members"][role];
        if m["device"].as_str() == Some(device) && m["state"].as_str() == Some("active") {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "role {role} is not {device}, active: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_served_array_replaces_members_and_refusals_change_nothing() {
    let _g = shared();
    let d = tmpdir();
    let (run_dir, conf) = (d.path().join("run"), d.path().join("uraid.conf"));
    std::fs::create_dir_all(&run_dir).unwrap();
    let env: [(&str, &OsStr); 2] = [("URAID_RUN_DIR", run_dir.as_os_str()), ("URAID_CONFIG", conf.as_os_str())];
    let name = format!("srep{}", std::process::id());
    let files = sparse_files(d.path(), "m", 5, 24 * MIB);
    let tiny = sparse_file(d.path(), "tiny", MIB);
    let f = strs(&files);
    run(&env, &with(&["create", "--level", "5", "--chunk", "64K", "--name", &name], &f[..3]), true);
    let log = d.path().join("serve.log");
    let (mut srv, _port) = serve_logged(&with(&["serve", "--tcp", "127.0.0.1:0"], &f[..3]), &env, &log);
    let ctl = run_dir.join(format!("{name}.ctl"));
    let t0 = Instant::now();
    while std::os::unix::net::UnixStream::connect(&ctl).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "no control socket at {}", ctl.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = status(&env, &name);

    // Refused, nothing changed: a slot that is no role, a device that is
    // not a member, a device too small.
    let e = run(&env, &["replace", "--old", "7", "--new", f[3], &name], false);
    assert_contains(&e, &["slot 7 is a spare, not a role", "nothing to replace"], "replace of no role");
    let e = run(&env, &["replace", "--old", f[4], "--new", f[3], &name], false);
    assert_contains(&e, &["is not a member of array", "role number"], "replace of a non-member");
    let e = run(&env, &["replace", "--old", "0", "--new", s(&tiny), &name], false);
    assert_contains(&e, &["too small"], "replace by a small device");
    let st = status(&env, &name);
    assert_eq!(st["events"], before["events"], "the refusals wrote nothing: {st}");
    assert_eq!(st["members"].as_array().map(Vec::len), Some(3), "{st}");

    // Degraded: replacing another active member would lose the data; the
    // spare added for it is taken out again.
    run(&env, &["fail", "--member", "1", &name], true);
    let e = run(&env, &["replace", "--old", "0", "--new", f[3], &name], false);
    assert_contains(&e, &["failing role 0", "lose the data", "--force"], "replace past the tolerance");
    let st = status(&env, &name);
    assert_eq!(st["members"].as_array().map(Vec::len), Some(3), "no spare left behind: {st}");
    assert_eq!((st["members"][0]["state"].as_str(), st["members"][1]["state"].as_str()), (Some("active"), Some("faulty")), "{st}");

    // The faulty member named by its path: the new device takes its role.
    let out = run(&env, &["replace", "--old", f[1], "--new", f[3], &name], true);
    assert_contains(&out, &[&format!("{} replaces role 1", f[3]), "rebuilt in the background"], "replace of a faulty member");
    wait_active(&env, &name, 1, f[3]);
    // An active member named by its number (redundancy is back).
    let out = run(&env, &["replace", "--old", "0", "--new", f[4], &name], true);
    assert_contains(&out, &[&format!("{} replaces role 0", f[4])], "replace of an active member");
    wait_active(&env, &name, 0, f[4]);
    let st = status(&env, &name);
    assert_eq!(st["volumes"][0]["state"].as_str(), Some("clean"), "{st}");
    println!("events after two replaces: {} (from {})", st["events"], before["events"]);

    run(&env, &["stop", &name], true);
    let t0 = Instant::now();
    let code = loop {
        if let Some(c) = srv.0.try_wait().unwrap() {
            break c;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "uraid serve did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(code.success(), "serve: {}", std::fs::read_to_string(&log).unwrap_or_default());
    // Stopped: the array assembles from its new members.
    let out = run(&env, &["status", f[2], f[3], f[4]], true);
    assert_contains(&out, &[&format!("role 0: {} active", f[4]), &format!("role 1: {} active", f[3])], "status after the stop");
}
