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

The engine's own cost (issue 31): the same RND4K Q32T1/Q32T2 runs over
`null:` members (reads return zeros, writes are dropped, completed through
the same io_uring path: no data copy), for every level, beside the floor:
the load generator alone on one null member (`uraid bench null:1G`, no
--level). CPU µs per I/O and IOPS per core, T1 and T2.

Shared budgets (issue 31, must-have 4): RAID 5 and 6 RND4K Q32T1 writes on
`mem:` members with a ceiling, once as one budget that reads and writes
share (`iops=N`, a real drive) and once as a budget per direction
(`riops=N,wiops=N`, the testbed's cgroup v1 blkio throttles): a
read-modify-write reads and writes each member, so the split budget shows
it up to 2x better than a drive would do it.

Usage: python3 bench/scaling.py [--runs N] [--time S] [--members 2,4,8,16]
       [--null-members 4,8] [--ceiling-iops N] [--only mem,null,ceilings]
"""
import json

from common import URAID, parser, prepare, sh

MIN = {0: 1, 10: 2, 5: 3, 6: 4}
MEMBER_IOS = {("read", 0): 1, ("read", 10): 1, ("read", 5): 1, ("read", 6): 1,
              ("write", 0): 1, ("write", 10): 2, ("write", 5): 4, ("write", 6): 6}


def us(x):
    """CPU µs per 4K I/O of a `uraid bench` result."""
    return x["cpu_secs_per_gb"] * 4096 / 1e9 * 1e6


def bench(args, members, level=None, profiles="RND4K-Q32T1,RND4K-Q32T2", size="256M"):
    """`uraid bench` on `members` (an array of `level`, or the members
    alone without one): keyed by (profile, 'read'|'write') -> best."""
    lv = [] if level is None else ["--level", str(level), "--chunk", "64K"]
    out = json.loads(sh(URAID, "bench", "--json", "--quiet", "--overwrite", "--profile", profiles,
                        "--runs", str(args.runs), "--time", str(args.time), "--warmup", "1", "--size", size,
                        *lv, *members))
    return {(x["test"]["profile"]["name"], x["test"]["dir"].lower()): x["best"] for x in out["results"]}


def t1t2(label, r, d):
    """Prints one T1/T2 row; returns (T1 IOPS, T1 µs, T2 IOPS, T2 µs)."""
    t1, t2 = r[("RND4K Q32T1", d)], r[("RND4K Q32T2", d)]
    print(f"{label:<16} {d:<5}  T1 {t1['iops']:>9.0f} IOPS {us(t1):6.2f} CPU µs/IO {1 / us(t1):5.2f}M IOPS/core   "
          f"T2 {t2['iops']:>9.0f} IOPS {us(t2):6.2f} CPU µs/IO   T2/T1 {t2['iops'] / t1['iops']:.2f}", flush=True)
    return t1["iops"], us(t1), t2["iops"], us(t2)


def null_table(args):
    """The floor and every level over null members."""
    print("null members (no data copy: the engine's own cost, load generator included)")
    try:
        r = bench(args, ["null:1G"], size="1G")
        for d in ("read", "write"):
            t1t2("floor null:1G", r, d)
    except SystemExit:
        # A uraid whose CLI takes a lone `null:1G` for an array's name
        # (service/client.rs and scan.rs know `mem:` only).
        print("floor: this uraid does not bench a lone null: member (see above); no floor row")
    for n in [int(x) for x in args.null_members.split(",")]:
        for level in (0, 10, 5, 6):
            if n < MIN[level] or (level == 10 and n % 2):
                continue
            r = bench(args, ["null:1G"] * n, level=level)
            for d in ("read", "write"):
                t1t2(f"RAID {level} x{n} null", r, d)
    print()


def ceilings_table(args):
    """RAID 5/6 small writes under a shared budget and a split one."""
    n = args.ceiling_iops
    print(f"mem: members with a ceiling of {n} IOPS: one budget for reads and writes (iops={n}, a real drive)")
    print(f"against one per direction (riops={n},wiops={n}, cgroup v1 blkio as the testbed throttles); RND4K Q32T1 write")
    for level, k in ((5, 4), (6, 6)):
        got = {}
        for name, opt in (("shared", f"iops={n}"), ("split", f"riops={n},wiops={n}")):
            r = bench(args, [f"mem:320M,{opt}"] * k, level=level, profiles="RND4K-Q32T1")
            got[name] = r[("RND4K Q32T1", "write")]["iops"]
        print(f"RAID {level} x{k}: shared {got['shared']:>8.0f} IOPS   split {got['split']:>8.0f} IOPS   "
              f"split/shared {got['split'] / got['shared']:.2f}   (read-modify-write ceiling, shared: "
              f"{k * n / (2 * (2 if level == 5 else 3)):.0f} IOPS)", flush=True)
    print()


def main():
    ap = parser(__doc__, runs=1, time=3.0)
    ap.add_argument("--members", default="2,4,8,16")
    ap.add_argument("--null-members", default="4,8")
    ap.add_argument("--ceiling-iops", type=int, default=20000)
    ap.add_argument("--only", default="mem,null,ceilings", help="which tables: mem, null, ceilings")
    args = ap.parse_args()
    prepare(None)
    only = args.only.split(",")
    if "null" in only:
        null_table(args)
    if "ceilings" in only:
        ceilings_table(args)
    if "mem" not in only:
        return
    counts = [int(x) for x in args.members.split(",")]
    rows = []
    print("mem: members, no ceilings (a memory copy per member I/O)")
    for n in counts:
        for level in (0, 10, 5, 6):
            if n < MIN[level] or (level == 10 and n % 2):
                continue
            r = bench(args, ["mem:320M"] * n, level=level)
            for d in ("read", "write"):
                i1, u1, i2, u2 = t1t2(f"RAID {level} x{n}", r, d)
                rows.append((level, n, d, i1, u1, i2, u2))

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
