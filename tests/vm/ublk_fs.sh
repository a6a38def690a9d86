#!/usr/bin/env bash
# The ublk export in the VM (run by tests/vm/run-all; URAID and WORK from it):
#  1. RAID 5 over 5 loop members of 300M (XFS aligns only volumes of 1G or more) (4 data chunks of 64K: a 256K stripe),
#     `uraid serve NAME --ublk`: /dev/ublkbN appears, in the serving line and
#     in RUN_DIR/NAME.ublk; its queue limits are the array's (logical block,
#     minimum_io_size = chunk, optimal_io_size = stripe, discard);
#  2. mkfs.xfs and mkfs.ext4 align to the stripe by themselves (xfs_info,
#     dumpe2fs); ext4 mounted, fio --verify=crc32c writes and reads back;
#     fstrim reaches the export (counted in the metrics);
#  3. the in-process engine and /dev/ublkbN measured on the same array, RND4K
#     Q32T1 read (printed: TCG guest, compare only within one run);
#  4. a clean stop deletes the device and its record; a read-only serve gives
#     a read-only device.
. "$(dirname "$0")/lib.sh"
name=vmublk
mnt=$MNT
modprobe ublk_drv

loop_members 5 300M
uraid create --level 5 --chunk 64K --name $name "${L[@]}" >/dev/null

step "1. serve --ublk"
serve_ublk $name --metrics 127.0.0.1:9199
grep -q "nbd" "$SERVE_OUT" && { cat "$SERVE_OUT"; fail "--ublk alone printed an NBD address"; }
[ ! -e "$URAID_RUN_DIR/$name.sock" ] || fail "--ublk alone made an NBD socket"
rec=$URAID_RUN_DIR/$name.ublk
uuid=$(uraid examine "${L[0]}" | sed -n 's/^ *array uuid : //p')
echo "record: $(cat "$rec")"
[ "$(jq -r .bdev "$rec")" = "$DEV" ] || fail "the record names $(jq -r .bdev "$rec"), not $DEV"
[ "/dev/ublkb$(jq -r .dev_id "$rec")" = "$DEV" ] || fail "the record's dev_id is not $DEV's"
[ "$(jq -r .pid "$rec")" -gt 1 ] || fail "no pid in the record"
[ "$(jq -r .uuid "$rec")" = "$uuid" ] || fail "the record's uuid is not the array's ($uuid)"
b=$(basename "$DEV")
q=/sys/block/$b/queue
lsblk -t "$DEV"
for f in logical_block_size physical_block_size minimum_io_size optimal_io_size discard_granularity discard_max_bytes write_zeroes_max_bytes max_sectors_kb; do
  printf '%s=%s ' $f "$(cat $q/$f)"
done
echo
[ "$(cat $q/minimum_io_size)" = 65536 ] || fail "minimum_io_size is $(cat $q/minimum_io_size), not the chunk (65536)"
[ "$(cat $q/optimal_io_size)" = 262144 ] || fail "optimal_io_size is $(cat $q/optimal_io_size), not the stripe (262144)"
[ "$(cat $q/discard_max_bytes)" -gt 0 ] || fail "no discard on a volume whose members take it"
[ "$(cat $q/write_zeroes_max_bytes)" -gt 0 ] || fail "no write-zeroes"
[ "$(cat /sys/block/$b/ro)" = 0 ] || fail "the device is read-only"
[ $(( $(blockdev --getsize64 "$DEV") )) -gt $((1 << 30)) ] || fail "the device has $(blockdev --getsize64 "$DEV") bytes"

step "2. mkfs aligns to the stripe; ext4, fio verify, fstrim"
# No discard of the whole device first (-K, nodiscard): slow under TCG, and
# the fstrim below is what checks that TRIM reaches the export.
if command -v mkfs.xfs >/dev/null; then
  x=$(mkfs.xfs -K -f -q "$DEV" && xfs_db -r -c "sb 0" -c "p unit width" "$DEV")
  echo "xfs: $(echo $x)"
  # 4K blocks: sunit 16 (64K), swidth 64 (256K).
  echo "$x" | grep -q "unit = 16" && echo "$x" | grep -q "width = 64" || fail "mkfs.xfs did not align to the stripe: $x"
fi
mkfs.ext4 -q -F -E nodiscard "$DEV"
d=$(dumpe2fs -h "$DEV" 2>/dev/null | grep -E "RAID (stride|stripe width)")
echo "ext4: $(echo $d)"
echo "$d" | grep -q "RAID stride: *16$" && echo "$d" | grep -q "RAID stripe width: *64$" || fail "mkfs.ext4 did not align to the stripe: $d"
mount "$DEV" "$mnt"
out=$(fio --name=verify --directory="$mnt" --size=16M --rw=randwrite --bs=16k --ioengine=libaio --iodepth=16 --direct=1 \
  --verify=crc32c --verify_fatal=1 --verify_state_save=0 --randrepeat=1 --output-format=json) || { echo "$out" | tail; fail "fio verify"; }
echo "$out" | jq -r '.jobs[0] | "fio verify: write \(.write.bw_bytes / 1e6 | . * 10 | round / 10) MB/s, read back \(.read.bw_bytes / 1e6 | . * 10 | round / 10) MB/s, errors \(.error)"'
[ "$(echo "$out" | jq '.jobs[0].error')" = 0 ] || fail "fio reported an error"
trims() { curl -s http://127.0.0.1:9199/metrics | awk '/^uraid_volume_trims_completed_total/ {s += $2} END {print s + 0}'; }
t0=$(trims)
rm -f "$mnt"/verify*
sync
fstrim -v "$mnt"
t1=$(trims)
echo "trims counted by the export: $t0 before fstrim, $t1 after"
[ "$t1" -gt "$t0" ] || fail "fstrim's discards were not counted by the export"
umount "$mnt"

step "3. RND4K Q32T1 read: /dev/ublkbN against the engine in process"
ublk_iops=$(fio --name=r --filename="$DEV" --rw=randread --bs=4k --iodepth=32 --numjobs=1 --ioengine=io_uring --direct=1 \
  --size=128M --time_based --runtime=2 --ramp_time=1 --output-format=json | jq '.jobs[0].read.iops | floor')
stop_serve $name
[ ! -e "$DEV" ] || fail "$DEV is still there after a clean stop"
[ ! -e "$rec" ] || fail "the record $rec is still there after a clean stop"
ls /sys/class/ublk-char/ 2>/dev/null | grep -q . && fail "a ublk device is left: $(ls /sys/class/ublk-char/)"
engine=$(uraid bench --profile RND4K-Q32T1 --read-only --size 128M --runs 1 --time 2 --warmup 1 --json "${L[@]}" 2>/dev/null |
  jq '.results[0].best.iops | floor' || true)
echo "RND4K Q32T1 read: /dev/ublkbN (fio io_uring) $ublk_iops IOPS; engine in process (uraid bench) ${engine:-?} IOPS${engine:+; ublk/engine $(awk -v a="$ublk_iops" -v b="$engine" 'BEGIN {printf "%.0f%%", 100 * a / b}')}"

step "4. read-only serve"
serve_ublk $name --read-only
b=$(basename "$DEV")
[ "$(cat /sys/block/$b/ro)" = 1 ] || fail "a read-only serve gave a writable device"
if dd if=/dev/zero of="$DEV" bs=4k count=1 oflag=direct 2>/dev/null; then fail "a write to the read-only device succeeded"; fi
dd if="$DEV" of=/dev/null bs=64k count=16 iflag=direct 2>/dev/null || fail "the read-only device cannot be read"
stop_serve $name --term
echo "ublk_fs: ok"
