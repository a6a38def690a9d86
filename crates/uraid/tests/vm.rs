//! The VM stage: the tests that need kernel parts this machine's kernel may
//! lack (ublk, nbd, null_blk), run by tests/vm/run-all in ONE boot of the
//! testbed's VM (`../shared/testbed/vm` from the repository root, or the
//! script named by `URAID_VM`) with this build's `uraid` binary.
//!
//! Without the VM tool the test fails and says how to get it, unless
//! `URAID_SKIP_VM=1` (then it says that it skipped). `URAID_VM_TESTS=WORD`
//! runs only the scripts whose name contains WORD; `URAID_VM_TIMEOUT`
//! (s, default 1800) bounds the whole stage, `VM_TEST_TIMEOUT` (s, default
//! 300) each script. Output with `-- --nocapture`.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The repository's top directory (this crate is crates/uraid).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root")
}

/// The VM tool: `URAID_VM`, else `shared/testbed/vm` next to the
/// repository (`../shared/testbed/vm` from its root) or next to one of its
/// parent directories (a git worktree inside the project's directory),
/// else /work/shared/testbed/vm.
/// Err: the places looked at.
fn vm_tool(root: &Path) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("URAID_VM") {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(format!("URAID_VM={} (no such file)", p.display())) };
    }
    // Last, where the project's machines keep the testbed: a checkout
    // elsewhere (a CI's clean clone) still finds it.
    let tried: Vec<PathBuf> =
        root.ancestors().skip(1).map(|d| d.join("shared/testbed/vm")).chain([PathBuf::from("/work/shared/testbed/vm")]).collect();
    tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    })
}

#[test]
fn vm_stage_passes() {
    let skip = std::env::var("URAID_SKIP_VM").is_ok_and(|v| v == "1");
    if skip {
        println!("vm stage SKIPPED (URAID_SKIP_VM=1): the kernel NBD client, ublk and discard tests of tests/vm did not run");
        return;
    }
    let root = repo_root();
    let vm = match vm_tool(&root) {
        Ok(vm) => vm,
        Err(tried) => panic!(
            "the VM stage needs the testbed's VM tool, a script `vm` (QEMU + virtme-ng + a Debian kernel with ublk, nbd and \
             null_blk; its `vm setup` installs those): not found at {tried}. Put the project's shared/testbed next to \
             the repository (../shared/testbed/vm, see the README), or point URAID_VM at the script, or set \
             URAID_SKIP_VM=1 to skip this stage (the tests of tests/vm then do not run)"
        ),
    };
    let uraid = env!("CARGO_BIN_EXE_uraid");
    let filter = std::env::var("URAID_VM_TESTS").unwrap_or_default();
    if !filter.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        panic!("URAID_VM_TESTS={filter:?}: give a word of letters, digits, _ or - (part of a script's name)");
    }
    let limit = Duration::from_secs(std::env::var("URAID_VM_TIMEOUT").ok().and_then(|v| v.parse().ok()).unwrap_or(1800));
    // The per-script limit of run-all (s), when set here.
    let per_script = match std::env::var("VM_TEST_TIMEOUT") {
        Ok(t) if t.parse::<u32>().is_ok() => format!("VM_TEST_TIMEOUT={t} "),
        _ => String::new(),
    };
    let inner = format!("{per_script}URAID={uraid} bash tests/vm/run-all {filter}");
    println!("vm stage: {} run -- '{inner}' (in {})", vm.display(), root.display());
    let started = Instant::now();
    // Its own process group, so that the VM (qemu under vng) can be
    // stopped as a whole when it overruns.
    let mut child = Command::new("bash")
        .arg(&vm)
        .args(["run", "--", &inner])
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", vm.display()));
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for the VM") {
            break Some(st);
        }
        if started.elapsed() > limit {
            // The whole group: vng, qemu and what they started.
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let secs = started.elapsed().as_secs();
    let all = format!("{out}\n--- stderr of {} ---\n{err}", vm.display());
    let Some(status) = status else {
        panic!("the VM stage did not end within {} s (URAID_VM_TIMEOUT); stopped it. Its output:\n{all}", limit.as_secs());
    };
    let summary = out.lines().rev().find(|l| l.starts_with("vm-tests: ")).unwrap_or("");
    assert!(
        status.success() && summary.contains(" 0 failed"),
        "the VM stage failed ({status}, after {secs} s; summary: {summary:?}). Its output:\n{all}"
    );
    println!("{out}");
    println!("vm stage: {summary} (in {secs} s, boot included)");
}
