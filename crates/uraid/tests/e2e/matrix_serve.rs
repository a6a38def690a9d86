//! `uraid serve` of a Matrix array (issue 29, item 2: every volume
//! served): a RAID 5 volume and a RAID 1 volume over the same three file
//! members, served over a unix socket. Real NBD clients (nbdinfo, nbdcopy)
//! see one export per volume (the first under the array's name, the
//! second as NAME/VOLUME), each with its own size and description; data
//! written to each reads back and does not show in the other; a member
//! is failed and a spare rebuilt while both are served, and each export
//! then still serves its own volume (the manager moves each export to
//! its own volume's replacement); `status`, `status --json` and the
//! metrics name both; a live `grow --add` is refused (a served Matrix
//! array's further volumes would be restriped under their users).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::RngCore;

use crate::util::*;

const MIB: u64 = 1 << 20;

/// Runs uraid with the test's run directory and config; its stdout, or
/// its stderr when `ok` is false (then it must fail).
fn run(run_dir: &Path, conf: &Path, args: &[&str], ok: bool) -> String {
    let o = Command::new(URAID).args(args).env("URAID_RUN_DIR", run_dir).env("URAID_CONFIG", conf).stdin(Stdio::null()).output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
    assert_eq!(o.status.success(), ok, "uraid {}: {out}{err}", args.join(" "));
    if ok { out } else { err }
}

/// The bytes of export `uri`, read with nbdcopy.
fn read_export(uri: &str, dir: &Path, what: &str) -> Vec<u8> {
    let out = dir.join(format!("{what}.back"));
    let _ = std::fs::remove_file(&out);
    run_tool(Command::new("nbdcopy").arg(uri).arg(&out));
    let b = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    b
}

/// Writes `data` at the start of export `uri` with nbdcopy.
fn write_export(uri: &str, dir: &Path, what: &str, data: &[u8]) {
    let src = dir.join(format!("{what}.src"));
    std::fs::write(&src, data).unwrap();
    // --allocated: every byte written (nbdcopy would skip zeros).
    run_tool(Command::new("nbdcopy").arg("--allocated").arg(&src).arg(uri));
    std::fs::remove_file(&src).unwrap();
}

fn assert_same(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some((at, len)) = first_difference(got, want) {
        panic!("{what}: {len} bytes differ from byte {at}");
    }
}

fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn every_volume_of_a_matrix_array_is_served_and_kept_apart() {
    let _g = shared();
    require_tool("nbdcopy", "libnbd-bin");
    require_tool("nbdinfo", "libnbd-bin");
    let mut rng = rng("every_volume_of_a_matrix_array_is_served_and_kept_apart");
    let d = tmpdir();
    let (run_dir, conf) = (d.path().join("run"), d.path().join("uraid.conf"));
    std::fs::create_dir_all(&run_dir).unwrap();
    let name = format!("mxs{}", std::process::id());
    let files = sparse_files(d.path(), "m", 4, 40 * MIB);
    let members: Vec<&str> = strs(&files[..3]);
    let spare = files[3].display().to_string();
    let out = run(&run_dir, &conf, &with(&["create", "--chunk", "64K", "--name", &name, "--volume", "fast,level=5,size=16M", "--volume", "safe,level=1"], &members), true);
    assert_contains(&out, &["2 volumes", "volume 'fast': RAID 5", "volume 'safe': RAID 1"], "create");

    let mut child = ChildGuard(
        Command::new(URAID)
            .args(with(&["serve", "--metrics", "127.0.0.1:0"], &members))
            .env("URAID_RUN_DIR", &run_dir)
            .env("URAID_CONFIG", &conf)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Its first lines, up to the metrics address.
    let mut lines = Vec::new();
    {
        use std::io::BufRead;
        let mut r = std::io::BufReader::new(child.0.stdout.take().unwrap());
        loop {
            let mut l = String::new();
            assert!(r.read_line(&mut l).unwrap() > 0, "serve ended: {lines:?}");
            let done = l.starts_with("metrics: ");
            lines.push(l.trim_end().to_string());
            if done {
                break;
            }
        }
        // The rest of stdout is drained, so that serve never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
    }
    let text = lines.join("\n");
    let sock = run_dir.join(format!("{name}.sock"));
    let uri = |export: &str| format!("nbd+unix:///{export}?socket={}", sock.display());
    let (fast_uri, safe_uri) = (uri(&name), uri(&format!("{name}/safe")));
    assert_contains(&text, &[&format!("serving '{name}' (uraid RAID 5 over 3 members"), &format!("serving volume 'safe' of '{name}' (uraid RAID 1 over 3 members"), &safe_uri], "serve's lines");
    let port: u16 = lines.last().unwrap().trim_start_matches("metrics: http://").trim_end_matches("/metrics").rsplit(':').next().unwrap().parse().unwrap();

    // nbdinfo --list: both exports, with their descriptions and sizes.
    let list = run_tool(Command::new("nbdinfo").arg("--list").arg("--json").arg(&fast_uri));
    let j: serde_json::Value = serde_json::from_str(&list).unwrap_or_else(|e| panic!("nbdinfo --list --json: {e}: {list}"));
    let exports = j["exports"].as_array().unwrap_or_else(|| panic!("{list}"));
    let got: Vec<(&str, &str, u64)> = exports
        .iter()
        .map(|e| (e["export-name"].as_str().unwrap_or(""), e["description"].as_str().unwrap_or(""), e["export-size"].as_u64().unwrap_or(0)))
        .collect();
    println!("nbdinfo --list: {got:?}");
    assert_eq!(got.len(), 2, "{list}");
    assert_eq!(got[0].0, name);
    assert_eq!(got[1].0, format!("{name}/safe"));
    assert!(got[0].1.contains("RAID 5") && got[0].1.contains("volume 'fast' (1 of 2)"), "{:?}", got[0]);
    assert!(got[1].1.contains("RAID 1") && got[1].1.contains("volume 'safe' (2 of 2)"), "{:?}", got[1]);
    let st: serde_json::Value = serde_json::from_str(&run(&run_dir, &conf, &["status", "--json", &name], true)).unwrap();
    let caps: Vec<u64> = st["volumes"].as_array().unwrap().iter().map(|v| v["capacity"].as_u64().unwrap()).collect();
    assert_eq!((got[0].2, got[1].2), (caps[0], caps[1]), "each export has its own volume's size: {st}");
    assert_eq!(caps[0], 16 * MIB);
    assert!(caps[1] > 16 * MIB && caps[1] != caps[0], "{caps:?}");

    // Each volume its own data; a write to one never shows in the other.
    let mut fast = vec![0u8; caps[0] as usize];
    rng.fill_bytes(&mut fast);
    write_export(&fast_uri, d.path(), "fast", &fast);
    assert!(read_export(&safe_uri, d.path(), "safe").iter().all(|&b| b == 0), "writing 'fast' shows in 'safe'");
    let mut safe = vec![0u8; caps[1] as usize];
    rng.fill_bytes(&mut safe);
    write_export(&safe_uri, d.path(), "safe", &safe);
    assert_same(&read_export(&fast_uri, d.path(), "fast"), &fast, "'fast' after writing 'safe'");
    assert_same(&read_export(&safe_uri, d.path(), "safe"), &safe, "'safe'");

    // status and status --json: both exports, each under its volume.
    let text = run(&run_dir, &conf, &["status", &name], true);
    assert_contains(&text, &[&format!("volume 'fast' exported as: nbd {fast_uri}"), &format!("volume 'safe' exported as: nbd {safe_uri}")], "status");
    let st: serde_json::Value = serde_json::from_str(&run(&run_dir, &conf, &["status", "--json", &name], true)).unwrap();
    let ex: Vec<(&str, &str, &str)> = st["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["volume"].as_str().unwrap_or(""), e["kind"].as_str().unwrap_or(""), e["address"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(ex, vec![("fast", "nbd", &fast_uri[..]), ("safe", "nbd", &safe_uri[..])], "{st}");

    // A member fails: both volumes degraded; a write to 'safe' meanwhile.
    run(&run_dir, &conf, &["fail", &name, "--member", "1"], true);
    let mut safe2 = safe.clone();
    rng.fill_bytes(&mut safe2[..4 * MIB as usize]);
    write_export(&safe_uri, d.path(), "safe2", &safe2[..4 * MIB as usize]);
    // A spare takes over the role: new volumes over it, each export moved
    // to its own one, and the rebuild runs while both are served.
    let out = run(&run_dir, &conf, &["add", &name, "--spare", &spare], true);
    assert_contains(&out, &["takes over role 1"], "add");
    let t0 = Instant::now();
    loop {
        let st: serde_json::Value = serde_json::from_str(&run(&run_dir, &conf, &["status", "--json", &name], true)).unwrap();
        let states: Vec<&str> = st["volumes"].as_array().unwrap().iter().map(|v| v["state"].as_str().unwrap_or("")).collect();
        if states == ["clean", "clean"] && st["progress"].is_null() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "the rebuild did not end: {st}");
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("rebuilt in {:.1} s", t0.elapsed().as_secs_f64());
    assert_same(&read_export(&fast_uri, d.path(), "fast"), &fast, "'fast' after the rebuild");
    assert_same(&read_export(&safe_uri, d.path(), "safe"), &safe2, "'safe' after the rebuild");
    // Through the rebuilt member alone with the others: fail role 0 and
    // read again (the spare's copy and parity are right).
    run(&run_dir, &conf, &["fail", &name, "--member", "0"], true);
    assert_same(&read_export(&fast_uri, d.path(), "fast"), &fast, "'fast' without role 0");
    assert_same(&read_export(&safe_uri, d.path(), "safe"), &safe2, "'safe' without role 0");

    // Metrics: each volume's figures and exports under its own label.
    let m = http_get(port, "/metrics");
    for v in ["fast", "safe"] {
        let info = m.lines().find(|l| l.starts_with("uraid_export_info{") && l.contains(&format!("volume=\"{v}\"")));
        assert!(info.is_some_and(|l| l.contains("export=\"nbd\"")), "no export of '{v}' in the metrics:\n{m}");
        let written = m.lines().find(|l| l.starts_with("uraid_volume_written_bytes_total{") && l.contains(&format!("volume=\"{v}\"")));
        let n: f64 = written.and_then(|l| l.rsplit(' ').next()).and_then(|x| x.parse().ok()).unwrap_or(0.0);
        assert!(n >= caps[if v == "fast" { 0 } else { 1 }] as f64, "'{v}' written bytes {n}:\n{m}");
    }

    // A live restripe is refused: it would move 'safe' under its users.
    let extra = sparse_file(d.path(), "x", 40 * MIB);
    let err = run(&run_dir, &conf, &["grow", &name, "--add", &extra.display().to_string()], false);
    assert_contains(&err, &["2 volumes, each exported", "Nothing was written"], "grow of a served Matrix array");
    assert_same(&read_export(&safe_uri, d.path(), "safe"), &safe2, "'safe' after the refused grow");

    run(&run_dir, &conf, &["stop", &name], true);
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "serve did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(st.success(), "serve exited with {st}");
    let _: Vec<PathBuf> = files;
}
