"""What the benchmark scripts in bench/ share: paths, running commands,
installing the tools they need, building uraid, and running fio.

Each script prints figures and ratios from ONE run (see ../shared/DESIGN.md,
"How speed is measured"); this module prints nothing itself.

The uraid binary the scripts run is the release build of this tree, built
by `prepare` (`cargo build --release`), or, when the environment variable
URAID_BIN is set, that binary as it is (nothing is built): e.g.
`URAID_BIN=/work/base/uraid-main-0b9f45d python3 bench/cache.py` measures an
older build with today's script.
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TESTBED = os.path.join(ROOT, "..", "shared", "testbed")
DRIVES = os.path.join(TESTBED, "drives")
PEER = os.path.join(TESTBED, "peer-btrfs")
# Where `cargo build` puts the binary: CARGO_TARGET_DIR when set, as cargo does.
TARGET_DIR = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
# URAID_BIN, when set, names the binary to run instead (see the docstring).
URAID = os.environ.get("URAID_BIN") or os.path.join(TARGET_DIR, "release", "uraid")


def sh(*args, capture=True, check=True):
    """Runs a command; returns its stdout (None when not captured). Exits the
    script with the command and its stderr when it fails and `check` is set."""
    r = subprocess.run(args, capture_output=capture, text=True)
    if check and r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(args)}\n{r.stderr}")
    return r.stdout if capture else None


def need_tools(*tools):
    """Installs with apt-get the Debian packages of the missing tools, given
    as (package, executable) pairs."""
    missing = [pkg for pkg, exe in tools if not shutil.which(exe)]
    if missing:
        sh("apt-get", "update", "-qq")
        sh("apt-get", "install", "-y", "-qq", *missing)


def parser(doc, runs=3, time=5.0, runs_help=None, time_help=None):
    """The argument parser every script starts from: --runs and --time."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=runs, help=runs_help)
    ap.add_argument("--time", type=float, default=time, help=time_help)
    return ap


def prepare(root_why, *tools):
    """Checks for root (`root_why` says what needs it), installs the missing
    tools and builds the release binary (not when URAID_BIN names one: it
    must then exist)."""
    if os.geteuid() != 0:
        sys.exit(f"run as root{f' ({root_why})' if root_why else ''}")
    need_tools(*tools)
    if os.environ.get("URAID_BIN"):
        if not os.access(URAID, os.X_OK):
            sys.exit(f"URAID_BIN={URAID} is not an executable file; give the path of a uraid binary, or unset it to build one")
        return
    sh("cargo", "build", "--release", "-q", "-p", "uraid", capture=False)


def testbed_down():
    """Takes the btrfs peer and the testbed drives down, ignoring errors."""
    subprocess.run([PEER, "down"], capture_output=True)
    subprocess.run([DRIVES, "down"], capture_output=True)


def fio_cmd(rw, bs, qd, runtime, size="1G"):
    """A timed fio job with CrystalDiskMark's shape: one job at queue depth
    `qd`, a 1 s ramp, random offsets without a map, JSON output. The caller
    adds the engine and the target."""
    return ["fio", "--name=t", f"--rw={rw}", f"--bs={bs}", f"--iodepth={qd}", f"--size={size}",
            "--time_based", f"--runtime={runtime}", "--ramp_time=1", "--norandommap",
            "--randrepeat=0", "--output-format=json"]


def fio_job(out):
    """The first job of fio's JSON output (anything fio printed before it,
    such as an engine's notes, is skipped)."""
    return json.loads(out[out.index("{"):])["jobs"][0]


def fio_figures(job, rw):
    """MB/s (bw_bytes / 1e6), IOPS, bytes, process CPU seconds (user +
    system) and CPU seconds per GB (10^9 bytes) of the read or write side of
    one fio job."""
    d = job["read"] if "read" in rw else job["write"]
    runtime = d["runtime"] / 1000.0
    cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100.0 * runtime
    return {"mbps": d["bw_bytes"] / 1e6, "iops": d["iops"], "bytes": d["io_bytes"], "cpu": cpu,
            "cpu_gb": cpu / (d["io_bytes"] / 1e9) if d["io_bytes"] else 0}


def best_of(runs, key, one):
    """The best (highest `key`) of `runs` calls of `one()`: CrystalDiskMark
    reports the best run too."""
    best = None
    for _ in range(runs):
        r = one()
        if best is None or r[key] > best[key]:
            best = r
    return best


def uraid_bench(args, targets, profiles, read_only=False, extra=(), size="1G"):
    """`uraid bench` under the testbed's ceilings, args.runs runs of args.time
    seconds over a test area of `size`: the best run of each test, keyed by
    (profile name, direction in lower case)."""
    cmd = [DRIVES, "run", "--", URAID, "bench", "--json", "--quiet", "--overwrite",
           "--profile", ",".join(profiles), "--runs", str(args.runs), "--time", str(args.time),
           "--warmup", "1", "--size", size, *extra] + (["--read-only"] if read_only else []) + list(targets)
    out = json.loads(sh(*cmd))
    return {(r["test"]["profile"]["name"], r["test"]["dir"].lower()): r["best"] for r in out["results"]}


def open_console(url):
    """Headless chromium showing the console (charts live) until killed."""
    return subprocess.Popen(["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                             "--disable-background-networking", "--disable-component-update", "--disable-sync",
                             f"--user-data-dir={tempfile.mkdtemp()}", "--remote-debugging-port=0", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def wait_http(addr, secs=20):
    """Waits until an HTTP server answers at `addr` (HOST:PORT), with any
    status; exits the script when none does within `secs`."""
    import urllib.error, urllib.request
    for _ in range(int(secs * 10)):
        try:
            urllib.request.urlopen(f"http://{addr}/", timeout=1)
            return
        except urllib.error.HTTPError:
            return  # it answered (401: it wants the token)
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing answers HTTP at {addr}")


def proc_cpu(pid):
    """CPU seconds (user + system) process `pid` has used, from /proc/PID/stat."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def wait_unix_socket(path, proc, secs=20):
    """Waits until a server accepts connections on unix socket `path`;
    exits the script with the server's stderr when `proc` does not within
    `secs` seconds."""
    import socket
    for _ in range(int(secs * 20)):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            s.close()
            return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit(f"uraid serve did not come up on {path}: " + (proc.stderr.read() if proc.stderr else ""))
