#!/usr/bin/env bash
# The deadline of a ublk device whose server does not come back (run by
# tests/vm/run-all; URAID and WORK from it). uraid.conf has
# `ublk-recovery-timeout`; `uraid monitor --scan` runs.
#  1. timeout 0 (wait for ever): serve --ublk is killed with SIGKILL; a read
#     of the device waits; 5 s later (ten looks of the monitor) the device is still there and the read
#     still waits, and `uraid scan` skips it (a live export too, even with
#     a member's superblock on it); the configuration then says 3s: the monitor, which reads
#     it at every look, deletes the device and the read fails with EIO.
#  2. timeout 6s: an ext4 on the device is mounted and a file synced; serve is
#     killed; a direct read of the device and a write to the mounted ext4
#     wait, then fail with EIO (not a hang) once the monitor deletes the
#     device, not before the timeout; the monitor reports DeviceDisappeared
#     naming the device; the device, its /dev/uraid link and its record are
#     gone; `uraid serve` again makes a new device and the file synced
#     before the kill reads back.
. "$(dirname "$0")/lib.sh"
name=vmexp
mnt=$MNT
modprobe ublk_drv
on_fail() { [ -f "$WORK/monitor.out" ] && { echo "-- monitor:"; cat "$WORK/monitor.out"; }; }

loop_members 2 64M
uraid create --level 1 --name $name "${L[@]}" >/dev/null
rec=$URAID_RUN_DIR/$name.ublk

# scan_check WHAT: `uraid scan` ends within 30 s, finds the array on its
# two loop members and names no ublk device (stdout or stderr).
scan_check() {
  local out
  out=$(timeout 30 "$URAID" scan 2>&1) || fail "uraid scan with a $1: exit status $? (killed after 30 s: 124): $out"
  echo "uraid scan with a $1: $out"
  echo "$out" | grep -q "^ARRAY name=$name .*devices=${L[0]},${L[1]}$" || fail "uraid scan did not find $name on ${L[*]}"
  ! echo "$out" | grep -q ublkb || fail "uraid scan read the $1"
}

echo 'ublk-recovery-timeout = 0' >"$URAID_CONFIG"
uraid monitor --scan --delay 0.5 >"$WORK/monitor.out" 2>&1 &
MON=$!
trap 'kill $MON 2>/dev/null || true' EXIT

step "1. ublk-recovery-timeout = 0: the device waits for its serve"
serve_ublk $name
first=$DEV
# The device holds a copy of a member's first MiB (its superblock): were
# `uraid scan` to read the live export, it would take it for a member.
dd if="${L[0]}" of="$DEV" bs=64k count=16 oflag=direct status=none
scan_check "live $DEV"
kill9 "$PID"
t0=$(now)
dd if="$DEV" of="$WORK/read1" bs=64k count=16 iflag=direct status=none 2>"$WORK/dd1.err" &
dd1=$!
sleep 5
kill -0 $dd1 2>/dev/null || fail "the read of $DEV ended while no server served it: $(cat "$WORK/dd1.err")"
[ -b "$first" ] || fail "$first was deleted with ublk-recovery-timeout = 0"
echo "5 s after the kill: $first is there, its read waits"
# A scan skips the device whose server is gone (a read of it would wait).
scan_check "quiesced $DEV"
grep -q "DeviceDisappeared $name /dev/ublkb" "$WORK/monitor.out" && fail "the monitor deleted a device with the timeout 0"
echo 'ublk-recovery-timeout = "3s"' >"$URAID_CONFIG"
for _ in $(seq 150); do kill -0 $dd1 2>/dev/null || break; sleep 0.2; done
kill -0 $dd1 2>/dev/null && fail "the read still waits 30 s after the timeout became 3 s"
rc=0; wait $dd1 || rc=$?
echo "timeout 3s: the read of $first ended $(since "$t0") s after the kill: exit $rc: $(cat "$WORK/dd1.err")"
[ $rc -ne 0 ] && grep -q "Input/output error" "$WORK/dd1.err" || fail "the read did not fail with EIO"
[ ! -e "$first" ] || fail "$first is still there"

step "2. ublk-recovery-timeout = 6s: EIO instead of a hang"
echo 'ublk-recovery-timeout = "6s"' >"$URAID_CONFIG"
serve_ublk $name
mkfs.ext4 -q -F "$DEV"
mount "$DEV" "$mnt"
head -c 1M /dev/urandom >"$mnt/synced"
sync
sum=$(md5sum <"$mnt/synced")
[ -L "/dev/uraid/$name" ] && echo "/dev/uraid/$name -> $(readlink "/dev/uraid/$name")"
kill9 "$PID"
t0=$(now)
# An uncached read of the device, and a write to the mounted ext4.
dd if="$DEV" of=/dev/null bs=4k count=1 skip=4000 iflag=direct status=none 2>"$WORK/dd2.err" &
dd2=$!
dd if=/dev/zero of="$mnt/after" bs=4k count=1 oflag=direct,sync status=none 2>"$WORK/dd3.err" &
dd3=$!
sleep 2
kill -0 $dd2 2>/dev/null || fail "the read of $DEV ended at once: $(cat "$WORK/dd2.err")"
for _ in $(seq 300); do kill -0 $dd2 2>/dev/null || break; sleep 0.2; done
kill -0 $dd2 2>/dev/null && fail "the read of $DEV still waits $(since "$t0") s after the kill (timeout 6 s)"
rc=0; wait $dd2 || rc=$?
took=$(since "$t0")
echo "read of $DEV: exit $rc after $took s: $(cat "$WORK/dd2.err")"
[ $rc -ne 0 ] || fail "the read of the deleted device succeeded"
grep -q "Input/output error" "$WORK/dd2.err" || fail "the read did not fail with EIO: $(cat "$WORK/dd2.err")"
awk -v t="$took" 'BEGIN {exit !(t >= 6)}' || fail "the device was deleted $took s after the kill, before the 6 s timeout"
for _ in $(seq 100); do kill -0 $dd3 2>/dev/null || break; sleep 0.2; done
rc=0; wait $dd3 || rc=$?
echo "write to the mounted ext4: exit $rc: $(cat "$WORK/dd3.err")"
[ $rc -ne 0 ] || fail "a synchronous write to the ext4 on the deleted device succeeded"
wait_for 10 "a DeviceDisappeared event naming $DEV" grep -q "DeviceDisappeared $name $DEV: .*EIO" "$WORK/monitor.out"
echo "-- monitor:"; cat "$WORK/monitor.out"
[ ! -e "$DEV" ] || fail "$DEV is still there"
[ ! -e "/sys/class/ublk-char/ublkc${DEV#/dev/ublkb}" ] || fail "the ublk device ${DEV#/dev/ublkb} is still there"
[ ! -e "$rec" ] || fail "the record $rec is still there"
[ ! -L "/dev/uraid/$name" ] || fail "/dev/uraid/$name is still there"
umount "$mnt" 2>/dev/null || umount -l "$mnt"

step "3. serve again: a new device, the data synced before the kill is there"
serve_ublk $name
mount "$DEV" "$mnt"
[ "$(md5sum <"$mnt/synced")" = "$sum" ] || fail "the file synced before the kill differs"
umount "$mnt"
stop_serve $name
echo "ublk_expiry: ok"
