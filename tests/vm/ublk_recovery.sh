#!/usr/bin/env bash
# User recovery of the ublk export in the VM (run by tests/vm/run-all; URAID
# and WORK from it): an ext4 on /dev/ublkbN is mounted and written by fio
# (crc32c in every block) when `uraid serve` is killed with SIGKILL; the
# device stays and its I/O waits; `uraid serve NAME --ublk` again re-attaches
# to the same device (START/END_USER_RECOVERY) and the same mount goes on:
# fio finishes and its verify passes, a file synced before the kill reads
# back, no unmount and no fsck were needed (fsck -n after the unmount finds
# nothing). Also: a second serve of the served array is refused and the
# first one serves on; a RAID 5 of 4 (3 data chunks, no power of two) says
# which mkfs options give the stripe; a clean stop deletes the device.
. "$(dirname "$0")/lib.sh"
name=vmrec
mnt=$MNT
modprobe ublk_drv
on_fail() { dmesg | tail -25; }
# The kernel log from here on: earlier tests of the same boot fail ublk
# devices on purpose (ublk_expiry.sh), and the device number is reused.
log_from=$(dmesg | wc -l)

loop_members 4 100M
uraid create --level 5 --chunk 64K --name $name "${L[@]}" >/dev/null
rec=$URAID_RUN_DIR/$name.ublk

step "1. serve --ublk, ext4 mounted"
serve_ublk $name
cat "$SERVE_OUT.err"
grep -q "mkfs.xfs -d su=64k,sw=3" "$SERVE_OUT.err" || fail "no word on the stripe width of 3 chunks"
first=$DEV
mkfs.ext4 -q -F "$DEV"
mount "$DEV" "$mnt"
head -c 3M /dev/urandom >"$mnt/synced"
sync
sum=$(md5sum <"$mnt/synced")

step "2. a second serve of the served array is refused"
if out=$(uraid serve $name --ublk 2>&1); then fail "a second serve started: $out"; fi
echo "second serve: $out"
kill -0 "$PID" || fail "the first serve died"
[ -b "$DEV" ] || fail "the device went"

step "3. SIGKILL of serve while fio writes"
fio --name=rec --filename="$mnt/fio" --size=12M --rw=randwrite --bs=4k --ioengine=libaio --iodepth=16 --direct=1 \
  --verify=crc32c --verify_fatal=1 --verify_state_save=0 --randrepeat=1 --output-format=json >"$WORK/fio.json" 2>&1 &
fio=$!
# Until fio has written something (and so has I/O in flight).
for _ in $(seq 100); do [ "$(stat -c %b "$mnt/fio" 2>/dev/null || echo 0)" -gt 512 ] && break; sleep 0.2; done
kill -0 $fio 2>/dev/null || { cat "$WORK/fio.json"; fail "fio ended before the kill"; }
kill9 "$PID"
echo "serve $PID killed; fio $(kill -0 $fio 2>/dev/null && echo waits || echo ended)"
[ -b "$DEV" ] || fail "$DEV went with the server"
[ -e "$rec" ] || fail "the record went with the server"
sleep 1
kill -0 $fio 2>/dev/null || { cat "$WORK/fio.json"; fail "fio ended while no server served the device"; }

step "4. serve again: re-attached, the mount goes on"
t0=$(date +%s.%N)
serve_ublk $name
cat "$SERVE_OUT.err"
grep -q "re-attached $first" "$SERVE_OUT" || { cat "$SERVE_OUT"; fail "serve did not say it re-attached $first"; }
[ "$DEV" = "$first" ] || fail "serve made $DEV instead of re-attaching $first"
echo "re-attached in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s"
for _ in $(seq 600); do kill -0 $fio 2>/dev/null || break; sleep 0.2; done
kill -0 $fio 2>/dev/null && { cat /proc/$fio/stack 2>/dev/null; fail "fio is still waiting 120 s after the re-attach"; }
wait $fio || { tail -20 "$WORK/fio.json"; fail "fio failed across the restart"; }
jq -r '.jobs[0] | "fio across the restart: write \(.write.io_bytes) bytes, verified \(.read.io_bytes) bytes, errors \(.error)"' "$WORK/fio.json"
[ "$(jq '.jobs[0].error' "$WORK/fio.json")" = 0 ] || fail "fio reported an error"
[ "$(md5sum <"$mnt/synced")" = "$sum" ] || fail "a file synced before the kill reads back different"
findmnt -n "$mnt" >/dev/null || fail "the mount went"
dmesg | tail -n +"$((log_from + 1))" | grep -iE "ext4.*(error|abort)|I/O error, dev $(basename "$DEV")" && fail "the kernel logged errors on $DEV"

step "5. unmount, fsck -n, clean stop"
umount "$mnt"
e2fsck -fn "$DEV" || fail "e2fsck found errors"
stop_serve $name
[ ! -e "$DEV" ] || fail "$DEV is left after a clean stop"
[ ! -e "$rec" ] || fail "the record is left after a clean stop"
echo "ublk_recovery: ok"
