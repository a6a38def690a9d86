#!/usr/bin/env python3
"""Redundant arrays on the testbed, in one run: RAID 5 over 4 drives, RAID 1
over 2, RAID 6 over 6 (each created with its write-intent bitmap, as users
get them), degraded RAID 5, a rebuild, and the parity kernels; every figure
next to one drive measured in the same run and the drive's ceiling, with the
ratio the issue asks for.

Usage: python3 bench/redundant.py [--runs N] [--time S] [--quick]
Needs root (loop devices, blkio throttling). Takes the testbed down after.
"""
import json, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DRIVES, ROOT, URAID, parser, prepare, sh, testbed_down  # noqa: E402

SEQ, RND = "SEQ1M Q8T1", "RND4K Q32T1"


def bench(args, members, profiles, read_only=False):
    """Best of args.runs runs of `uraid bench` on `members` (an assembled
    array when they carry superblocks) under the ceilings; keyed by
    (profile, 'read'|'write') -> {'mbps', 'iops', ...}."""
    cmd = [DRIVES, "run", "--", URAID, "bench", "--json", "--quiet", "--overwrite",
           "--profile", ",".join(profiles), "--runs", str(args.runs), "--time", str(args.time),
           "--warmup", "1", "--size", "1G"] + (["--read-only"] if read_only else []) + list(members)
    out = json.loads(sh(*cmd))
    return {(r["test"]["profile"]["name"], r["test"]["dir"].lower()): r["best"] for r in out["results"]}


def create(name, level, members, chunk="128K"):
    sh(URAID, "create", "--name", name, "--level", str(level), "--chunk", chunk, "--force", *members)


def fig(r, key):
    return r[key]["iops"] if key[0] == RND else r[key]["mbps"]


def main():
    ap = parser(__doc__, runs=3, time=4.0)
    ap.add_argument("--quick", action="store_true", help="1 run of 2 s per test")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.time = 1, 2.0
    prepare("loop devices and blkio throttling")
    testbed_down()
    try:
        drives = sh(DRIVES, "up", "6").split()
        limits = dict(kv.split("=") for kv in sh(DRIVES, "limits").split())
        bw, iops = int(limits["bw_bytes_per_s"]) / 1e6, int(limits["iops"])
        print(f"testbed: {len(drives)} drives, ceiling {bw:.0f} MB/s and {iops} IOPS each; "
              f"runs {args.runs} x {args.time:g} s, best run, CrystalDiskMark profiles")
        one = bench(args, drives[:1], [SEQ, RND])
        rows, verdicts = [], []

        def row(label, val, base, times, unit, target=None):
            need = times * base
            ratio = val / need if need else 0
            ceil = times * (iops if unit == "IOPS" else bw)
            ok = "" if target is None else ("MET" if ratio >= target else "NOT MET")
            rows.append(f"  {label:<34} {val:>10.1f} {unit:<4}  vs {times:g} x 1 drive {need:>9.1f}: {ratio:6.1%}"
                        f"  (vs ceiling {val / ceil:6.1%})" + (f"  target >= {target:.0%}: {ok}" if target else ""))
            if target:
                verdicts.append(ok == "MET")

        for k in [(SEQ, "read"), (SEQ, "write"), (RND, "read"), (RND, "write")]:
            u = "IOPS" if k[0] == RND else "MB/s"
            rows.append(f"  one drive {k[0]} {k[1]:<5}               {fig(one, k):>10.1f} {u}")

        r5 = drives[:4]
        create("r5", 5, r5)
        h = bench(args, r5, [SEQ, RND])
        row("RAID 5 x4 SEQ1M Q8T1 write", fig(h, (SEQ, "write")), fig(one, (SEQ, "write")), 3, "MB/s", 0.9)
        row("RAID 5 x4 SEQ1M Q8T1 read", fig(h, (SEQ, "read")), fig(one, (SEQ, "read")), 4, "MB/s", 0.9)
        row("RAID 5 x4 RND4K Q32T1 read", fig(h, (RND, "read")), fig(one, (RND, "read")), 4, "IOPS", 0.9)
        row("RAID 5 x4 RND4K Q32T1 write (bitmap)", fig(h, (RND, "write")), fig(one, (RND, "write")), 1, "IOPS", 0.9)

        sh(URAID, "fail", "--member", "3", *r5)
        d = bench(args, r5, [SEQ], read_only=True)
        degraded, healthy = fig(d, (SEQ, "read")), fig(h, (SEQ, "read"))
        ratio = degraded / healthy
        rows.append(f"  RAID 5 x4 degraded SEQ1M Q8T1 read {degraded:>10.1f} MB/s  vs healthy {healthy:.1f}: {ratio:6.1%}"
                    f"  target >= 70%: {'MET' if ratio >= 0.7 else 'NOT MET'}")
        verdicts.append(ratio >= 0.7)

        sh(URAID, "replace", "--old", "3", "--new", drives[4], "--no-rebuild", "--force", *r5[:3], r5[3])
        members = r5[:3] + [drives[4]]
        out = sh(DRIVES, "run", "--", URAID, "rebuild", "--json", "--quiet", *members)
        reps = [r["report"] for r in json.loads(out)["rebuilt"]]
        written = sum(r.get("bytes_written", 0) for r in reps)
        zeroed = sum(r.get("bytes_skipped", 0) for r in reps)
        secs = sum(r.get("seconds", 0) for r in reps)
        # Never-written regions are zeroed on the new drive, not copied: on
        # this testbed a zeroing is throttled like a write of that size.
        rate = (written + zeroed) / secs / 1e6 if secs else 0
        ratio = rate / bw
        rows.append(f"  rebuild onto a new drive (idle)  {rate:>10.1f} MB/s written to it ({written / 1e6:.0f} MB rebuilt + "
                    f"{zeroed / 1e6:.0f} MB never written, zeroed, in {secs:.2f} s; rebuilt data alone "
                    f"{written / secs / 1e6 if secs else 0:.1f} MB/s) vs one drive's write ceiling {bw:.0f}: {ratio:6.1%}"
                    f"  target >= 90%: {'MET' if ratio >= 0.9 else 'NOT MET'}")
        verdicts.append(ratio >= 0.9)
        rows.append("  (the testbed's blkio throttle limits reads and writes separately, so mixed loads such as RAID 5/6 "
                    "read-modify-write can pass N/4 x one drive; examples/level_probe on mem: drives, one ceiling per drive, "
                    "shows the single-queue figure)")
        chk = json.loads(sh(URAID, "check", "--json", "--quiet", *members))
        mism = sum(v["report"]["mismatches"] for v in chk)
        rows.append(f"  check after the rebuild: {mism} mismatches over {sum(v['report']['bytes_checked'] for v in chk) / 1e9:.2f} GB")

        r1 = drives[:2]
        create("r1", 1, r1)
        m = bench(args, r1, [RND], read_only=True)
        row("RAID 1 x2 RND4K Q32T1 read", fig(m, (RND, "read")), fig(one, (RND, "read")), 2, "IOPS", 0.9)

        r6 = drives[:6]
        create("r6", 6, r6)
        s6 = bench(args, r6, [SEQ, RND])
        row("RAID 6 x6 SEQ1M Q8T1 write", fig(s6, (SEQ, "write")), fig(one, (SEQ, "write")), 4, "MB/s")
        row("RAID 6 x6 SEQ1M Q8T1 read", fig(s6, (SEQ, "read")), fig(one, (SEQ, "read")), 6, "MB/s")
        row("RAID 6 x6 RND4K Q32T1 read", fig(s6, (RND, "read")), fig(one, (RND, "read")), 6, "IOPS")
        row("RAID 6 x6 RND4K Q32T1 write (bitmap)", fig(s6, (RND, "write")), fig(one, (RND, "write")), 1.5, "IOPS")
        print("\n".join(rows))
        print(f"targets: {sum(verdicts)} of {len(verdicts)} MET")
    finally:
        testbed_down()
    print("\nparity kernels (bench/parity.sh --quick):")
    subprocess.run([os.path.join(ROOT, "bench", "parity.sh"), "--quick"], check=False)


if __name__ == "__main__":
    main()
