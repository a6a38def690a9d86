//! The HTTP side of a served array (issue 28, items 3 and 5) against real
//! sockets: the console's token cannot be guessed (one limit on every
//! route that checks it, 429 before any comparison, a 128-bit token in a
//! 0600 file, never printed; short tokens refused), and no HTTP client can
//! hold the stop, the descriptors or a connection for ever (header, body
//! and idle timeouts, a connection cap, a bounded graceful stop).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::util::*;

/// A `uraid serve` of a RAID 1 on two files, with `URAID_RUN_DIR` in a
/// temporary directory; its stdout and stderr are kept.
struct Served {
    child: Option<ChildGuard>,
    run: PathBuf,
    name: String,
    /// Everything it printed, stdout and stderr.
    out: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Served {
    /// Creates the array `name` and serves it with `args`; returns once the
    /// lines that start with each of `wait_for` were printed.
    fn start(name: &str, args: &[&str], wait_for: &[&str], pre: impl Fn(&mut Command)) -> Served {
        let d = tmpdir();
        let run = d.path().join("run");
        std::fs::create_dir_all(&run).unwrap();
        let files = sparse_files(d.path(), "m", 2, 24 << 20);
        uraid_ok(&with(&["create", "--level", "1", "--chunk", "64K", "--name", name], &strs(&files)));
        let mut tries = 0;
        loop {
            let mut c = Command::new(URAID);
            c.arg("serve").args(args).args(&files);
            c.env("URAID_RUN_DIR", &run).env("URAID_STATE_DIR", d.path().join("state")).env("URAID_CONFIG", d.path().join("none.conf"));
            c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
            pre(&mut c);
            let mut child = ChildGuard(c.spawn().unwrap());
            let out = Arc::new(Mutex::new(String::new()));
            for r in [Box::new(child.0.stdout.take().unwrap()) as Box<dyn Read + Send>, Box::new(child.0.stderr.take().unwrap())] {
                let out = out.clone();
                std::thread::spawn(move || {
                    for l in BufReader::new(r).lines().map_while(Result::ok) {
                        let mut o = out.lock().unwrap();
                        o.push_str(&l);
                        o.push('\n');
                    }
                });
            }
            let t0 = Instant::now();
            loop {
                let text = out.lock().unwrap().clone();
                if wait_for.iter().all(|w| text.lines().any(|l| l.starts_with(w))) {
                    return Served { child: Some(child), run, name: name.to_string(), out, _dir: d };
                }
                if let Ok(Some(st)) = child.0.try_wait() {
                    std::thread::sleep(Duration::from_millis(100));
                    let text = out.lock().unwrap().clone();
                    // The `uraid create` just before may hold a member a moment.
                    tries += 1;
                    assert!(tries < 20 && text.contains(" in use "), "uraid serve {args:?} exited ({st}):\n{text}");
                    std::thread::sleep(Duration::from_millis(250));
                    break;
                }
                assert!(t0.elapsed() < Duration::from_secs(30), "uraid serve printed no {wait_for:?}:\n{text}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The port of the address on the line that starts with `prefix`
    /// (`metrics: http://127.0.0.1:PORT/...`).
    fn port(&self, prefix: &str) -> u16 {
        let text = self.out.lock().unwrap().clone();
        let l = text.lines().find(|l| l.starts_with(prefix)).unwrap();
        l.split("127.0.0.1:").nth(1).and_then(|r| r.split(['/', ' ']).next()).and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {l}"))
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().0.id()
    }

    /// `uraid stop NAME`; returns the seconds from the request to the
    /// process's exit, which must be a success.
    fn stop(&mut self) -> f64 {
        let t0 = Instant::now();
        let o = Command::new(URAID).args(["stop", &self.name]).env("URAID_RUN_DIR", &self.run).stdin(Stdio::null()).output().unwrap();
        assert!(o.status.success(), "uraid stop: {}", String::from_utf8_lossy(&o.stderr));
        let mut g = self.child.take().unwrap();
        loop {
            if let Some(st) = g.0.try_wait().unwrap() {
                std::mem::forget(g);
                assert!(st.success(), "uraid serve ended with {st}:\n{}", self.out.lock().unwrap());
                return t0.elapsed().as_secs_f64();
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "uraid serve still runs 60 s after uraid stop");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// One HTTP/1.0 request on a connection of its own: (status, body).
fn request(port: u16, head: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "{head}Host: localhost\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut r = Vec::new();
    let _ = s.read_to_end(&mut r);
    let r = String::from_utf8_lossy(&r).into_owned();
    let (h, b) = r.split_once("\r\n\r\n").unwrap_or((&r, ""));
    let code = h.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, b.to_string())
}

/// The three ways to give a token, each a request on its own connection.
fn guess(port: u16, kind: usize, t: &str) -> (u16, String) {
    match kind {
        0 => request(port, "POST /login HTTP/1.0\r\nContent-Type: application/x-www-form-urlencoded\r\n", &format!("token={t}")),
        1 => request(port, &format!("GET /api/status HTTP/1.0\r\nAuthorization: Bearer {t}\r\n"), ""),
        _ => request(port, &format!("GET /?token={t} HTTP/1.0\r\n"), ""),
    }
}

/// A flood of wrong tokens (4-digit guesses, as the guesser) on
/// `/login`, `/api/status` with `Authorization: Bearer` and `/?token=`,
/// from 12 threads for 4 s: the answers that say "wrong" (401) come at a
/// few a second at most, every answer to a wrong token is 401 or 429 with
/// one body per route and status, the right token sent meanwhile gets the
/// same 429 (it is given before any comparison), and once the flood stops
/// the right token gets in. The token is 128 bits in a 0600 file, in no
/// output of serve.
#[test]
fn the_console_token_cannot_be_guessed() {
    let _g = shared();
    let mut srv = Served::start("guess", &["--console", "127.0.0.1:0"], &["console: "], |_| {});
    let port = srv.port("console: ");
    let file = srv.run.join("guess.console-token");
    let meta = std::fs::symlink_metadata(&file).unwrap_or_else(|e| panic!("no token file {}: {e}", file.display()));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "the token file's mode");
    assert!(meta.file_type().is_file());
    let token = std::fs::read_to_string(&file).unwrap().trim().to_string();
    assert!(token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()), "not 128 bits in hex: {token:?}");
    let printed = srv.out.lock().unwrap().clone();
    assert!(!printed.contains(&token), "serve printed its token:\n{printed}");
    assert_contains(&printed, &[&file.display().to_string()], "the console line names the token file");
    println!("{}", printed.lines().find(|l| l.starts_with("console: ")).unwrap());

    let flood = Duration::from_secs(4);
    let seen: Arc<Mutex<Vec<(usize, u16, String)>>> = Arc::default();
    let t0 = Instant::now();
    let guessers: Vec<_> = (0..12)
        .map(|i| {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut n = i * 731;
                while t0.elapsed() < flood {
                    let kind = n % 3;
                    let (code, body) = guess(port, kind, &format!("{:04}", n % 10_000));
                    seen.lock().unwrap().push((kind, code, body));
                    n += 1;
                }
            })
        })
        .collect();
    // The right token, sent during the flood.
    let mut right = Vec::new();
    std::thread::sleep(Duration::from_millis(500));
    while t0.elapsed() < flood - Duration::from_millis(500) {
        right.push(guess(port, 1, &token).0);
        std::thread::sleep(Duration::from_millis(200));
    }
    for g in guessers {
        g.join().unwrap();
    }
    let secs = t0.elapsed().as_secs_f64();
    let seen = seen.lock().unwrap();
    let wrong = seen.iter().filter(|(_, c, _)| *c == 401).count();
    let limited = seen.iter().filter(|(_, c, _)| *c == 429).count();
    let rate = wrong as f64 / secs;
    println!(
        "guesses answered as wrong: {wrong} in {secs:.1} s = {rate:.2}/s; {limited} answered 429 before any comparison; \
         the right token during the flood: {right:?}"
    );
    for (kind, code, body) in seen.iter() {
        assert!(*code == 401 || *code == 429, "a wrong token on route {kind} was answered {code}: {body}");
        let first = seen.iter().find(|(k, c, _)| k == kind && c == code).unwrap();
        assert_eq!(&first.2, body, "two answers {code} to wrong tokens on route {kind} differ");
    }
    assert!(rate <= 5.0, "{rate:.1} wrong tokens a second were compared ({wrong} in {secs:.1} s)");
    assert!(right.iter().all(|c| *c == 200 || *c == 429), "the right token during the flood: {right:?}");
    assert!(right.contains(&429), "the right token always got in during the flood, so a 429 told a wrong one: {right:?}");
    let t1 = Instant::now();
    loop {
        match guess(port, 1, &token).0 {
            200 => break,
            429 => assert!(t1.elapsed() < Duration::from_secs(10), "the right token was still refused 10 s after the flood"),
            c => panic!("the right token after the flood: {c}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("the right token got in {:.1} s after the flood", t1.elapsed().as_secs_f64());
    let (code, _) = guess(port, 0, &token);
    assert_eq!(code, 303, "the right login");
    srv.stop();
    assert!(!file.exists(), "the token file outlived the stop");
    let printed = srv.out.lock().unwrap().clone();
    assert!(!printed.contains(&token), "serve printed its token:\n{printed}");
}

/// A configured console token too short (or too plain) to be a secret is
/// refused at start, from the command line and from the config, before
/// anything is served; a long random one is taken and not printed.
#[test]
fn a_short_console_token_is_refused() {
    let _g = shared();
    let d = tmpdir();
    let files = sparse_files(d.path(), "s", 2, 24 << 20);
    let f = strs(&files);
    let out = uraid_ok(&with(&["create", "--level", "1", "--chunk", "64K", "--name", "short"], &f)).stdout;
    let run = d.path().join("run");
    // uraid with a deadline: a serve that takes the token runs on (killed
    // after 20 s, exit status 124).
    let uraid_env = |args: &[&str], conf: &Path| {
        let o = Command::new("timeout").args(["20", URAID]).args(args).env("URAID_RUN_DIR", &run).env("URAID_CONFIG", conf).stdin(Stdio::null()).output().unwrap();
        Out { status: o.status, stdout: String::from_utf8_lossy(&o.stdout).into_owned(), stderr: String::from_utf8_lossy(&o.stderr).into_owned(), cmdline: args.join(" ") }
    };
    let none = d.path().join("none.conf");
    for t in ["1234", "t0k3n-for-the-test", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "a token with spaces in it, long enough"] {
        let o = uraid_env(&with(&["serve", "--console", "127.0.0.1:0", "--console-token", t], &f), &none);
        assert_eq!(o.status.code(), Some(1), "a console token {t:?} was taken:\n{}{}", o.stdout, o.stderr);
        assert_contains(&o.stderr, &["console token", "openssl rand -hex 16"], &format!("the token {t:?}"));
        assert!(!o.stdout.contains("console:"), "{}", o.stdout);
        println!("--console-token {t:?}: {}", o.stderr.trim());
    }
    let uuid = out.split(['(', ')']).nth(1).expect("create names the uuid");
    let conf = d.path().join("uraid.conf");
    std::fs::write(&conf, format!("[[array]]\nname = \"short\"\nuuid = \"{uuid}\"\nmembers = [\"{}\", \"{}\"]\nconsole = \"127.0.0.1:0\"\nconsole-token = \"12345678\"\n", f[0], f[1])).unwrap();
    let o = uraid_env(&["serve", "short"], &conf);
    assert_eq!(o.status.code(), Some(1), "the config's short token was taken:\n{}{}", o.stdout, o.stderr);
    assert_contains(&o.stderr, &["too easy to guess", "8 characters"], "the config's token");
}

/// Hostile HTTP clients on the metrics endpoint and the console at once
/// (a request whose headers never end, a body that stops after 10 of 1000
/// bytes, an event stream that is never read, 300 idle connections on
/// each port): `uraid stop` still ends the process within 5 s.
#[test]
fn http_clients_cannot_hold_the_stop() {
    let _g = shared();
    let mut srv = Served::start(
        "stopweb",
        &["--metrics", "127.0.0.1:0", "--console", "127.0.0.1:0", "--console-token", "stop-test-token-0123456789abcdef"],
        &["metrics: ", "console: "],
        |_| {},
    );
    let (metrics, console) = (srv.port("metrics: "), srv.port("console: "));
    let mut held = Vec::new();
    for port in [metrics, console] {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: ").unwrap();
        held.push(s);
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"POST /login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ntoken=stop").unwrap();
        held.push(s);
    }
    let mut sse = TcpStream::connect(("127.0.0.1", console)).unwrap();
    sse.write_all(b"GET /api/stream HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer stop-test-token-0123456789abcdef\r\n\r\n").unwrap();
    held.push(sse);
    for port in [metrics, console] {
        for _ in 0..300 {
            held.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    let secs = srv.stop();
    println!("uraid stop with {} hostile HTTP connections open: the process ended {secs:.2} s after the request", held.len());
    assert!(secs < 5.0, "uraid serve took {secs:.1} s to stop with HTTP clients open");
}

/// 300 idle connections on each of the metrics and console ports of a
/// serve whose descriptors are limited to 256 (a default-like limit): the
/// HTTP servers hold at most their cap, and an NBD client (nbdinfo) still
/// gets its handshake.
#[test]
fn idle_http_connections_do_not_starve_nbd() {
    let _g = shared();
    require_tool("nbdinfo", "libnbd-bin");
    let srv = Served::start(
        "fdweb",
        &["--metrics", "127.0.0.1:0", "--console", "127.0.0.1:0", "--console-token", "fd-test-token-0123456789abcdef"],
        &["metrics: ", "console: "],
        |c| {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit only, in the child between fork and exec.
            unsafe {
                c.pre_exec(|| {
                    let lim = libc::rlimit { rlim_cur: 256, rlim_max: 256 };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        },
    );
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", srv.pid())).map(|d| d.count()).unwrap_or(0);
    let before = fds();
    let mut held = Vec::new();
    for port in [srv.port("metrics: "), srv.port("console: ")] {
        for _ in 0..300 {
            // A server out of descriptors accepts nothing: its backlog fills.
            match TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)) {
                Ok(s) => held.push(s),
                Err(_) => break,
            }
        }
    }
    std::thread::sleep(Duration::from_millis(1000));
    let during = fds();
    let uri = format!("nbd+unix:///fdweb?socket={}", srv.run.join("fdweb.sock").display());
    let t0 = Instant::now();
    let o = Command::new("timeout").args(["20", "nbdinfo", "--size", &uri]).output().unwrap();
    println!(
        "descriptors of uraid serve: {before} before, {during} with {} idle HTTP connections open (limit 256); nbdinfo answered in {:.2} s: {} {}",
        held.len(),
        t0.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&o.stdout).trim(),
        String::from_utf8_lossy(&o.stderr).trim()
    );
    assert!(o.status.success(), "nbdinfo failed with 600 idle HTTP connections open: {}", String::from_utf8_lossy(&o.stderr));
    assert!(during <= before + 2 * 64 + 8, "serve holds {during} descriptors ({before} before): the HTTP servers hold more than their cap");
    drop(held);
    let mut srv = srv;
    srv.stop();
}

/// Connections that send nothing, stop in their body, or sit idle after a
/// response are closed by the server within its timeouts (10 s; 15 s
/// allowed here), the stalled body with 408.
#[test]
fn idle_http_connections_are_closed() {
    let _g = shared();
    let mut srv = Served::start("idleweb", &["--metrics", "127.0.0.1:0"], &["metrics: "], |_| {});
    let port = srv.port("metrics: ");
    // How long the server takes to close `s`, and what it sent.
    let closed_after = |mut s: TcpStream, t0: Instant| -> (f64, String) {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut r = Vec::new();
        let res = s.read_to_end(&mut r);
        assert!(res.is_ok(), "the server kept the connection open 30 s: {res:?}");
        (t0.elapsed().as_secs_f64(), String::from_utf8_lossy(&r).into_owned())
    };
    let silent = std::thread::spawn(move || {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        closed_after(s, Instant::now())
    });
    let body = std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n0123456789").unwrap();
        closed_after(s, Instant::now())
    });
    let kept = std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        // The whole response (its length is given), then nothing more.
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).unwrap();
            head.push(b[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let len: usize = head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().parse().unwrap())).expect("a length");
        let mut rest = vec![0u8; len];
        s.read_exact(&mut rest).unwrap();
        closed_after(s, Instant::now())
    });
    let (silent, body, kept) = (silent.join().unwrap(), body.join().unwrap(), kept.join().unwrap());
    println!(
        "closed by the server: a connection that sent nothing after {:.1} s, a stalled body after {:.1} s ({}), an idle keep-alive connection after {:.1} s",
        silent.0,
        body.0,
        body.1.lines().next().unwrap_or(""),
        kept.0
    );
    for (what, (secs, _)) in [("silent", &silent), ("stalled body", &body), ("keep-alive", &kept)] {
        assert!(*secs <= 15.0, "the {what} connection was closed after {secs:.1} s");
    }
    assert!(body.1.starts_with("HTTP/1.1 408"), "the stalled body got: {}", body.1);
    srv.stop();
}
