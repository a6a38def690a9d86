#!/usr/bin/env python3
"""A scaling model (issue 19): how uraid's engine would do past this
machine's 2 cores and 6 drives, from what it costs per I/O here.

Measures: the in-process engine (`uraid bench`, the load generator and the
engine in the same threads, one io_uring per thread) on `mem:` drives with
no ceilings (in-process RAM drives: no device, no kernel block layer; the
drives' own cost is a memory copy, counted in the CPU figure), as a
temporary array (`uraid bench --level L`: no superblock, bitmap or cache),
RAID 0, 10, 5 and 6 over 2, 4, 8 and 16 members, RND4K Q32T1 and Q32T2 (1
and 2 engine threads), read and write: IOPS and CPU microseconds per I/O
(the process's CPU time over the I/Os).

Models (stated, not measured): an array on C cores and D drives of 1M IOPS
each does min(C x 10^6 / c, D x 10^6 / a) IOPS, where c is the CPU µs per
I/O measured here at 16 members with 1 thread (the cost per I/O is taken
as flat in the member count past 16 and in the core count: each core runs
its own queue, with no shared lock on the path; the T2/T1 column shows how
far that holds on this machine, whose 2 cores also run the load generator),
and a is the member I/Os per array I/O (reads 1; writes: RAID 0 1, RAID 10
2, RAID 5 4 and RAID 6 6 for a read-modify-write of one chunk). Beside it,
SPDK's published RAID 0 figure, about 1.2 to 1.4 M IOPS per core (SPDK
bdev performance reports, as quoted in issue 19).

Usage: python3 bench/scaling.py [--runs N] [--time S] [--members 2,4,8,16]
"""
import json

from common import URAID, parser, prepare, sh, uraid_bench

MIN = {0: 1, 10: 2, 5: 3, 6: 4}
MEMBER_IOS = {("read", 0): 1, ("read", 10): 1, ("read", 5): 1, ("read", 6): 1,
              ("write", 0): 1, ("write", 10): 2, ("write", 5): 4, ("write", 6): 6}


def main():
    ap = parser(__doc__, runs=1, time=3.0)
    ap.add_argument("--members", default="2,4,8,16")
    args = ap.parse_args()
    prepare(None)
    counts = [int(x) for x in args.members.split(",")]
    rows = []
    for n in counts:
        for level in (0, 10, 5, 6):
            if n < MIN[level] or (level == 10 and n % 2):
                continue
            out = json.loads(sh(URAID, "bench", "--json", "--quiet", "--overwrite", "--profile", "RND4K-Q32T1,RND4K-Q32T2",
                                "--runs", str(args.runs), "--time", str(args.time), "--warmup", "1", "--size", "256M",
                                "--level", str(level), "--chunk", "64K", *(["mem:320M"] * n)))
            r = {(x["test"]["profile"]["name"], x["test"]["dir"].lower()): x["best"] for x in out["results"]}
            for d in ("read", "write"):
                t1, t2 = r[("RND4K Q32T1", d)], r[("RND4K Q32T2", d)]
                us = lambda x: x["cpu_secs_per_gb"] * 4096 / 1e9 * 1e6
                rows.append((level, n, d, t1["iops"], us(t1), t2["iops"], us(t2)))
                print(f"RAID {level:<2} x{n:<2} {d:<5}  T1 {t1['iops']:>9.0f} IOPS {us(t1):6.2f} CPU µs/IO   "
                      f"T2 {t2['iops']:>9.0f} IOPS {us(t2):6.2f} CPU µs/IO   T2/T1 {t2['iops'] / t1['iops']:.2f}", flush=True)

    print()
    print("model: IOPS = min(cores x 1e6 / c, drives x 1e6 / member I/Os per I/O); c = CPU µs per I/O at the most")
    print("members measured, 1 thread; drives of 1M IOPS each. A model from 2 cores, not a measurement.")
    top = max(counts)
    print(f"{'level':<8} {'dir':<6} {'c µs':>6} {'IOPS/core':>10}" + "".join(f"  {c:>2}c/{d:>2}d" for c in (16, 32, 64) for d in (8, 24)))
    for level in (0, 10, 5, 6):
        for d in ("read", "write"):
            m = [r for r in rows if r[0] == level and r[2] == d and r[1] == top]
            if not m:
                continue
            c = m[0][4]
            per_core = 1e6 / c
            cells = []
            for cores in (16, 32, 64):
                for drives in (8, 24):
                    iops = min(cores * per_core, drives * 1e6 / MEMBER_IOS[(d, level)])
                    cells.append(f"  {iops / 1e6:>6.1f}M")
            print(f"RAID {level:<3} {d:<6} {c:>6.2f} {per_core / 1e6:>9.2f}M" + "".join(cells))
    print("SPDK RAID 0 (published): about 1.2-1.4M IOPS per core")


if __name__ == "__main__":
    main()
