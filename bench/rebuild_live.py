#!/usr/bin/env python3
"""Rebuild of live data only (issue 33, item 3), on the testbed's throttled
drives: RAID 5 over 4 drives plus a dedicated spare, 64K chunk, the volume
written 100% and then (on a fresh array) 25% from its start; one member
fails, the spare takes its role, and `uraid rebuild` runs. Prints the time
to full redundancy of each, the bytes rebuilt and skipped (regions the
live-data map says hold no data), and the ratio the issue asks for: the
25%-written volume in at most 30% of the full volume's time. `uraid check`
after each rebuild must find 0 mismatches.

Usage: python3 bench/rebuild_live.py [--size 1G] [--fills 100,25]
Needs root (loop devices, blkio throttling). Takes the testbed down after.
"""
import json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DRIVES, URAID, parser, prepare, sh, testbed_down  # noqa: E402


def fill(members, nbytes):
    """Writes the first `nbytes` of the array's volume (1 MiB aligned):
    `uraid bench` lays out its test area before a read test."""
    nbytes = max(nbytes >> 20, 1) << 20
    sh(DRIVES, "run", "--", URAID, "bench", "--json", "--quiet", "--overwrite", "--profile", "SEQ1M-Q8T1",
       "--runs", "1", "--time", "0.5", "--warmup", "0", "--size", f"{nbytes >> 20}M", *members)


def one(drives, pct):
    """A fresh RAID 5 over drives[:4] with drives[4] as its spare, `pct`%
    written, member 1 failed and rebuilt onto the spare: the figures."""
    r5, spare = drives[:4], drives[4]
    sh(URAID, "create", "--name", "live", "--level", "5", "--chunk", "64K", "--force", *r5)
    sh(URAID, "add", "--spare", spare, "--force", "--no-rebuild", *r5)
    st = json.loads(sh(URAID, "status", "--json", *r5, spare))
    cap = st["volumes"][0]["capacity"]
    fill(r5, cap * pct // 100)
    live = json.loads(sh(URAID, "status", "--json", *r5, spare))["volumes"][0].get("live_bytes")
    sh(URAID, "fail", "--member", "1", "--no-rebuild", *r5, spare)
    members = [r5[0], spare, r5[2], r5[3]]
    t0 = time.monotonic()
    out = sh(DRIVES, "run", "--", URAID, "rebuild", "--json", "--quiet", *members)
    wall = time.monotonic() - t0
    reps = [r["report"] for r in json.loads(out)["rebuilt"]]
    chk = json.loads(sh(URAID, "check", "--json", "--quiet", *members))
    return {
        "pct": pct, "capacity": cap, "live": live, "wall": wall,
        "seconds": sum(r.get("seconds", 0) for r in reps),
        "written": sum(r.get("bytes_written", 0) for r in reps),
        "skipped": sum(r.get("bytes_skipped", 0) for r in reps),
        "mismatches": sum(v["report"]["mismatches"] for v in chk),
        "checked": sum(v["report"]["bytes_checked"] for v in chk),
    }


def main():
    ap = parser(__doc__)
    ap.add_argument("--size", default="1G", help="size of each testbed drive (default 1G)")
    ap.add_argument("--fills", default="100,25", help="percentages of the volume written, the first the reference")
    args = ap.parse_args()
    prepare("loop devices and blkio throttling")
    testbed_down()
    try:
        drives = sh(DRIVES, "up", "5", "--size", args.size).split()
        limits = dict(kv.split("=") for kv in sh(DRIVES, "limits").split())
        bw = int(limits["bw_bytes_per_s"]) / 1e6
        print(f"testbed: 5 drives of {args.size}, ceiling {bw:.0f} MB/s each; RAID 5 x4 + 1 dedicated spare, chunk 64K")
        res = []
        for pct in [int(p) for p in args.fills.split(",")]:
            for d in drives:  # every drive fresh: no old superblock or data
                sh("dd", "if=/dev/zero", f"of={d}", "bs=1M", "count=2", "oflag=direct", "status=none")
            r = one(drives, pct)
            res.append(r)
            print(f"  {pct:>3}% written: rebuild {r['seconds']:6.2f} s (wall {r['wall']:.2f} s), "
                  f"{r['written'] / 1e6:8.0f} MB rebuilt, {r['skipped'] / 1e6:8.0f} MB skipped (not live), "
                  f"live {(r['live'] or 0) / 1e6:.0f} of {r['capacity'] / 1e6:.0f} MB; "
                  f"check: {r['mismatches']} mismatches over {r['checked'] / 1e6:.0f} MB")
        full = res[0]
        for r in res[1:]:
            ratio = r["seconds"] / full["seconds"] if full["seconds"] else float("nan")
            print(f"  {r['pct']}% written / {full['pct']}% written rebuild time: {ratio:6.1%}  target <= 30%: "
                  f"{'MET' if ratio <= 0.30 else 'NOT MET'}")
    finally:
        testbed_down()


if __name__ == "__main__":
    main()
