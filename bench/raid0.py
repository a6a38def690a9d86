#!/usr/bin/env python3
"""RAID 0 speed on the shared testbed: single drive vs uraid RAID 0 vs btrfs raid0.

Prints figures and ratios from ONE run (absolute figures on a shared 2-core
machine are noise; ratios measured together are not). Issue 2's targets:

  part 1 (drives at 250 MB/s and 25k IOPS each, 4 drives):
    uraid RAID 0 over 4, chunk 128K: SEQ1M Q8T1 and RND4K Q32T1, read and
    write, >= 95% of 4 x one drive; side by side with btrfs raid0 (fio).
  part 2 (no ceilings, memory-speed drives):
    uraid RAID 0 RND4K Q32T1 read IOPS >= 90% of fio io_uring randread over
    the same four raw devices at the same total queue depth; CPU s per GB.

Needs root, the testbed (../shared/testbed), fio and btrfs-progs (installed
with apt-get when missing). Usage: python3 bench/raid0.py [--runs N] [--time S]
"""
import argparse, json, os, shutil, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TESTBED = os.path.join(ROOT, "..", "shared", "testbed")
DRIVES = os.path.join(TESTBED, "drives")
PEER = os.path.join(TESTBED, "peer-btrfs")
URAID = os.path.join(ROOT, "target", "release", "uraid")


def sh(*args, capture=True, check=True):
    r = subprocess.run(args, capture_output=capture, text=True)
    if check and r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(args)}\n{r.stderr}")
    return r.stdout if capture else None


def need_tools():
    missing = [p for p, t in (("fio", "fio"), ("btrfs-progs", "mkfs.btrfs")) if not shutil.which(t)]
    if missing:
        sh("apt-get", "update", "-qq")
        sh("apt-get", "install", "-y", "-qq", *missing)


def uraid_bench(targets, profiles, args, read_only=False, extra=()):
    cmd = [DRIVES, "run", "--", URAID, "bench", "--json", "--quiet", "--overwrite",
           "--profile", ",".join(profiles), "--runs", str(args.runs), "--time", str(args.time),
           "--warmup", "1", "--size", "1G", *extra, *targets]
    if read_only:
        cmd.insert(-len(targets), "--read-only")
    out = json.loads(sh(*cmd))
    res = {}
    for r in out["results"]:
        key = (r["test"]["profile"]["name"], r["test"]["dir"].lower())
        res[key] = r["best"]
    return res


def fio(filename, rw, bs, qd, args, size="1G", throttled=True):
    """Best of args.runs fio runs (CrystalDiskMark reports the best run too)."""
    best = None
    for _ in range(args.runs):
        cmd = ["fio", "--name=t", f"--filename={filename}", f"--rw={rw}", f"--bs={bs}",
               f"--iodepth={qd}", "--ioengine=io_uring", "--direct=1", f"--size={size}",
               "--time_based", f"--runtime={args.time}", "--ramp_time=1", "--norandommap",
               "--randrepeat=0", "--output-format=json"]
        if throttled:
            cmd = [DRIVES, "run", "--"] + cmd
        j = json.loads(sh(*cmd))["jobs"][0]
        d = j["read"] if "read" in rw else j["write"]
        runtime = d["runtime"] / 1000.0
        cpu = (j["usr_cpu"] + j["sys_cpu"]) / 100.0 * runtime
        r = {"mbps": d["bw_bytes"] / 1e6, "iops": d["iops"], "bytes": d["io_bytes"],
             "cpu_secs_per_gb": cpu / (d["io_bytes"] / 1e9) if d["io_bytes"] else 0}
        if best is None or r["mbps"] > best["mbps"]:
            best = r
    return best


def fig(r, seq):
    return r["mbps"] if seq else r["iops"]


def unit(seq):
    return "MB/s" if seq else "IOPS"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="timed runs per test (best is kept)")
    ap.add_argument("--time", type=float, default=5, help="seconds per run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (the testbed makes loop devices and blkio throttles)")
    need_tools()
    sh("cargo", "build", "--release", "-q", "-p", "uraid", capture=False)
    subprocess.run([PEER, "down"], capture_output=True)
    subprocess.run([DRIVES, "down"], capture_output=True)

    # ---- part 1: throttled drives -------------------------------------------------
    devs = sh(DRIVES, "up", "4").split()
    limits = dict(kv.split("=") for kv in sh(DRIVES, "limits").split())
    bw, iops = int(limits["bw_bytes_per_s"]), int(limits["iops"])
    print(f"testbed: {len(devs)} drives {' '.join(devs)}, each {bw/1e6:.0f} MB/s and {iops} IOPS;"
          f" runs={args.runs} x {args.time}s, best run kept")
    tests = [("SEQ1M Q8T1", "read", True, "1M", 8), ("SEQ1M Q8T1", "write", True, "1M", 8),
             ("RND4K Q32T1", "read", False, "4k", 32), ("RND4K Q32T1", "write", False, "4k", 32)]
    profiles = ["SEQ1M-Q8T1", "RND4K-Q32T1"]
    single = uraid_bench([devs[0]], profiles, args)
    sh(URAID, "create", "--level", "0", "--chunk", "128K", "--name", "bench", "--force", *devs)
    array = uraid_bench(devs, profiles, args)  # assembles the array from its superblocks
    testfile = sh(PEER, "up").strip()
    btrfs = {}
    for name, d, seq, bs, qd in tests:
        rw = ("read" if d == "read" else "write") if seq else ("randread" if d == "read" else "randwrite")
        btrfs[(name, d)] = fio(testfile, rw, bs, qd, args)
    sh(PEER, "down")

    print()
    print(f"{'test':<18} {'1 drive':>10} {'uraid RAID0 x4':>15} {'/ 4x1 drive':>12} {'/ 4x ceiling':>13}"
          f" {'btrfs raid0':>12} {'uraid/btrfs':>12}  unit")
    ok = True
    for name, d, seq, _, _ in tests:
        s, a, b = fig(single[(name, d)], seq), fig(array[(name, d)], seq), fig(btrfs[(name, d)], seq)
        ceiling = 4 * (bw / 1e6 if seq else iops)
        r_meas, r_ceil = a / (4 * s), a / ceiling
        ok &= min(r_meas, r_ceil) >= 0.95
        print(f"{name + ' ' + d:<18} {s:>10.1f} {a:>15.1f} {r_meas:>11.1%} {r_ceil:>13.1%}"
              f" {b:>12.1f} {a / b:>12.2f}  {unit(seq)}")
    print(f"target: uraid RAID 0 >= 95% of 4 x one drive (both measured and ceiling): {'MET' if ok else 'NOT MET'}")
    sh(DRIVES, "down")

    # ---- part 2: no ceilings: CPU cost of the engine --------------------------------
    devs = sh(DRIVES, "up", "4", "--bw", "0", "--iops", "0").split()
    for dv in devs:  # fill the drives so both read real data
        sh("fio", "--name=fill", f"--filename={dv}", "--rw=write", "--bs=1M", "--iodepth=8",
           "--ioengine=io_uring", "--direct=1", "--size=300M")
    u = uraid_bench(devs, ["RND4K-Q32T1"], args, read_only=True)[("RND4K Q32T1", "read")]
    f = fio(":".join(devs), "randread", "4k", 32, args, size="1G", throttled=False)
    ratio = u["iops"] / f["iops"]
    print()
    print("no ceilings (memory-speed drives), RND4K Q32T1 read, 4 drives, total QD 32, one thread each:")
    print(f"  fio io_uring over the 4 raw devices: {f['iops']:>10.0f} IOPS  {f['cpu_secs_per_gb']:.2f} CPU s/GB")
    print(f"  uraid RAID 0 x4 (128K chunk):        {u['iops']:>10.0f} IOPS  {u['cpu_secs_per_gb']:.2f} CPU s/GB")
    print(f"  uraid / fio: {ratio:.1%}  target >= 90%: {'MET' if ratio >= 0.9 else 'NOT MET'}")
    sh(DRIVES, "down")


if __name__ == "__main__":
    main()
