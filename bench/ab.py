#!/usr/bin/env python3
"""Before/after A/B of two uraid binaries, run alternately on the same drives
so that a slower machine moves both: the figures the "no more than 3% worse
in the same conditions" rule compares when two separate bench runs differ.

  python3 bench/ab.py OLD_BINARY NEW_BINARY [--rounds N]

1. No ceilings: RND4K Q32T1 read over 4 memory-speed drives (RAID 0 x4 by
   `uraid bench`, IOPS and CPU s/GB), with fio over the raw devices between
   rounds as the machine's own reference.
2. Testbed ceilings: RAID 5 x4, cache off, RND4K Q1T1 write mean latency and
   SEQ1M Q8T1 read.
3. The NBD export, no ceilings: `uraid serve` of each binary in turn over a
   RAID 0 x4 of memory-speed drives, measured through its socket by one and
   the same client (the OLD binary's `uraid bench` on the export's URI):
   RND4K Q32T1 read and write IOPS and the server's CPU s/GB. This is the
   figure a change to the NBD server moves.

4. The volume cache, testbed ceilings: RAID 5 x4, chunk 128K, write-back
   (the default 256M cache, 64M dirty limit): SEQ64K Q1T1 write MB/s and
   RND4K Q1T1 write mean latency; beside it, the cache off: RND4K Q1T1 write
   mean latency (bench/cache.py's figures).
5. Scaling, in process, no ceilings (`uraid bench --level L`, a temporary
   array: bench/scaling.py's runs): RAID 0 x4 and RAID 5 x4 over `null:`
   members and over `mem:` members, RND4K Q32T1 read and write: IOPS and
   CPU µs per I/O.

`--parts 1,2,3` chooses the parts (all by default); `--runs` and `--time`
set the runs per test and their seconds (3 and 5: shorter ones only to see
that a part runs). Parts 4 and 5 print, per figure, the mean of the rounds
for OLD and NEW and NEW / OLD (latency and CPU: lower is better). Both
binaries are run with flags an older uraid has too (bench --profile, --size,
--write-only, --level, --chunk; config --cache).

Each round runs OLD then NEW, the next NEW then OLD. Needs root (the
testbed's loop devices) and fio."""
import argparse, json, os, signal, subprocess

from common import DRIVES, proc_cpu, wait_unix_socket


def sh(*a):
    return subprocess.run(a, check=True, capture_output=True, text=True).stdout


# Runs per test and seconds per run of every `uraid bench` here (--runs, --time).
TIMING = {"runs": "3", "time": "5"}


def bench(binary, devs, profiles, read_only, write_only=False):
    out = json.loads(sh(DRIVES, "run", "--", binary, "bench", "--json", "--quiet", "--overwrite", "--profile", profiles,
                        "--runs", TIMING["runs"], "--time", TIMING["time"], "--warmup", "1", "--size", "1G",
                        *(["--read-only"] if read_only else []), *(["--write-only"] if write_only else []), *devs))
    return {(r["test"]["profile"]["name"], r["test"]["dir"].lower()): r["best"] for r in out["results"]}


def order(rnd, bins):
    return list(bins.items()) if rnd % 2 == 0 else list(reversed(bins.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--parts", default="1,2,3,4,5", help="which parts to run, e.g. 3 (default: 1,2,3,4,5)")
    ap.add_argument("--runs", type=int, default=3, help="runs per test, the best counts (default 3)")
    ap.add_argument("--time", type=float, default=5, help="seconds per run (default 5)")
    a = ap.parse_args()
    bins = {"old": a.old, "new": a.new}
    parts = {int(x) for x in a.parts.split(",")}
    TIMING.update(runs=str(a.runs), time=f"{a.time:g}")
    if 1 in parts:
        part_raw(a, bins)
    if 2 in parts:
        part_raid5(a, bins)
    if 3 in parts:
        part_nbd(a, bins)
    if 4 in parts:
        part_cache(a, bins)
    if 5 in parts:
        part_scaling(a, bins)


SOCK = "/tmp/uraid-ab-nbd.sock"


def part_nbd(a, bins):
    devs = sh(DRIVES, "up", "4", "--bw", "0", "--iops", "0").split()
    try:
        sh(a.old, "create", "--level", "0", "--chunk", "128K", "--name", "ab", "--force", *devs)
        res = {k: [] for k in bins}
        print("NBD export, no ceilings, RAID 0 x4 over memory-speed drives, client: OLD's uraid bench on the URI:")
        for rnd in range(a.rounds):
            for name, b in order(rnd, bins):
                if os.path.exists(SOCK):
                    os.unlink(SOCK)
                p = subprocess.Popen([b, "serve", "--socket", SOCK, *devs], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                try:
                    wait_unix_socket(SOCK, p)
                    uri = f"nbd+unix:///ab?socket={SOCK}"
                    c0 = proc_cpu(p.pid)
                    out = json.loads(sh(a.old, "bench", "--json", "--quiet", "--overwrite", "--profile", "RND4K-Q32T1",
                                        "--runs", TIMING["runs"], "--time", TIMING["time"], "--warmup", "1", "--size", "1G", uri))
                    cpu = proc_cpu(p.pid) - c0
                finally:
                    p.send_signal(signal.SIGTERM)
                    p.wait(30)
                r = {r["test"]["dir"].lower(): r["best"] for r in out["results"]}
                gb = sum(x["bytes"] for x in r.values()) / 1e9
                res[name].append((r["read"]["iops"], r["write"]["iops"], cpu / gb))
                print(f"  round {rnd} {name}: read {r['read']['iops']:9.0f} IOPS  write {r['write']['iops']:9.0f} IOPS"
                      f"  server {cpu / gb:.3f} CPU s/GB (of the best runs' bytes)", flush=True)
        for name in bins:
            rd = [x[0] for x in res[name]]
            wr = [x[1] for x in res[name]]
            cp = [x[2] for x in res[name]]
            print(f"  {name}: mean read {sum(rd) / len(rd):9.0f} IOPS, write {sum(wr) / len(wr):9.0f} IOPS, server {sum(cp) / len(cp):.3f} CPU s/GB")
    finally:
        sh(DRIVES, "down")


def part_raw(a, bins):
    devs = sh(DRIVES, "up", "4", "--bw", "0", "--iops", "0").split()
    try:
        for dv in devs:
            sh("fio", "--name=fill", f"--filename={dv}", "--rw=write", "--bs=1M", "--iodepth=8", "--ioengine=io_uring", "--direct=1", "--size=300M")
        res = {k: [] for k in bins}
        print("no ceilings, RND4K Q32T1 read, RAID 0 x4 over memory-speed drives:")
        for rnd in range(a.rounds):
            for name, b in order(rnd, bins):
                r = bench(b, devs, "RND4K-Q32T1", True)[("RND4K Q32T1", "read")]
                res[name].append((r["iops"], r["cpu_secs_per_gb"]))
                print(f"  round {rnd} {name}: {r['iops']:9.0f} IOPS {r['cpu_secs_per_gb']:.3f} CPU s/GB", flush=True)
            f = json.loads(sh("fio", "--name=t", f"--filename={':'.join(devs)}", "--rw=randread", "--bs=4k", "--iodepth=32", "--size=1G",
                              "--time_based", "--runtime=5", "--ramp_time=1", "--ioengine=io_uring", "--direct=1", "--output-format=json"))
            print(f"  round {rnd} fio: {f['jobs'][0]['read']['iops']:9.0f} IOPS", flush=True)
        for name in bins:
            ios = [x[0] for x in res[name]]
            cpu = [x[1] for x in res[name]]
            print(f"  {name}: mean {sum(ios) / len(ios):9.0f} IOPS (min {min(ios):.0f} max {max(ios):.0f}), mean {sum(cpu) / len(cpu):.3f} CPU s/GB")
    finally:
        sh(DRIVES, "down")


def part_raid5(a, bins):
    devs = sh(DRIVES, "up", "4").split()
    try:
        res = {k: [] for k in bins}
        print("testbed ceilings, RAID 5 x4, cache off (each binary on an array it created, before each of its runs):")
        for rnd in range(a.rounds):
            for name, b in order(rnd, bins):
                # Its own create: a binary that does not read the other's
                # superblock format would bench a temporary array without
                # a bitmap instead (--overwrite), which is not the same test.
                sh(b, "create", "--name", "ab5", "--level", "5", "--chunk", "128K", "--force", *devs)
                r = bench(b, devs, "RND4KQ1T1,SEQ1MQ8T1", False)
                lat, seq = r[("RND4K Q1T1", "write")]["lat_mean_us"], r[("SEQ1M Q8T1", "read")]["mbps"]
                res[name].append((lat, seq))
                print(f"  round {rnd} {name}: RND4K Q1T1 write {lat:6.1f} us   SEQ1M Q8T1 read {seq:7.1f} MB/s", flush=True)
        for name in bins:
            lat = [x[0] for x in res[name]]
            seq = [x[1] for x in res[name]]
            print(f"  {name}: mean RND4K Q1T1 write latency {sum(lat) / len(lat):.1f} us; SEQ1M Q8T1 read {sum(seq) / len(seq):.1f} MB/s")
    finally:
        sh(DRIVES, "down")


def report(res, figures):
    """Prints, per figure (index into each round's tuple, label, unit, lower
    is better), the mean of the rounds for OLD and NEW and NEW / OLD; a
    figure a binary could not measure in some round (None) is n/a."""
    for i, (label, unit, lower) in enumerate(figures):
        means = {}
        for k in ("old", "new"):
            xs = [x[i] for x in res[k]]
            means[k] = None if not xs or None in xs else sum(xs) / len(xs)
        old, new = means["old"], means["new"]
        fmt = lambda v: f"{v:10.2f}" if v is not None else f"{'n/a':>10}"
        ratio = f"{new / old:6.3f}" if old and new is not None else f"{'n/a':>6}"
        print(f"  {label:<44} OLD {fmt(old)} {unit:<6} NEW {fmt(new)} {unit:<6} NEW/OLD {ratio}"
              f"  ({'lower' if lower else 'higher'} is better)", flush=True)


def part_cache(a, bins):
    devs = sh(DRIVES, "up", "4").split()
    try:
        sh(a.new, "create", "--name", "abc", "--level", "5", "--chunk", "128K", "--force", *devs)
        res = {k: [] for k in bins}
        print("testbed ceilings, RAID 5 x4, chunk 128K, the volume cache (default size and dirty limit):")
        for rnd in range(a.rounds):
            got = {k: {} for k in bins}
            for mode in ("writeback", "off"):
                sh(a.new, "config", "--cache", mode, *devs)
                for name, b in order(rnd, bins):
                    profiles = "SEQ64KQ1T1,RND4KQ1T1" if mode == "writeback" else "RND4KQ1T1"
                    got[name][mode] = bench(b, devs, profiles, False, write_only=True)
            for name in bins:
                wb, off = got[name]["writeback"], got[name]["off"]
                x = (wb[("SEQ64K Q1T1", "write")]["mbps"], wb[("RND4K Q1T1", "write")]["lat_mean_us"],
                     off[("RND4K Q1T1", "write")]["lat_mean_us"])
                res[name].append(x)
                print(f"  round {rnd} {name}: write-back SEQ64K Q1T1 write {x[0]:7.1f} MB/s, RND4K Q1T1 write {x[1]:7.1f} us;"
                      f" off RND4K Q1T1 write {x[2]:7.1f} us", flush=True)
        report(res, [("write-back SEQ64K Q1T1 write", "MB/s", False), ("write-back RND4K Q1T1 write mean latency", "us", True),
                     ("off RND4K Q1T1 write mean latency", "us", True)])
    finally:
        sh(DRIVES, "down")


def part_scaling(a, bins):
    """In process, no testbed: `uraid bench --level L` over null: and mem:
    members, as bench/scaling.py runs it."""
    setups = [(kind, level) for kind in ("null:1G", "mem:320M") for level in (0, 5)]
    res = {k: [] for k in bins}
    print("in process, no ceilings, RND4K Q32T1 (a temporary array, chunk 64K, 256M test area):")
    for rnd in range(a.rounds):
        for name, b in order(rnd, bins):
            row = []
            for kind, level in setups:
                p = subprocess.run([b, "bench", "--json", "--quiet", "--overwrite", "--profile", "RND4K-Q32T1", "--runs", TIMING["runs"],
                                    "--time", TIMING["time"], "--warmup", "1", "--size", "256M", "--level", str(level), "--chunk", "64K",
                                    *[kind] * 4], capture_output=True, text=True)
                if p.returncode != 0:
                    # An older uraid without null: members ("cannot open
                    # member null:1G"): its figures are n/a.
                    print(f"  round {rnd} {name}: RAID {level} over {kind}: {p.stderr.strip()}", flush=True)
                    row += [None] * 4
                    continue
                r = {x["test"]["dir"].lower(): x["best"] for x in json.loads(p.stdout)["results"]}
                for d in ("read", "write"):
                    # CPU µs per 4 KiB I/O: the process's CPU seconds per GB.
                    row += [r[d]["iops"], r[d]["cpu_secs_per_gb"] * 4096 / 1e9 * 1e6]
            res[name].append(tuple(row))
            print(f"  round {rnd} {name}: " + ", ".join(f"{kind.split(':')[0]} RAID {level} read {row[4 * i] or 0:.0f} / write {row[4 * i + 2] or 0:.0f} IOPS"
                                                       for i, (kind, level) in enumerate(setups) if row[4 * i] is not None), flush=True)
    figures = []
    for kind, level in setups:
        for d in ("read", "write"):
            what = f"RAID {level} x4 {kind.split(':')[0]}: RND4K Q32T1 {d}"
            figures += [(f"{what} IOPS", "IOPS", False), (f"{what} CPU", "us/IO", True)]
    report(res, figures)


if __name__ == "__main__":
    main()
