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

Needs root and the testbed (../shared/testbed). Usage: python3 bench/grow.py [--size 1G] [--live]
"""
import json, os, socket, subprocess, sys, tempfile, time

from common import DRIVES, URAID, best_of, fio_cmd, fio_figures, fio_job, parser, prepare, sh, testbed_down


def main():
    ap = parser(__doc__, runs=1, time=10.0)
    ap.add_argument("--size", default="1G", help="testbed drive size")
    ap.add_argument("--live", action="store_true", help="reshape a served array under a QD8 client")
    args = ap.parse_args()
    prepare(None, *([("fio", "fio"), ("libnbd-bin", "nbdinfo")] if args.live else []))
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
        if args.live:
            return live(args, devs, bw)
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


def live(args, devs, bw):
    run = tempfile.mkdtemp(prefix="uraid-grow-bench-")
    env = dict(os.environ, URAID_RUN_DIR=run)
    sock = os.path.join(run, "bench.sock")
    srv = subprocess.Popen([DRIVES, "run", "--", URAID, "serve", "--socket", sock, *devs[:4]], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ctl = os.path.join(run, "growbench.ctl")
        for _ in range(400):
            try:
                for path in (sock, ctl):
                    s = socket.socket(socket.AF_UNIX); s.connect(path); s.close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            sys.exit("uraid serve did not come up: " + srv.stderr.read())
        uri = f"nbd+unix:///growbench?socket={sock}"

        def client():
            def one():
                cmd = fio_cmd("write", "1M", 8, args.time) + ["--ioengine=nbd", f"--uri={uri}"]
                return fio_figures(fio_job(sh(*cmd, check=False)), "write")
            return best_of(args.runs, "mbps", one)

        def status():
            r = subprocess.run([URAID, "status", "--json", "growbench"], env=env, capture_output=True, text=True)
            return json.loads(r.stdout) if r.returncode == 0 else sys.exit("status: " + r.stderr)

        idle = client()
        t0 = time.monotonic()
        r = subprocess.run([URAID, "grow", "growbench", "--force", "--add", devs[4]], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("grow: " + r.stderr)
        during = client()
        st = status()
        still = st.get("reshape") is not None
        while status().get("reshape") is not None:
            time.sleep(0.2)
        secs = time.monotonic() - t0
        st = status()
        old_cap = st["volumes"][0]["capacity"] * 3 // 4
        print(f"testbed: 5 drives of {args.size}, each {bw / 1e6:.0f} MB/s; RAID 5 x4 chunk 64K served, + 1 drive "
              f"while a client writes SEQ1M Q8T1 through the export ({args.time:.0f} s, best of {args.runs})")
        print(f"  client idle:            {idle['mbps']:8.1f} MB/s")
        print(f"  client during reshape:  {during['mbps']:8.1f} MB/s"
              f"{'' if still else ' (the reshape ended before the client: run with a larger --size)'}")
        verdict = "MET" if during["mbps"] >= 0.5 * idle["mbps"] else "NOT MET"
        print(f"  kept: {during['mbps'] / idle['mbps']:.1%} of idle (target >= 50%) {verdict}")
        print(f"  reshape at the default rate: {secs:.1f} s for {old_cap / 1e6:.0f} MB of data "
              f"({old_cap / secs / 1e6:.1f} MB/s moved, {st['member_count']} members, {st['volumes'][0]['capacity'] / 1e6:.0f} MB now)")
    finally:
        subprocess.run([URAID, "stop", "growbench"], env=env, capture_output=True)
        try:
            srv.wait(60)
        except subprocess.TimeoutExpired:
            srv.kill()


if __name__ == "__main__":
    main()
