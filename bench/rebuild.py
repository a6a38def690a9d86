#!/usr/bin/env python3
"""Time to full redundancy after one member fails (issue 33), on the
testbed's throttled drives: RAID 5 over N-1 drives with a dedicated spare
against draid5 over N drives (4 data + 1 parity per group, one distributed
spare), for N = 8 and 12, chunk 64K.

The volumes are created without a write-intent bitmap, so a rebuild
reconstructs every row of the failed member: the "100% written" case (the
reads and writes are the same whatever the data). One member is failed
(`uraid fail`), then `uraid rebuild` (under the drives' ceilings) puts the
dedicated spare, or the distributed spare, into its role and rebuilds it;
the time is the rebuild's own (its report's seconds).

Printed for each: the time, the MB/s of the failed member's data rebuilt
(RAID 5: its whole area; draid: its data and parity chunks, not its spare
and unused ones), the bound and the fraction of it reached. The bound: one
drive's write ceiling for a dedicated spare; for draid the survivors' read
bandwidth over the D reads each lost chunk needs, (N-1) x ceiling / D.
Then the speed-up of draid5 over RAID 5 at each N, and `uraid check`'s
mismatches after each rebuild. Targets (issue 33): draid5 x8 >= 1.6x RAID 5,
x12 >= 2.5x, each >= 85% of its bound.

Usage: python3 bench/rebuild.py [--size 1G] [--quick]
Needs root (loop devices, blkio throttling). Takes the testbed down after.
"""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DRIVES, URAID, parser, prepare, sh, testbed_down  # noqa: E402

D = 4


def rebuild(members):
    """Runs `uraid rebuild` under the ceilings; (seconds, member bytes)."""
    out = json.loads(sh(DRIVES, "run", "--", URAID, "rebuild", "--json", "--quiet", *members))
    reps = [r["report"] for r in out["rebuilt"]]
    if len(reps) != 1:
        sys.exit(f"rebuild: expected one role rebuilt, got {out['rebuilt']}")
    r = reps[0]
    return r["seconds"], r["bytes_written"] + r["bytes_skipped"] + r.get("bytes_in_sync", 0)


def mismatches(members):
    chk = json.loads(sh(URAID, "check", "--json", "--quiet", *members))
    return sum(v["report"]["mismatches"] for v in chk)


def raid5(drives, n):
    """RAID 5 over n-1 drives and a dedicated spare; (seconds, data bytes, mismatches)."""
    r5, spare = drives[:n - 1], drives[n - 1]
    sh(URAID, "create", "--name", f"r5x{n}", "--level", "5", "--chunk", "64K", "--no-bitmap", "--force", *r5)
    sh(URAID, "add", "--spare", spare, "--force", *r5)
    sh(URAID, "fail", "--no-rebuild", "--member", "3", *r5, spare)
    # The failed drive is left out: the spare takes its role.
    secs, member = rebuild(r5[:3] + r5[4:] + [spare])
    return secs, member, mismatches(r5[:3] + [spare] + r5[4:])


def draid5(drives, n):
    """draid5 (4d+1p, 1 distributed spare) over n drives; (seconds, data bytes, mismatches)."""
    m = drives[:n]
    out = sh(URAID, "create", "--name", f"d5x{n}", "--level", "draid5", "--data", str(D), "--spares", "1",
             "--chunk", "64K", "--no-bitmap", "--force", *m)
    sh(URAID, "fail", "--member", "3", *m)
    # The failed drive is left out: the distributed spare takes its role.
    m = m[:3] + m[4:]
    secs, member = rebuild(m)
    # The failed member's chunks that hold data or parity: G groups of
    # D + 1 chunks in each row of n positions.
    groups = (n - 1) // (D + 1)
    data = member * groups * (D + 1) / n
    return secs, data, mismatches(m), out


def main():
    ap = parser(__doc__, runs=1, time=0)
    ap.add_argument("--size", default="1G", help="size of each testbed drive (default 1G)")
    ap.add_argument("--quick", action="store_true", help="drives of 256M")
    args = ap.parse_args()
    if args.quick:
        args.size = "256M"
    prepare("loop devices and blkio throttling")
    if sh(DRIVES, "list", check=False).strip():
        sys.exit("the testbed's drives are up (another benchmark uses them?); run 'drives down' first")
    testbed_down()
    try:
        drives = sh(DRIVES, "up", "13", "--size", args.size).split()
        limits = dict(kv.split("=") for kv in sh(DRIVES, "limits").split())
        bw = float(limits.get("bw", 250e6)) / 1e6
        print(f"testbed: {len(drives)} drives of {args.size}, ceiling {bw:.0f} MB/s each; chunk 64K, no bitmap (every row rebuilt)")
        times, ok = {}, []
        for n in (8, 12):
            s, data, mis = raid5(drives, n)
            rate = data / s / 1e6
            times[("r5", n)] = s
            print(f"  RAID 5 x{n - 1} + dedicated spare   {s:7.2f} s  {rate:7.1f} MB/s of the failed member's data   "
                  f"bound {bw:.0f} (one drive's writes): {rate / bw:6.1%}   check: {mis} mismatches")
            s, data, mis, _ = draid5(drives, n)
            rate = data / s / 1e6
            bound = (n - 1) * bw / D
            times[("d5", n)] = s
            frac = rate / bound
            ok.append(frac >= 0.85)
            print(f"  draid5 x{n} (4d+1p, 1 spare)     {s:7.2f} s  {rate:7.1f} MB/s of the failed member's data   "
                  f"bound {bound:.0f} ((N-1) x {bw:.0f} / {D}): {frac:6.1%}  target >= 85%: {'MET' if frac >= 0.85 else 'NOT MET'}"
                  f"   check: {mis} mismatches")
        for n, target in ((8, 1.6), (12, 2.5)):
            x = times[("r5", n)] / times[("d5", n)]
            ok.append(x >= target)
            print(f"  time to full redundancy, draid5 x{n} vs RAID 5 x{n - 1} + spare: {x:.2f}x faster  target >= {target}x: "
                  f"{'MET' if x >= target else 'NOT MET'}")
        print(f"targets: {sum(ok)} of {len(ok)} met")
    finally:
        testbed_down()


if __name__ == "__main__":
    main()
