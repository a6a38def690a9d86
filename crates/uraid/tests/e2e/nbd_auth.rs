//! Who may connect to `uraid serve` over TCP: clients authenticate with a
//! pre-shared key (TLS-PSK) or a certificate of the configured CA, checked
//! with libnbd's own client (nbdinfo, nbdcopy: GnuTLS on the other side);
//! a non-loopback address without client authentication is refused unless
//! the user says `--insecure-no-client-auth`; loopback without it warns at
//! start that every local user can read and write the array.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rand::RngCore;

use crate::util::*;

fn tools() {
    require_tool("nbdinfo", "libnbd-bin");
    require_tool("nbdcopy", "libnbd-bin");
    require_tool("openssl", "openssl");
}

/// A RAID 1 array `name` over two 32 MiB files: (members, array UUID).
fn mirror(dir: &Path, name: &str) -> (Vec<PathBuf>, String) {
    let m = sparse_files(dir, name, 2, 32 << 20);
    let mut args = vec!["create", "--level", "1", "--name", name];
    args.extend(m.iter().map(|p| s(p)));
    let o = uraid_ok(&args);
    let uuid = o.stdout.split(['(', ')']).nth(1).unwrap_or_else(|| panic!("no uuid in: {}", o.stdout)).to_string();
    (m, uuid)
}

/// A 32-byte key in hex, from `openssl rand` (as nbdkit's docs make them).
fn hex_key() -> String {
    run_tool(Command::new("openssl").args(["rand", "-hex", "32"])).trim().to_string()
}

/// Writes `text` to `dir/name` with permissions `mode`.
fn file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

fn nbdinfo(uri: &str) -> Output {
    Command::new("nbdinfo").arg(uri).stdin(Stdio::null()).output().unwrap()
}

/// `uraid serve ARGS...` (with `env`) must refuse to start: exit status 1
/// and an error naming every one of `needles`. A server that starts
/// instead (it prints its URI) is killed and the test fails.
fn serve_refused<S: AsRef<OsStr>>(args: &[S], env: &[(&str, &OsStr)], needles: &[&str]) {
    use std::io::BufRead;
    let mut child = ChildGuard(
        Command::new(URAID)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // A refusal closes stdout without a line; a server prints "serving".
    let mut first = String::new();
    std::io::BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let status = if first.is_empty() { Some(child.0.wait().unwrap()) } else { None };
    let _ = child.0.kill();
    let _ = child.0.wait();
    let mut err = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.is_some(), "uraid serve started where it must refuse: {first}{err}");
    assert_eq!(status.and_then(|s| s.code()), Some(1), "uraid serve should fail with status 1: {err}");
    assert_contains(&err, needles, "uraid serve");
}

/// nbdinfo URI run as user nobody (uid 65534), a local user without
/// privileges.
fn nbdinfo_as_nobody(uri: &str) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "nbdinfo", uri])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn serve_args<'a>(head: &[&'a str], members: &'a [PathBuf]) -> Vec<&'a OsStr> {
    let mut v: Vec<&OsStr> = head.iter().map(|h| OsStr::new(*h)).collect();
    v.extend(members.iter().map(|m| m.as_os_str()));
    v
}

#[test]
fn psk_clients_authenticate_with_libnbd_and_others_are_refused() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let (m, _) = mirror(d.path(), "psk");
    let (alice, bob) = (hex_key(), hex_key());
    let keys = file(d.path(), "keys.psk", &format!("alice:{alice}\nbob:{bob}\n"), 0o600);
    let k = s(&keys);
    // A key file every user can read is refused before anything is served.
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o644)).unwrap();
    serve_refused(&serve_args(&["serve", "--tcp", "0.0.0.0:0", "--tls-psk", k], &m), &[], &["chmod 600", k]);
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();

    // On every address, with keys: served without a warning.
    let log = d.path().join("serve.log");
    let (mut child, port) = serve_logged(&serve_args(&["serve", "--tcp", "0.0.0.0:0", "--tls-psk", k], &m), &[], &log);
    let uri = |f: &Path, user: &str| format!("nbds://{user}@127.0.0.1:{port}/psk?tls-psk-file={}", f.display());
    for user in ["alice", "bob"] {
        let o = nbdinfo(&uri(&keys, user));
        assert!(o.status.success(), "{user} with her key was refused: {}", String::from_utf8_lossy(&o.stderr));
        assert_contains(&String::from_utf8_lossy(&o.stdout), &["with TLS", "export-size:"], "nbdinfo with a key");
    }
    // Data through the TLS-PSK stream, both ways, from a file with
    // alice's key only.
    let alice_only = file(d.path(), "alice.psk", &format!("alice:{alice}\n"), 0o600);
    let mut data = vec![0u8; 8 << 20];
    rng("psk").fill_bytes(&mut data);
    let src = d.path().join("src");
    std::fs::write(&src, &data).unwrap();
    run_tool(Command::new("nbdcopy").arg(&src).arg(uri(&alice_only, "alice")));
    let back = d.path().join("back");
    run_tool(Command::new("nbdcopy").arg(uri(&alice_only, "alice")).arg(&back));
    assert!(first_difference(&std::fs::read(&back).unwrap()[..data.len()], &data).is_none(), "TLS-PSK round trip differs");

    // A wrong key, a user the server does not know, and clear text are
    // refused.
    let wrong = file(d.path(), "wrong.psk", &format!("alice:{}\n", hex_key()), 0o600);
    let o = nbdinfo(&uri(&wrong, "alice"));
    assert!(!o.status.success(), "a client with a wrong key got in: {}", String::from_utf8_lossy(&o.stdout));
    let carol = file(d.path(), "carol.psk", &format!("carol:{alice}\n"), 0o600);
    let o = nbdinfo(&uri(&carol, "carol"));
    assert!(!o.status.success(), "an unknown user got in: {}", String::from_utf8_lossy(&o.stdout));
    let o = nbdinfo(&format!("nbd://127.0.0.1:{port}/psk"));
    assert!(!o.status.success(), "a clear-text client got in: {}", String::from_utf8_lossy(&o.stdout));

    // Still serving the clients with keys.
    assert!(child.0.try_wait().unwrap().is_none(), "uraid serve ended after the refusals");
    let o = nbdinfo(&uri(&keys, "bob"));
    assert!(o.status.success(), "not served after the refusals: {}", String::from_utf8_lossy(&o.stderr));
    child.kill_and_release(&m);
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(!err.contains("WARNING"), "a server whose clients authenticate warned:\n{err}");
}

#[test]
fn non_loopback_tcp_without_client_authentication_is_refused_unless_said_insecure() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let (m, _) = mirror(d.path(), "open");
    let (cert, key) = self_signed_cert(d.path());
    let tls = ["--tls-cert", s(&cert), "--tls-key", s(&key)];
    // TLS that any client completes, and clear text: refused, naming the
    // ways to authenticate clients and the flag that says it is insecure.
    let head = [&["serve", "--tcp", "0.0.0.0:0"][..], &tls].concat();
    serve_refused(
        &serve_args(&head, &m),
        &[],
        &["not a loopback address", "--tls-psk", "--tls-verify-peer --tls-ca", "--insecure-no-client-auth"],
    );
    serve_refused(&serve_args(&["serve", "--tcp", "0.0.0.0:0"], &m), &[], &["in clear", "--insecure-no-client-auth"]);

    // Said explicitly: served, with a warning at start; any TLS client
    // gets in, as the flag says.
    let log = d.path().join("serve.log");
    let head = [&head[..], &["--insecure-no-client-auth"]].concat();
    let (mut child, port) = serve_logged(&serve_args(&head, &m), &[], &log);
    let ca_only = d.path().join("ca-only");
    std::fs::create_dir(&ca_only).unwrap();
    std::fs::copy(&cert, ca_only.join("ca-cert.pem")).unwrap();
    let o = nbdinfo(&format!("nbds://localhost:{port}/open?tls-certificates={}", ca_only.display()));
    assert!(o.status.success(), "--insecure-no-client-auth did not serve: {}", String::from_utf8_lossy(&o.stderr));
    child.kill_and_release(&m);
    let err = std::fs::read_to_string(&log).unwrap();
    assert_contains(&err, &["WARNING", "do not authenticate", "every host that can reach it", "--tls-psk"], "serve's warning");
}

#[test]
fn client_certificates_and_refusal_from_uraid_conf() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let (m, uuid) = mirror(d.path(), "pki");
    let (cert, key, ca, with, without) = crate::hostile::pki(d.path());
    let conf = d.path().join("uraid.conf");
    let env = [("URAID_CONFIG", conf.as_os_str())];
    let array = format!(
        "[[array]]\nname = \"pki\"\nuuid = \"{uuid}\"\nmembers = [\"{}\", \"{}\"]\ntcp = \"0.0.0.0:0\"\n\
         tls-cert = \"{}\"\ntls-key = \"{}\"\n",
        m[0].display(),
        m[1].display(),
        cert.display(),
        key.display()
    );
    // Every address, TLS without client authentication: refused.
    std::fs::write(&conf, &array).unwrap();
    serve_refused(&["serve", "pki"], &env, &["not a loopback address", "--insecure-no-client-auth"]);
    // The config says it is insecure: served.
    std::fs::write(&conf, format!("{array}insecure-no-client-auth = true\n")).unwrap();
    let log = d.path().join("serve.log");
    let (mut child, _) = serve_logged(&["serve", "pki"], &env, &log);
    child.kill_and_release(&m);
    assert_contains(&std::fs::read_to_string(&log).unwrap(), &["WARNING", "do not authenticate"], "serve's warning");

    // The config names the clients' CA: a client with a certificate it
    // signed gets in, one without is refused during TLS.
    std::fs::write(&conf, format!("{array}tls-ca = \"{}\"\n", ca.display())).unwrap();
    let (mut child, port) = serve_logged(&["serve", "pki"], &env, &log);
    let uri = |dir: &Path| format!("nbds://localhost:{port}/pki?tls-certificates={}", dir.display());
    let o = nbdinfo(&uri(&with));
    assert!(o.status.success(), "a client with a certificate of the CA was refused: {}", String::from_utf8_lossy(&o.stderr));
    assert_contains(&String::from_utf8_lossy(&o.stdout), &["with TLS"], "nbdinfo with a certificate");
    let o = nbdinfo(&uri(&without));
    assert!(!o.status.success(), "a client without a certificate got in: {}", String::from_utf8_lossy(&o.stdout));
    let o = nbdinfo(&uri(&with));
    assert!(o.status.success(), "not served after the refusal: {}", String::from_utf8_lossy(&o.stderr));
    child.kill_and_release(&m);
    assert!(!std::fs::read_to_string(&log).unwrap().contains("WARNING"), "warned with client certificates");
}

#[test]
fn loopback_tcp_without_client_authentication_warns_that_every_local_user_can_write() {
    let _g = shared();
    tools();
    require_tool("setpriv", "util-linux");
    let d = tmpdir();
    let (m, _) = mirror(d.path(), "lo");
    let log = d.path().join("serve.log");
    let (mut child, port) = serve_logged(&serve_args(&["serve", "--tcp", "127.0.0.1:0"], &m), &[], &log);
    // What the warning says is true: an unprivileged user (nobody, uid
    // 65534) connects.
    let o = nbdinfo_as_nobody(&format!("nbd://127.0.0.1:{port}/lo"));
    assert!(o.status.success(), "nobody could not connect: {}", String::from_utf8_lossy(&o.stderr));
    child.kill_and_release(&m);
    let err = std::fs::read_to_string(&log).unwrap();
    assert_contains(&err, &["WARNING", "every user of this machine", "--tls-psk", "--tls-verify-peer", "unix socket"], "serve's warning");
    assert!(!err.contains("every host"), "loopback only, yet the warning speaks of other hosts:\n{err}");

    // With keys, nobody without one gets in, and there is no warning.
    let keys = file(d.path(), "keys.psk", &format!("alice:{}\n", hex_key()), 0o600);
    let (mut child, port) = serve_logged(&serve_args(&["serve", "--tcp", "127.0.0.1:0", "--tls-psk", s(&keys)], &m), &[], &log);
    let o = nbdinfo_as_nobody(&format!("nbd://127.0.0.1:{port}/lo"));
    assert!(!o.status.success(), "a local user without a key got in: {}", String::from_utf8_lossy(&o.stdout));
    child.kill_and_release(&m);
    assert!(!std::fs::read_to_string(&log).unwrap().contains("WARNING"), "warned with keys");
}

/// A relay for a client that cannot speak NBD: it listens on 127.0.0.1,
/// and for its one connection opens `port`, does the NBD greeting and
/// STARTTLS, then copies bytes both ways (so the client speaks TLS with the
/// server from its first byte). Returns the port to connect to.
fn starttls_relay(port: &str) -> u16 {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = l.local_addr().unwrap().port();
    let server = format!("127.0.0.1:{port}");
    std::thread::spawn(move || {
        let Ok((c, _)) = l.accept() else { return };
        let mut s = TcpStream::connect(&server).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut hello = [0u8; 18];
        s.read_exact(&mut hello).unwrap();
        s.write_all(&3u32.to_be_bytes()).unwrap(); // FIXED_NEWSTYLE | NO_ZEROES
        let mut opt = b"IHAVEOPT".to_vec();
        opt.extend(5u32.to_be_bytes()); // NBD_OPT_STARTTLS
        opt.extend(0u32.to_be_bytes());
        s.write_all(&opt).unwrap();
        let mut rep = [0u8; 20];
        s.read_exact(&mut rep).unwrap();
        assert_eq!(u32::from_be_bytes(rep[12..16].try_into().unwrap()), 1, "STARTTLS not acknowledged");
        s.set_read_timeout(None).unwrap();
        let pump = |mut from: TcpStream, mut to: TcpStream| {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        };
        let (c2, s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
        let back = std::thread::spawn(move || pump(s2, c2));
        pump(c, s);
        let _ = back.join();
    });
    lport
}

#[test]
fn psk_speaks_tls_1_2_and_1_3_with_openssl_s_client() {
    let _g = shared();
    tools();
    let d = tmpdir();
    let (m, _) = mirror(d.path(), "v12");
    let key = hex_key();
    let keys = file(d.path(), "keys.psk", &format!("alice:{key}\n"), 0o600);
    let log = d.path().join("serve.log");
    let (mut child, port) = serve_logged(&serve_args(&["serve", "--tcp", "127.0.0.1:0", "--tls-psk", s(&keys)], &m), &[], &log);
    // GnuTLS clients older than TLS 1.3 (and libnbd's priority string)
    // need TLS 1.2 PSK suites; newer ones use TLS 1.3.
    let s_client = |version: &str, key: &str| {
        let relay = starttls_relay(&port);
        Command::new("openssl")
            .args(["s_client", "-brief", "-connect", &format!("127.0.0.1:{relay}"), "-psk", key, "-psk_identity", "alice", version])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for (flag, name) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
        let o = s_client(flag, &key);
        let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "openssl s_client {flag} with the key failed:\n{out}");
        assert_contains(&out, &[&format!("Protocol version: {name}")], "openssl s_client");
        let wrong = s_client(flag, &hex_key());
        let out = format!("{}{}", String::from_utf8_lossy(&wrong.stdout), String::from_utf8_lossy(&wrong.stderr));
        assert!(!wrong.status.success() && !out.contains("Protocol version"), "{flag} with a wrong key got through:\n{out}");
    }
    child.kill_and_release(&m);
}
