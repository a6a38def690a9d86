#!/usr/bin/env python3
"""User-space instructions per I/O of `uraid bench`, under callgrind.

The machine's speed moves 10-20% between runs; the count of instructions
the process executes per I/O does not (about +-2%), so this is the figure
to compare two builds of the engine by when a timed A/B (bench/ab.py) is
too noisy to see a few percent.

It runs `BINARY bench --level L ... RND4K-Q32T1 --read-only|--write-only`
over four `mem:` or `null:` members twice, for SHORT and LONG seconds,
under `valgrind --tool=callgrind`, and divides the difference of the
instructions executed (all threads) by the difference of the I/Os done:
setup and teardown cancel out. Under callgrind the process runs about 50x
slower, so the I/O counts are small; the default durations give a few
thousand I/Os per run.

Usage:
  python3 bench/irio.py BINARY [--level 0|5|...] [--dir read|write]
                        [--member mem:24M] [--short 2] [--long 6]
Prints one line: instructions per I/O, and the two runs' figures.
Needs valgrind (apt-get install valgrind).
"""
import argparse
import json
import os
import re
import subprocess
import tempfile


def run(a, seconds):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}-%p", a.binary, "bench", "--json", "--quiet",
                            "--overwrite", "--profile", "RND4K-Q32T1", "--runs", "1", "--time", str(seconds), "--warmup", "0",
                            "--size", a.size, "--level", str(a.level), "--chunk", "64K",
                            "--read-only" if a.dir == "read" else "--write-only", *[a.member] * a.members],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"irio: bench failed: {p.stderr[-2000:]}")
        res = json.loads(p.stdout)["results"]
        r = [x for x in res if x["test"]["dir"].lower() == a.dir][0]["best"]
        # The I/Os counted, not IOPS x seconds: under callgrind the
        # measured window's clock is not the asked duration.
        ios = r["ios"]
        total = 0
        for f in os.listdir(d):
            if f.startswith("cg.out"):
                for line in open(os.path.join(d, f)):
                    m = re.match(r"^(summary|totals): (\d+)", line)
                    if m:
                        total += int(m.group(2))
                        break
        return total, ios


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--level", default="0")
    ap.add_argument("--dir", choices=("read", "write"), default="read")
    ap.add_argument("--member", default="mem:24M")
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--size", default="16M")
    ap.add_argument("--short", type=float, default=2)
    ap.add_argument("--long", type=float, default=6)
    a = ap.parse_args()
    i1, n1 = run(a, a.short)
    i2, n2 = run(a, a.long)
    per = (i2 - i1) / (n2 - n1) if n2 > n1 else float("nan")
    print(f"RAID {a.level} x{a.members} {a.member} RND4K Q32T1 {a.dir}: {per:.0f} instructions/IO "
          f"({i1:,} instr / {n1:,.0f} IOs in {a.short} s; {i2:,} / {n2:,.0f} in {a.long} s)")


if __name__ == "__main__":
    main()
