#!/usr/bin/env python3
"""The web console's page load on the shared testbed (issue 17: the overview
loads in under 300 ms on this machine).

Serves a RAID 5 over 4 testbed drives (250 MB/s and 25000 IOPS each, chunk
64K) with `--console`, and loads the overview --loads times in headless
chromium (selenium and chromedriver), first idle, then while fio reads and
writes through the export (RND4K QD8, 70% reads). For each load it takes
from the browser's own timing:
  - loaded: navigation start to the load event (the page, its script and
    styles, uPlot);
  - state shown: navigation start to when the overview first showed the
    array's state (the page's `uraid-first-status` mark; the status comes
    through the server-sent event stream);
and prints the median, the 90th percentile and the largest. Target: the
90th percentile of "state shown" under 300 ms, idle and under load.

Needs root, the testbed (../shared/testbed), fio, libnbd-bin, chromium,
chromium-driver (installed with apt-get when missing) and python3's
selenium (pip). Usage: python3 bench/console.py [--loads N]
"""
import json, os, signal, statistics, subprocess, sys, time

from common import DRIVES, URAID, parser, prepare, sh, testbed_down, wait_http

SOCK = "/tmp/uraid-bench-console.sock"
CONSOLE = "127.0.0.1:18110"
TARGET_MS = 300


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def loads(d, n):
    """Loads the overview `n` times; returns [(loaded ms, state shown ms)]."""
    from selenium.webdriver.support.ui import WebDriverWait
    out = []
    for _ in range(n):
        d.get("about:blank")
        d.get(f"http://{CONSOLE}/")
        WebDriverWait(d, 30, poll_frequency=0.05).until(
            lambda d: d.execute_script("return performance.getEntriesByName('uraid-first-status').length > 0"))
        loaded, shown = d.execute_script(
            "const n = performance.getEntriesByType('navigation')[0];"
            "return [n.loadEventEnd - n.startTime, performance.getEntriesByName('uraid-first-status')[0].startTime];")
        state = d.execute_script("return document.getElementById('array-state').textContent")
        assert state == "clean", f"the overview shows '{state}'"
        out.append((loaded, shown))
    return out


def report(what, xs):
    for i, name in ((0, "loaded"), (1, "state shown")):
        v = [x[i] for x in xs]
        verdict = "" if i == 0 else ("  MET" if pct(v, 90) < TARGET_MS else "  NOT MET") + f" (target p90 < {TARGET_MS} ms)"
        print(f"  {what:<34} {name:<12} median {statistics.median(v):6.1f} ms  p90 {pct(v, 90):6.1f} ms  max {max(v):6.1f} ms{verdict}")


def main():
    ap = parser(__doc__)
    ap.add_argument("--loads", type=int, default=20, help="page loads per condition")
    args = ap.parse_args()
    prepare(None, ("fio", "fio"), ("libnbd-bin", "nbdinfo"), ("chromium", "chromium"), ("chromium-driver", "chromedriver"))
    try:
        import selenium  # noqa: F401
    except ImportError:
        sh(sys.executable, "-m", "pip", "install", "-q", "selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    testbed_down()
    devs = sh(DRIVES, "up", "4").split()
    limits = dict(kv.split("=") for kv in sh(DRIVES, "limits").split())
    sh(URAID, "create", "--level", "5", "--chunk", "64K", "--name", "consolebench", "--force", *devs)
    if os.path.exists(SOCK):
        os.unlink(SOCK)
    srv = subprocess.Popen([DRIVES, "run", "--", URAID, "serve", "--socket", SOCK, "--console", CONSOLE, "--console-token", "bench-console-token-0123456789", *devs],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fio = None
    d = None
    try:
        wait_http(CONSOLE)
        o = webdriver.ChromeOptions()
        for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1280,1000"]:
            o.add_argument(a)
        o.binary_location = "/usr/bin/chromium"
        d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
        d.get(f"http://{CONSOLE}/?token=bench-console-token-0123456789")  # the login: a cookie from here on
        print(f"testbed: 4 drives, each {int(limits['bw_bytes_per_s']) / 1e6:.0f} MB/s and {limits['iops']} IOPS; RAID 5 chunk 64K "
              f"served with --console; {args.loads} loads of the overview per condition, headless chromium")
        idle = loads(d, args.loads)
        fio = subprocess.Popen(["fio", "--name=load", "--thread", "--ioengine=nbd", f"--uri=nbd+unix:///consolebench?socket={SOCK}",
                                "--rw=randrw", "--rwmixread=70", "--bs=4k", "--iodepth=8", "--size=1G", "--time_based",
                                "--runtime=3600", "--output-format=json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        time.sleep(3)
        busy = loads(d, args.loads)
        os.kill(fio.pid, signal.SIGINT)
        job = fio.communicate(timeout=30)[0]
        j = json.loads(job[job.index(b"{"):])["jobs"][0]
        iops = j["read"]["iops"] + j["write"]["iops"]
        print()
        report("idle", idle)
        report(f"fio RND4K QD8 at {iops:,.0f} IOPS", busy)
    finally:
        if d:
            d.quit()
        if fio and fio.poll() is None:
            fio.kill()
        srv.send_signal(signal.SIGTERM)
        srv.wait(60)
        sh(DRIVES, "down")


if __name__ == "__main__":
    main()
