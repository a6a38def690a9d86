//! The run directory and the bounds of what users and clients give: state
//! files never written through a symbolic link, a run directory others
//! may write to refused, a control socket answered by another user not
//! trusted, slow control clients that cannot hold every slot, duplicate
//! keys in a control request refused; a cache larger than the memory, an
//! event counter at its end, device paths with escape sequences and a
//! huge configuration file.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// The environment of the tests' uraid commands: a run directory, a
/// state directory and a configuration file of their own.
struct Env {
    run: PathBuf,
    state: PathBuf,
    conf: PathBuf,
}

impl Env {
    fn new(dir: &Path) -> Env {
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        Env { run, state: dir.join("state"), conf: dir.join("uraid.conf") }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(URAID);
        c.args(args).env("URAID_RUN_DIR", &self.run).env("URAID_STATE_DIR", &self.state).env("URAID_CONFIG", &self.conf);
        c.stdin(Stdio::null());
        c
    }

    /// Runs uraid: (success, stdout, stderr).
    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let o = self.cmd(args).output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
    }

    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args);
        assert!(ok, "uraid {args:?} failed: {out}{err}");
        out
    }

    /// Starts `uraid serve MEMBERS` (its stderr in `log`); returns once the
    /// control socket of `name` answers.
    fn serve(&self, name: &str, members: &[&str], log: &Path) -> ChildGuard {
        let mut c = self.cmd(&[&["serve"], members].concat());
        c.stdout(Stdio::null()).stderr(std::fs::File::create(log).unwrap());
        let mut child = ChildGuard(c.spawn().unwrap());
        let ctl = self.run.join(format!("{name}.ctl"));
        let t0 = Instant::now();
        while UnixStream::connect(&ctl).is_err() {
            if let Ok(Some(st)) = child.0.try_wait() {
                panic!("uraid serve exited ({st}) before its control socket answered: {}", std::fs::read_to_string(log).unwrap());
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no control socket at {}", ctl.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    /// `uraid stop NAME`, then waits for the serving process to end.
    fn stop(&self, name: &str, mut srv: ChildGuard) {
        self.ok(&["stop", name]);
        let t0 = Instant::now();
        while srv.0.try_wait().unwrap().is_none() {
            assert!(t0.elapsed() < Duration::from_secs(60), "uraid serve did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// An environment in `dir` and a new RAID 1 array `name` over two 16 MiB
/// files `NAME0`, `NAME1` there.
fn raid1(dir: &Path, name: &str) -> (Env, Vec<PathBuf>) {
    let env = Env::new(dir);
    let files = sparse_files(dir, name, 2, 16 << 20);
    env.ok(&with(&["create", "--level", "1", "--name", name], &strs(&files)));
    (env, files)
}

/// Sends `line` on the control socket `ctl`; returns the last reply line.
fn ctl_last(ctl: &Path, line: &[u8]) -> serde_json::Value {
    let mut s = UnixStream::connect(ctl).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(line).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let last = out.lines().last().unwrap_or_else(|| panic!("no reply to {}", String::from_utf8_lossy(line)));
    serde_json::from_str(last).unwrap()
}

/// The array's UUID as `uraid status --json` gives it.
fn uuid_of(env: &Env, members: &[&str]) -> String {
    let st: serde_json::Value = serde_json::from_str(&env.ok(&with(&["status", "--json"], members))).unwrap();
    st["uuid"].as_str().unwrap().to_string()
}

/// A run directory that others may write to (mode 1777 or 0777) is
/// refused by `serve` before it touches the array, with a message that
/// names the directory and the fix.
#[test]
fn a_run_directory_others_may_write_to_is_refused() {
    let _g = shared();
    let d = tmpdir();
    let (env, files) = raid1(d.path(), "wdir");
    let f = strs(&files);
    let before = Snapshot::take(&files);
    for mode in [0o1777, 0o777] {
        std::fs::set_permissions(&env.run, std::fs::Permissions::from_mode(mode)).unwrap();
        let log = d.path().join("serve.log");
        let sock = d.path().join("wdir.sock");
        let mut c = env.cmd(&with(&["serve", "--socket", sock.to_str().unwrap()], &f));
        c.stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap());
        let mut child = ChildGuard(c.spawn().unwrap());
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = child.0.try_wait().unwrap() {
                break st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "uraid serve with a run directory of mode {mode:o} still runs after 20 s: it was not refused"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let err = std::fs::read_to_string(&log).unwrap();
        println!("run directory mode {mode:04o}: {}", err.trim());
        assert_eq!(st.code(), Some(1), "{err}");
        assert_contains(&err, &["run directory", &env.run.display().to_string(), "other users", "URAID_RUN_DIR"], "serve");
        assert!(!env.run.join("wdir.ctl").exists());
        before.assert_unchanged("a refused serve");
    }
}

/// A symbolic link planted at the state file's path is not followed: the
/// file it points to keeps its content and `serve` says why it cannot
/// publish its state.
#[test]
fn a_symbolic_link_at_the_state_file_is_not_followed() {
    let _g = shared();
    let d = tmpdir();
    let (env, files) = raid1(d.path(), "slink");
    let f = strs(&files);
    let uuid = uuid_of(&env, &f);
    let victim = d.path().join("victim");
    std::fs::write(&victim, "root:x:0:0:precious\n").unwrap();
    let link = env.run.join(format!("{uuid}.json"));
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let log = d.path().join("serve.log");
    let srv = env.serve("slink", &f, &log);
    std::thread::sleep(Duration::from_millis(2500));
    env.stop("slink", srv);
    let err = std::fs::read_to_string(&log).unwrap();
    println!("serve's stderr: {err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root:x:0:0:precious\n", "the link was followed");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the planted link was replaced");
    assert_contains(&err, &[&link.display().to_string(), "symbolic link", "not followed"], "serve");
}

/// A process of another user (65534) listening on `NAME.ctl` in a shared
/// sticky directory is not trusted: `uraid status NAME` refuses, naming
/// the user, and prints nothing of its answer.
#[test]
fn a_control_socket_of_another_user_is_not_trusted() {
    let _g = shared();
    require_tool("setpriv", "util-linux");
    let d = tmpdir();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (env, files) = raid1(d.path(), "squat");
    let f = strs(&files);
    // The squatter answers with a well-formed status of its own making.
    let status: serde_json::Value = serde_json::from_str(&env.ok(&with(&["status", "--json"], &f))).unwrap();
    let reply = serde_json::json!({"version": 1, "ok": true, "result": {
        "array": status, "pid": 4242, "progress": null, "reshape": null, "io": {}, "member_details": null}});
    let reply_file = d.path().join("forged.json");
    std::fs::write(&reply_file, format!("{reply}\n")).unwrap();
    std::fs::set_permissions(&reply_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let shared_dir = d.path().join("shared");
    std::fs::create_dir(&shared_dir).unwrap();
    std::fs::set_permissions(&shared_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let ctl = shared_dir.join("squat.ctl");
    let script = "import socket, sys\n\
                  s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)\n\
                  reply = open(sys.argv[2], 'rb').read()\n\
                  while True:\n    c, _ = s.accept()\n    try:\n        c.sendall(reply)\n    except OSError:\n        pass\n    c.close()\n";
    let mut squatter = ChildGuard(
        Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "/usr/bin/python3", "-c", script])
            .arg(&ctl)
            .arg(&reply_file)
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while UnixStream::connect(&ctl).is_err() {
        assert!(squatter.0.try_wait().unwrap().is_none(), "the squatter exited");
        assert!(t0.elapsed() < Duration::from_secs(20), "the squatter does not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&ctl).unwrap().uid(), 65534);
    let o = Command::new(URAID).args(["status", "squat"]).env("URAID_RUN_DIR", &shared_dir).env("URAID_CONFIG", &env.conf).output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    println!("uraid status squat: {}\nstdout: {out}\nstderr: {err}", o.status);
    assert!(!out.contains("4242"), "the squatter's answer was printed as the array's status: {out}");
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert_contains(&err, &[&ctl.display().to_string(), "user 65534", "not trusted"], "uraid status squat");
    drop(squatter);
}

/// 16 control clients that send a byte every 8 s hold no slot: an honest
/// `uraid status` is answered at once, and each slow client is cut off
/// 10 s after it connected (not 10 s after its last byte).
#[test]
fn slow_control_clients_do_not_hold_every_slot() {
    let _g = shared();
    let d = tmpdir();
    let (env, files) = raid1(d.path(), "slow");
    let f = strs(&files);
    let srv = env.serve("slow", &f, &d.path().join("serve.log"));
    let ctl = env.run.join("slow.ctl");
    let slow: Vec<_> = (0..16)
        .map(|_| {
            let mut s = UnixStream::connect(&ctl).unwrap();
            let t0 = Instant::now();
            s.write_all(b"{").unwrap();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(8));
                let _ = s.write_all(b"\"");
                s.set_read_timeout(Some(Duration::from_secs(12))).unwrap();
                let mut line = String::new();
                let _ = BufReader::new(&s).read_line(&mut line);
                (t0.elapsed(), line)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let (ok, out, err) = env.run(&["status", "slow"]);
    println!("honest 'uraid status slow' with 16 slow clients connected: answered in {:.3} s", t.elapsed().as_secs_f64());
    assert!(ok, "uraid status with 16 slow clients: {out}{err}");
    assert_contains(&out, &["array 'slow'"], "status");
    for h in slow {
        let (after, line) = h.join().unwrap();
        println!("a slow client was cut off {:.1} s after it connected: {}", after.as_secs_f64(), line.trim());
        assert_contains(&line, &["within 10 s"], "the slow client's reply");
        assert!(after < Duration::from_secs(15), "cut off after {after:?}: the 10 s limit is not for the whole request");
    }
    env.stop("slow", srv);
}

/// A control request that gives a key twice is refused (serde_json keeps
/// the last one silently), over the real control socket.
#[test]
fn duplicate_keys_in_a_control_request_are_refused() {
    let _g = shared();
    let d = tmpdir();
    let (env, files) = raid1(d.path(), "dupkey");
    let f = strs(&files);
    let srv = env.serve("dupkey", &f, &d.path().join("serve.log"));
    let ctl = env.run.join("dupkey.ctl");
    assert_eq!(ctl_last(&ctl, b"{\"version\": 1, \"command\": \"status\"}\n")["ok"], true);
    for req in [
        &b"{\"version\": 2, \"version\": 1, \"command\": \"status\"}\n"[..],
        b"{\"version\": 1, \"command\": \"stop\", \"command\": \"status\"}\n",
        b"{\"version\": 1, \"command\": {\"rebuild\": {\"rate\": 1000000, \"rate\": null}}}\n",
    ] {
        let r = ctl_last(&ctl, req);
        println!("{} -> {r}", String::from_utf8_lossy(req).trim());
        assert_eq!(r["ok"], false, "{r}");
        assert_contains(r["error"]["message"].as_str().unwrap(), &["given twice"], "a duplicate key");
    }
    // The array still runs: the duplicate "stop" was not obeyed.
    assert_eq!(ctl_last(&ctl, b"{\"version\": 1, \"command\": \"status\"}\n")["ok"], true);
    env.stop("dupkey", srv);
}

/// A cache larger than the machine's memory is refused by create, by
/// config on a stopped array and over the control socket of a served one,
/// naming the size and the memory.
#[test]
fn a_cache_larger_than_the_memory_is_refused() {
    let _g = shared();
    let d = tmpdir();
    let (env, files) = raid1(d.path(), "bigc");
    let f = strs(&files);
    let create = ["create", "--level", "1", "--name", "bigc", "--force", "--cache", "writeback", "--cache-size", "1024T"];
    let (ok, out, err) = env.run(&with(&create, &f));
    println!("create with a 1024T cache: {}", err.trim());
    assert!(!ok, "a 1024T cache was accepted: {out}");
    assert_contains(&err, &["cache size 1024T", "1125899906842624 bytes", "memory", "MemTotal"], "create");
    let (ok, out, err) = env.run(&with(&["config", "--cache", "writeback", "--cache-size", "1024T"], &f));
    assert!(!ok, "config accepted a 1024T cache: {out}");
    assert_contains(&err, &["cache size 1024T", "memory"], "config");
    let srv = env.serve("bigc", &f, &d.path().join("serve.log"));
    let r = ctl_last(
        &env.run.join("bigc.ctl"),
        b"{\"version\": 1, \"command\": {\"config\": {\"mode\": \"writeback\", \"cache_size\": 1125899906842624}}}\n",
    );
    assert_eq!(r["ok"], false, "{r}");
    assert_contains(r["error"]["message"].as_str().unwrap(), &["cache size 1024T", "memory"], "live config");
    env.stop("bigc", srv);
}

/// Members whose event counter is at its largest value: assemble refuses
/// with a clear error instead of wrapping the counter to 0; status still
/// reads them.
#[test]
fn the_event_counter_does_not_wrap() {
    let _g = shared();
    let d = tmpdir();
    let (env, files) = raid1(d.path(), "evmax");
    let f = strs(&files);
    for p in &files {
        let mut b = std::fs::read(p).unwrap();
        b[112..120].copy_from_slice(&u64::MAX.to_le_bytes());
        let crc = crc32c(&b[..4092]);
        b[4092..4096].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(p, &b).unwrap();
    }
    let before = Snapshot::take(&files);
    let (ok, out, err) = env.run(&with(&["assemble"], &f));
    println!("assemble at events 2^64-1: {}", err.trim());
    assert!(!ok, "{out}");
    assert_contains(&err, &["uraid: error:", "event counter", "largest value", "18446744073709551615"], "assemble");
    before.assert_unchanged("a refused assemble");
    assert_eq!(raw_superblock(&files[0]).events, u64::MAX);
    let st: serde_json::Value = serde_json::from_str(&env.ok(&with(&["status", "--json"], &f))).unwrap();
    assert_eq!(st["events"].as_u64(), Some(u64::MAX), "{st}");
}

/// A member path with a newline, an escape sequence and quotes: `scan`
/// prints one ARRAY line with the path quoted (no raw escape byte, no
/// forged line), the configuration it writes reads back to exactly the
/// real paths, `status` quotes it and `status --json` keeps it exact.
#[test]
fn device_paths_are_escaped_in_scan_status_and_the_config() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let dir = d.path().join("members");
    std::fs::create_dir(&dir).unwrap();
    let evil = "m1\nARRAY name=evil uuid=00000000-0000-4000-8000-000000000000 level=0 members=1 state=clean devices=sda\x1b[2J\"q\\";
    let files = vec![sparse_file(&dir, "m0", 16 << 20), sparse_file(&dir, evil, 16 << 20)];
    let f = strs(&files);
    env.ok(&with(&["create", "--level", "1", "--name", "esc"], &f));
    // Only these files are scanned (not the machine's devices).
    let conf = d.path().join("written.conf");
    std::fs::write(&conf, format!("devices = [\"{}/*\"]\n", dir.display())).unwrap();
    let out = env.ok(&["scan", "--config", conf.to_str().unwrap()]);
    println!("scan: {out:?}");
    assert!(!out.contains('\x1b'), "scan printed a raw escape byte: {out:?}");
    let arrays: Vec<&str> = out.lines().filter(|l| l.starts_with("ARRAY")).collect();
    assert_eq!(arrays.len(), 1, "scan printed a forged ARRAY line: {out:?}");
    assert!(arrays[0].contains(r#"\nARRAY name=evil"#) && arrays[0].contains(r#"\u001B[2J\"q\\""#), "{out:?}");
    let text = std::fs::read_to_string(&conf).unwrap();
    assert!(!text.contains('\x1b'), "{text:?}");
    let cfg: toml::Value = toml::from_str(&text).unwrap_or_else(|e| panic!("the written config does not parse: {e}\n{text}"));
    let tables = cfg["array"].as_array().unwrap();
    assert_eq!(tables.len(), 1, "{text}");
    let members: Vec<&str> = tables[0]["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert_eq!(members, f, "{text}");
    // The config names the array: its members are found by it.
    let named = env.cmd(&["status", "esc"]).env("URAID_CONFIG", &conf).output().unwrap();
    assert!(named.status.success(), "{}", String::from_utf8_lossy(&named.stderr));
    for st in [env.ok(&with(&["status"], &f)), String::from_utf8_lossy(&named.stdout).into_owned(), env.ok(&with(&["examine"], &f))] {
        println!("{st}");
        assert!(!st.contains('\x1b'), "a raw escape byte: {st:?}");
        assert!(!st.lines().any(|l| l.starts_with("ARRAY")), "a forged line: {st:?}");
        assert!(st.contains(r#"m1\nARRAY name=evil"#), "{st:?}");
    }
    let st: serde_json::Value = serde_json::from_str(&env.ok(&with(&["status", "--json"], &f))).unwrap();
    assert_eq!(st["members"][1]["device"].as_str(), Some(f[1]), "{st}");
}

/// A 50 MiB string in the configuration file is refused before it is
/// parsed: fast, and with little memory (it took 2 GB).
#[test]
fn a_huge_config_string_is_refused_fast_and_small() {
    let _g = shared();
    let d = tmpdir();
    require_tool("time", "time");
    let conf = d.path().join("uraid.conf");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&conf).unwrap());
        f.write_all(b"[[array]]\nname = \"x\"\nuuid = \"11111111-2222-3333-4444-555555555555\"\nconsole-token = \"").unwrap();
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..50 {
            f.write_all(&chunk).unwrap();
        }
        f.write_all(b"\"\n").unwrap();
    }
    // GNU time reports its child's peak RSS (its own process, not a fork
    // of this test binary, whose memory a child's figure would include).
    let (err_file, time_file) = (d.path().join("err"), d.path().join("time"));
    let t0 = Instant::now();
    let st = Command::new("/usr/bin/time")
        .arg("-o")
        .arg(&time_file)
        .args(["-f", "%M", URAID, "scan", d.path().to_str().unwrap(), "--config", conf.to_str().unwrap()])
        .env("URAID_RUN_DIR", d.path().join("run"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .status()
        .unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let err = std::fs::read_to_string(&err_file).unwrap();
    let time = std::fs::read_to_string(&time_file).unwrap();
    let kib: f64 = time.lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or_else(|| panic!("time printed {time:?}"));
    let peak_mib = kib / 1024.0;
    println!("a 50 MiB config string: refused in {secs:.3} s, peak RSS {peak_mib:.1} MiB: {}", err.trim());
    assert_eq!(st.code(), Some(1), "{err}");
    assert_contains(&err, &[&conf.display().to_string(), "larger than", "1 MiB"], "scan");
    assert!(peak_mib < 100.0, "peak RSS {peak_mib:.1} MiB reading a 50 MiB config");
    assert!(secs < 10.0, "{secs} s");
}
