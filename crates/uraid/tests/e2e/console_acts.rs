//! What the web console may write, and the administrator's small traps
//! (issue 28, items 4 and 13): the console's benchmark and "add spare"
//! act only on free block devices (or files of the one directory
//! configured), the served array is benchmarked read-only unless it is
//! empty and the request confirms; an array's name is found beside a
//! directory of that name; the same spare cannot be added twice; members
//! on one device are one warning; times are local ISO 8601. Real HTTP over
//! TCP, real loop devices, ext4 and mounts.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// The console's access token in these tests (32 hex digits).
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// uraid with a run directory and a configuration file of its own.
struct Env {
    run: PathBuf,
    conf: PathBuf,
    state: PathBuf,
}

impl Env {
    fn new(dir: &Path) -> Env {
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        Env { run, conf: dir.join("uraid.conf"), state: dir.join("state") }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(URAID);
        c.args(args).env("URAID_RUN_DIR", &self.run).env("URAID_STATE_DIR", &self.state).env("URAID_CONFIG", &self.conf);
        c.stdin(Stdio::null());
        c
    }

    /// Runs uraid to completion: success, stdout, stderr.
    fn run(&self, c: &mut Command) -> (bool, String, String) {
        let o = c.output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
    }

    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(&mut self.cmd(args));
        assert!(ok, "uraid {} failed: {out}{err}", args.join(" "));
        out
    }

    /// `uraid serve ARGS` with the console on a free port: returns once
    /// the console's address is printed.
    fn serve(&self, name: &str, args: &[&str]) -> Served {
        let mut c = self.cmd(&[&["serve", "--console", "127.0.0.1:0", "--console-token", TOKEN], args].concat());
        c.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = ChildGuard(c.spawn().unwrap());
        let out = child.0.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let (mut uri, mut port) = (String::new(), 0u16);
        while port == 0 {
            let l = rx.recv_timeout(Duration::from_secs(30)).expect("uraid serve printed no console address");
            if let Some(rest) = l.strip_prefix("serving ") {
                uri = rest.rsplit(" on ").next().unwrap().to_string();
            }
            if let Some(rest) = l.strip_prefix("console: http://127.0.0.1:") {
                port = rest.split('/').next().unwrap().parse().unwrap();
            }
        }
        Served { child, port, uri, name: name.to_string() }
    }

    /// Stops a served array and waits for its process.
    fn stop(&self, mut s: Served) {
        self.ok(&["stop", &s.name]);
        let t0 = Instant::now();
        while s.child.0.try_wait().unwrap().is_none() {
            assert!(t0.elapsed() < Duration::from_secs(60), "uraid serve did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A served array with its console.
struct Served {
    child: ChildGuard,
    port: u16,
    /// The export's NBD URI.
    uri: String,
    name: String,
}

impl Served {
    /// One HTTP/1.0 request with the token as the page's scripts send it
    /// (bearer and the `X-Uraid-Token` header): status code and body.
    fn http(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\nX-Uraid-Token: {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        let (head, body) = r.split_once("\r\n\r\n").expect("an HTTP reply");
        let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status code");
        (code, body.to_string())
    }

    /// POST of a JSON body: the reply, which must be 200 with JSON.
    fn post(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        let (code, text) = self.http("POST", path, &body.to_string());
        assert_eq!(code, 200, "POST {path} {body}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("POST {path}: not JSON ({e}): {text}"))
    }

    fn get(&self, path: &str) -> serde_json::Value {
        let (code, text) = self.http("GET", path, "");
        assert_eq!(code, 200, "GET {path}: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// Starts a benchmark of `target` from the console.
    fn bench(&self, target: &str, confirm: bool) -> serde_json::Value {
        self.post("/api/bench", serde_json::json!({"target": target, "runs": 1, "time": 1, "confirm": confirm}))
    }

    /// Adds `device` as a spare from the console (`force` as a forged
    /// request could set it).
    fn add(&self, device: &str, force: bool) -> serde_json::Value {
        self.post("/api/command", serde_json::json!({"version": 1, "command": {"add": {"device": device, "force": force}}}))
    }
}

/// Asserts a refused reply whose message holds every needle.
fn refused(reply: &serde_json::Value, needles: &[&str], what: &str) {
    assert_eq!(reply["ok"], false, "{what} was accepted: {reply}");
    let msg = reply["error"]["message"].as_str().unwrap_or_default();
    assert_contains(msg, needles, what);
}

/// A mounted filesystem, unmounted when dropped.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The SHA-256 of a file, as sha256sum prints it.
fn sha256(p: &Path) -> String {
    run_tool(Command::new("sha256sum").arg(p)).split_whitespace().next().unwrap().to_string()
}

/// Waits for the console's benchmark to end; whether it succeeded, and its log.
fn bench_result(srv: &Served) -> (bool, serde_json::Value) {
    let t0 = Instant::now();
    loop {
        let b = srv.get("/api/bench");
        if b["running"] == false {
            return (b["ok"] == true, b);
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "the benchmark did not end: {b}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The console writes no regular file (a 40,000-line text file typed as
/// a benchmark target or a spare stays byte for byte the same), no device
/// that holds a filesystem, no mounted one; a free loop device and a file
/// in `--console-files-dir` are taken; the served array is benchmarked
/// read-only, and its write tests are refused while it holds data.
#[test]
fn the_console_acts_only_on_free_devices() {
    let _g = shared();
    require_tool("mount", "mount");
    let d = tmpdir();
    let env = Env::new(d.path());
    let name = format!("acts{}", std::process::id());
    let files = sparse_files(d.path(), "m", 2, 64 << 20);
    env.ok(&with(&["create", "--level", "1", "--name", &name], &strs(&files)));

    // A text file of 40,000 lines, as the one the issue saw overwritten.
    let notes = d.path().join("notes.txt");
    let text: String = (0..40_000).map(|i| format!("line {i}: an administrator's notes, not a drive\n")).collect();
    std::fs::write(&notes, &text).unwrap();
    let notes_sum = sha256(&notes);
    // A loop device holding ext4, and another one mounted.
    let fs_img = sparse_file(d.path(), "fs.img", 64 << 20);
    mkfs_ext4(&fs_img);
    let fs_lo = LoopDev::attach(&fs_img);
    let mnt_img = sparse_file(d.path(), "mnt.img", 64 << 20);
    mkfs_ext4(&mnt_img);
    let mnt_lo = LoopDev::attach(&mnt_img);
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    run_tool(Command::new("mount").arg(&mnt_lo.dev).arg(&mnt));
    let mounted = Mounted(mnt.clone());
    std::fs::write(mnt.join("kept.txt"), "kept").unwrap();
    // A free loop device, and a file in the directory the console may use.
    let free_lo = LoopDev::attach(&sparse_file(d.path(), "free.img", 64 << 20));
    let scratch = d.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let scratch_file = sparse_file(&scratch, "spare.img", 64 << 20);
    let snap = Snapshot::take(&[&notes, &fs_img]);

    let srv = env.serve(
        &name,
        &with(&["--reports", s(&d.path().join("reports")), "--console-files-dir", s(&scratch)], &strs(&files)),
    );
    let (fs_dev, mnt_dev, free_dev) = (s(&fs_lo.dev), s(&mnt_lo.dev), s(&free_lo.dev));

    refused(&srv.bench(s(&notes), false), &["regular file", "outside", "Nothing was done"], "a benchmark of a text file");
    refused(&srv.add(s(&notes), false), &["regular file", "outside"], "a text file as a spare");
    refused(&srv.add(s(&notes), true), &["regular file", "outside"], "a text file as a spare, forced");
    refused(&srv.bench(fs_dev, false), &[fs_dev, "holds an ext2/ext3/ext4 filesystem"], "a benchmark of a device holding ext4");
    refused(&srv.add(fs_dev, true), &[fs_dev, "holds an ext2/ext3/ext4 filesystem"], "a device holding ext4 as a spare");
    refused(&srv.bench(mnt_dev, false), &[mnt_dev, "is mounted at", s(&mnt)], "a benchmark of a mounted device");
    refused(&srv.add(mnt_dev, false), &[mnt_dev, "is mounted at", s(&mnt)], "a mounted device as a spare");
    refused(&srv.add(s(&files[0]), false), &["member of array", &name], "a member of the array as a spare");
    assert!(srv.get("/api/bench").is_null(), "a refused benchmark was started");
    // Nothing may be written even later (a benchmark runs in a process of its own).
    std::thread::sleep(Duration::from_secs(1));
    snap.assert_unchanged("the console's refused benchmarks and spares");
    assert_eq!(sha256(&notes), notes_sum, "the text file changed");
    assert_eq!(std::fs::read_to_string(mnt.join("kept.txt")).unwrap(), "kept");
    println!("notes.txt sha256 before and after the refused requests: {notes_sum}");

    // Free: a loop device with nothing on it, a file of the directory allowed.
    let r = srv.add(free_dev, false);
    assert_eq!(r["ok"], true, "a free loop device as a spare: {r}");
    let r = srv.add(s(&scratch_file), false);
    assert_eq!(r["ok"], true, "a file in --console-files-dir as a spare: {r}");
    let st: serde_json::Value = serde_json::from_str(&env.ok(&["status", "--json", &name])).unwrap();
    let spares: Vec<&str> = st["members"].as_array().unwrap().iter().filter(|m| m["state"] == "spare").filter_map(|m| m["device"].as_str()).collect();
    assert_eq!(spares, [free_dev, s(&scratch_file)], "{st}");

    // The served array: data written through the export; then its write
    // tests are refused even confirmed, and the read-only run changes nothing.
    {
        use uraid_core::{BlockDevice, BlockQueue};
        let dev = uraid_nbd::client::NbdDevice::connect(&srv.uri.parse().unwrap()).unwrap();
        let mut q = dev.open_queue(1).unwrap();
        q.write_at(4096, &[0xA5; 4096]).unwrap();
        dev.flush().unwrap();
    }
    let area = |p: &Path| std::fs::read(p).unwrap()[DATA_OFFSET as usize..].to_vec();
    let before: Vec<Vec<u8>> = files.iter().map(|f| area(f)).collect();
    refused(&srv.bench(&name, true), &["holds data", "write benchmark would destroy it", "Nothing was started"], "write tests on a served array with data");
    let r = srv.bench(&name, false);
    assert_eq!(r["ok"], true, "a read-only benchmark of the served array: {r}");
    let (ok, b) = bench_result(&srv);
    assert!(ok, "the read-only benchmark of the served array failed: {b}");
    for (f, was) in files.iter().zip(&before) {
        assert!(area(f) == *was, "the read-only benchmark changed {}", f.display());
    }
    env.stop(srv);
    drop(mounted);
    drop((fs_lo, mnt_lo, free_lo));
}

/// Adding a drive that is already a spare is refused, also when the array
/// is opened without it: before, the same spare twice made a second slot
/// for one drive (`spare 3: - spare`).
#[test]
fn the_same_spare_twice_is_refused() {
    let _g = shared();
    let d = tmpdir();
    let m = sparse_files(d.path(), "m", 3, 16 << 20);
    let (a0, a1, sp) = (s(&m[0]), s(&m[1]), s(&m[2]));
    uraid_ok(&["create", "--level", "1", "--name", "twice", a0, a1]);
    uraid_ok(&["add", "--no-rebuild", "--spare", sp, a0, a1]);
    uraid_fails(&["add", "--no-rebuild", "--spare", sp, a0, a1], &[sp, "already spare slot 2", "twice"]);
    uraid_fails(&["add", "--no-rebuild", "--spare", sp, a0, a1, sp], &[sp, "already slot 2"]);
    assert_eq!(raw_superblock(&m[0]).slots.len(), 3, "a slot was added for a drive already in the array");
    let o = uraid_ok(&["status", a0, a1, sp]);
    assert!(!o.stdout.contains(": - "), "a slot without a device: {}", o.stdout);
}

/// A directory named like the array in the current directory (a mount
/// point named after it) does not hide the array: `status NAME` and
/// `serve NAME` find it in the configuration.
#[test]
fn an_array_is_found_beside_a_directory_of_its_name() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let m = sparse_files(d.path(), "m", 2, 16 << 20);
    env.ok(&["create", "--level", "1", "--name", "home", s(&m[0]), s(&m[1])]);
    let uuid = raw_superblock(&m[0]).array_uuid.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let uuid = format!("{}-{}-{}-{}-{}", &uuid[..8], &uuid[8..12], &uuid[12..16], &uuid[16..20], &uuid[20..]);
    std::fs::write(&env.conf, format!("[[array]]\nname = \"home\"\nuuid = \"{uuid}\"\nmembers = [\"{}\", \"{}\"]\n", s(&m[0]), s(&m[1]))).unwrap();
    std::fs::create_dir(d.path().join("home")).unwrap();
    let (ok, out, err) = env.run(env.cmd(&["status", "home"]).current_dir(d.path()));
    assert!(ok && out.contains("array 'home'"), "status beside a directory 'home': {out}{err}");
    let mut c = env.cmd(&["serve", "home"]);
    c.current_dir(d.path()).stdout(Stdio::null());
    let mut srv = ChildGuard(c.spawn().unwrap());
    let t0 = Instant::now();
    while std::os::unix::net::UnixStream::connect(env.run.join("home.ctl")).is_err() {
        if let Some(st) = srv.0.try_wait().unwrap() {
            panic!("uraid serve home beside a directory 'home' exited ({st})");
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "uraid serve home did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    env.ok(&["stop", "home"]);
    assert!(srv.0.wait().unwrap().success());
}

/// Six members on one device are one warning naming all six, not fifteen
/// (one per pair), in the console's member details.
#[test]
fn members_on_one_device_are_one_warning() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let m = sparse_files(d.path(), "m", 6, 16 << 20);
    let name = format!("six{}", std::process::id());
    env.ok(&with(&["create", "--level", "5", "--chunk", "64K", "--name", &name], &strs(&m)));
    let srv = env.serve(&name, &strs(&m));
    let st = srv.get("/api/status");
    let warnings: Vec<&str> = st["member_details"]["warnings"].as_array().unwrap().iter().filter_map(|w| w.as_str()).collect();
    let same: Vec<&&str> = warnings.iter().filter(|w| w.contains("same device")).collect();
    println!("{} warning line(s) for 6 members on one device: {warnings:#?}", same.len());
    assert_eq!(same.len(), 1, "{warnings:#?}");
    for f in &m {
        assert!(same[0].contains(s(f)), "{} is not named: {}", f.display(), same[0]);
    }
    env.stop(srv);
}

/// Times are local ISO 8601 with the offset from UTC: `examine`'s
/// creation and update times (they were Unix seconds), `monitor`'s event
/// lines, and the console's (its script's isoLocal run by node, as the
/// browser runs it; it used toLocaleString, a US-style date here).
#[test]
fn times_are_local_iso_8601() {
    let _g = shared();
    let d = tmpdir();
    let env = Env::new(d.path());
    let m = sparse_files(d.path(), "m", 2, 16 << 20);
    let name = format!("iso{}", std::process::id());
    env.ok(&["create", "--level", "1", "--name", &name, s(&m[0]), s(&m[1])]);
    // India: +05:30 all year, no daylight saving time.
    let tz = ("TZ", "Asia/Kolkata");
    let iso = |t: &str| {
        let b = t.as_bytes();
        t.len() == 25
            && t.chars().enumerate().all(|(i, c)| match i {
                4 | 7 => c == '-',
                10 => c == 'T',
                13 | 16 | 22 => c == ':',
                19 => c == '+' || c == '-',
                _ => c.is_ascii_digit(),
            })
            && &b[19..] == b"+05:30"
    };
    let (ok, out, err) = env.run(env.cmd(&["examine", s(&m[0])]).env(tz.0, tz.1));
    assert!(ok, "{out}{err}");
    for field in ["creation time :", "update time :"] {
        let v = out.lines().find_map(|l| l.trim().strip_prefix(field)).unwrap_or_else(|| panic!("no {field} in {out}")).trim();
        assert!(iso(v), "{field} {v:?} is not local ISO 8601 (+05:30)");
    }

    let srv = env.serve(&name, &[s(&m[0]), s(&m[1])]);
    env.ok(&["fail", &name, "--member", "1"]);
    let mut mon = env.cmd(&["monitor", &name]);
    mon.env(tz.0, tz.1).stdout(Stdio::piped());
    let mut mon = ChildGuard(mon.spawn().unwrap());
    let line = BufReader::new(mon.0.stdout.take().unwrap()).lines().next().unwrap().unwrap();
    drop(mon);
    let when = line.split(' ').next().unwrap();
    assert!(iso(when), "monitor's event line does not start with local ISO 8601 (+05:30): {line}");
    env.stop(srv);

    require_tool("node", "nodejs");
    let js = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("console/app.js")).unwrap();
    let start = js.find("function isoLocal(").expect("app.js has isoLocal");
    let end = start + js[start..].find("\n}\n").unwrap() + 2;
    // The page's time helpers (its "--- time" section) that isoLocal uses.
    let helpers = js.find("// --- time").map(|t| &js[t..t + js[t + 1..].find("\n// ---").map_or(0, |e| e + 1)]).unwrap_or("");
    let script = format!("{helpers}\n{}\nconsole.log(isoLocal(Date.UTC(2026, 10, 27, 0, 15, 3)));", &js[start..end]);
    let o = Command::new("node").args(["-e", &script]).env(tz.0, tz.1).output().unwrap();
    let printed = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(printed, "2026-11-27T05:45:03+05:30", "{}", String::from_utf8_lossy(&o.stderr));
}
