#!/usr/bin/env python3
"""The journal cache mode against plain write-back (issue 19: group commit), in one run.

Part 1, no ceilings (testbed drives with --bw 0 --iops 0: memory-speed loop
devices, so the CPU and the journal's write path are what is measured):
RAID 5 x4, chunk 128K, a fifth drive as the journal device; RND4K Q32T1
write IOPS in the journal mode and in write-back, with the default cache
(256M, 64M dirty: the 1 GiB test area does not fit, so write-back runs at
the rate its flusher writes back, read-modify-write on RAID 5). Target: the
journal mode >= 50% of write-back's IOPS. Reported beside it: the same with
a cache that holds the test area (1.5G, 1G dirty), where write-back only
copies into memory during the test.

Part 2, the testbed (250 MB/s and 25,000 IOPS per drive): RAID 0 x4,
chunk 128K, the journal on a fifth drive; SEQ1M Q8T1 write MB/s in the
journal mode, against the journal drive's own ceiling (every byte written
goes to it once). Target: >= 90%.

Usage: python3 bench/journal.py [--runs N] [--time S]
Needs root (loop devices, blkio throttling). Takes the testbed down after.
"""
from cache import CURRENT, bench, config, create, on
from common import DRIVES, parser, prepare, sh, testbed_down


def main():
    ap = parser(__doc__, runs=2, time=4.0)
    args = ap.parse_args()
    prepare("loop devices and blkio throttling")
    verdicts = []
    testbed_down()
    try:
        devs = sh(DRIVES, "up", "5", "--bw", "0", "--iops", "0").split()
        drives, journal = devs[:4], devs[4]
        print(f"part 1: no ceilings; RAID 5 x4, chunk 128K, journal on a fifth drive; runs {args.runs} x {args.time:g} s, best run")
        create("j5", "5", drives)
        for label, extra in (("default cache (256M, 64M dirty)", []), ("a cache holding the test area (1.5G, 1G dirty)", ["--cache-size", "1536M", "--dirty-limit", "1G"])):
            r = {}
            for mode in ("writeback", "journal"):
                config(mode, drives, journal, *extra)
                r[mode] = bench(args, on(mode, drives, journal), ["RND4KQ32T1"])[("RND4K Q32T1", "write")]
            wb, jn = r["writeback"]["iops"], r["journal"]["iops"]
            if extra:
                # Write-back then runs at memory speed (nothing is written
                # before the test ends): a ceiling no durable mode meets.
                print(f"  {label}: RND4K Q32T1 write: write-back {wb:.0f} IOPS, journal {jn:.0f} IOPS: {jn / wb:.1%} (reported)")
                continue
            ok = jn >= 0.5 * wb
            verdicts.append(ok)
            print(f"  {label}: RND4K Q32T1 write: write-back {wb:.0f} IOPS, journal {jn:.0f} IOPS: {jn / wb:.1%}  "
                  f"target >= 50%: {'MET' if ok else 'NOT MET'}")
        config("off", drives, journal)
        testbed_down()
        CURRENT["mode"] = "off"

        devs = sh(DRIVES, "up", "5").split()
        drives, journal = devs[:4], devs[4]
        limits = dict(kv.split("=") for kv in sh(DRIVES, "limits").split())
        bw = int(limits["bw_bytes_per_s"]) / 1e6
        print(f"part 2: the testbed ({bw:.0f} MB/s and {limits['iops']} IOPS per drive); RAID 0 x4, chunk 128K, journal on a fifth drive")
        create("j0", "0", drives)
        config("journal", drives, journal)
        mbps = bench(args, on("journal", drives, journal), ["SEQ1MQ8T1"])[("SEQ1M Q8T1", "write")]["mbps"]
        ok = mbps >= 0.9 * bw
        verdicts.append(ok)
        print(f"  SEQ1M Q8T1 write with the journal: {mbps:.1f} MB/s = {mbps / bw:.1%} of the journal drive's {bw:.0f} MB/s"
              f"  target >= 90%: {'MET' if ok else 'NOT MET'}")
        print(f"\ntargets: {sum(verdicts)} of {len(verdicts)} MET")
    finally:
        testbed_down()


if __name__ == "__main__":
    main()
