#!/usr/bin/env python3
"""Reshape speed on the shared testbed (issue 18): adding a fifth drive to a
4-drive RAID 5 with `uraid grow --add`, the array stopped (idle).

5 testbed drives (250 MB/s and 25000 IOPS each, read and write ceilings
apart, --size as given, each written once beforehand); RAID 5 over 4 of them, chunk 64K; then `uraid grow
--add` the fifth under the drives' ceilings. The reshape reads the data
chunks of the old members and writes every member's area in the new layout
(with its parity); its report says how many bytes. The rate the drives'
bandwidth allows is set by the busiest drive in its busiest direction:
max(bytes read per old member, bytes written per member) / 250 MB/s. The
script prints both rates, as logical MB/s moved (the old capacity over the
time). Target: at least 70% of the allowed rate.

Needs root and the testbed (../shared/testbed). Usage: python3 bench/grow.py [--size 1G]
"""
import json, time

from common import DRIVES, URAID, parser, prepare, sh, testbed_down


def main():
    ap = parser(__doc__)
    ap.add_argument("--size", default="1G", help="testbed drive size")
    args = ap.parse_args()
    prepare(None)
    testbed_down()
    try:
        devs = sh(DRIVES, "up", "5", "--size", args.size).split()
        bw = int(dict(kv.split("=") for kv in sh(DRIVES, "limits").split())["bw_bytes_per_s"])
        # Write every drive once, outside the ceilings: the testbed's RAM
        # pages are then in place, as a real drive's cells are (the first
        # write to a fresh page costs the kernel an allocation that no drive
        # has, and made runs vary from 55% to 90%). dd ends with "no space
        # left" at the end of the drive: that is not checked.
        for dev in devs:
            sh("dd", "if=/dev/zero", f"of={dev}", "bs=1M", "oflag=direct", "status=none", check=False)
        sh(URAID, "create", "--level", "5", "--chunk", "64K", "--name", "growbench", "--force", *devs[:4])
        t0 = time.monotonic()
        rep = json.loads(sh(DRIVES, "run", "--", URAID, "grow", "--json", "--force", "--add", devs[4], *devs[:4]))
        wall = time.monotonic() - t0
        old_cap, new_cap = rep["capacity"]
        per_read = rep["bytes_read"] / 4
        per_write = rep["bytes_written"] / 5
        bound = max(per_read, per_write) / bw
        print(f"testbed: 5 drives of {args.size}, each {bw / 1e6:.0f} MB/s read and {bw / 1e6:.0f} MB/s write; "
              f"RAID 5 x4 chunk 64K + 1 drive: {old_cap / 1e6:.0f} MB -> {new_cap / 1e6:.0f} MB")
        print(f"  reshape: {rep['seconds']:.2f} s (command {wall:.2f} s); read {rep['bytes_read'] / 1e6:.0f} MB "
              f"({per_read / 1e6:.0f} MB per old member), wrote {rep['bytes_written'] / 1e6:.0f} MB ({per_write / 1e6:.0f} MB per member)")
        got, allowed = old_cap / rep["seconds"], old_cap / bound
        verdict = "MET" if got >= 0.7 * allowed else "NOT MET"
        print(f"  rate: {got / 1e6:.1f} MB/s of data moved; the drives allow {allowed / 1e6:.1f} MB/s "
              f"({bound:.2f} s): {got / allowed:.1%} (target >= 70%) {verdict}")
    finally:
        sh(DRIVES, "down", check=False)


if __name__ == "__main__":
    main()
