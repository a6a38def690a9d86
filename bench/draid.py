#!/usr/bin/env python3
"""Healthy and degraded speed of draid5 against RAID 5 on the same drives
(issue 33), on the testbed's throttled drives: RAID 5 over 7 drives with the
8th as its dedicated spare (idle), and draid5 (4 data + 1 parity per group,
one distributed spare) over the same 8 drives: the same drives and the same
one-failure-plus-a-spare protection. Chunk 64K, each created with its
write-intent bitmap (and live-data map), as users get them.

For each, CrystalDiskMark's SEQ1M Q8T1 and RND4K Q32T1, read and write
(`uraid bench` in process, under the drives' ceilings, on a 1G area); then
member 3 is failed (no rebuild) and the reads run again, degraded, over
the members left. The
rounds alternate RAID 5 and draid5 (--rounds), each round on fresh arrays,
so the machine's drift hits both alike; each figure is the median over the
rounds of the best of --runs runs.

Printed: every figure, draid5/RAID 5, and the targets of issue 33: healthy
draid5 within 5% of RAID 5 (ratio >= 0.95) on the four tests, degraded
reads at least RAID 5's (ratio >= 1.0).

Usage: python3 bench/draid.py [--runs N] [--time S] [--rounds R] [--quick]
Needs root (loop devices, blkio throttling). Takes the testbed down after.
"""
import json, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DRIVES, URAID, parser, prepare, sh, testbed_down  # noqa: E402

SEQ, RND = "SEQ1M Q8T1", "RND4K Q32T1"
TESTS = [(SEQ, "read"), (SEQ, "write"), (RND, "read"), (RND, "write")]
FAILED = 3


def bench(args, members, read_only=False):
    """Best of args.runs runs of `uraid bench` on the array over `members`
    under the ceilings: {(profile, 'read'|'write'): MB/s or IOPS}."""
    cmd = [DRIVES, "run", "--", URAID, "bench", "--json", "--quiet", "--overwrite",
           "--profile", f"{SEQ.replace(' ', '-')},{RND.replace(' ', '-')}", "--runs", str(args.runs),
           "--time", str(args.time), "--warmup", "1", "--size", "1G"] + (["--read-only"] if read_only else []) + members
    out = json.loads(sh(*cmd))
    return {(r["test"]["profile"]["name"], r["test"]["dir"].lower()):
            r["best"]["iops" if r["test"]["profile"]["name"] == RND else "mbps"] for r in out["results"]}


def fresh(drives):
    for d in drives:  # no old superblock on any drive
        sh("dd", "if=/dev/zero", f"of={d}", "bs=1M", "count=2", "oflag=direct", "status=none")


def raid5(args, drives):
    """RAID 5 over drives[:7], drives[7] its spare: (healthy, degraded)."""
    fresh(drives)
    r5, spare = drives[:7], drives[7]
    sh(URAID, "create", "--name", "r5", "--level", "5", "--chunk", "64K", "--force", *r5)
    sh(URAID, "add", "--spare", spare, "--no-rebuild", "--force", *r5)
    h = bench(args, r5 + [spare])
    sh(URAID, "fail", "--member", str(FAILED), "--no-rebuild", *r5, spare)
    d = bench(args, [m for m in r5 + [spare] if m != r5[FAILED]], read_only=True)
    return h, d


def draid5(args, drives):
    """draid5 (4d+1p, 1 distributed spare) over drives[:8]: (healthy, degraded)."""
    fresh(drives)
    sh(URAID, "create", "--name", "d5", "--level", "draid5", "--data", "4", "--spares", "1", "--chunk", "64K",
       "--force", *drives)
    h = bench(args, drives)
    sh(URAID, "fail", "--member", str(FAILED), "--no-rebuild", *drives)
    d = bench(args, [m for m in drives if m != drives[FAILED]], read_only=True)
    return h, d


def main():
    ap = parser(__doc__, runs=2, time=3.0)
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each RAID 5 then draid5 on fresh arrays")
    ap.add_argument("--quick", action="store_true", help="1 round, 1 run of 2 s per test")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.runs, args.time = 1, 1, 2.0
    prepare("loop devices and blkio throttling")
    if sh(DRIVES, "list", check=False).strip():
        sys.exit("the testbed's drives are up (another benchmark uses them?); run 'drives down' first")
    testbed_down()
    try:
        drives = sh(DRIVES, "up", "8").split()
        limits = dict(kv.split("=") for kv in sh(DRIVES, "limits").split())
        bw, iops = int(limits["bw_bytes_per_s"]) / 1e6, int(limits["iops"])
        print(f"testbed: 8 drives, ceiling {bw:.0f} MB/s and {iops} IOPS each; chunk 64K, bitmaps on; "
              f"{args.rounds} rounds x best of {args.runs} runs x {args.time:g} s, median of the rounds")
        res = {"r5": [], "d5": []}
        for i in range(args.rounds):
            res["r5"].append(raid5(args, drives))
            res["d5"].append(draid5(args, drives))
            print(f"  round {i + 1} healthy (SEQ1M read, write MB/s; RND4K read, write IOPS): RAID 5 "
                  + ", ".join(f"{res['r5'][-1][0][k]:.0f}" for k in TESTS) + "; draid5 "
                  + ", ".join(f"{res['d5'][-1][0][k]:.0f}" for k in TESTS), flush=True)
        ok = []

        def med(k, which, key):
            return statistics.median(r[which][key] for r in res[k])

        for which, label, tests, target in ((0, "healthy", TESTS, 0.95), (1, "degraded", TESTS[::2], 1.0)):
            for key in tests:
                a, b = med("r5", which, key), med("d5", which, key)
                unit = "IOPS" if key[0] == RND else "MB/s"
                x = b / a if a else 0.0
                ok.append(x >= target)
                print(f"  {label:<8} {key[0]} {key[1]:<5}  RAID 5 x7+spare {a:>9.1f} {unit}   draid5 x8 {b:>9.1f} {unit}"
                      f"   draid5/RAID 5 {x:5.2f}  target >= {target:.2f}: {'MET' if x >= target else 'NOT MET'}")
        print(f"targets: {sum(ok)} of {len(ok)} met")
    finally:
        testbed_down()


if __name__ == "__main__":
    main()
