#!/usr/bin/env python3
"""NBD export speed on the shared testbed: fio's nbd engine against a uraid RAID 0 export.

Prints figures and ratios from ONE run. Issue 4's targets:

  part 1 (4 drives at 250 MB/s and 25k IOPS each): fio --ioengine=nbd against
    a RAID 0 export (128K chunk): SEQ1M Q8T1 read and write >= 90% of 4 x one
    drive, RND4K Q32T1 read >= 85% of 4 x one drive; beside it uraid's own
    in-process benchmark of the same array and btrfs raid0 (fio) on the same
    drives, with ratios.
  part 2 (no ceilings): the export's RND4K Q32T1 read IOPS and CPU seconds
    per GB (server and client) next to the in-process engine's, measured
    with two clients: fio's nbd engine (with the most the export could
    reach with it on this machine's cores: the in-process run's CPU per
    I/O, the whole machine's, drives' kernel threads included, plus the
    client's), and `uraid bench` on the export's URI, the same load
    generator as the in-process run through uraid's NBD client (issue
    19's target: at least 70% of in-process).

Needs root, the testbed (../shared/testbed), fio, libnbd-bin and btrfs-progs
(installed with apt-get when missing). Usage: python3 bench/nbd.py [--runs N] [--time S] [--metrics] [--console]
(--metrics: the server runs its Prometheus endpoint, scraped once a second;
--console: the server runs its web console, open in headless chromium with
its charts live, on the same 2 cores; chromium is installed when missing)
"""
import os, signal, subprocess, threading, time, urllib.request

from common import DRIVES, PEER, URAID, best_of, fio_cmd, fio_figures, fio_job, open_console, parser, prepare, proc_cpu, sh, testbed_down, uraid_bench, wait_http, wait_unix_socket

SOCK = "/tmp/uraid-bench-nbd.sock"
TICK = os.sysconf("SC_CLK_TCK")


def busy_cores(secs, delay):
    """A thread that, after `delay` s, measures for `secs` s how many of
    the machine's cores were busy (every process and kernel thread: user,
    nice, system, irq, softirq; /proc/stat). Its `cores` is set when done."""
    def stat():
        f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return sum(f[:3]) + sum(f[5:8]), sum(f[:8])
    class T(threading.Thread):
        cores = None
        def run(self):
            time.sleep(delay)
            (b0, a0), t0 = stat(), time.time()
            time.sleep(secs)
            (b1, a1), t1 = stat(), time.time()
            self.cores = (b1 - b0) / TICK / (t1 - t0)
    t = T()
    t.start()
    return t


METRICS = "127.0.0.1:19109"
CONSOLE = "127.0.0.1:18109"


class Serve:
    def __init__(self, devs, throttled, metrics=False, console=False):
        if os.path.exists(SOCK):
            os.unlink(SOCK)
        cmd = [URAID, "serve", "--socket", SOCK, *(["--metrics", METRICS] if metrics else []),
               *(["--console", CONSOLE, "--console-token", "bench-console-token-0123456789"] if console else []), *devs]
        if throttled:
            cmd = [DRIVES, "run", "--"] + cmd
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_unix_socket(SOCK, self.p)
        self.uri = f"nbd+unix:///bench?socket={SOCK}"
        self.scraping = metrics
        if metrics:
            # Scraped once a second (Prometheus's default is every 15 s).
            def scrape():
                while self.scraping:
                    try:
                        urllib.request.urlopen(f"http://{METRICS}/metrics").read()
                    except OSError:
                        pass
                    time.sleep(1)
            self.scraper = threading.Thread(target=scrape)
            self.scraper.start()
        self.browser = None
        if console:
            wait_http(CONSOLE)
            self.browser = open_console(f"http://{CONSOLE}/?token=bench-console-token-0123456789")
            time.sleep(3)  # the page loaded, its charts running

    def cpu(self):
        return proc_cpu(self.p.pid)

    def stop(self):
        if self.browser:
            assert self.browser.poll() is None, "chromium showing the console ended early"
            os.killpg(self.browser.pid, signal.SIGKILL)
            self.browser.wait()
        if self.scraping:
            self.scraping = False
            self.scraper.join()
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(30)


def fio(args, rw, bs, qd, target, nbd=False, size="1G"):
    def one():
        cmd = fio_cmd(rw, bs, qd, args.time, size)
        if nbd:
            cmd += ["--ioengine=nbd", f"--uri={target}"]
        else:
            cmd = [DRIVES, "run", "--"] + cmd + ["--ioengine=io_uring", "--direct=1", f"--filename={target}"]
        f = fio_figures(fio_job(sh(*cmd, check=False)), rw)
        return {"mbps": f["mbps"], "iops": f["iops"], "bytes": f["bytes"], "client_cpu": f["cpu"]}
    return best_of(args.runs, "mbps", one)


def main():
    ap = parser(__doc__)
    ap.add_argument("--metrics", action="store_true", help="serve with --metrics (scraped once a second)")
    ap.add_argument("--console", action="store_true", help="serve with --console, open in headless chromium (charts live)")
    args = ap.parse_args()
    prepare(None, ("fio", "fio"), ("btrfs-progs", "mkfs.btrfs"), ("libnbd-bin", "nbdinfo"), *([("chromium", "chromium")] if args.console else []))
    testbed_down()

    devs = sh(DRIVES, "up", "4").split()
    limits = dict(kv.split("=") for kv in sh(DRIVES, "limits").split())
    bw, iops = int(limits["bw_bytes_per_s"]), int(limits["iops"])
    print(f"testbed: 4 drives, each {bw/1e6:.0f} MB/s and {iops} IOPS; runs={args.runs} x {args.time}s, best run kept")
    tests = [("SEQ1M Q8T1", "read", True, "read", "1M", 8, 0.90), ("SEQ1M Q8T1", "write", True, "write", "1M", 8, 0.90),
             ("RND4K Q32T1", "read", False, "randread", "4k", 32, 0.85), ("RND4K Q32T1", "write", False, "randwrite", "4k", 32, None)]
    single = uraid_bench(args, [devs[0]], ["SEQ1M-Q8T1", "RND4K-Q32T1"])
    sh(URAID, "create", "--level", "0", "--chunk", "128K", "--name", "bench", "--force", *devs)
    inproc = uraid_bench(args, devs, ["SEQ1M-Q8T1", "RND4K-Q32T1"])
    srv = Serve(devs, throttled=True, metrics=args.metrics, console=args.console)
    # fill the first GiB so reads read data
    subprocess.run(["fio", "--name=fill", "--ioengine=nbd", f"--uri={srv.uri}", "--rw=write", "--bs=1M",
                    "--iodepth=8", "--size=1G"], capture_output=True)
    export = {(n, d): fio(args, rw, bs, qd, srv.uri, nbd=True) for n, d, _, rw, bs, qd, _ in tests}
    srv.stop()
    testfile = sh(PEER, "up").strip()
    btrfs = {(n, d): fio(args, rw, bs, qd, testfile) for n, d, _, rw, bs, qd, _ in tests}
    sh(PEER, "down")

    print()
    print(f"{'test':<18} {'1 drive':>9} {'NBD export':>11} {'/ 4x1 drive':>12} {'/ 4x ceil':>10} {'target':>7}"
          f" {'in-process':>11} {'NBD/inproc':>11} {'btrfs':>9} {'NBD/btrfs':>10}  unit")
    for n, d, seq, _, _, _, target in tests:
        key = "mbps" if seq else "iops"
        s, e, i, b = single[(n, d)][key], export[(n, d)][key], inproc[(n, d)][key], btrfs[(n, d)][key]
        ceil = 4 * (bw / 1e6 if seq else iops)
        r1, r2 = e / (4 * s), e / ceil
        verdict = "-" if target is None else ("MET" if min(r1, r2) >= target else "NOT MET")
        tgt = "-" if target is None else f">={target:.0%}"
        print(f"{n + ' ' + d:<18} {s:>9.1f} {e:>11.1f} {r1:>12.1%} {r2:>10.1%} {tgt:>7} {i:>11.1f}"
              f" {e / i:>11.2f} {b:>9.1f} {e / b:>10.2f}  {'MB/s' if seq else 'IOPS'} {verdict}")
    sh(DRIVES, "down")

    # part 2: no ceilings
    devs = sh(DRIVES, "up", "4", "--bw", "0", "--iops", "0").split()
    sh(URAID, "create", "--level", "0", "--chunk", "128K", "--name", "bench", "--force", *devs)
    # The whole machine's busy cores in the first run's steady state (after
    # the 1 s warm-up): the engine, the drives' kernel threads, interrupts.
    window = max(1.0, args.time - 2)
    busy = busy_cores(window, 1.5)
    inproc = uraid_bench(args, devs, ["RND4K-Q32T1"])[("RND4K Q32T1", "read")]
    busy.join()
    srv = Serve(devs, throttled=True, metrics=args.metrics, console=args.console)
    c0 = srv.cpu()
    busy_nbd = busy_cores(window, 1.5)
    r = fio(args, "randread", "4k", 32, srv.uri, nbd=True)
    busy_nbd.join()
    server_cpu = (srv.cpu() - c0) / args.runs  # per run (each run includes 1 s ramp)
    # The same load generator as the in-process run, through the export:
    # `uraid bench` on the export's URI (uraid's NBD client, one request
    # sent per completion as in process). Read-only: the area was written
    # by the in-process run.
    c1 = srv.cpu()
    busy_own = busy_cores(window, 1.5)
    own = uraid_bench(args, [srv.uri], ["RND4K-Q32T1"], read_only=True)[("RND4K Q32T1", "read")]
    busy_own.join()
    own_server_cpu = (srv.cpu() - c1) / args.runs
    srv.stop()
    gb = r["bytes"] / 1e9
    cores = os.cpu_count()
    # CPU µs per I/O of everything the in-process run keeps busy, and of
    # fio's nbd engine (one thread, libnbd: a poll and four recv(2) per
    # structured read reply). With a server that cost nothing more than
    # the engine, every core busy could at most run cores / (sum) IOPS.
    per_io_inproc = busy.cores / inproc["iops"] * 1e6
    per_io_client = r["client_cpu"] / (r["bytes"] / 4096) * 1e6
    bound = cores / (per_io_inproc + per_io_client) * 1e6
    print()
    print("no ceilings, RND4K Q32T1 read over 4 memory-speed drives:")
    print(f"  in-process engine:      {inproc['iops']:>9.0f} IOPS  {inproc['cpu_secs_per_gb']:.2f} CPU s/GB;"
          f" the machine {busy.cores:.2f} of {cores} cores busy = {per_io_inproc:.1f} CPU µs per I/O")
    print(f"  NBD export (fio nbd):   {r['iops']:>9.0f} IOPS  server {server_cpu / gb:.2f} + client {r['client_cpu'] / gb:.2f}"
          f" = {(server_cpu + r['client_cpu']) / gb:.2f} CPU s/GB (server CPU includes the ramp-up second);"
          f" the machine {busy_nbd.cores:.2f} of {cores} cores busy")
    print(f"  export / in-process IOPS (fio nbd): {r['iops'] / inproc['iops']:.1%}")
    print(f"  most a server costing no more than the engine could reach with this client on {cores} cores:"
          f" {cores} / ({per_io_inproc:.1f} + client {per_io_client:.1f} µs per I/O) = {bound:.0f} IOPS"
          f" = {bound / inproc['iops']:.1%} of in-process; the export is at {r['iops'] / bound:.1%} of that")
    own_gb = own["bytes"] / 1e9
    # uraid bench's CPU figure is the whole run's (warm-up included) over
    # the best run's bytes; the server's is per run, ramp included, too.
    print(f"  NBD export (uraid bench): {own['iops']:>9.0f} IOPS  server {own_server_cpu / own_gb:.2f} + client"
          f" {own['cpu_secs_per_gb']:.2f} = {own_server_cpu / own_gb + own['cpu_secs_per_gb']:.2f} CPU s/GB;"
          f" the machine {busy_own.cores:.2f} of {cores} cores busy")
    share = own["iops"] / inproc["iops"]
    print(f"  export / in-process IOPS, the same load generator on both sides (uraid bench): {share:.1%}"
          f"  target >= 70%: {'MET' if share >= 0.70 else 'NOT MET'}")
    sh(DRIVES, "down")


if __name__ == "__main__":
    main()
