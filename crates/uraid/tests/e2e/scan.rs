//! `uraid scan` and arrays named in place of their members: arrays on loop
//! devices and on files found with the right members found / expected, a
//! foreign filesystem left out, a degraded array, the configuration file
//! that `scan --config` writes and every command then reads, and the errors
//! of a malformed configuration.
//!
//! Every run sets `URAID_CONFIG` to a file in the test's temporary
//! directory, so that the machine's /etc/uraid is never read or written.
//! Arrays get names unique to this process: other tests (and other
//! checkouts' tests) may have arrays on loop devices of the same machine.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::util::*;

const MIB: u64 = 1 << 20;

/// Runs `uraid ARGS...` with `URAID_CONFIG=cfg`.
fn run(cfg: &Path, args: &[&str]) -> Out {
    uraid_env(args, &[("URAID_CONFIG", cfg.as_os_str())])
}

/// [`run`], and panics unless it succeeds.
fn run_ok(cfg: &Path, args: &[&str]) -> Out {
    let o = run(cfg, args);
    assert!(o.status.success(), "`{}` failed ({}):\nstdout:\n{}\nstderr:\n{}", o.cmdline, o.status, o.stdout, o.stderr);
    o
}

/// An array name no other test of this machine uses.
fn unique(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

/// The `ARRAY` line of the array named `name` in `scan` output, parsed
/// into its `key=value` fields.
fn array_line(out: &str, name: &str) -> Option<std::collections::BTreeMap<String, String>> {
    let line = out.lines().find(|l| l.starts_with("ARRAY ") && l.split(' ').any(|f| f == format!("name={name}")))?;
    Some(line.split(' ').skip(1).filter_map(|f| f.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
}

fn set<S: AsRef<str>>(items: &[S]) -> BTreeSet<String> {
    items.iter().map(|s| s.as_ref().to_string()).collect()
}


fn create(cfg: &Path, name: &str, level: &str, members: &[&str]) -> String {
    let mut args = vec!["create", "--level", level, "--name", name];
    args.extend_from_slice(members);
    let o = run_ok(cfg, &args);
    // "created array 'NAME' (UUID): ..."
    let uuid = o.stdout.split(['(', ')']).nth(1).unwrap_or_else(|| panic!("no uuid in: {}", o.stdout));
    uuid.to_string()
}

#[test]
fn scan_lists_arrays_on_loop_devices_and_files_and_not_a_filesystem() {
    let _g = shared();
    let backing = tmpdir();
    let dir = tmpdir();
    let cfg = dir.path().join("no-such-uraid.conf");
    // An array over three loop devices, given in an order that is not the
    // devices' order.
    let loops: Vec<LoopDev> = sparse_files(backing.path(), "lo", 3, 64 * MIB).iter().map(|f| LoopDev::attach(f)).collect();
    let loop_devs: Vec<&str> = loops.iter().map(|l| s(&l.dev)).collect();
    let on_loops = unique("scanloop");
    let loops_uuid = create(&cfg, &on_loops, "5", &[loop_devs[2], loop_devs[0], loop_devs[1]]);
    // A loop device holding ext4, and an ext4 image among the files.
    let fs_img = sparse_file(backing.path(), "ext4.img", 64 * MIB);
    mkfs_ext4(&fs_img);
    let ext4 = LoopDev::attach(&fs_img);
    let ext4_file = sparse_file(dir.path(), "a-filesystem", 64 * MIB);
    mkfs_ext4(&ext4_file);
    // An array over files of DIR, and a file of zeros beside them.
    let files = sparse_files(dir.path(), "m", 2, 64 * MIB);
    sparse_file(dir.path(), "zeros", 64 * MIB);
    let on_files = unique("scanfiles");
    let files_uuid = create(&cfg, &on_files, "1", &[s(&files[1]), s(&files[0])]);

    let o = run_ok(&cfg, &["scan", s(dir.path())]);
    let l = array_line(&o.stdout, &on_loops).unwrap_or_else(|| panic!("{on_loops} not listed:\n{}\n{}", o.stdout, o.stderr));
    assert_eq!(l["uuid"], loops_uuid);
    assert_eq!(l["level"], "5");
    assert_eq!(l["members"], "3/3");
    assert_eq!(l["state"], "clean");
    assert_eq!(set(&l["devices"].split(',').collect::<Vec<_>>()), set(&loop_devs));
    let f = array_line(&o.stdout, &on_files).unwrap_or_else(|| panic!("{on_files} not listed:\n{}", o.stdout));
    assert_eq!(f["uuid"], files_uuid);
    assert_eq!(f["level"], "1");
    assert_eq!(f["members"], "2/2");
    assert_eq!(set(&f["devices"].split(',').collect::<Vec<_>>()), set(&strs(&files)));
    for other in [s(&ext4.dev), s(&ext4_file), "zeros"] {
        assert!(!o.stdout.contains(other), "{other} is listed although it holds no array:\n{}", o.stdout);
    }
    // The same in JSON.
    let o = run_ok(&cfg, &["scan", "--json", s(dir.path())]);
    let j: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("scan --json printed no JSON ({e}):\n{}", o.stdout));
    let a = j.as_array().unwrap().iter().find(|a| a["name"] == on_loops.as_str()).unwrap_or_else(|| panic!("{j}"));
    assert_eq!((a["uuid"].as_str(), a["members_found"].as_u64(), a["members_expected"].as_u64()), (Some(&*loops_uuid), Some(3), Some(3)));
    assert_eq!(a["state"], "clean");
    let devs: Vec<&str> = a["devices"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    assert_eq!(set(&devs), set(&loop_devs));
    // A name stands for the members in every command: found by a scan of
    // the machine when the (missing) configuration does not list it.
    let by_name = run_ok(&cfg, &["status", &on_loops]);
    let by_members = run_ok(&cfg, &["status", loop_devs[0], loop_devs[1], loop_devs[2]]);
    assert_eq!(by_name.stdout, by_members.stdout);
    assert!(!cfg.exists(), "a scan without --config wrote {}", cfg.display());
    drop(loops);
}

#[test]
fn scan_config_writes_a_file_that_names_stand_for() {
    let _g = shared();
    let dir = tmpdir();
    let cfg = dir.path().join("etc/uraid/uraid.conf");
    let files = sparse_files(dir.path(), "m", 3, 64 * MIB);
    let name = unique("scancfg");
    let uuid = create(&cfg, &name, "5", &strs(&files));
    // Without --config nothing is written; with it the file and its
    // directory are made.
    run_ok(&cfg, &["scan", s(dir.path())]);
    assert!(!cfg.exists());
    let o = run_ok(&cfg, &["scan", s(dir.path()), "--config", s(&cfg)]);
    assert!(array_line(&o.stdout, &name).is_some(), "{}", o.stdout);
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains(&format!("name = \"{name}\"")) && text.contains(&uuid), "{text}");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(cfg.parent().unwrap()).unwrap().permissions()) & 0o777, 0o755);

    let by_members = run_ok(&cfg, &["status", s(&files[0]), s(&files[1]), s(&files[2])]);
    for word in [name.as_str(), uuid.as_str()] {
        let o = run_ok(&cfg, &["status", word]);
        assert_eq!(o.stdout, by_members.stdout, "status {word} differs from status MEMBERS");
    }
    let j: Value = serde_json::from_str(&run_ok(&cfg, &["status", "--json", &name]).stdout).unwrap();
    assert_eq!(j["uuid"], uuid.as_str());

    // An update keeps comments, other keys and other arrays, and replaces
    // this array's members.
    let other = "[[array]]\nname = \"elsewhere\"\nuuid = \"11111111-2222-3333-4444-555555555555\"\nsocket = \"/run/x.sock\"\n";
    std::fs::write(&cfg, format!("# my arrays\n{text}scrub-every = \"7d\"\n\n{other}")).unwrap();
    std::fs::rename(&files[2], dir.path().join("moved")).unwrap();
    run_ok(&cfg, &["scan", s(dir.path()), "--config", s(&cfg)]);
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.starts_with("# my arrays\n"), "{text}");
    assert!(text.contains("scrub-every = \"7d\"") && text.contains("elsewhere") && text.contains("/run/x.sock"), "{text}");
    assert!(text.contains(s(&dir.path().join("moved"))), "{text}");
    assert_eq!(text.matches(&uuid).count(), 1, "{text}");
    let o = run_ok(&cfg, &["status", &name]);
    assert!(o.stdout.contains("moved active"), "{}", o.stdout);
}

#[test]
fn scan_shows_a_degraded_array() {
    let _g = shared();
    let dir = tmpdir();
    // Files are found by name through the config's device globs.
    let cfg = dir.path().join("uraid.conf");
    std::fs::write(&cfg, format!("devices = [\"{}/m*\"]\n", s(dir.path()))).unwrap();
    let files = sparse_files(dir.path(), "m", 3, 64 * MIB);
    let name = unique("scandeg");
    create(&cfg, &name, "5", &strs(&files));
    std::fs::remove_file(&files[1]).unwrap();
    let o = run_ok(&cfg, &["scan", s(dir.path())]);
    let l = array_line(&o.stdout, &name).unwrap_or_else(|| panic!("{name} not listed:\n{}", o.stdout));
    assert_eq!(l["members"], "2/3");
    assert_eq!(l["state"], "degraded");
    assert_eq!(set(&l["devices"].split(',').collect::<Vec<_>>()), set(&[s(&files[0]), s(&files[2])]));
    // Named, it opens degraded over the two that are left.
    let o = run_ok(&cfg, &["status", "--json", &name]);
    let j: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(j["volumes"][0]["state"], "degraded", "{j}");
}

#[test]
fn a_malformed_config_is_refused_naming_the_file_and_the_key() {
    let _g = shared();
    let dir = tmpdir();
    let cfg = dir.path().join("uraid.conf");
    let uuid = "11111111-2222-3333-4444-555555555555";
    // An unknown key: the file, its line, the key and the known ones.
    std::fs::write(&cfg, format!("[[array]]\nname = \"data\"\nuuid = \"{uuid}\"\nsockt = \"/run/uraid/data.sock\"\n")).unwrap();
    for args in [&["scan"][..], &["status", "data"][..]] {
        let o = run(&cfg, args);
        assert_eq!(o.status.code(), Some(1), "`{}` should fail:\n{}{}", o.cmdline, o.stdout, o.stderr);
        assert_contains(&o.stderr, &[s(&cfg), "line 4", "sockt", "socket", "uraid.conf.md"], &o.cmdline);
    }
    // TOML that does not parse.
    std::fs::write(&cfg, "devices = [\"/dev/nvme*n1\"]\n\n[[array]\nname = \"data\"\n").unwrap();
    let o = run(&cfg, &["status", "data"]);
    assert_eq!(o.status.code(), Some(1), "{}", o.stderr);
    assert_contains(&o.stderr, &[s(&cfg), "line 3"], &o.cmdline);
    // A bad value: what to write instead.
    std::fs::write(&cfg, format!("[[array]]\nname = \"data\"\nuuid = \"{uuid}\"\nscrub-every = \"weekly\"\n")).unwrap();
    let o = run(&cfg, &["scan", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", o.stderr);
    assert_contains(&o.stderr, &[s(&cfg), "line 4", "scrub-every", "7d"], &o.cmdline);
    // A path is a path: the configuration is not read for members named
    // by their paths.
    let files = sparse_files(dir.path(), "m", 2, 64 * MIB);
    let name = unique("scanbad");
    create(&cfg, &name, "1", &strs(&files));
    run_ok(&cfg, &["status", s(&files[0]), s(&files[1])]);
    // A name in no config and on no device: says so and points at scan.
    std::fs::remove_file(&cfg).unwrap();
    let o = run(&cfg, &["status", "no-such-array-anywhere"]);
    assert_eq!(o.status.code(), Some(1));
    assert_contains(&o.stderr, &["no array named 'no-such-array-anywhere'", "uraid scan"], &o.cmdline);
}

#[test]
fn scan_shows_an_array_a_running_uraid_holds_as_in_use() {
    let _g = shared();
    let dir = tmpdir();
    let cfg = dir.path().join("uraid.conf");
    let files = sparse_files(dir.path(), "m", 2, 64 * MIB);
    let name = unique("scanbusy");
    create(&cfg, &name, "1", &strs(&files));
    let sock = dir.path().join("s.sock");
    let mut serve = ChildGuard(
        std::process::Command::new(URAID)
            .args(["serve", "--socket", s(&sock), s(&files[0]), s(&files[1])])
            .env("URAID_CONFIG", &cfg)
            .env("URAID_RUN_DIR", dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("cannot start uraid serve"),
    );
    let t0 = std::time::Instant::now();
    while !sock.exists() {
        assert!(t0.elapsed().as_secs() < 30, "uraid serve made no socket in 30 s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = run_ok(&cfg, &["scan", s(dir.path())]);
    let l = array_line(&o.stdout, &name).unwrap_or_else(|| panic!("{name} not listed:\n{}", o.stdout));
    assert_eq!((l["members"].as_str(), l["state"].as_str()), ("2/2", "in-use"), "{}", o.stdout);
    serve.kill_and_release(&files);
    // Killed, it was not stopped cleanly.
    let o = run_ok(&cfg, &["scan", s(dir.path())]);
    assert_eq!(array_line(&o.stdout, &name).unwrap()["state"], "active", "{}", o.stdout);
}

/// `scan --assemble` (boot without systemd): every complete array found
/// that no process serves is served in the background; an incomplete one
/// is left alone; a second run starts nothing twice.
#[test]
fn scan_assemble_serves_every_complete_array_found() {
    let _g = shared();
    let d = tmpdir();
    let dir = d.path().join("members");
    std::fs::create_dir(&dir).unwrap();
    let run_dir = d.path().join("run");
    let cfg = d.path().join("uraid.conf");
    // Only these files are scanned: other tests' arrays on loop devices of
    // this machine must not be started.
    std::fs::write(&cfg, format!("devices = [\"{}/*\"]\n", dir.display())).unwrap();
    let (a, b, c) = (unique("boot-a"), unique("boot-b"), unique("boot-c"));
    let fa = sparse_files(&dir, "a", 2, 16 * MIB);
    let fb = sparse_files(&dir, "b", 3, 16 * MIB);
    let fc = sparse_files(&dir, "c", 3, 16 * MIB);
    create(&cfg, &a, "1", &strs(&fa));
    create(&cfg, &b, "5", &strs(&fb));
    create(&cfg, &c, "5", &strs(&fc));
    std::fs::remove_file(&fc[2]).unwrap();
    let env = [("URAID_CONFIG", cfg.as_os_str()), ("URAID_RUN_DIR", run_dir.as_os_str())];
    let o = uraid_env(&["scan", "--assemble"], &env);
    assert!(o.status.success(), "{}{}", o.stdout, o.stderr);
    assert_contains(&o.stdout, &[&format!("started array '{a}'"), &format!("started array '{b}'")], "scan --assemble");
    assert_contains(&o.stderr, &[&format!("array '{c}' has 2 of its 3 members"), "not started"], "scan --assemble");
    for n in [&a, &b] {
        let ctl = run_dir.join(format!("{n}.ctl"));
        let t0 = std::time::Instant::now();
        while std::os::unix::net::UnixStream::connect(&ctl).is_err() {
            assert!(t0.elapsed().as_secs() < 30, "{n} is not served: {}", std::fs::read_to_string(run_dir.join(format!("{n}.log"))).unwrap_or_default());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    let o = uraid_env(&["scan", "--assemble"], &env);
    assert_contains(&o.stderr, &[&format!("array '{a}' is already served"), &format!("array '{b}' is already served")], "second run");
    for n in [&a, &b] {
        let o = uraid_env(&["stop", n], &env);
        assert!(o.status.success(), "{}{}", o.stdout, o.stderr);
    }
    let o = uraid_env(&["status", "--json", &a], &env);
    assert!(o.status.success() && o.stdout.contains("\"state\": \"clean\""), "{}{}", o.stdout, o.stderr);
}

/// `scan --assemble` (without systemd) opens each started array's log in
/// the run directory without following a symbolic link planted at its
/// name: the link's target is left as it was and the array is reported
/// as not started (before, the log was opened through the link and the
/// target truncated and written by the started server).
#[test]
fn scan_assemble_does_not_follow_a_link_at_the_log() {
    let _g = shared();
    let d = tmpdir();
    let dir = d.path().join("members");
    std::fs::create_dir(&dir).unwrap();
    let run_dir = d.path().join("run");
    std::fs::create_dir(&run_dir).unwrap();
    let cfg = d.path().join("uraid.conf");
    std::fs::write(&cfg, format!("devices = [\"{}/*\"]\n", dir.display())).unwrap();
    let a = unique("loglink");
    let fa = sparse_files(&dir, "a", 2, 16 * MIB);
    create(&cfg, &a, "1", &strs(&fa));
    let victim = d.path().join("victim");
    std::fs::write(&victim, "keep me\n").unwrap();
    std::os::unix::fs::symlink(&victim, run_dir.join(format!("{a}.log"))).unwrap();
    let env = [("URAID_CONFIG", cfg.as_os_str()), ("URAID_RUN_DIR", run_dir.as_os_str())];
    let o = uraid_env(&["scan", "--assemble"], &env);
    // Whatever happened, nothing stays served.
    let _ = uraid_env(&["stop", &a], &env);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n", "the link was followed: {}{}", o.stdout, o.stderr);
    assert!(!o.status.success(), "scan --assemble said it started everything: {}{}", o.stdout, o.stderr);
    assert_contains(&o.stderr, &[&a, "symbolic link there is not followed"], "scan --assemble");
}
