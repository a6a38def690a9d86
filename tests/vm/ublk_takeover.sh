#!/usr/bin/env bash
# `uraid serve NAME --ublk --takeover` in the VM (run by tests/vm/run-all;
# URAID and WORK from it): an upgrade without unmounting. A RAID 5 of 3
# loop members is served on /dev/ublkbN (and an NBD socket), ext4 mounted,
# fio writing with crc32c in every block; a second serve asks the first to
# hand over while fio writes: the first answers its requests in flight,
# flushes, closes the array clean and exits without deleting the device;
# the second re-attaches the same device (user recovery). Checked: the old
# process is gone, the same /dev/ublkbN and the same mount remain, fio
# finishes and its verify passes, a file synced before reads back after a
# cache drop, both processes sent the TakeOver event, the new one said the
# NBD clients lost their connection and its assemble found the array
# clean (no resync). Then a takeover with nothing serving fails clearly.
set -euo pipefail
: "${URAID:?set URAID to the uraid binary}" "${WORK:?set WORK to a scratch directory}"
export URAID_RUN_DIR=$WORK/run URAID_CONFIG=$WORK/uraid.conf URAID_STATE_DIR=$WORK/state
mkdir -p -m 0700 "$URAID_RUN_DIR"
name=vmtk
mnt=$WORK/mnt
mkdir -p "$mnt"
modprobe loop
modprobe ublk_drv
uraid() { "$URAID" "$@"; }
step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; dmesg | tail -25 >&2; exit 1; }
log_from=$(dmesg | wc -l)

L=()
for i in 0 1 2; do
  truncate -s 96M "$WORK/tk$i.img"
  L+=("$(losetup -f --show "$WORK/tk$i.img")")
done
uraid create --level 5 --chunk 64K --name $name "${L[@]}" >/dev/null
rec=$URAID_RUN_DIR/$name.ublk
# Every event, as `PROGRAM EVENT ARRAY [MEMBER]`.
printf '#!/bin/sh\necho "$*" >>%s\n' "$WORK/events.log" >"$WORK/event.sh"
chmod +x "$WORK/event.sh"
serve_args=(--ublk --socket "$WORK/$name.sock" --program "$WORK/event.sh")

step "1. serve --ublk, ext4 mounted"
out1=$WORK/serve1.out
timeout 120 "$URAID" serve $name "${serve_args[@]}" --fork >"$out1" 2>"$out1.err" || { cat "$out1" "$out1.err"; fail "serve --ublk"; }
DEV=$(sed -n "s/^serving '$name' .* on .* and \(\/dev\/ublkb[0-9]*\)$/\1/p" "$out1")
[ -b "$DEV" ] || { cat "$out1"; fail "no block device in the serving line"; }
old=$(jq -r .pid "$rec")
mkfs.ext4 -q -F "$DEV"
mount "$DEV" "$mnt"
mount_before=$(findmnt -n -o SOURCE,TARGET,FSTYPE "$mnt")
head -c 3M /dev/urandom >"$mnt/synced"
sync
sum=$(md5sum <"$mnt/synced")
echo "served by $old on $DEV, mounted: $mount_before"

step "2. takeover while fio writes"
fio --name=tk --filename="$mnt/fio" --size=12M --rw=randwrite --bs=4k --ioengine=libaio --iodepth=16 --direct=1 \
  --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 --randrepeat=1 --output-format=json >"$WORK/fio.json" 2>&1 &
fio=$!
# Until fio has written something (and so has I/O in flight).
for _ in $(seq 100); do [ "$(stat -c %b "$mnt/fio" 2>/dev/null || echo 0)" -gt 512 ] && break; sleep 0.2; done
kill -0 $fio 2>/dev/null || { cat "$WORK/fio.json"; fail "fio ended before the takeover"; }
out2=$WORK/serve2.out
t0=$(date +%s.%N)
timeout 300 "$URAID" serve $name "${serve_args[@]}" --takeover --fork >"$out2" 2>"$out2.err" &
taker=$!
wait $taker || { cat "$out2" "$out2.err"; echo "--- the old one:"; cat "$out1.err"; fail "serve --takeover"; }
echo "takeover done in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s (fio $(kill -0 $fio 2>/dev/null && echo still writing || echo ended))"
cat "$out2"
kill -0 "$old" 2>/dev/null && fail "the old serve $old is still running"
new=$(jq -r .pid "$rec")
[ "$new" != "$old" ] || fail "the record still names the old serve"
grep -q "re-attached $DEV" "$out2" || fail "the new serve did not say it re-attached $DEV"
DEV2=$(sed -n "s/^serving '$name' .* and \(\/dev\/ublkb[0-9]*\)$/\1/p" "$out2")
[ "$DEV2" = "$DEV" ] || fail "the new serve serves $DEV2, not $DEV"
[ "$(findmnt -n -o SOURCE,TARGET,FSTYPE "$mnt")" = "$mount_before" ] || fail "the mount changed: $(findmnt -n "$mnt")"
grep -q "process $old handed $DEV over" "$out2" || fail "the new serve did not say what the old one handed over"
grep -q "NBD clients .* lost their connection" "$out2" || fail "the new serve did not say the NBD clients were disconnected"
grep -q "warning" "$out2.err" && { cat "$out2.err"; fail "the new assemble warned (the old one did not close the array clean?)"; }
grep -q "stopped cleanly" "$out1.err" || { cat "$out1.err"; fail "the old serve did not stop cleanly"; }

step "3. fio finishes, its verify passes; synced data reads back"
for _ in $(seq 600); do kill -0 $fio 2>/dev/null || break; sleep 0.2; done
kill -0 $fio 2>/dev/null && { cat /proc/$fio/stack 2>/dev/null; fail "fio is still waiting 120 s after the takeover"; }
wait $fio || { tail -20 "$WORK/fio.json"; fail "fio failed across the takeover"; }
jq -r '.jobs[0] | "fio across the takeover: write \(.write.io_bytes) bytes, verified \(.read.io_bytes) bytes, errors \(.error), write latency max \(.write.clat_ns.max / 1000000) ms"' "$WORK/fio.json"
[ "$(jq '.jobs[0].error' "$WORK/fio.json")" = 0 ] || fail "fio reported an error"
[ "$(jq '.jobs[0].read.io_bytes' "$WORK/fio.json")" -gt 0 ] || fail "fio verified nothing"
sync
echo 3 >/proc/sys/vm/drop_caches
[ "$(md5sum <"$mnt/synced")" = "$sum" ] || fail "a file synced before the takeover reads back different"
md5sum "$mnt/fio" >/dev/null || fail "the fio file cannot be read back"
dmesg | tail -n +"$((log_from + 1))" | grep -iE "ext4.*(error|abort)|I/O error, dev $(basename "$DEV")" && fail "the kernel logged errors on $DEV"

step "4. the events"
cat "$WORK/events.log"
[ "$(grep -c "^TakeOver $name" "$WORK/events.log")" = 2 ] || fail "not one TakeOver event from each process"
grep -q "TakeOver.*hands $DEV over to process $new" "$out1.err" || fail "the old serve's log does not name the takeover"
uraid status $name >"$WORK/status.out"
grep "served by" "$WORK/status.out"
grep -q "served by uraid serve (pid $new)" "$WORK/status.out" || fail "status does not show the new serve"

step "5. unmount, fsck -n, clean stop; a takeover with nothing serving"
umount "$mnt"
e2fsck -fn "$DEV" >/dev/null || fail "e2fsck found errors"
uraid stop $name >/dev/null
for _ in $(seq 100); do kill -0 "$new" 2>/dev/null || break; sleep 0.2; done
kill -0 "$new" 2>/dev/null && fail "serve did not stop"
[ ! -e "$DEV" ] || fail "$DEV is left after a clean stop"
if msg=$(uraid serve $name --takeover 2>&1); then fail "a takeover with nothing serving started: $msg"; fi
echo "takeover with nothing serving: $msg"
grep -q "nothing to take over" <<<"$msg" || fail "no clear message"
echo "ublk_takeover: ok"
