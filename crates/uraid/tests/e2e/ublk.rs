//! `uraid serve NAME --ublk` on this machine's kernel. Where the kernel
//! has no ublk driver (this machine's: the VM tests in tests/vm/ublk_*.sh
//! run the device itself), serve fails at once with a message naming
//! what is missing and what to do, and serves nothing: no NBD socket, no
//! control socket, no record, the members not written. Where it has one
//! (as root), the device appears, is recorded, and a clean stop deletes
//! both.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

#[test]
fn serve_ublk_without_the_driver_fails_clearly_and_serves_nothing() {
    let _g = shared();
    let d = tmpdir();
    let run = d.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let members = sparse_files(d.path(), "m", 3, 64 << 20);
    uraid_ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", "ub"], &strs(&members)));
    let conf = d.path().join("none.conf");
    let env = [("URAID_RUN_DIR", run.as_os_str()), ("URAID_CONFIG", conf.as_os_str())];
    if !std::path::Path::new("/dev/ublk-control").exists() {
        let before = Snapshot::take(&members);
        let t0 = Instant::now();
        let o = uraid_env(&with(&["serve", "--ublk"], &strs(&members)), &env);
        println!("{}\n{}", o.cmdline, o.stderr);
        assert_eq!(o.status.code(), Some(1), "serve --ublk without ublk_drv: {}\n{}", o.stdout, o.stderr);
        assert_contains(&o.stderr, &["/dev/ublk-control", "ublk_drv", "nbd"], &o.cmdline);
        assert!(
            o.stderr.contains("modprobe ublk_drv") || o.stderr.contains("CONFIG_BLK_DEV_UBLK"),
            "the message says neither how to load the driver nor what the kernel lacks: {}",
            o.stderr
        );
        assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
        assert!(!o.stdout.contains("serving"), "it says it serves: {}", o.stdout);
        let left: Vec<_> = std::fs::read_dir(&run).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "serve --ublk left {left:?} in the run directory");
        before.assert_unchanged("serve --ublk without ublk_drv");
        // Not silently served over NBD instead, with a socket given either.
        let sock = d.path().join("ub.sock");
        let o = uraid_env(&with(&["serve", "--ublk", "--socket", s(&sock)], &strs(&members)), &env);
        assert_eq!(o.status.code(), Some(1), "serve --ublk --socket without ublk_drv: {}\n{}", o.stdout, o.stderr);
        assert!(!sock.exists(), "an NBD socket was made");
        return;
    }
    // A kernel with ublk: the device is made, recorded, and deleted by a
    // clean stop.
    let mut c = Command::new(URAID);
    c.args(with(&["serve", "--ublk"], &strs(&members))).envs(env.iter().copied()).stdin(Stdio::null()).stdout(Stdio::null());
    let mut child = ChildGuard(c.spawn().unwrap());
    let rec = run.join("ub.ublk");
    let t0 = Instant::now();
    while !rec.exists() {
        assert!(child.0.try_wait().unwrap().is_none(), "serve --ublk ended (is this root?)");
        assert!(t0.elapsed() < Duration::from_secs(30), "no record after 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rec).unwrap()).unwrap();
    let bdev = r["bdev"].as_str().unwrap().to_string();
    assert!(std::path::Path::new(&bdev).exists(), "{bdev} is missing: {r}");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    assert!(child.0.wait().unwrap().success());
    assert!(!rec.exists() && !std::path::Path::new(&bdev).exists(), "a clean stop left {bdev} or its record");
}
