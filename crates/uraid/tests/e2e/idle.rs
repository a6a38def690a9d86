//! An idle `uraid serve` sleeps: its threads block on what they wait for
//! (a client, a command, a signal, the stop) instead of waking every few
//! tens of milliseconds to look at flags (issue 29), and a SIGTERM still
//! stops it at once.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// The voluntary context switches of every thread of process `pid` so far
/// (a thread's sleep that ends is one), from /proc/PID/task/*/status.
fn wakeups(pid: u32) -> u64 {
    let mut n = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's threads").flatten() {
        // A thread may end between the listing and the read.
        let Ok(st) = std::fs::read_to_string(t.path().join("status")) else { continue };
        n += st
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    n
}

/// A served RAID 5 (its manager, control socket, NBD listener and stop
/// watcher all running) left alone wakes at most 10 times a second in all
/// (about 3 today: the figures' sampler, the manager's look and the NBD
/// accept loop, once a second each; ~100 before); SIGTERM ends it within
/// a few seconds all the same.
#[test]
fn idle_serve_sleeps_and_stops_at_once() {
    let _g = shared();
    let d = tmpdir();
    let run = d.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let m = sparse_files(d.path(), "m", 3, 24 << 20);
    let mut args = vec!["create", "--level", "5", "--chunk", "64K", "--name", "idle"];
    args.extend(m.iter().map(|p| s(p)));
    uraid_ok(&args);
    let socket = d.path().join("s.sock");
    let mut cmd = Command::new(URAID);
    cmd.arg("serve").arg("--socket").arg(&socket).args(&m);
    cmd.env("URAID_RUN_DIR", &run).env("URAID_STATE_DIR", d.path().join("state")).env("URAID_CONFIG", d.path().join("none.conf"));
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = ChildGuard(cmd.spawn().expect("cannot start uraid serve"));
    let pid = child.0.id();
    let mut drains = Vec::new();
    for mut r in [Box::new(child.0.stdout.take().unwrap()) as Box<dyn Read + Send>, Box::new(child.0.stderr.take().unwrap())] {
        drains.push(std::thread::spawn(move || {
            let mut text = String::new();
            let _ = r.read_to_string(&mut text);
            text
        }));
    }
    let t0 = Instant::now();
    while UnixStream::connect(&socket).is_err() || !run.join("idle.ctl").exists() {
        assert!(child.0.try_wait().unwrap().is_none(), "uraid serve exited before serving");
        assert!(t0.elapsed() < Duration::from_secs(30), "uraid serve did not listen on {}", socket.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Idle: the start's work done, no client.
    std::thread::sleep(Duration::from_secs(3));
    let (n0, w0) = (wakeups(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (n1, secs) = (wakeups(pid), w0.elapsed().as_secs_f64());
    let rate = (n1 - n0) as f64 / secs;
    println!("idle uraid serve: {} wake-ups (voluntary context switches, all threads) in {secs:.2} s: {rate:.1}/s", n1 - n0);
    assert!(rate <= 10.0, "an idle uraid serve woke {rate:.1} times a second (at most 10 expected)");

    // SIGTERM: the sleeping threads are woken, the array stopped cleanly.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let t1 = Instant::now();
    let st = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(t1.elapsed() < Duration::from_secs(10), "uraid serve did not stop within 10 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    println!("stopped {:.2} s after SIGTERM", t1.elapsed().as_secs_f64());
    std::mem::forget(child);
    let out: Vec<String> = drains.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(st.success(), "uraid serve exit {st}:\n{}\n{}", out[0], out[1]);
    let mut args = vec!["status", "--json"];
    args.extend(m.iter().map(|p| s(p)));
    let j: serde_json::Value = serde_json::from_str(&uraid_ok(&args).stdout).unwrap();
    assert_eq!(j["volumes"][0]["state"], "clean", "stopped cleanly: {j}");
}
