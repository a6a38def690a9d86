#!/usr/bin/env python3
"""The exports against the in-process engine, all inside ONE VM boot (issue 29's "Speed").

On the same array in the same VM (../shared/testbed/vm: Debian's kernel with
ublk, nbd and null_blk, under QEMU TCG), it measures:

  in-process    `uraid bench` on the array's members (uraid's own load
                generator on the engine, no export)
  ublk          fio on /dev/ublkbN of `uraid serve --ublk`
  NBD kernel    fio on /dev/nbd0: nbd-client over `uraid serve`'s unix socket
  nbdfuse+loop  fio on a loop device over nbdfuse's file of the same socket

and, in setup (a), two floors of the ublk export:

  null_blk      fio on a null_blk drive alone (the kernel block layer alone)
  ublk null     fio on the /dev/ublkbN of the `ublk-null` example of
                crates/uraid-ublk: a ublk server answering every request at
                once, no engine behind it (the ublk driver and one ring's
                wait: what no ublk server can beat); the table says how far
                uraid's ublk export is from it, and how far it is from
                null_blk (the ublk driver's own cost, under TCG)

Profiles: RND4K Q32T1 read (IOPS), SEQ1M Q8T1 read and write (MB/s), RND4K
Q1T1 read latency (mean and p99, µs), and the server's CPU per I/O in the
RND4K Q32T1 read (the `uraid serve` process's user + system time from
/proc/PID/stat over the fio run, divided by the I/Os the block device
completed in it; in process: `uraid bench`'s own CPU time over its I/Os,
load generator included). fio: io_uring, direct=1, one job per profile,
stonewalled in one fio run (each fio start costs seconds under TCG).

Two setups of 4 null_blk members (configfs: memory_backed=1 for the
superblock, max_sectors=1024, hw_queue_depth=64; scheduler none everywhere):
  (a) no ceilings: the ratios to in-process; issue 29's targets beside:
      ublk >= 90% of in-process RND4K Q32T1 IOPS, ublk server CPU per I/O
      <= in-process + 1.5 µs, and the QD1 latency ublk adds.
  (b) throttled drives: null_blk mbps=N per drive, --seq-mbps for SEQ1M
      Q8T1 read and write, then --rnd-mbps (256 x N 4K requests/s: an IOPS
      ceiling; requests cut to 4K) for RND4K Q32T1 read; a fifth drive with
      the same ceiling is measured alone with fio first, then each path as a
      share of 4 x one drive (target: ublk >= 97%).
One array serves every setup: the drives are power-cycled with the new
ceiling (null_blk keeps their data).

Figures under TCG are several times slower than on hardware (CPU µs per I/O
several times larger): compare the ratios, measured together in one boot.

Usage (as root, on the host): python3 bench/export.py [--levels 0,5] [--time S] [--uraid PATH] [--out DIR]
It builds `cargo build --release -p uraid` and the ublk-null example
(unless --uraid / --ublk-null), boots the VM once, prints the tables and
writes DIR/export.json (default target/bench-export).
--no-ublk measures the other paths only (a uraid without `serve --ublk`).
--paths P,.. measures only those paths (in-process always), --setups a
skips the throttled drives: short runs while working on one path.
--syscalls also counts the syscalls per I/O of the ublk servers (strace -c
-f on the server over a separate fio run of RND4K Q32T1 and Q1T1 read; the
slowdown of strace is not in the other figures).
"""
import argparse, glob, json, os, shlex, shutil, signal, subprocess, sys, time

from common import ROOT, TARGET_DIR, TESTBED, proc_cpu, wait_unix_socket



def vm_tool():
    """The VM tool: $URAID_VM, else ../shared/testbed/vm beside this
    checkout, or beside the main checkout of this git worktree."""
    if os.environ.get("URAID_VM"):
        return os.environ["URAID_VM"]
    here = os.path.join(TESTBED, "vm")
    if os.path.exists(here):
        return os.path.normpath(here)
    r = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=ROOT,
                       capture_output=True, text=True)
    if r.returncode == 0:
        main = os.path.join(os.path.dirname(os.path.dirname(r.stdout.strip())), "shared", "testbed", "vm")
        if os.path.exists(main):
            return main
    return os.path.normpath(here)


NULLB = "/sys/kernel/config/nullb"
RUN_DIR = "/tmp/uraid-export-bench"          # the guest's /tmp: sockets, mounts, serve's run dir
SOCK = os.path.join(RUN_DIR, "bench.sock")
NAME = "bench"
PATHS = ["in-process", "null_blk", "ublk null", "ublk null 2 rings", "ublk B", "ublk", "NBD kernel", "nbdfuse+loop"]
# Measured only when --paths names them: the null ublk server waiting as
# the export's queue loop did before it had one ring (a second ring polling
# the ublk ring's fd).
# "ublk B": `serve --ublk` of another uraid build (--uraid-b), beside
# this one's in the same boot (a before/after).
EXTRA_PATHS = ["ublk null 2 rings", "ublk B"]
# Measured in setup (a) only: the floors of the ublk export.
FLOORS = ["null_blk", "ublk null"]

# (key, fio job name, rw, bs, qd): the profiles of setup (a); (b) runs the first three.
RND_Q32 = ("RND4K Q32T1 read", "rnd4k-q32-read", "randread", "4k", 32)
SEQ_READ = ("SEQ1M Q8T1 read", "seq1m-q8-read", "read", "1M", 8)
SEQ_WRITE = ("SEQ1M Q8T1 write", "seq1m-q8-write", "write", "1M", 8)
RND_Q1 = ("RND4K Q1T1 read", "rnd4k-q1-read", "randread", "4k", 1)
# uraid bench's (profile, direction) for each key.
INPROC = {RND_Q32[0]: ("RND4K Q32T1", "read"), SEQ_READ[0]: ("SEQ1M Q8T1", "read"),
          SEQ_WRITE[0]: ("SEQ1M Q8T1", "write"), RND_Q1[0]: ("RND4K Q1T1", "read")}


T0 = time.time()


def log(msg):
    print(msg, flush=True)


def step(msg):
    """A progress line, with the seconds since the script started."""
    log(f"[{time.time() - T0:5.0f} s] {msg}")


def run(*args, check=True):
    """Runs a command, stdout captured; exits the script naming the command
    and its stderr when it fails and `check` is set."""
    r = subprocess.run(args, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"export.py: command failed ({r.returncode}): {shlex.join(args)}\n{r.stderr.strip()}")
    return r


def has_ublk_option(uraid):
    """Whether this uraid binary has `serve --ublk`."""
    r = subprocess.run([uraid, "serve", "--help"], capture_output=True, text=True)
    return "--ublk" in r.stdout


# ---------------------------------------------------------------------------
# The guest side: null_blk drives, the paths, fio.
# ---------------------------------------------------------------------------

class Drives:
    """`n` null_blk devices of `size_mib` MiB named PREFIX0.. made through
    configfs, memory-backed (the superblock must stay); `throttle()`
    changes their ceiling (a power cycle: the data stays), `remove()`
    takes them down."""

    def __init__(self, prefix, n, size_mib):
        self.dirs = [os.path.join(NULLB, f"{prefix}{i}") for i in range(n)]
        self.devs = []
        for d in self.dirs:
            os.mkdir(d)
            self.configure(d, {"size": size_mib, "memory_backed": 1, "blocksize": 4096, "hw_queue_depth": 64,
                               "submit_queues": 1})
        self.throttle(0, 1024)

    @staticmethod
    def configure(d, attrs):
        for k, v in attrs.items():
            p = os.path.join(d, k)
            if not os.path.exists(p):
                sys.exit(f"export.py: this kernel's null_blk has no configfs attribute '{k}' ({p})")
            with open(p, "w") as f:
                f.write(str(v))

    def throttle(self, mbps, max_sectors):
        """Powers the drives off and on again with a ceiling of `mbps` MiB/s
        each (0: none) and requests of at most `max_sectors` 512-byte
        sectors. null_blk's budget is per 20 ms tick and a request larger
        than one tick's budget never passes, hence the small max_sectors
        with a low mbps."""
        self.devs = []
        for d in self.dirs:
            with open(os.path.join(d, "power"), "w") as f:
                f.write("0")
            self.configure(d, {"mbps": mbps, "max_sectors": max_sectors})
            with open(os.path.join(d, "power"), "w") as f:
                f.write("1")
            # The disk is named after the configfs directory (Linux 6.x),
            # or nullb<index> (older kernels).
            idx = open(os.path.join(d, "index")).read().strip()
            names = [f"/dev/{os.path.basename(d)}", f"/dev/nullb{idx}"]
            for _ in range(100):
                dev = next((n for n in names if os.path.exists(n)), None)
                if dev:
                    break
                time.sleep(0.05)
            else:
                sys.exit(f"export.py: null_blk {d} is powered on but neither of {' '.join(names)} appeared")
            set_no_scheduler(dev)
            self.devs.append(dev)

    def remove(self):
        for d in self.dirs:
            with open(os.path.join(d, "power"), "w") as f:
                f.write("0")
            os.rmdir(d)


def set_no_scheduler(dev):
    """Puts block device `dev` on the 'none' I/O scheduler (null_blk with
    one queue gets mq-deadline by default), so that every path is measured
    without one."""
    p = f"/sys/block/{os.path.basename(os.path.realpath(dev))}/queue/scheduler"
    if os.path.exists(p):
        try:
            with open(p, "w") as f:
                f.write("none")
        except OSError:
            pass


def blk_sectors(dev):
    """Size of block device `dev` in 512-byte sectors (0 when it has none
    yet or is gone), from /sys/block/DEV/size."""
    try:
        return int(open(f"/sys/block/{os.path.basename(os.path.realpath(dev))}/size").read())
    except (OSError, ValueError):
        return 0


def dev_ios(dev):
    """Requests block device `dev` has completed (reads + writes), from
    /sys/block/DEV/stat."""
    f = open(f"/sys/block/{os.path.basename(os.path.realpath(dev))}/stat").read().split()
    return int(f[0]) + int(f[4])


def fio(dev, jobs, args, size):
    """One fio run of `jobs` (key, name, rw, bs, qd) on `dev`, stonewalled
    one after the other, each with a 1 s ramp and args.time s measured:
    per key MB/s, IOPS, mean latency (µs, fio's lat) and p99 (µs, clat)."""
    cmd = ["fio", "--output-format=json", f"--filename={dev}", f"--ioengine={args.engine}", "--direct=1",
           f"--size={size}", "--time_based", f"--runtime={args.time}", "--ramp_time=1", "--norandommap",
           "--randrepeat=0"]
    for _, name, rw, bs, qd in jobs:
        cmd += [f"--name={name}", f"--rw={rw}", f"--bs={bs}", f"--iodepth={qd}", "--stonewall"]
    r = run(*cmd, check=False)
    if "{" not in r.stdout:
        sys.exit(f"export.py: fio on {dev} failed ({r.returncode}): {r.stderr.strip()}")
    out = json.loads(r.stdout[r.stdout.index("{"):])
    res = {}
    for (key, name, rw, _, _), job in zip(jobs, out["jobs"]):
        if job.get("error"):
            sys.exit(f"export.py: fio job {name} on {dev} failed: error {job['error']} {r.stderr.strip()}")
        d = job["write" if "write" in rw else "read"]
        pct = d["clat_ns"].get("percentile", {})
        res[key] = {"mbps": d["bw_bytes"] / 1e6, "iops": d["iops"], "lat_mean_us": d["lat_ns"]["mean"] / 1e3,
                    "lat_p99_us": pct.get("99.000000", 0) / 1e3, "ios": d["total_ios"]}
    return res


def thread_cpu(pid):
    """CPU seconds (user + system) of each thread of process `pid`, keyed
    by (thread id, name), from /proc/PID/task/TID/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            raw = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue  # it ended meanwhile
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        f = raw.rsplit(")", 1)[1].split()
        out[(tid, name)] = (int(f[11]) + int(f[12])) / tick
    return out


def busiest(before, after, n=4):
    """The `n` threads that used the most CPU between two thread_cpu()
    readings: [name, CPU seconds]."""
    d = sorted(((after[k] - before.get(k, 0), k[1]) for k in after), reverse=True)[:n]
    return [[name, round(c, 2)] for c, name in d if c > 0]


def measure_device(dev, server_pid, jobs, args, size):
    """fio on block device `dev`: RND4K Q32T1 read alone when `jobs` has
    it, with the server's CPU (and its busiest threads) and the device's
    completed requests counted over it (server CPU µs per I/O), then the
    other `jobs` in one stonewalled run."""
    set_no_scheduler(dev)
    res = {}
    if RND_Q32 in jobs and server_pid is None:
        res.update(fio(dev, [RND_Q32], args, size))
    elif RND_Q32 in jobs:
        c0, t0, n0 = proc_cpu(server_pid), thread_cpu(server_pid), dev_ios(dev)
        res.update(fio(dev, [RND_Q32], args, size))
        c1, t1, n1 = proc_cpu(server_pid), thread_cpu(server_pid), dev_ios(dev)
        res["server_cpu_us_per_io"] = (c1 - c0) / max(1, n1 - n0) * 1e6
        res["server_cpu_ios"] = n1 - n0
        res["server_busiest_threads"] = busiest(t0, t1)
    rest = [j for j in jobs if j is not RND_Q32]
    if rest:
        res.update(fio(dev, rest, args, size))
    return res


class Serve:
    """`uraid serve` on the array's members (with --ublk: its /dev/ublkbN
    in `dev`), stopped with SIGTERM."""

    def __init__(self, args, devs, ublk, uraid=None):
        if os.path.exists(SOCK):
            os.unlink(SOCK)
        before = set(glob.glob("/dev/ublkb*"))
        # --ublk alone: the device, no NBD socket.
        cmd = [uraid or args.uraid, "serve", *(["--ublk"] if ublk else ["--socket", SOCK]), *devs]
        self.err = open(os.path.join(RUN_DIR, "serve.err"), "w+")
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err, text=True,
                                  env=dict(os.environ, URAID_RUN_DIR=RUN_DIR))
        self.dev = None
        if not ublk:
            wait_unix_socket(SOCK, self.p)
            return
        for _ in range(600):
            if self.p.poll() is not None:
                sys.exit(f"export.py: `{shlex.join(cmd)}` exited ({self.p.returncode}): {self.stderr()}")
            for dev in sorted(set(glob.glob("/dev/ublkb*")) - before):
                if blk_sectors(dev) > 0:  # started: it has its size
                    self.dev = dev
                    return
            time.sleep(0.1)
        self.stop()
        sys.exit(f"export.py: `{shlex.join(cmd)}` made no /dev/ublkbN within 60 s: {self.stderr()}")

    def stderr(self):
        self.err.seek(0)
        return self.err.read().strip()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            sys.exit(f"export.py: uraid serve did not stop within 60 s of SIGTERM: {self.stderr()}")


def strace_counts(path):
    """Calls per syscall name of an `strace -c` summary file."""
    calls = {}
    for line in open(path):
        f = line.split()
        if len(f) in (5, 6) and f[3].isdigit():
            calls[f[-1]] = int(f[3])
    return calls


def syscalls_per_io(dev, server_pid, args, size):
    """Syscalls per I/O of the server `server_pid` (all its threads) over
    a fio run of RND4K Q32T1 read then one of Q1T1 read on `dev`, with
    `strace -c -f` attached: per profile, io_uring_enter and all syscalls
    per completed request (strace slows the server: only counts are kept)."""
    out = {}
    for key, name, rw, bs, qd in (RND_Q32, RND_Q1):
        summary = os.path.join(RUN_DIR, f"strace-{server_pid}-{qd}.txt")
        st = subprocess.Popen(["strace", "-c", "-f", "-p", str(server_pid), "-o", summary],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # attached to every thread
        n0 = dev_ios(dev)
        fio(dev, [(key, name, rw, bs, qd)], args, size)
        n = max(1, dev_ios(dev) - n0)
        st.send_signal(signal.SIGINT)
        st.wait(60)
        calls = strace_counts(summary)
        out[key] = {"ios": n, "io_uring_enter": calls.get("io_uring_enter", 0) / n,
                    "total": calls.get("total", sum(calls.values())) / n,
                    "top": sorted(((c, k) for k, c in calls.items() if k != "total"), reverse=True)[:4]}
    return out


class NullServe:
    """The ublk-null example (a ublk server with no engine) on a device of
    `mib` MiB: its /dev/ublkbN in `dev`; stopped with SIGTERM."""

    def __init__(self, args, mib, extra):
        cmd = [args.ublk_null, "--size-mib", str(mib), *extra]
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.dev = self.p.stdout.readline().strip()
        if not self.dev.startswith("/dev/ublkb"):
            self.p.kill()
            sys.exit(f"export.py: `{shlex.join(cmd)}` made no device: {self.p.stderr.read().strip()}")
        for _ in range(100):
            if blk_sectors(self.dev) > 0:
                break
            time.sleep(0.05)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def nbd_kernel(args, srv, jobs, size):
    """The kernel NBD client on serve's unix socket: /dev/nbd0."""
    dev = "/dev/nbd0"
    run("nbd-client", "-N", NAME, "-u", SOCK, dev, "-b", "4096")
    try:
        for _ in range(100):
            if blk_sectors(dev) > 0:
                break
            time.sleep(0.05)
        return measure_device(dev, srv.p.pid, jobs, args, size)
    finally:
        run("nbd-client", "-d", dev, check=False)


def nbdfuse_loop(args, srv, jobs, size):
    """nbdfuse's file of serve's export, under a loop device with direct
    I/O (as on a kernel with neither ublk nor nbd)."""
    mnt = os.path.join(RUN_DIR, "fuse")
    pidfile = os.path.join(RUN_DIR, "nbdfuse.pid")
    os.makedirs(mnt, exist_ok=True)
    if os.path.exists(pidfile):
        os.unlink(pidfile)
    uri = f"nbd+unix:///{NAME}?socket={SOCK}"
    fuse = subprocess.Popen(["nbdfuse", "-P", pidfile, mnt, uri], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    loop = None
    try:
        for _ in range(300):
            if os.path.exists(pidfile) and os.path.getsize(pidfile) > 0:
                break
            if fuse.poll() is not None:
                sys.exit(f"export.py: nbdfuse {mnt} {uri} exited ({fuse.returncode}): {fuse.stderr.read().strip()}")
            time.sleep(0.1)
        loop = run("losetup", "-f", "--show", "--direct-io=on", os.path.join(mnt, "nbd")).stdout.strip()
        dio = open(f"/sys/block/{os.path.basename(loop)}/loop/dio").read().strip() == "1"
        res = measure_device(loop, srv.p.pid, jobs, args, size)
        res["loop_direct_io"] = dio
        return res
    finally:
        if loop:
            run("losetup", "-d", loop, check=False)
        run("fusermount3", "-u", mnt, check=False)
        try:
            fuse.wait(30)
        except subprocess.TimeoutExpired:
            fuse.kill()
            fuse.wait()


def in_process(args, devs, jobs, size):
    """`uraid bench` on the array's members: one run of args.time s per
    test after a 1 s warm-up; the figures of `jobs`, and the CPU µs per I/O
    of the RND4K Q32T1 read (the whole process: load generator and engine)."""
    reads = sorted({INPROC[k][0].replace(" ", "-") for k, *_ in jobs if INPROC[k][1] == "read"})
    writes = sorted({INPROC[k][0].replace(" ", "-") for k, *_ in jobs if INPROC[k][1] == "write"})
    best = {}
    runs = [(reads, "--read-only"), (writes, "--write-only")]
    if reads == writes:
        runs = [(reads, None)]
    for profiles, only in runs:
        if not profiles:
            continue
        cmd = [args.uraid, "bench", "--json", "--quiet", "--overwrite", *([only] if only else []), "--profile", ",".join(profiles),
               "--runs", "1", "--time", str(args.time), "--warmup", "1", "--size", size, *devs]
        out = json.loads(run(*cmd).stdout)
        for r in out["results"]:
            best[(r["test"]["profile"]["name"], r["test"]["dir"].lower())] = r["best"]
    res = {}
    for key, *_ in jobs:
        b = best[INPROC[key]]
        res[key] = {"mbps": b["mbps"], "iops": b["iops"], "lat_mean_us": b["lat_mean_us"], "lat_p99_us": b["lat_p99_us"],
                    "ios": b["ios"]}
        if key == RND_Q32[0]:
            res["server_cpu_us_per_io"] = b["cpu_secs"] / max(1, b["ios"]) * 1e6
            res["server_cpu_ios"] = b["ios"]
    return res


def all_paths(args, devs, jobs, size, floor=None):
    """Measures every path (of args.paths) on the array over `devs`; with
    `floor` (a spare null_blk drive, its test size), the floors too."""
    res = {}
    step("  in-process (uraid bench)")
    res["in-process"] = in_process(args, devs, jobs, size)
    if floor and "null_blk" in args.paths:
        step(f"  null_blk alone ({floor[0]})")
        res["null_blk"] = measure_device(floor[0], None, jobs, args, floor[1])
    for path, extra in (("ublk null", []), ("ublk null 2 rings", ["--two-rings"])):
        if not (floor and path in args.paths and args.ublk):
            continue
        srv = NullServe(args, args.size_mib, extra)
        try:
            step(f"  {path} ({srv.dev}, no engine)")
            res[path] = measure_device(srv.dev, srv.p.pid, jobs, args, size)
            if args.syscalls:
                res[path]["syscalls"] = syscalls_per_io(srv.dev, srv.p.pid, args, size)
        finally:
            srv.stop()
    for path, uraid in (("ublk B", args.uraid_b), ("ublk", args.uraid)):
        if not (args.ublk and path in args.paths and uraid):
            continue
        srv = Serve(args, devs, ublk=True, uraid=uraid)
        try:
            step(f"  {path} ({srv.dev}, {uraid})")
            res[path] = measure_device(srv.dev, srv.p.pid, jobs, args, size)
            res[path]["max_sectors_kb"] = int(open(f"/sys/block/{os.path.basename(srv.dev)}/queue/max_sectors_kb").read())
            if args.syscalls and floor:
                res[path]["syscalls"] = syscalls_per_io(srv.dev, srv.p.pid, args, size)
        finally:
            srv.stop()
    if "NBD kernel" not in args.paths and "nbdfuse+loop" not in args.paths:
        return res
    srv = Serve(args, devs, ublk=False)
    try:
        if "NBD kernel" in args.paths:
            step("  NBD kernel client (/dev/nbd0)")
            res["NBD kernel"] = nbd_kernel(args, srv, jobs, size)
        if "nbdfuse+loop" in args.paths:
            step("  nbdfuse + loop")
            res["nbdfuse+loop"] = nbdfuse_loop(args, srv, jobs, size)
    finally:
        srv.stop()
    return res


def member_mib(level, n, area_mib):
    """MiB of each null_blk member: the test area's share, plus room for the
    superblock (and the write-intent bitmap of a redundant level)."""
    data = n - (1 if level == 5 else 2 if level == 6 else 0)
    return -(-area_mib // data) + (16 if level == 0 else 96)


def guest(args):
    """Runs inside the VM: every setup and level, then the tables and JSON."""
    if os.geteuid() != 0:
        sys.exit("export.py --in-vm: run as root (it loads modules and makes block devices)")
    need = ["fio", "losetup"] + (["strace"] if args.syscalls else [])
    need += ["nbd-client"] * ("NBD kernel" in args.paths) + ["nbdfuse", "fusermount3"] * ("nbdfuse+loop" in args.paths)
    for exe in need:
        if not shutil.which(exe):
            sys.exit(f"export.py: {exe} is missing (apt-get install fio nbd-client libnbd-bin fuse3 mount)")
    os.makedirs(RUN_DIR, mode=0o700, exist_ok=True)
    os.chmod(RUN_DIR, 0o700)
    for mod in ("configfs", "loop", "fuse", "nbd"):
        run("modprobe", mod, check=False)
    if not os.path.isdir("/sys/kernel/config/nullb"):
        if not os.path.ismount("/sys/kernel/config"):
            run("mount", "-t", "configfs", "none", "/sys/kernel/config", check=False)
        r = run("modprobe", "null_blk", "nr_devices=0", check=False)
        if r.returncode != 0 or not os.path.isdir(NULLB):
            sys.exit(f"export.py: null_blk with configfs is not available in this kernel: {r.stderr.strip()}")
    if args.ublk:
        r = run("modprobe", "ublk_drv", check=False)
        if r.returncode != 0 or not os.path.exists("/dev/ublk-control"):
            sys.exit("export.py: no ublk in this kernel (modprobe ublk_drv: "
                     f"{r.stderr.strip() or 'no /dev/ublk-control'}); --no-ublk measures the other paths")
        if not has_ublk_option(args.uraid):
            sys.exit(f"export.py: {args.uraid} has no `serve --ublk`; build a uraid with the ublk export, or --no-ublk")
    area = args.size_mib
    size = f"{area}M"
    throttle = {"seq_mbps": args.seq_mbps, "rnd_mbps": args.rnd_mbps}
    result = {"config": {"time_s": args.time, "engine": args.engine, "area_mib": area, "chunk": args.chunk,
                         "members": 4, "throttle": throttle, "kernel": os.uname().release,
                         "ublk": args.ublk, "paths": args.paths, "setups": args.setups}, "levels": {}}
    t0 = time.time()
    for level in args.levels:
        lv = result["levels"][str(level)] = {"b": {}}
        mib = member_mib(level, 4, area)
        step(f"RAID {level}: 4 null_blk of {mib} MiB, memory-backed, and a fifth alone")
        drives, one = Drives("uraidbench", 4, mib), Drives("uraidone", 1, mib)
        try:
            step(f"  create RAID {level} over {' '.join(drives.devs)}")
            run(args.uraid, "create", "--level", str(level), "--chunk", args.chunk, "--name", NAME, "--force", *drives.devs)
            # The fifth drive's memory touched now (slow under TCG), as the
            # members' was by create's zeroing.
            run("dd", "if=/dev/zero", f"of={one.devs[0]}", "bs=1M", f"count={mib}", "oflag=direct")
            step(f"RAID {level}, (a) no ceilings")
            lv["a"] = all_paths(args, drives.devs, [RND_Q32, SEQ_READ, SEQ_WRITE, RND_Q1], size,
                                floor=(one.devs[0], f"{mib - 8}M"))
            if "b" not in args.setups:
                continue
            # Bandwidth ceilings for SEQ1M, requests cut to 128K (the
            # chunk: the same requests reach a member and the drive alone,
            # and null_blk's budget per tick passes whole requests only);
            # then a low one that is an IOPS ceiling for 4K requests (256
            # per MiB/s), with 4K requests.
            for mbps, max_sectors, jobs in ((args.seq_mbps, 256, [SEQ_READ, SEQ_WRITE]), (args.rnd_mbps, 8, [RND_Q32])):
                step(f"RAID {level}, (b) throttled: each drive {mbps} MiB/s ({', '.join(j[0] for j in jobs)})")
                drives.throttle(mbps, max_sectors)
                one.throttle(mbps, max_sectors)
                # The drive alone before and after the paths: the VM's
                # timer ticks (null_blk's budget) slow down when the host is
                # busy; the best is kept (the stricter denominator).
                step(f"  one drive alone ({one.devs[0]})")
                before = fio(one.devs[0], jobs, args, f"{mib - 8}M")
                part = all_paths(args, drives.devs, jobs, size)
                step(f"  one drive alone again ({one.devs[0]})")
                after = fio(one.devs[0], jobs, args, f"{mib - 8}M")
                part["one drive"] = {k: max(before[k], after[k], key=lambda r: r["mbps"]) for k in before}
                part["one drive, before"], part["one drive, after"] = before, after
                for path, figures in part.items():
                    lv["b"].setdefault(path, {}).update(figures)
        finally:
            drives.remove()
            one.remove()
    result["elapsed_s"] = time.time() - t0
    path = os.path.join(args.out, "export.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print_tables(result)
    log(f"\nJSON: {path}")


# ---------------------------------------------------------------------------
# The tables.
# ---------------------------------------------------------------------------

def verdict(ok):
    return "MET" if ok else "NOT MET"


def print_floors(a):
    """ublk against its floors: the null ublk server (no engine) and
    null_blk alone, in setup (a)."""
    q32, q1 = RND_Q32[0], RND_Q1[0]
    if "ublk" in a and "ublk B" in a:
        u, o = a["ublk"], a["ublk B"]
        log(f"ublk against ublk B (the other build): RND4K Q32T1 read IOPS {u[q32]['iops'] / o[q32]['iops']:.1%}, server CPU"
            f" µs/IO {u['server_cpu_us_per_io'] - o['server_cpu_us_per_io']:+.2f}, SEQ1M Q8T1 read MB/s"
            f" {u[SEQ_READ[0]]['mbps'] / o[SEQ_READ[0]]['mbps']:.1%}, QD1 read latency {u[q1]['lat_mean_us'] - o[q1]['lat_mean_us']:+.1f} µs")
    if "ublk" not in a or "ublk null" not in a:
        return
    u, n = a["ublk"], a["ublk null"]
    log(f"ublk against the null ublk server (no engine): RND4K Q32T1 read IOPS {u[q32]['iops'] / n[q32]['iops']:.1%}"
        f" (target >= 90%: {verdict(u[q32]['iops'] >= 0.9 * n[q32]['iops'])}), server CPU µs/IO"
        f" {u['server_cpu_us_per_io'] - n['server_cpu_us_per_io']:+.2f} (target <= +1.5 µs:"
        f" {verdict(u['server_cpu_us_per_io'] <= n['server_cpu_us_per_io'] + 1.5)}), SEQ1M Q8T1 read MB/s"
        f" {u[SEQ_READ[0]]['mbps'] / n[SEQ_READ[0]]['mbps']:.1%}, QD1 read latency {u[q1]['lat_mean_us'] - n[q1]['lat_mean_us']:+.1f} µs")
    if "ublk null 2 rings" in a:
        t = a["ublk null 2 rings"]
        log(f"the null ublk server waiting on a second ring (as the export did) against one ring: RND4K Q32T1 read IOPS"
            f" {t[q32]['iops'] / n[q32]['iops']:.1%}, server CPU µs/IO {t['server_cpu_us_per_io'] - n['server_cpu_us_per_io']:+.2f},"
            f" QD1 read latency {t[q1]['lat_mean_us'] - n[q1]['lat_mean_us']:+.1f} µs")
    if "null_blk" in a:
        r = a["null_blk"]
        log(f"the null ublk server against null_blk alone (the ublk driver's cost): RND4K Q32T1 read IOPS"
            f" {n[q32]['iops'] / r[q32]['iops']:.1%}, QD1 read latency {n[q1]['lat_mean_us'] - r[q1]['lat_mean_us']:+.1f} µs")


def print_tables(result):
    cfg = result["config"]
    for level, lv in result["levels"].items():
        a = lv["a"]
        inp = a["in-process"]
        paths = [p for p in PATHS if p in a]
        log(f"\nRAID {level} x4 (chunk {cfg['chunk']}), (a) no ceilings, kernel {cfg['kernel']} under TCG,"
            f" {cfg['time_s']} s per test, test area {cfg['area_mib']} MiB")
        short = {"ublk null 2 rings": "null 2 rings"}  # column headers of at most 13 characters
        head = f"{'':<30}" + "".join(f"{short.get(p, p):>14}" for p in paths)
        head += "".join(f"{short.get(p, p) + '/in':>16}" for p in paths[1:])
        log(head + "  target")
        rows = [("RND4K Q32T1 read", "iops", "IOPS"), ("SEQ1M Q8T1 read", "mbps", "MB/s"),
                ("SEQ1M Q8T1 write", "mbps", "MB/s"), ("RND4K Q1T1 read", "lat_mean_us", "mean µs"),
                ("RND4K Q1T1 read", "lat_p99_us", "p99 µs")]
        for key, fld, unit in rows:
            vals = [a[p][key][fld] for p in paths]
            line = f"{key + ' ' + unit:<30}" + "".join(f"{v:>14.1f}" for v in vals)
            if fld.startswith("lat"):  # latency: what the path adds
                line += "".join(f"{v - vals[0]:>+13.1f} µs" for v in vals[1:])
            else:
                line += "".join(f"{v / vals[0]:>16.1%}" if vals[0] else f"{'-':>16}" for v in vals[1:])
            if key == RND_Q32[0] and "ublk" in a:
                r = a["ublk"][key][fld] / inp[key][fld]
                line += f"  ublk >= 90%: {verdict(r >= 0.90)}"
            if key == RND_Q1[0] and "ublk" in a:
                line += f"  ublk adds {a['ublk'][key][fld] - inp[key][fld]:+.1f} µs"
            log(line)
        cpu = [a[p].get("server_cpu_us_per_io") for p in paths]
        line = f"{'server CPU µs/IO (RND4K Q32T1)':<30}" + "".join(f"{v:>14.2f}" if v is not None else f"{'-':>14}" for v in cpu)
        line += "".join(f"{v - cpu[0]:>+13.2f} µs" if v is not None else f"{'-':>16}" for v in cpu[1:])
        if "ublk" in a:
            u = a["ublk"]["server_cpu_us_per_io"]
            line += f"  ublk <= in-process + 1.5 µs: {verdict(u <= cpu[0] + 1.5)}"
        log(line)
        for p in paths:
            th = a[p].get("server_busiest_threads")
            if th:
                log(f"  {p} server's busiest threads in RND4K Q32T1 (CPU s): " + ", ".join(f"{n} {c}" for n, c in th))
        dio = a.get("nbdfuse+loop", {}).get("loop_direct_io")
        log(f"(in-process CPU: uraid bench's whole process, load generator included; exports: the server's;"
            f" null_blk: no server; loop over nbdfuse with direct I/O: {'yes' if dio else 'NO or not run'})")
        print_floors(a)
        for p in paths:
            sc = a[p].get("syscalls")
            if sc:
                log(f"  {p} syscalls per I/O (strace -c -f): " + "; ".join(
                    f"{k}: io_uring_enter {v['io_uring_enter']:.2f}, all {v['total']:.2f} "
                    f"({', '.join(f'{n} {c}' for c, n in v['top'])}; {v['ios']} I/Os)" for k, v in sc.items()))
        if "max_sectors_kb" in a.get("ublk", {}):
            log(f"  ublk device's largest request: {a['ublk']['max_sectors_kb']} KiB")

        b = lv["b"]
        if not b:
            continue
        one = b["one drive"]
        t = cfg["throttle"]
        paths = [p for p in PATHS if p in b]  # the floors are measured in (a) only
        log(f"\nRAID {level} x4, (b) throttled drives (null_blk mbps: {t['seq_mbps']} MiB/s each for SEQ1M,"
            f" {t['rnd_mbps']} MiB/s = {256 * t['rnd_mbps']} 4K IOPS each for RND4K): share of 4 x one drive")
        log(f"{'':<24}{'1 drive before/after':>21}{'4 x best':>10}" + "".join(f"{p:>20}" for p in paths) + "  target")
        for key, fld, unit in (("SEQ1M Q8T1 read", "mbps", "MB/s"), ("SEQ1M Q8T1 write", "mbps", "MB/s"),
                               ("RND4K Q32T1 read", "iops", "IOPS")):
            four = 4 * one[key][fld]
            line = f"{key + ' ' + unit:<24}{b['one drive, before'][key][fld]:>14.1f}/{b['one drive, after'][key][fld]:<6.1f}{four:>10.1f}"
            line += "".join(f"{b[p][key][fld]:>11.1f} {b[p][key][fld] / four:>7.1%}" for p in paths)
            if "ublk" in b:
                line += f"  ublk >= 97%: {verdict(b['ublk'][key][fld] / four >= 0.97)}"
            log(line)
    log(f"\nmeasured in {result.get('elapsed_s', 0):.0f} s of VM time")


# ---------------------------------------------------------------------------
# The host side: build, boot the VM once, run this script inside.
# ---------------------------------------------------------------------------

def host(args, argv):
    vm = vm_tool()
    if not (os.path.isfile(vm) and os.access(vm, os.X_OK)):
        sys.exit(f"export.py: the VM tool {vm} is missing: this benchmark boots a kernel with ublk, nbd and"
                 " null_blk with it (../shared/testbed/vm beside the checkout, or set URAID_VM)")
    if os.geteuid() != 0:
        sys.exit("export.py: run as root (the VM tool installs qemu and boots the VM as root)")
    if args.uraid:
        uraid = os.path.abspath(args.uraid)
        if not os.access(uraid, os.X_OK):
            sys.exit(f"export.py: --uraid {args.uraid}: no executable there")
    else:
        r = subprocess.run(["cargo", "build", "--release", "-q", "-p", "uraid"], cwd=ROOT)
        if r.returncode != 0:
            sys.exit("export.py: cargo build --release -p uraid failed (above)")
        uraid = os.path.join(TARGET_DIR, "release", "uraid")
    if args.ublk_null:
        ublk_null = os.path.abspath(args.ublk_null)
    elif args.ublk and ("ublk null" in args.paths or "ublk null 2 rings" in args.paths):
        r = subprocess.run(["cargo", "build", "--release", "-q", "-p", "uraid-ublk", "--example", "ublk-null"], cwd=ROOT)
        if r.returncode != 0:
            sys.exit("export.py: cargo build --release -p uraid-ublk --example ublk-null failed (above)")
        ublk_null = os.path.join(TARGET_DIR, "release", "examples", "ublk-null")
    else:
        ublk_null = None
    if args.ublk and not has_ublk_option(uraid):
        sys.exit(f"export.py: {uraid} has no `serve --ublk` (no ublk export in this build);"
                 " --no-ublk measures the other paths")
    out = os.path.abspath(args.out or os.path.join(TARGET_DIR, "bench-export"))
    os.makedirs(out, exist_ok=True)
    stale = os.path.join(out, "export.json")
    if os.path.exists(stale):
        os.unlink(stale)
    if args.uraid_b:
        argv = [*argv, "--uraid-b", os.path.abspath(args.uraid_b)]
    inner = ["python3", "-u", os.path.join(ROOT, "bench", "export.py"), *argv, "--in-vm", "--uraid", uraid, "--out", out,
             *(["--ublk-null", ublk_null] if ublk_null else [])]
    log(f"booting the VM: {vm} run --rw {out} -- {shlex.join(inner)}")
    t0 = time.time()
    r = subprocess.run([vm, "run", "--rw", out, "--", shlex.join(inner)], cwd=ROOT)
    if r.returncode != 0 or not os.path.exists(stale):
        sys.exit(f"export.py: the VM run failed (status {r.returncode}, {time.time() - t0:.0f} s); its output is above")
    log(f"VM run: {time.time() - t0:.0f} s in all; figures in {stale}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time", type=float, default=5, help="seconds measured per test (after a 1 s ramp); default 5")
    ap.add_argument("--levels", default="0", help="RAID levels, comma-separated (0, 5); default 0")
    ap.add_argument("--chunk", default="128K", help="chunk size; default 128K")
    ap.add_argument("--size-mib", type=int, default=256, help="test area in MiB (null_blk memory is slow to touch under TCG); default 256")
    ap.add_argument("--seq-mbps", type=int, default=25, help="(b) SEQ1M: bandwidth ceiling of each drive, MiB/s (null_blk mbps, at least 7; a multiple of 25 passes whole 128K requests in each 20 ms tick); default 25")
    ap.add_argument("--rnd-mbps", type=int, default=2, help="(b) RND4K: null_blk mbps of each drive, a ceiling of 256 x N 4K IOPS; default 2")
    ap.add_argument("--engine", default="io_uring", choices=["io_uring", "libaio"], help="fio's engine; default io_uring")
    ap.add_argument("--no-ublk", dest="ublk", action="store_false", help="skip the ublk export")
    ap.add_argument("--uraid", help="the uraid binary (default: cargo build --release -p uraid)")
    ap.add_argument("--uraid-b", help="another uraid build, measured as path 'ublk B' beside --uraid's (add 'ublk B' to --paths)")
    ap.add_argument("--ublk-null", help="the ublk-null example binary (default: cargo build --release -p uraid-ublk --example ublk-null)")
    default_paths = [p for p in PATHS[1:] if p not in EXTRA_PATHS]
    ap.add_argument("--paths", default=",".join(default_paths),
                    help=f"paths besides in-process, comma-separated; default {','.join(default_paths)} (also: {','.join(EXTRA_PATHS)})")
    ap.add_argument("--setups", default="a,b", help="a (no ceilings), b (throttled drives), or both (default a,b)")
    ap.add_argument("--syscalls", action="store_true", help="count the ublk servers' syscalls per I/O (strace, separate fio runs)")
    ap.add_argument("--out", help="directory for export.json (made writable in the VM); default target/bench-export")
    ap.add_argument("--in-vm", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        args.levels = [int(x) for x in args.levels.split(",")]
    except ValueError:
        sys.exit(f"export.py: --levels {args.levels}: give levels like 0 or 0,5")
    if any(level not in (0, 5) for level in args.levels):
        sys.exit(f"export.py: --levels {args.levels}: 0 and 5 are measured")
    if args.time <= 0 or args.size_mib < 16 or args.rnd_mbps < 1:
        sys.exit("export.py: --time and --rnd-mbps must be positive, --size-mib at least 16")
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    bad = [p for p in args.paths if p not in PATHS[1:]]
    if bad:
        sys.exit(f"export.py: --paths: unknown {', '.join(bad)}; give some of {','.join(PATHS[1:])}")
    args.setups = [x.strip() for x in args.setups.split(",") if x.strip()]
    if not args.setups or any(x not in ("a", "b") for x in args.setups):
        sys.exit(f"export.py: --setups {','.join(args.setups)}: give a, b or a,b")
    if args.seq_mbps < 7:
        # One 20 ms tick's budget must pass a 128 KiB request (max_sectors 256).
        sys.exit("export.py: --seq-mbps must be at least 7 (null_blk passes no request larger than 1/50 of it, and requests are 128 KiB)")
    if args.in_vm:
        if not args.uraid or not args.out or (args.ublk and any(p.startswith("ublk null") for p in args.paths) and not args.ublk_null):
            sys.exit("export.py --in-vm needs --uraid, --ublk-null and --out")
        guest(args)
    else:
        host(args, sys.argv[1:])


if __name__ == "__main__":
    main()
