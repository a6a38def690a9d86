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
from common import DRIVES, PEER, URAID, best_of, fio_cmd, fio_figures, fio_job, parser, prepare, sh, testbed_down, uraid_bench


def fio(filename, rw, bs, qd, args, size="1G", throttled=True):
    """Best of args.runs fio runs (CrystalDiskMark reports the best run too)."""
    def one():
        cmd = fio_cmd(rw, bs, qd, args.time, size) + [f"--filename={filename}", "--ioengine=io_uring", "--direct=1"]
        if throttled:
            cmd = [DRIVES, "run", "--"] + cmd
        f = fio_figures(fio_job(sh(*cmd)), rw)
        return {"mbps": f["mbps"], "iops": f["iops"], "bytes": f["bytes"], "cpu_secs_per_gb": f["cpu_gb"]}
    return best_of(args.runs, "mbps", one)


def fig(r, seq):
    return r["mbps"] if seq else r["iops"]


def unit(seq):
    return "MB/s" if seq else "IOPS"


def main():
    args = parser(__doc__, runs_help="timed runs per test (best is kept)", time_help="seconds per run").parse_args()
    prepare("the testbed makes loop devices and blkio throttles", ("fio", "fio"), ("btrfs-progs", "mkfs.btrfs"))
    testbed_down()

    # ---- part 1: throttled drives -------------------------------------------------
    devs = sh(DRIVES, "up", "4").split()
    limits = dict(kv.split("=") for kv in sh(DRIVES, "limits").split())
    bw, iops = int(limits["bw_bytes_per_s"]), int(limits["iops"])
    print(f"testbed: {len(devs)} drives {' '.join(devs)}, each {bw/1e6:.0f} MB/s and {iops} IOPS;"
          f" runs={args.runs} x {args.time}s, best run kept")
    tests = [("SEQ1M Q8T1", "read", True, "1M", 8), ("SEQ1M Q8T1", "write", True, "1M", 8),
             ("RND4K Q32T1", "read", False, "4k", 32), ("RND4K Q32T1", "write", False, "4k", 32)]
    profiles = ["SEQ1M-Q8T1", "RND4K-Q32T1"]
    single = uraid_bench(args, [devs[0]], profiles)
    sh(URAID, "create", "--level", "0", "--chunk", "128K", "--name", "bench", "--force", *devs)
    array = uraid_bench(args, devs, profiles)  # assembles the array from its superblocks
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
    u = uraid_bench(args, devs, ["RND4K-Q32T1"], read_only=True)[("RND4K Q32T1", "read")]
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
