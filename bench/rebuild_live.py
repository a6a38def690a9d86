#!/usr/bin/env python3
"""Rebuild of live data only (issue 33, item 3), on the testbed's throttled
drives, for the two layouts issue 33 compares on 8 drives: RAID 5 over 7
drives with the 8th as its dedicated spare, and draid5 (4d+1p, one
distributed spare) over all 8; chunk 64K, each with its bitmap (the live-data
map). Each is written 100% and then (a fresh array) 25% from its start; one
member fails, the spare (dedicated or distributed) takes its role, and
`uraid rebuild` runs. Prints the time to full redundancy of each, the bytes
rebuilt and skipped (regions the live-data map says hold no data), and the
ratios the issue asks for: the 25%-written volume in at most 30% of the same
layout's full-volume time, and draid5 25% written at least 5x faster than
RAID 5's full-volume rebuild (today's rebuild). `uraid check` after each
rebuild must find 0 mismatches.

Usage: python3 bench/rebuild_live.py [--size 1G] [--fills 100,25] [--layouts raid5,draid5]
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


def one(drives, layout, pct):
    """A fresh array of `layout` over drives[:8] (RAID 5: 7 and a dedicated
    spare), `pct`% written, member 1 failed and rebuilt into its spare: the
    figures."""
    if layout == "raid5":
        arr, spare = drives[:7], [drives[7]]
        sh(URAID, "create", "--name", "live", "--level", "5", "--chunk", "64K", "--force", *arr)
        sh(URAID, "add", "--spare", spare[0], "--force", "--no-rebuild", *arr)
    else:
        arr, spare = drives[:8], []
        sh(URAID, "create", "--name", "live", "--level", "draid5", "--data", "4", "--spares", "1", "--chunk", "64K",
           "--force", *arr)
    st = json.loads(sh(URAID, "status", "--json", *arr, *spare))
    cap = st["volumes"][0]["capacity"]
    fill(arr, cap * pct // 100)
    live = json.loads(sh(URAID, "status", "--json", *arr, *spare))["volumes"][0].get("live_bytes")
    sh(URAID, "fail", "--member", "1", "--no-rebuild", *arr, *spare)
    # The failed drive is left out: the spare takes its role.
    members = [arr[0]] + spare + arr[2:]
    t0 = time.monotonic()
    out = sh(DRIVES, "run", "--", URAID, "rebuild", "--json", "--quiet", *members)
    wall = time.monotonic() - t0
    reps = [r["report"] for r in json.loads(out)["rebuilt"]]
    chk = json.loads(sh(URAID, "check", "--json", "--quiet", *members))
    return {
        "layout": layout, "pct": pct, "capacity": cap, "live": live, "wall": wall,
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
    ap.add_argument("--layouts", default="raid5,draid5", help="raid5 (x7 + dedicated spare), draid5 (x8, 4d+1p, 1 spare)")
    args = ap.parse_args()
    prepare("loop devices and blkio throttling")
    if sh(DRIVES, "list", check=False).strip():
        sys.exit("the testbed's drives are up (another benchmark uses them?); run 'drives down' first")
    testbed_down()
    names = {"raid5": "RAID 5 x7 + spare", "draid5": "draid5 x8 (4d+1p, 1 spare)"}
    try:
        drives = sh(DRIVES, "up", "8", "--size", args.size).split()
        limits = dict(kv.split("=") for kv in sh(DRIVES, "limits").split())
        bw = int(limits["bw_bytes_per_s"]) / 1e6
        print(f"testbed: 8 drives of {args.size}, ceiling {bw:.0f} MB/s each; chunk 64K, bitmaps (live-data map) on")
        res, ok = {}, []
        for layout in args.layouts.split(","):
            for pct in [int(p) for p in args.fills.split(",")]:
                for d in drives:  # every drive fresh: no old superblock or data
                    sh("dd", "if=/dev/zero", f"of={d}", "bs=1M", "count=2", "oflag=direct", "status=none")
                r = one(drives, layout, pct)
                res[(layout, pct)] = r
                print(f"  {names[layout]:<27} {pct:>3}% written: rebuild {r['seconds']:6.2f} s (wall {r['wall']:.2f} s), "
                      f"{r['written'] / 1e6:7.0f} MB rebuilt, {r['skipped'] / 1e6:7.0f} MB skipped (not live), "
                      f"live {(r['live'] or 0) / 1e6:.0f} of {r['capacity'] / 1e6:.0f} MB; "
                      f"check: {r['mismatches']} mismatches over {r['checked'] / 1e6:.0f} MB", flush=True)
        fills = [int(p) for p in args.fills.split(",")]
        for layout in args.layouts.split(","):
            full = res[(layout, fills[0])]
            for pct in fills[1:]:
                r = res[(layout, pct)]
                ratio = r["seconds"] / full["seconds"] if full["seconds"] else float("nan")
                ok.append(ratio <= 0.30)
                print(f"  {names[layout]}: {pct}% written / {fills[0]}% written rebuild time: {ratio:6.1%}  target <= 30%: "
                      f"{'MET' if ratio <= 0.30 else 'NOT MET'}")
        if ("raid5", 100) in res and ("draid5", 25) in res:
            x = res[("raid5", 100)]["seconds"] / res[("draid5", 25)]["seconds"]
            ok.append(x >= 5)
            print(f"  draid5 25% written vs RAID 5 100% written (today's full rebuild): {x:.2f}x faster  target >= 5x: "
                  f"{'MET' if x >= 5 else 'NOT MET'}")
        print(f"targets: {sum(ok)} of {len(ok)} met")
    finally:
        testbed_down()


if __name__ == "__main__":
    main()
