"""md beside uraid on the same emulated drives, in one run of the VM (issue 31).

Run from the repository root on the host (as root; it builds the release
binary, then boots ../shared/testbed/vm and runs itself inside):

    python3 bench/md.py [--levels 0,10,5,6] [--time 5] [--size 256M] [--json FILE]

Inside the VM, each level gets fresh null_blk drives (configfs, memory_backed=1:
4 for RAID 0, 10 and 5, 6 for RAID 6, and one more for RAID 5's rebuild) with
ceilings the drive itself enforces, so that md's kernel threads and uraid are
held to the same budget and neither is CPU-bound under TCG:

  --mbps N   null_blk's `mbps`: N MiB/s per drive, ONE budget for reads and
             writes together (as a real drive's). null_blk refills it every
             20 ms to (1 MiB / 50) * N bytes, and a request larger than that
             never passes: N must be at least 26 for the 512 KiB requests
             max_sectors=1024 allows (26: 25 MiB/s in 128K or 512K requests);
             a smaller N is refused;
  --iops N   an IOPS ceiling per drive from the timer completion: irqmode=2,
             hw_queue_depth=16, submit_queues=1, completion_nsec=16/N s
             (at most 16 requests in flight, each taking 16/N s), also shared
             by reads and writes.

Per level (and for RAID 5 and 6 with a write-intent bitmap and without: md's
--bitmap=internal at mdadm's default bitmap chunk against uraid's default
bitmap, and --bitmap=none against --no-bitmap), at the same chunk (--chunk,
128K): CrystalDiskMark SEQ1M Q8T1 and RND4K Q32T1, read and write, by fio
(libaio, direct=1) on /dev/md0 and on uraid's ublk export (/dev/ublkbN of
`uraid serve --ublk`), and by `uraid bench` in process on the same drives.
RAID 5 (with bitmaps) also: both read tests with one member failed, and the
time to rebuild one member onto the spare after the array was written whole
(md: --fail, --remove, --add the spare, until /proc/mdstat shows no recovery,
speed_limit_min = speed_limit_max = 2,000,000 KB/s; uraid: fail, then
`uraid replace` onto the spare, no --rate): the drives' ceilings bound both.

Prints one table, rows = (level, test), columns md, uraid ublk, uraid in
process and the ratios uraid/md (for the rebuild, md's time / uraid's), and
the CPU line: the share of both vCPUs busy (/proc/stat, over the measured
part of each test) and the busiest thread group's CPU (md's mdX_raidN
thread, uraid serve's process, uraid bench's process) in % of one vCPU.
Each fio test also prints what the block layer saw (/sys/block/X/stat
before and after): requests on the target (md0 or ublkbN) and on the drives,
their mean size and mean number in flight (time in queue over the test's
wall time, fio's start included, so lower than the queue depth asked).
--json FILE writes every figure there too (FILE's directory is the VM's
writable directory).
"""
import json, os, re, shlex, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, URAID, fio_cmd, fio_job, fio_figures, parser, proc_cpu, sh  # noqa: E402

# The VM runner: ../shared/testbed/vm beside the repository (or beside its
# parent, for a git worktree one level deeper).
VM = next((p for p in (os.path.join(ROOT, "..", "shared", "testbed", "vm"),
                       os.path.join(ROOT, "..", "..", "shared", "testbed", "vm")) if os.path.exists(p)),
          os.path.join(ROOT, "..", "shared", "testbed", "vm"))
NAME = "mdcmp"
TESTS = [("SEQ1M Q8T1", "read", "read", "1M", 8), ("SEQ1M Q8T1", "write", "write", "1M", 8),
         ("RND4K Q32T1", "read", "randread", "4k", 32), ("RND4K Q32T1", "write", "randwrite", "4k", 32)]
DEPTH = 16  # null_blk tags per drive: the IOPS ceiling is DEPTH / completion time
MD_SPEED = 2000000  # KB/s, md's resync speed_limit_min and _max: the drives bound it


def mib(s):
    """A size such as 256M or 1G in MiB."""
    m = re.fullmatch(r"(\d+)([MG])", s.upper())
    if not m:
        sys.exit(f"--size {s}: give MiB or GiB, e.g. 256M or 1G")
    return int(m[1]) * (1024 if m[2] == "G" else 1)


def main():
    ap = parser(__doc__, runs=1, time=3.0, time_help="seconds per test (after a 1 s ramp)")
    ap.add_argument("--levels", default="5,0,6,10", help="levels to run, comma-separated (0, 10, 5, 6)")
    ap.add_argument("--size", default="256M", help="size of each drive (M or G): 256M-1G")
    ap.add_argument("--chunk", default="128K", help="chunk of both md and uraid (K)")
    ap.add_argument("--mbps", type=int, default=26, help="bandwidth ceiling per drive, MiB/s, reads + writes")
    ap.add_argument("--iops", type=int, default=400, help="IOPS ceiling per drive, reads + writes")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--uraid", default=URAID, help="the uraid binary (default: the release build)")
    ap.add_argument("--no-vm", action="store_true", help="run here (this is the VM); set when it boots itself")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    if any(lv not in (0, 10, 5, 6) for lv in levels):
        sys.exit(f"--levels {args.levels}: md and uraid share levels 0, 10, 5 and 6")
    mib(args.size)
    if args.mbps < 26 or args.iops < 1:
        sys.exit(f"--mbps {args.mbps} --iops {args.iops}: null_blk never passes a 512 KiB request with mbps under 26"
                 " (its budget per 20 ms tick is smaller); give --mbps 26 or more and --iops 1 or more")
    if not re.fullmatch(r"\d+K", args.chunk.upper()):
        sys.exit(f"--chunk {args.chunk}: give KiB, e.g. 128K")
    if args.no_vm or "virtme" in open("/proc/cmdline").read():
        return inside(args, levels)
    if os.geteuid() != 0:
        sys.exit("run as root (the VM runner needs it)")
    if args.uraid == URAID:
        sh("cargo", "build", "--release", "-q", "-p", "uraid", capture=False)
    out = os.path.abspath(args.json) if args.json else None
    rw = os.path.dirname(out) if out else tempfile.mkdtemp(prefix="md-bench.")
    os.makedirs(rw, exist_ok=True)
    argv = ["--levels", args.levels, "--time", str(args.time), "--size", args.size, "--chunk", args.chunk,
            "--mbps", str(args.mbps), "--iops", str(args.iops), "--uraid", os.path.abspath(args.uraid),
            *(["--json", out] if out else [])]
    cmd = " ".join(shlex.quote(a) for a in ["python3", os.path.abspath(__file__), "--no-vm", *argv])
    sys.exit(subprocess.run([VM, "run", "--rw", rw, "--", cmd], cwd=ROOT).returncode)


class Cpu:
    """Samples /proc/stat and some processes' CPU time every 0.25 s, to tell
    the CPU use of a window afterwards."""

    def __init__(self):
        self.samples, self.pids, self.stop = [], [], False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            f = open("/proc/stat").readline().split()[1:]
            total, idle = sum(map(int, f[:8])), int(f[3]) + int(f[4])
            own = 0.0
            for p in list(self.pids):
                try:
                    own += proc_cpu(p)
                except (OSError, IndexError):
                    pass
            self.samples.append((time.time(), total, idle, own))
            time.sleep(0.25)

    def window(self, t0, t1):
        """(share of all CPUs busy in %, CPU of the watched processes in %
        of one CPU) between t0 and t1."""
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if len(s) < 2:
            return None, None
        a, b = s[0], s[-1]
        busy = 100.0 * (1 - (b[2] - a[2]) / max(1, b[1] - a[1]))
        return busy, 100.0 * (b[3] - a[3]) / (b[0] - a[0])


def md_threads(dev):
    """Pids of md's kernel threads of `dev` (md0_raid5, md0_resync, ...)."""
    n = os.path.basename(dev) + "_"
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if open(f"/proc/{p}/comm").read().startswith(n):
                    out.append(int(p))
            except OSError:
                pass
    return out


def run(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stdout}{r.stderr}")
    return r.stdout


def drives(n, args):
    """n fresh null_blk drives with the ceilings; their paths."""
    base = "/sys/kernel/config/nullb"
    devs = []
    for i in range(n):
        d = f"{base}/nullb{i}"  # the drive is /dev/<this name>
        os.mkdir(d)
        nsec = int(DEPTH * 1e9 / args.iops)
        for k, v in [("size", mib(args.size)), ("memory_backed", 1), ("max_sectors", 1024), ("submit_queues", 1),
                     ("hw_queue_depth", DEPTH), ("irqmode", 2), ("completion_nsec", nsec), ("mbps", args.mbps),
                     ("power", 1)]:
            with open(f"{d}/{k}", "w") as f:
                f.write(str(v))
        devs.append(f"/dev/nullb{i}")
    run("udevadm", "settle", "--timeout=10", check=False)
    for d in devs:
        if not os.path.exists(d):
            sys.exit(f"{d} did not appear after powering its null_blk drive on")
    return devs


def drives_down():
    base = "/sys/kernel/config/nullb"
    for d in os.listdir(base):
        if not os.path.isdir(f"{base}/{d}"):
            continue  # "features"
        with open(f"{base}/{d}/power", "w") as f:
            f.write("0")
        os.rmdir(f"{base}/{d}")


def fio(cpu, args, target, rw, bs, qd, area):
    """One fio test on a block device: its figures and the CPU of its window
    (the last args.time s before it ended, less 0.3 s of fio's exit)."""
    cmd = fio_cmd(rw, bs, qd, args.time, f"{area}M") + ["--ioengine=libaio", "--direct=1", f"--filename={target}"]
    b0 = blk_stats(target)
    out = run(*cmd)
    t1 = time.time() - 0.3
    blk = blk_delta(b0, blk_stats(target))
    f = fio_figures(fio_job(out), rw)
    busy, own = cpu.window(t1 - args.time * 0.8, t1)
    print(f"   fio {rw} {bs} Q{qd} on {target}: {f['mbps']:.1f} MB/s, {f['iops']:.0f} IOPS; {blk_line(blk)}", flush=True)
    return {"mbps": f["mbps"], "iops": f["iops"], "busy": busy, "own": own, "blk": blk}


def blk_stats(target):
    """/sys/block/X/stat of the target and of every null_blk drive, with the
    time it was read: {name: [fields]}, "t": seconds."""
    names = [os.path.basename(os.path.realpath(target))] + sorted(
        d for d in os.listdir("/sys/block") if d.startswith("nullb"))
    res = {"t": time.time()}
    for n in names:
        try:
            res[n] = [int(x) for x in open(f"/sys/block/{n}/stat").read().split()]
        except OSError:
            pass
    return res


def blk_delta(a, b):
    """What the block layer saw over a test, from two blk_stats: for the
    target and for the drives (summed; the queue depth per drive): requests,
    their mean size (KiB) and the mean number in flight (time in queue /
    wall time), reads and writes together."""
    secs = max(b["t"] - a["t"], 1e-3)
    out = {}
    for part, names in (("target", [k for k in a if k != "t" and not k.startswith("nullb")]),
                        ("drives", [k for k in a if k.startswith("nullb") and k in b])):
        if not names:
            continue
        d = [sum(b[n][i] - a[n][i] for n in names) for i in range(11)]
        reqs = d[0] + d[4]
        out[part] = {"reqs": reqs, "kib": (d[2] + d[6]) / 2 / reqs if reqs else 0.0,
                     "qd": d[10] / 1000 / secs / len(names)}
    return out


def blk_line(blk):
    return "; ".join(f"{k} {v['reqs']} req of {v['kib']:.0f} KiB, QD {v['qd']:.1f}" for k, v in blk.items())


def fio_all(cpu, args, target, area, tests=TESTS):
    return {(n, d): fio(cpu, args, target, rw, bs, qd, area) for n, d, rw, bs, qd in tests}


def fill(target):
    """Writes the whole device once (so a rebuild has everything to copy)."""
    print(f"   filling {target}", flush=True)
    run("fio", "--name=fill", "--rw=write", "--bs=1M", "--iodepth=8", "--ioengine=libaio", "--direct=1",
        f"--filename={target}")


def uraid_bench(cpu, args, devs, read_only=False):
    """`uraid bench` in process on the array over devs: each test's figures
    (its own CPU % of one core) and the machine's share busy over the run."""
    t0 = time.time()
    cmd = [args.uraid, "bench", "--json", "--quiet", "--overwrite", "--profile", "SEQ1M-Q8T1,RND4K-Q32T1",
           "--runs", "1", "--time", str(args.time), "--warmup", "1", "--size", f"{args.area}M",
           *(["--read-only"] if read_only else []), *devs]
    # 4 tests of warm-up + time, the fill of the area at the drives'
    # ceilings, and as much again: past that it hangs (seen once in a full
    # run, RAID 5 without bitmap), and the run goes on without its figures.
    limit = 120 + 8 * (args.time + 1) * 4
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        print(f"   uraid bench HUNG: still running after {limit:.0f} s; its threads and the drives:", flush=True)
        print(hang_dump(p.pid), flush=True)
        p.kill()
        p.communicate()
        return {}
    if p.returncode != 0:
        raise SystemExit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{out}{err}")
    busy, _ = cpu.window(t0, time.time())
    print(f"   uraid bench{' --read-only' if read_only else ''}: {time.time() - t0:.0f} s", flush=True)
    res = {}
    for r in json.loads(out)["results"]:
        b = r["best"]
        res[(r["test"]["profile"]["name"], r["test"]["dir"].lower())] = {
            "mbps": b["mbps"], "iops": b["iops"], "busy": busy, "own": b["cpu_pct"]}
    return res


def hang_dump(pid):
    """What a hung process waits for: each thread's name, wait channel,
    system call and kernel stack, and each null_blk drive's requests in
    flight (reads, writes)."""
    lines = []
    for t in sorted(os.listdir(f"/proc/{pid}/task")):
        def rd(f):
            try:
                return open(f"/proc/{pid}/task/{t}/{f}").read().strip()
            except OSError as e:
                return f"({e.strerror})"
        lines.append(f"    thread {t} {rd('comm')}: wchan {rd('wchan')}, syscall {rd('syscall').split(' ')[0]}")
        lines += [f"      {x}" for x in rd("stack").splitlines()]
    for d in sorted(x for x in os.listdir("/sys/block") if x.startswith("nullb")):
        lines.append(f"    {d} in flight (r w): {open(f'/sys/block/{d}/inflight').read().split()}")
    try:  # the threads' own stacks, where gdb is installed
        r = subprocess.run(["gdb", "-q", "-batch", "-p", str(pid), "-ex", "thread apply all bt 25"],
                           capture_output=True, text=True, timeout=60)
        lines += [f"    {x}" for x in r.stdout.splitlines() if x.startswith(("Thread", "#"))]
    except (OSError, subprocess.TimeoutExpired) as e:
        lines.append(f"    (no gdb stacks: {e})")
    return "\n".join(lines)


def md_side(cpu, args, level, devs, n, bitmap, extra):
    """md on devs[:n]: the four tests; with `extra` (RAID 5) also the
    degraded reads and the rebuild onto devs[n]."""
    md = "/dev/md0"
    run("mdadm", "--create", md, "--run", "--quiet", "--assume-clean", f"--level={level}", f"--chunk={args.chunk}",
        f"--raid-devices={n}", *([] if bitmap is None else [f"--bitmap={'internal' if bitmap else 'none'}"]),
        "--metadata=1.2", *devs[:n])
    run("udevadm", "settle", "--timeout=10", check=False)
    cpu.pids = md_threads(md)
    res = fio_all(cpu, args, md, args.area)
    if extra:
        fill(md)
        run("mdadm", md, "--fail", devs[n - 1])
        res.update({(f"degraded {k[0]}", k[1]): v for k, v in
                    fio_all(cpu, args, md, args.area, [t for t in TESTS if t[1] == "read"]).items()})
        run("mdadm", md, "--remove", devs[n - 1])
        for k in ("speed_limit_min", "speed_limit_max"):
            with open(f"/proc/sys/dev/raid/{k}", "w") as f:
                f.write(str(MD_SPEED))
        t0 = time.time()
        run("mdadm", md, "--add", devs[n])
        time.sleep(0.5)
        while re.search(r"recovery|resync", open("/proc/mdstat").read()):
            time.sleep(0.2)
        secs = time.time() - t0
        busy, own = cpu.window(t0, time.time())
        res[("rebuild 1 member", "s")] = {"secs": secs, "busy": busy, "own": own}
    cpu.pids = []
    print(open("/proc/mdstat").read().strip(), flush=True)
    run("mdadm", "--stop", md)
    run("mdadm", "--zero-superblock", *devs[:n + (1 if extra else 0)], check=False)
    return res


def uraid_side(cpu, args, level, devs, n, bitmap, extra):
    """uraid on devs[:n]: in process, then through ublk; with `extra` also
    the degraded reads (both ways) and the rebuild onto devs[n]."""
    members = devs[:n]
    run(args.uraid, "create", "--force", "--name", NAME, "--level", str(level), "--chunk", args.chunk,
        *([] if bitmap or bitmap is None else ["--no-bitmap"]), *members)
    inproc = uraid_bench(cpu, args, members)
    # --fork: the server keeps the stdout it was given, so a file, not a pipe.
    log = os.path.join(os.environ["URAID_RUN_DIR"], "serve.out")
    with open(log, "w") as f:
        r = subprocess.run([args.uraid, "serve", "--ublk", "--fork", *members], stdout=f, stderr=f)
    out = open(log).read()
    if r.returncode != 0:
        sys.exit(f"uraid serve {NAME} --ublk failed:\n{out}")
    m = re.search(r"^serving '%s' .* on (/dev/ublkb\d+)$" % NAME, out, re.M)
    if not m:
        sys.exit(f"no /dev/ublkbN in uraid serve's output:\n{out}")
    dev = m[1]
    pid = json.load(open(os.path.join(os.environ["URAID_RUN_DIR"], f"{NAME}.ublk")))["pid"]
    cpu.pids = [pid]
    ublk = fio_all(cpu, args, dev, args.area)
    if extra:
        fill(dev)
        run(args.uraid, "fail", NAME, "--member", str(n - 1), "--no-rebuild")
        ublk.update({(f"degraded {k[0]}", k[1]): v for k, v in
                     fio_all(cpu, args, dev, args.area, [t for t in TESTS if t[1] == "read"]).items()})
    cpu.pids = []
    run(args.uraid, "stop", NAME)
    while os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    if extra:
        inproc.update({(f"degraded {k[0]}", k[1]): v for k, v in uraid_bench(cpu, args, members, read_only=True).items()})
        t0 = time.time()
        run(args.uraid, "replace", "--old", str(n - 1), "--new", devs[n], "--quiet", "--force", *members)
        secs = time.time() - t0
        busy, _ = cpu.window(t0, time.time())
        inproc[("rebuild 1 member", "s")] = {"secs": secs, "busy": busy, "own": None}
    return ublk, inproc


def inside(args, levels):
    for m in ("null_blk", "ublk_drv", "raid0", "raid10", "raid456"):
        run("modprobe", m, *(["nr_devices=0"] if m == "null_blk" else []), check=False)
    if not os.path.isdir("/sys/kernel/config/nullb"):
        run("mount", "-t", "configfs", "none", "/sys/kernel/config", check=False)
    work = tempfile.mkdtemp(prefix="md-bench.", dir="/tmp")
    os.environ.update(URAID_RUN_DIR=f"{work}/run", URAID_CONFIG=f"{work}/uraid.conf", URAID_STATE_DIR=f"{work}/state")
    os.makedirs(f"{work}/run", mode=0o700)
    commit = run("git", "-C", ROOT, "log", "-1", "--format=%h %s", check=False).strip()
    cpu = Cpu()
    kernel, ncpu = os.uname().release, os.cpu_count()
    print(f"md beside uraid: kernel {kernel}, {ncpu} vCPUs (QEMU TCG); uraid {commit}", flush=True)
    print(f"drives: null_blk memory_backed=1, {args.size} each, ceilings per drive (reads + writes share them):"
          f" {args.mbps} MiB/s (mbps), {args.iops} IOPS (hw_queue_depth={DEPTH},"
          f" completion_nsec={int(DEPTH * 1e9 / args.iops)}); chunk {args.chunk}; {args.time:g} s per test after"
          f" a 1 s ramp", flush=True)
    rows = []  # (level label, test, dir, md, ublk, inproc)
    for level in levels:
        n = 6 if level == 6 else 4
        # RAID 10: a bitmap on both (mdadm's default from 100 GB on); RAID 0 has none.
        for bitmap in ([True, False] if level in (5, 6) else [True] if level == 10 else [None]):
            extra = level == 5 and bitmap
            label = f"RAID {level}" + ("" if bitmap is None else " bitmap" if bitmap else " no bitmap")
            print(f"== {label}, {n} drives", flush=True)
            devs = drives(n + (1 if extra else 0), args)
            data = {0: n, 10: n // 2, 5: n - 1, 6: n - 2}[level]
            args.area = data * mib(args.size) // 2
            md = md_side(cpu, args, level, devs, n, bitmap, extra)
            ublk, inproc = uraid_side(cpu, args, level, devs, n, bitmap, extra)
            drives_down()
            for key in md:
                rows.append((label, key[0], key[1], md[key], ublk.get(key), inproc.get(key)))
            print_rows(rows[-len(md):])
    cpu.stop = True
    print()
    print(f"md beside uraid on the same drives (uraid {commit}; kernel {kernel}, {ncpu} vCPUs, TCG)")
    print_rows(rows, header=True)
    cpu_line(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kernel": kernel, "vcpus": ncpu, "commit": commit, "size": args.size, "chunk": args.chunk,
                       "mbps": args.mbps, "iops": args.iops, "depth": DEPTH, "time": args.time,
                       "rows": [{"level": r[0], "test": r[1], "dir": r[2], "md": r[3], "uraid_ublk": r[4],
                                 "uraid_inproc": r[5]} for r in rows]}, f, indent=1)
        print(f"figures in {args.json}")


def figure(row, r):
    """The figure of one cell (MB/s, IOPS or s) and whether more is better."""
    if r is None:
        return None
    if "secs" in r:
        return r["secs"]
    return r["mbps"] if row[1].endswith("SEQ1M Q8T1") else r["iops"]


def print_rows(rows, header=False):
    if header:
        print(f"{'level':<16} {'test':<28} {'md':>9} {'uraid ublk':>11} {'in process':>11} {'ublk/md':>8}"
              f" {'inproc/md':>10}  unit")
    for row in rows:
        label, test, d = row[0], row[1], row[2]
        vals = [figure(row, r) for r in row[3:6]]
        unit = "s" if d == "s" else "MB/s" if test.endswith("SEQ1M Q8T1") else "IOPS"

        def ratio(v):
            if v is None or not vals[0]:
                return "-"
            return f"{(vals[0] / v if d == 's' else v / vals[0]):.2f}"
        cells = ["-" if v is None else f"{v:.1f}" for v in vals]
        name = f"{test} {d}" if d != "s" else f"{test} (md time / uraid)"
        busy = "/".join("-" if r is None or r.get("busy") is None else f"{r['busy']:.0f}" for r in row[3:6])
        print(f"{label:<16} {name:<28} {cells[0]:>9} {cells[1]:>11} {cells[2]:>11} {ratio(vals[1]):>8}"
              f" {ratio(vals[2]):>10}  {unit:<5} CPU busy % md/ublk/inproc {busy}", flush=True)


def cpu_line(rows):
    def peak(i, k):
        v = [r[i][k] for r in rows if r[i] is not None and r[i].get(k) is not None]
        return max(v) if v else float("nan")
    print(f"CPU, highest over the tests: both vCPUs busy: md {peak(3, 'busy'):.0f}%, uraid ublk {peak(4, 'busy'):.0f}%,"
          f" uraid in process {peak(5, 'busy'):.0f}% (of all vCPUs); md's mdX_raidN thread {peak(3, 'own'):.0f}%,"
          f" uraid serve {peak(4, 'own'):.0f}%, uraid bench {peak(5, 'own'):.0f}% (of one vCPU)")


if __name__ == "__main__":
    main()
