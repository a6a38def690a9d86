#!/usr/bin/env bash
# Where a request's time goes through ublk, on md.py's drives (run INSIDE
# the test VM, as root, from the repository root):
#
#   cargo build --release -p uraid && cargo build --release -p uraid-ublk --example ublk-null
#   ../shared/testbed/vm run -- 'URAID=$PWD/target/release/uraid bash bench/ublk_rtt.sh'
#
# 4 null_blk drives with bench/md.py's ceilings (26 MiB/s, 16 deep, each
# request completed by a timer after NSEC ns, 40 ms by default): fio
# RND4K read at Q32 and Q1 (IOPS, mean completion latency) on one drive
# alone, md RAID 0 over the 4, uraid's RAID 0 through /dev/ublkbN with
# user copy and with the kernel's copy (URAID_UBLK_USER_COPY=0), uraid in
# process (`uraid bench`), and the ublk-null example (a ublk server that
# answers at once: the ublk driver's own round trip). Prints one line each.
set -u
U=${URAID:-$PWD/target/release/uraid}
N=${UBLK_NULL:-$PWD/target/release/examples/ublk-null}
modprobe ublk_drv; modprobe null_blk nr_devices=0
mount -t configfs none /sys/kernel/config 2>/dev/null
export URAID_RUN_DIR=/tmp/run URAID_CONFIG=/tmp/u.conf URAID_STATE_DIR=/tmp/st; mkdir -p /tmp/run /tmp/st
L=()
for i in 0 1 2 3; do d=/sys/kernel/config/nullb/nullb$i; mkdir $d
  for kv in size=256 memory_backed=1 max_sectors=1024 submit_queues=1 hw_queue_depth=16 irqmode=2 completion_nsec=${NSEC:-40000000} mbps=26 power=1; do echo ${kv#*=} > $d/${kv%%=*}; done
  L+=(/dev/nullb$i); done
udevadm settle
fiojob() { fio --output-format=json --filename="$1" --ioengine=libaio --direct=1 --numjobs=1 --size=192M --time_based --runtime=3 --ramp_time=1 \
  --name=q32 --rw=randread --bs=4k --iodepth=32 --name=q1 --stonewall --rw=randread --bs=4k --iodepth=1 |
  jq -r '"Q32 \(.jobs[0].read.iops|floor) IOPS clat \(.jobs[0].read.clat_ns.mean/1e6*100|round/100) ms; Q1 \(.jobs[1].read.iops|floor) IOPS clat \(.jobs[1].read.clat_ns.mean/1e6*100|round/100) ms"'; }
echo "null_blk alone: $(fiojob /dev/nullb0)"
mdadm --create /dev/md0 --run --level=0 --chunk=128 --raid-devices=4 "${L[@]}" >/dev/null 2>&1
echo "md raid0: $(fiojob /dev/md0)"
mdadm --stop /dev/md0 >/dev/null 2>&1; for d in "${L[@]}"; do mdadm --zero-superblock $d 2>/dev/null; done
$U create --level 0 --chunk 128K --name lat "${L[@]}" >/dev/null
for uc in 1 0; do
  URAID_UBLK_USER_COPY=$uc $U serve lat --ublk --fork > /tmp/serve.out 2>&1
  dev=$(sed -n "s/^serving 'lat' .* on \(\/dev\/ublkb[0-9]*\)$/\1/p" /tmp/serve.out)
  echo "uraid ublk (user copy $uc) $dev: $(fiojob $dev)"
  $U stop lat >/dev/null; sleep 1
done
$U bench --json --quiet --overwrite --profile RND4K-Q32T1,RND4K-Q1T1 --read-only --runs 1 --time 3 --warmup 1 --size 192M "${L[@]}" 2>/dev/null |
  jq -r '.results[] | "in process \(.test.profile.name): \(.best.iops|floor) IOPS"'
if [ -x $N ]; then
  $N --size-mib 256 > /tmp/null.out 2>/tmp/null.err & np=$!
  for i in $(seq 50); do read -r dev < /tmp/null.out 2>/dev/null; [ -n "${dev:-}" ] && break; sleep 0.1; done
  sleep 1
  echo "ublk-null $dev: $(fio --output-format=json --filename=$dev --ioengine=libaio --direct=1 --size=192M --time_based --runtime=3 --ramp_time=1 --name=q1 --rw=randread --bs=4k --iodepth=1 | jq -r '"Q1 \(.jobs[0].read.iops|floor) IOPS clat \(.jobs[0].read.clat_ns.mean/1e3|floor) us"')"
  kill $np; wait $np
fi
echo "null_blk nullb0 Q1 (timer 40ms): $(fio --output-format=json --filename=/dev/nullb0 --ioengine=libaio --direct=1 --size=192M --time_based --runtime=3 --ramp_time=1 --name=q1 --rw=randread --bs=4k --iodepth=1 | jq -r '"\(.jobs[0].read.clat_ns.mean/1e3|floor) us"')"
