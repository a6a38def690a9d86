#!/usr/bin/env python3
"""The reviewers' suite: is uraid's load generator ever the bottleneck?

Prints figures and ratios from ONE run (absolute figures on a shared 2-core
machine are noise; ratios measured together are not). Issue 5's targets, on
one unthrottled drive (a kernel loop device over a file in RAM: the
testbed's drive with --bw 0 --iops 0, or an identical one made here when
other engineers have the testbed up):

  1. RND4K Q32T1 read: uraid's IOPS >= 95% of fio's (io_uring, O_DIRECT,
     same file, same queue depth); SEQ1M Q8T1 read: MB/s >= 95% of fio's.
     Both sides alternate and keep their best run (CrystalDiskMark's figure).
  2. A full default CrystalDiskMark run (`uraid suite --sets cdm`: 1 GiB,
     8 tests, 2 s warm-up + 5 runs of 5 s each) finishes in under 4 minutes.

Needs root (loop devices) and fio (installed with apt-get when missing).
Usage: python3 bench/suite.py [--runs N] [--time S] [--skip-full]
"""
import json, os, subprocess, sys, time

from common import DRIVES, URAID, fio_cmd, fio_figures, fio_job, parser, prepare, sh

OWN_IMG = "/dev/shm/uraid-bench-suite.img"


class Drive:
    """One unthrottled drive: the testbed's if nobody has it up, else our own
    loop device over a RAM file, made the way the testbed makes its drives."""

    def __init__(self):
        self.testbed = False
        self.dev = None
        up = subprocess.run([DRIVES, "list"], capture_output=True, text=True)
        if up.returncode != 0 or not up.stdout.strip():
            self.dev = sh(DRIVES, "up", "1", "--bw", "0", "--iops", "0").split()[0]
            self.testbed = True
            self.what = f"testbed drive {self.dev} (no ceilings)"
        else:
            sh("truncate", "-s", "2G", OWN_IMG)
            r = subprocess.run(["losetup", "-f", "--show", "--direct-io=on", OWN_IMG], capture_output=True, text=True)
            if r.returncode != 0:
                r = subprocess.run(["losetup", "-f", "--show", OWN_IMG], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"cannot make a loop device: {r.stderr}")
            self.dev = r.stdout.strip()
            self.what = (f"{self.dev}, a loop device over a 2 GiB file in RAM (the testbed is in use by others, "
                         "so an identical unthrottled drive was made)")

    def close(self):
        if self.testbed:
            subprocess.run([DRIVES, "down"], capture_output=True)
        elif self.dev:
            for _ in range(50):
                if subprocess.run(["losetup", "-d", self.dev], capture_output=True).returncode == 0:
                    break
                time.sleep(0.1)
            try:
                os.unlink(OWN_IMG)
            except FileNotFoundError:
                pass


def uraid(dev, profile, args):
    out = json.loads(sh(URAID, "suite", "--json", "--quiet", "--sets", "none", "--profile", profile, "--read-only",
                        "--best", "--runs", "1", "--time", str(args.time), "--warmup", "1", "--size", "1G", dev))
    t = out["targets"][0]["tests"][0]
    return {"mbps": t["best"]["mbps"], "iops": t["best"]["iops"], "cpu_gb": t["cpu_secs_per_gb"]}


def fio(dev, rw, bs, qd, args):
    return fio_figures(fio_job(sh(*fio_cmd(rw, bs, qd, args.time), f"--filename={dev}", "--ioengine=io_uring", "--direct=1")), rw)


def main():
    ap = parser(__doc__, runs_help="alternating runs per side in part 1 (best is kept)", time_help="seconds per run in part 1")
    ap.add_argument("--skip-full", action="store_true", help="skip part 2 (the 4-minute full run)")
    args = ap.parse_args()
    prepare("loop devices", ("fio", "fio"))
    drive = Drive()
    try:
        print(f"drive: {drive.what}")
        sh("fio", "--name=fill", f"--filename={drive.dev}", "--rw=write", "--bs=1M", "--iodepth=8",
           "--ioengine=io_uring", "--direct=1", "--size=1G")
        # ---- part 1: the load generator against fio ----------------------------------
        print(f"\npart 1: uraid's load generator against fio, read, {args.runs} alternating runs of {args.time:g} s "
              "per side (best kept), 1 GiB")
        print(f"{'test':<14} {'uraid':>12} {'fio':>12} {'uraid/fio':>10} {'target':>8}  {'CPU s/GB uraid':>15} {'fio':>6}")
        ok_all = True
        for name, profile, rw, bs, qd, key, unit in (
                ("RND4K Q32T1", "RND4K-Q32T1", "randread", "4k", 32, "iops", "IOPS"),
                ("SEQ1M Q8T1", "SEQ1M-Q8T1", "read", "1M", 8, "mbps", "MB/s")):
            bu = bf = None
            for i in range(args.runs):
                if i % 2 == 0:
                    u = uraid(drive.dev, profile, args)
                    f = fio(drive.dev, rw, bs, qd, args)
                else:
                    f = fio(drive.dev, rw, bs, qd, args)
                    u = uraid(drive.dev, profile, args)
                bu = u if bu is None or u[key] > bu[key] else bu
                bf = f if bf is None or f[key] > bf[key] else bf
            ratio = bu[key] / bf[key]
            ok = ratio >= 0.95
            ok_all &= ok
            print(f"{name:<14} {bu[key]:>9.0f} {unit:<4}{bf[key]:>9.0f} {unit:<4}{ratio:>8.1%} {'>= 95%':>8}  "
                  f"{bu['cpu_gb']:>15.2f} {bf['cpu_gb']:>6.2f}  {'MET' if ok else 'NOT MET'}")
        print(f"target: uraid >= 95% of fio on both: {'MET' if ok_all else 'NOT MET'}")
        print("CPU: uraid's figure is the whole process (getrusage RUSAGE_SELF, which includes io_uring's worker "
              "threads when the kernel hands requests to them); fio's is its job thread's usr+sys, without them.")
        # ---- part 2: a full default CrystalDiskMark run -------------------------------
        if not args.skip_full:
            print("\npart 2: a full default CrystalDiskMark run: uraid suite --sets cdm "
                  "(1 GiB, 8 tests, 2 s warm-up + 5 runs of 5 s)")
            t0 = time.monotonic()
            out = json.loads(sh(URAID, "suite", "--json", "--quiet", "--sets", "cdm", "--overwrite", drive.dev))
            secs = time.monotonic() - t0
            print(f"{'test':<20} {'median':>12} {'best':>12} {'spread':>7} {'CPU s/s':>8} {'CPU s/GB':>9}")
            for t in out["targets"][0]["tests"]:
                unit = "MB/s" if t["metric"] == "Mbps" else "IOPS"
                name = f"{t['test']['profile']['name']} {str(t['test']['dir']).lower()}"
                s = t["summary"]
                print(f"{name:<20} {s['median']:>7.0f} {unit:<4} {s['max']:>7.0f} {unit:<4} {s['spread_pct']:>6.1f}% "
                      f"{t['cpu_per_sec']:>8.2f} {t['cpu_secs_per_gb']:>9.2f}")
            print(f"full default run took {secs:.0f} s; target < 240 s: {'MET' if secs < 240 else 'NOT MET'}")
    finally:
        drive.close()


if __name__ == "__main__":
    main()
