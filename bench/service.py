#!/usr/bin/env python3
"""What the service costs the data path (issue "uraid as an always-on storage service").

Prints figures and ratios from ONE run:

  part 1 (testbed: 5 drives at 250 MB/s and 25k IOPS each; RAID 5 over 4, the
    5th a spare): RND4K Q32T1 read through the NBD export idle, during a live
    scrub at the service's default rate (`uraid check NAME`), and during a
    background rebuild with --rebuild-rate at half a drive's bandwidth
    (`uraid fail` + `uraid add` of the spare). Targets: >= 80% of idle during
    the scrub, >= 70% during the rebuild. The array is filled first so that
    the rebuild reconstructs (regions never written are only zeroed).
  part 2 (no ceilings, RAID 0 over 4 memory-speed drives, like bench/nbd.py
    part 2): RND4K Q32T1 read IOPS and server CPU per GB of the export with
    --metrics (scraped once a second, 15 times Prometheus's default) and
    without, alternately, ROUNDS times each; with --old BINARY, that binary
    (an earlier uraid) is in the alternation too; with --console, also with
    the web console open in headless chromium (charts live). Target: within 3%.

Needs root, the testbed (../shared/testbed), fio and libnbd-bin.
Usage: python3 bench/service.py [--time S] [--rounds N] [--old BINARY] [--console] [--part 1|2]
"""
import json, os, signal, socket, subprocess, sys, tempfile, threading, time, urllib.request

from common import DRIVES, URAID, fio_cmd, fio_figures, fio_job, open_console, parser, prepare, sh, testbed_down

TICK = os.sysconf("SC_CLK_TCK")
RUN = tempfile.mkdtemp(prefix="uraid-bench-service-")
ENV = dict(os.environ, URAID_RUN_DIR=RUN, URAID_CONFIG=os.path.join(RUN, "none.conf"))
NAME = "bench"


def proc_cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def uraid(*args, check=True):
    r = subprocess.run([URAID, *args], capture_output=True, text=True, env=ENV)
    if check and r.returncode != 0:
        sys.exit(f"uraid {' '.join(args)} failed: {r.stderr}")
    return r.stdout


class Serve:
    def __init__(self, binary, devs, extra=(), throttled=True):
        self.sock = os.path.join(RUN, "bench.sock")
        cmd = [binary, "serve", "--socket", self.sock, *extra, *devs]
        if throttled:
            cmd = [DRIVES, "run", "--"] + cmd
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=ENV)
        self.metrics = None
        want_metrics = "--metrics" in extra
        want_console = "--console" in extra
        self.console = None
        for line in self.p.stdout:
            if line.startswith("metrics: "):
                self.metrics = line.split()[1]
            if line.startswith("console: "):
                self.console = line.split()[1]
            if want_metrics and self.metrics or want_console and self.console or not (want_metrics or want_console) and line.startswith("stop with"):
                break
        for _ in range(400):
            try:
                s = socket.socket(socket.AF_UNIX); s.connect(self.sock); s.close(); break
            except OSError:
                time.sleep(0.05)
        else:
            sys.exit("uraid serve did not come up")
        self.uri = f"nbd+unix:///{NAME}?socket={self.sock}"
        self.scraping = False

    def scrape(self):
        """Scrapes the metrics once a second until stop()."""
        self.scraping = True
        def loop():
            while self.scraping:
                urllib.request.urlopen(self.metrics).read()
                time.sleep(1)
        self.scraper = threading.Thread(target=loop)
        self.scraper.start()

    def cpu(self):
        # Under `drives run`, the server is the child of the wrapper.
        pids = [self.p.pid] + [int(x) for x in subprocess.run(["pgrep", "-P", str(self.p.pid)], capture_output=True, text=True).stdout.split()]
        return sum(proc_cpu(p) for p in pids)

    def stop(self):
        self.scraping = False
        if getattr(self, "scraper", None):
            self.scraper.join()
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(120)


def tree_cpu(pid):
    """CPU seconds of process `pid` and its descendants."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
    total = 0.0
    try:
        total = proc_cpu(pid)
    except OSError:
        pass
    return total + sum(tree_cpu(int(c)) for c in out)


def fio_read(args, uri, throttled=True):
    cmd = fio_cmd("randread", "4k", 32, args.time) + ["--ioengine=nbd", f"--uri={uri}"]
    if throttled:
        cmd = [DRIVES, "run", "--"] + cmd
    return fio_figures(fio_job(sh(*cmd, check=False)), "randread")


def status(name=NAME):
    return json.loads(uraid("status", "--json", name))


def wait_progress(action, secs=60):
    t0 = time.time()
    while time.time() - t0 < secs:
        p = status().get("progress")
        if p and p["action"] == action and p["done"] > 0:
            return p
        time.sleep(0.2)
    sys.exit(f"no {action} in progress after {secs} s")


def part1(args):
    devs = sh(DRIVES, "up", "5", "--size", "2G").split()
    limits = dict(kv.split("=") for kv in sh(DRIVES, "limits").split())
    bw = int(limits["bw_bytes_per_s"])
    print(f"part 1 (testbed: 5 drives, each {bw/1e6:.0f} MB/s and {limits['iops']} IOPS; RAID 5 x4 chunk 64K, 1 spare; "
          f"fio RND4K Q32T1 read {args.time:.0f} s through the export)")
    sh(URAID, "create", "--level", "5", "--chunk", "64K", "--name", NAME, "--force", *devs[:4])
    half = bw / 2 / 1e6
    srv = Serve(URAID, devs[:4], ["--rebuild-rate", f"{half:.0f}"])
    # Fill the whole volume: a rebuild reconstructs only what was written.
    sh(DRIVES, "run", "--", "fio", "--name=fill", "--ioengine=nbd", f"--uri={srv.uri}", "--rw=write", "--bs=1M",
       "--iodepth=8", "--size=100%")
    idle = fio_read(args, srv.uri)
    check = subprocess.Popen([URAID, "check", "--quiet", NAME], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    wait_progress("check")
    scrub = fio_read(args, srv.uri)
    sp = status()["progress"]
    # The stop ends the scrub (its client is told), then serve again.
    srv.stop()
    check.wait(60)
    srv = Serve(URAID, devs[:4], ["--rebuild-rate", f"{half:.0f}"])
    uraid("fail", NAME, "--member", "1")
    uraid("add", NAME, "--spare", devs[4])
    wait_progress("rebuild")
    rebuild = fio_read(args, srv.uri)
    rp = status()["progress"]
    srv.stop()
    sh(DRIVES, "down")
    print(f"  idle:                         {idle['iops']:>9.0f} IOPS")
    print(f"  during a live scrub:          {scrub['iops']:>9.0f} IOPS = {scrub['iops'] / idle['iops']:.1%} of idle (target >= 80%)"
          f"  [scrub at {sp['mb_per_s']:.1f} MB/s, limit {sp['rate_limit'] / 1e6:.0f} MB/s]")
    print(f"  during a background rebuild:  {rebuild['iops']:>9.0f} IOPS = {rebuild['iops'] / idle['iops']:.1%} of idle (target >= 70%)"
          f"  [rebuild at {rp['mb_per_s']:.1f} MB/s, --rebuild-rate {half:.0f} = half a drive]")


def part2(args):
    devs = sh(DRIVES, "up", "4", "--bw", "0", "--iops", "0").split()
    sh(URAID, "create", "--level", "0", "--chunk", "128K", "--name", NAME, "--force", *devs)
    configs = [("no metrics", URAID, ()), ("--metrics, scraped 1/s", URAID, ("--metrics", "127.0.0.1:0"))]
    if args.console:
        configs.append(("console open in chromium", URAID, ("--console", "127.0.0.1:0", "--console-token", "bench-console-token-0123456789")))
    if args.old:
        configs.insert(0, ("old binary", args.old, ()))
    res = {c[0]: [] for c in configs}
    first = True
    for _ in range(args.rounds):
        for label, binary, extra in configs:
            srv = Serve(binary, devs, extra)
            if first:
                sh("fio", "--name=fill", "--ioengine=nbd", f"--uri={srv.uri}", "--rw=write", "--bs=1M", "--iodepth=8", "--size=1G")
                first = False
            browser = None
            if "--metrics" in extra:
                srv.scrape()
            if "--console" in extra:
                browser = open_console(srv.console.split("?")[0] + "?token=bench-console-token-0123456789")
            c0 = srv.cpu()
            b0 = tree_cpu(browser.pid) if browser else 0
            r = fio_read(args, srv.uri)
            cpu = srv.cpu() - c0
            if browser:
                res.setdefault("browser cpu", []).append(tree_cpu(browser.pid) - b0)
                browser.kill()
                browser.wait()
            srv.stop()
            res[label].append((r["iops"], cpu / (r["bytes"] / 1e9)))
    sh(DRIVES, "down")
    print(f"part 2 (no ceilings, RAID 0 x4 memory-speed drives, RND4K Q32T1 read {args.time:.0f} s, {args.rounds} rounds alternated)")
    base = sum(x[0] for x in res["no metrics"]) / args.rounds
    if "browser cpu" in res:
        print(f"  (chromium rendering the console used {sum(res['browser cpu']) / args.rounds:.1f} CPU s per run, on the same 2 cores)")
    for label, _, _ in configs:
        iops = [x[0] for x in res[label]]
        m = sum(iops) / len(iops)
        cpu = sum(x[1] for x in res[label]) / len(iops)
        print(f"  {label:<24} mean {m:>9.0f} IOPS (min {min(iops):.0f} max {max(iops):.0f}), server {cpu:.2f} CPU s/GB"
              f" (incl. ramp), {m / base:.1%} of no metrics")


def main():
    ap = parser(__doc__, time=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--old", help="an earlier uraid binary to include in part 2's alternation")
    ap.add_argument("--part", type=int, choices=[1, 2])
    ap.add_argument("--console", action="store_true", help="part 2 also with the web console open in headless chromium")
    args = ap.parse_args()
    prepare(None, ("fio", "fio"), ("libnbd-bin", "nbdinfo"))
    testbed_down()
    if args.part in (None, 1):
        part1(args)
    if args.part in (None, 2):
        part2(args)


if __name__ == "__main__":
    main()
