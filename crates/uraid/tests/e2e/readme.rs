//! The README's walkthrough, run as written: every shell code block of
//! README.md, in order, in one `bash` (`set -Eeuo pipefail`), as root, with
//! the `uraid` just built first on PATH, on loop devices over files in a
//! scratch directory (`$DIR`, which the README sets to /var/tmp when it is
//! not set). So the README cannot say something the commands no longer do.
//!
//! Which blocks run: every indented (4 spaces, outside a list) or fenced
//! (```` ``` ````, ```` ```sh ````, ```` ```bash ````) code block, except a
//! block right after the marker `<!-- readme-test: skip: REASON -->`
//! (a build, an install, the test command itself, the benchmarks, systemd,
//! a block that is not commands). The script keeps the README's line
//! numbers (other lines are blank), so a failure names the README line of
//! the command that failed.
//!
//! `URAID_README=FILE` runs FILE instead of the repository's README.md (to
//! check the test itself on an older README).
//!
//! Whatever happens, the test unmounts what the walkthrough mounted under
//! the scratch directory, detaches its loop devices, stops the arrays it
//! serves and kills what it left in the background (the walkthrough runs in
//! a process group of its own).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// The marker that keeps the next code block out of the run.
const SKIP: &str = "<!-- readme-test: skip";

/// Longest the walkthrough may take, s (it takes about 2 minutes).
const TIMEOUT_S: u64 = 900;

/// What [`script_of`] made of a README.
struct Script {
    /// One line per README line: the command where the README has one,
    /// else empty.
    lines: Vec<String>,
    /// Code blocks run, and skipped (with their first README line).
    run: Vec<usize>,
    skipped: Vec<usize>,
    /// Indented blocks right after a list item: Markdown shows them as
    /// text of the item, not as code (README lines).
    list_blocks: Vec<usize>,
}

/// Whether `line` opens or continues a list item (an indented line after
/// it is part of the item, not code).
fn in_list(line: &str) -> bool {
    let t = line.trim_start();
    line.starts_with(char::is_whitespace)
        || t.starts_with("- ")
        || t.starts_with("* ")
        || t.starts_with("+ ")
        || t.split_once(". ").is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The shell code blocks of `readme`, as a script whose line N is README
/// line N (see the module doc for which blocks).
fn script_of(readme: &str) -> Script {
    let lines: Vec<&str> = readme.lines().collect();
    let mut s = Script { lines: vec![String::new(); lines.len()], run: Vec::new(), skipped: Vec::new(), list_blocks: Vec::new() };
    // The last line that is not blank and not code: a skip marker, a
    // paragraph or a list item.
    let mut context = "";
    let mut prev_blank = true;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(lang) = line.strip_prefix("```") {
            let shell = matches!(lang.trim(), "" | "sh" | "bash" | "shell");
            let run = shell && !context.starts_with(SKIP);
            let first = i + 1;
            i += 1;
            while i < lines.len() && !lines[i].starts_with("```") {
                if run {
                    s.lines[i] = lines[i].to_string();
                }
                i += 1;
            }
            if shell {
                if run { &mut s.run } else { &mut s.skipped }.push(first + 1);
            }
            i += 1;
            (context, prev_blank) = ("```", false);
            continue;
        }
        if line.starts_with("    ") && prev_blank && !in_list(context) {
            let run = !context.starts_with(SKIP);
            if run { &mut s.run } else { &mut s.skipped }.push(i + 1);
            // The block: indented lines, and blank lines between them.
            while i < lines.len() {
                let l = lines[i];
                let more = l.starts_with("    ")
                    || (l.trim().is_empty() && lines[i..].iter().find(|l| !l.trim().is_empty()).is_some_and(|l| l.starts_with("    ")));
                if !more {
                    break;
                }
                if run && !l.trim().is_empty() {
                    s.lines[i] = l[4..].to_string();
                }
                i += 1;
            }
            (context, prev_blank) = ("code", false);
            continue;
        }
        if line.starts_with("    ") && prev_blank {
            s.list_blocks.push(i + 1);
        }
        prev_blank = line.trim().is_empty();
        if !prev_blank {
            context = line;
        }
        i += 1;
    }
    s
}

/// Mount points under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .filter(|m| Path::new(m).starts_with(dir))
        .map(str::to_string)
        .collect();
    v.sort_by_key(|m| std::cmp::Reverse(m.len()));
    v
}

/// Loop devices whose backing file is under `dir`.
fn loops_under(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/sys/block").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Ok(b) = std::fs::read_to_string(e.path().join("loop/backing_file")) {
            if Path::new(b.trim().trim_end_matches(" (deleted)")).starts_with(dir) {
                v.push(format!("/dev/{name}"));
            }
        }
    }
    v
}

/// Whether any process of group `pgid` is left.
fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks that the group exists.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

/// Undoes what the walkthrough left, even when it failed: mounts, loop
/// devices, served arrays and background processes.
struct Cleanup {
    dir: PathBuf,
    pgid: Option<i32>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let quiet = |c: &mut Command| {
            let _ = c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        for m in mounts_under(&self.dir) {
            quiet(Command::new("umount").arg("-l").arg(&m));
        }
        // `losetup -d` of a device still open detaches it at its last close.
        for l in loops_under(&self.dir) {
            quiet(Command::new("losetup").arg("-d").arg(&l));
        }
        if let Some(pgid) = self.pgid {
            // SIGTERM: a serve stops cleanly (flushes, marks clean).
            // SAFETY: signals a process group this test created.
            unsafe { libc::kill(-pgid, libc::SIGTERM) };
            let t0 = Instant::now();
            while group_alive(pgid) && t0.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(100));
            }
            // SAFETY: as above.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        let t0 = Instant::now();
        loop {
            let left = loops_under(&self.dir);
            if left.is_empty() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(10) {
                eprintln!("warning: loop devices {left:?} over files in {} are still attached; detach them by hand", self.dir.display());
                break;
            }
            for l in &left {
                quiet(Command::new("losetup").arg("-d").arg(l));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(n)..].join("\n")
}

/// The README's commands, run in order on loop devices: each must succeed.
#[test]
fn readme_walkthrough_runs_as_written() {
    let _g = shared();
    for (tool, pkg) in [("losetup", "mount"), ("nbdfuse", "libnbd-bin"), ("mkfs.ext4", "e2fsprogs"), ("curl", "curl")] {
        require_tool(tool, pkg);
    }
    let readme_path = std::env::var_os("URAID_README")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"));
    let readme = std::fs::read_to_string(&readme_path).unwrap_or_else(|e| panic!("cannot read {}: {e}", readme_path.display()));
    let mut script = script_of(&readme);
    assert!(
        script.list_blocks.is_empty(),
        "README.md lines {:?}: an indented block right after a list item is shown as text of the item, not as code; \
         put a paragraph before it",
        script.list_blocks
    );
    assert!(script.lines[0].is_empty(), "README.md line 1 is code; the test keeps line 1 for its preamble");
    let commands = script.lines.iter().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')).count();
    assert!(
        script.run.len() >= 8 && script.lines.iter().any(|l| l.contains("uraid serve")),
        "only {} code blocks of README.md are run ({commands} commands): the extraction or the skip markers are wrong",
        script.run.len()
    );
    // Line 1 (the title) becomes the preamble: stop at the first failure
    // and name its README line.
    script.lines[0] = "set -Eeuo pipefail; \
        trap 'echo \"readme-test: README.md line $LINENO failed (exit status $?): $BASH_COMMAND\" >&2' ERR; \
        PS4='+ README.md:$LINENO: '; set -x"
        .to_string();

    let dir = tmpdir();
    let d = dir.path().to_path_buf();
    let sh = d.join("readme.sh");
    std::fs::write(&sh, script.lines.join("\n") + "\n").unwrap();
    let run_dir = d.join("run");
    std::fs::create_dir(&run_dir).unwrap();
    let log = d.join("readme.log");
    let bin_dir = Path::new(URAID).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());

    let mut cleanup = Cleanup { dir: d.clone(), pgid: None };
    let out = std::fs::File::create(&log).unwrap();
    let t0 = Instant::now();
    let mut child = Command::new("bash")
        .arg(&sh)
        .current_dir(&d)
        .env("PATH", path)
        .env("DIR", &d)
        .env("URAID_CONFIG", d.join("uraid.conf"))
        .env("URAID_RUN_DIR", &run_dir)
        .env("URAID_STATE_DIR", d.join("state"))
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0)
        .spawn()
        .expect("cannot run bash");
    cleanup.pgid = Some(child.id() as i32);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(TIMEOUT_S) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let took = t0.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let at = text.lines().rev().find(|l| l.starts_with("+ README.md:")).unwrap_or("(no command)").to_string();
    match status {
        Some(st) if st.success() => {}
        Some(st) => {
            // The ERR trap's line; bash's own for an unset variable (no trap).
            let why = text
                .lines()
                .find(|l| l.starts_with("readme-test: "))
                .map(str::to_string)
                .or_else(|| {
                    text.lines().rev().find(|l| l.contains("readme.sh: line ")).map(|l| l.replace(&*sh.to_string_lossy(), "README.md"))
                })
                .unwrap_or_else(|| format!("bash ended with {st} after {at}"));
            panic!("the README walkthrough failed after {took:.0} s: {why}\n--- last lines of its output ---\n{}", tail(&text, 60));
        }
        None => panic!("the README walkthrough did not end within {TIMEOUT_S} s; it was at {at}\n--- last lines ---\n{}", tail(&text, 60)),
    }
    eprintln!(
        "README walkthrough: {} code blocks ({commands} commands) ran in {took:.1} s; {} skipped by a marker (README lines {:?})",
        script.run.len(),
        script.skipped.len(),
        script.skipped
    );
    // The README's own "when done" detaches what it attached.
    let left = loops_under(&d);
    drop(cleanup);
    assert!(left.is_empty(), "the walkthrough left loop devices attached: {left:?}");
}

/// `uraid serve --fork` (which the walkthrough uses instead of `&` and a
/// sleep): it returns once the array is served, so the control socket
/// answers at once and the export takes a client, and the server goes on
/// until `uraid stop`; when the server cannot start, it returns status 1
/// with the error, leaving no process behind.
#[test]
fn serve_fork_returns_once_served_or_failed() {
    let _g = shared();
    let dir = tmpdir();
    let d = dir.path();
    let run_dir = d.join("run");
    let m = sparse_files(d, "m", 2, 64 << 20);
    uraid_ok(&with(&["create", "--level", "1", "--name", "forked"], &strs(&m)));
    let cmd = |args: &[&str], out: &Path| {
        let f = std::fs::File::create(out).unwrap();
        Command::new(URAID)
            .args(args)
            .env("URAID_RUN_DIR", &run_dir)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .status()
            .unwrap()
    };
    // Stops the forked server even when an assert fails.
    struct Stop<'a>(&'a Path);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            let _ = Command::new(URAID)
                .args(["stop", "forked"])
                .env("URAID_RUN_DIR", self.0)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
    let _stop = Stop(&run_dir);
    let sock = d.join("forked.sock");
    let log = d.join("serve.log");
    let st = cmd(&with(&["serve", "--fork", "--socket", s(&sock)], &strs(&m)), &log);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(st.success(), "serve --fork failed ({st}):\n{text}");
    assert!(text.contains("serving 'forked'"), "serve --fork returned before it served:\n{text}");
    // Served already: the live status answers through the control socket,
    // and an NBD client gets the export.
    let o = d.join("status.log");
    assert!(cmd(&["status", "forked"], &o).success());
    let status = std::fs::read_to_string(&o).unwrap();
    assert!(status.contains("served by uraid serve"), "status right after serve --fork is not live:\n{status}");
    require_tool("nbdinfo", "libnbd-bin");
    run_tool(Command::new("nbdinfo").arg("--size").arg(format!("nbd+unix:///forked?socket={}", s(&sock))));
    assert!(cmd(&["stop", "forked"], &o).success(), "{}", std::fs::read_to_string(&o).unwrap());

    // A server that cannot start: the parent says so with status 1, and
    // no child is left serving.
    let bad = sparse_file(d, "not-a-member", 64 << 20);
    let t0 = Instant::now();
    let st = cmd(&["serve", "--fork", s(&bad)], &log);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(st.code(), Some(1), "serve --fork of a file that is no member: {st}\n{text}");
    assert!(text.contains("is not a uraid member"), "the error is not on stderr:\n{text}");
    assert!(t0.elapsed() < Duration::from_secs(60), "serve --fork took {:?} to fail", t0.elapsed());
    // Nothing holds the file: a child left serving would hold it open.
    let held = std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        std::fs::read_dir(p.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == bad))
    });
    assert!(!held, "a process still holds {} after serve --fork failed", bad.display());
}
