#!/usr/bin/env bash
# A Matrix array on ublk in the VM (run by tests/vm/run-all; URAID and WORK
# from it): two volumes over the same 4 loop members, 'fast' RAID 0 (chunk
# 64K) and 'safe' RAID 10 (chunk 32K).
#  1. `uraid serve NAME --ublk` makes one /dev/ublkbN per volume, each with
#     its volume's size and its own hints (lsblk -t: MIN-IO = its chunk,
#     OPT-IO = its stripe), both in the record RUN_DIR/NAME.ublk;
#  2. /dev/uraid/NAME -> the first volume's device, /dev/uraid/NAME:safe ->
#     the second's, /dev/disk/by-id/uraid-<volume UUID> for each;
#  3. ext4 on both, mounted, fio --verify=crc32c on both;
#  4. kill -9 of serve while fio writes to both; `uraid serve NAME --ublk`
#     re-attaches both devices (user recovery, each on its own), both mounts
#     go on, both fio runs finish and verify, files synced before read back;
#  5. unmount, e2fsck -fn both, a clean stop removes both devices, the links
#     and the record.
set -euo pipefail
: "${URAID:?set URAID to the uraid binary}" "${WORK:?set WORK to a scratch directory}"
export URAID_RUN_DIR=$WORK/run URAID_CONFIG=$WORK/uraid.conf URAID_STATE_DIR=$WORK/state
mkdir -p -m 0700 "$URAID_RUN_DIR"
name=vmmx
modprobe loop
modprobe ublk_drv
uraid() { "$URAID" "$@"; }
step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; dmesg | tail -20 >&2; exit 1; }
log_from=$(dmesg | wc -l)

L=()
for i in 0 1 2 3; do
  truncate -s 96M "$WORK/m$i.img"
  L+=("$(losetup -f --show "$WORK/m$i.img")")
done
uraid create --chunk 64K --name $name --volume fast,level=0,size=64M --volume safe,level=10,chunk=32K "${L[@]}" >/dev/null
rec=$URAID_RUN_DIR/$name.ublk

# serve_ublk: serves the array in the background on ublk; sets D1, D2
# (the two volumes' devices), PID and SERVE_OUT.
serve_ublk() {
  SERVE_OUT=$WORK/serve.$RANDOM
  timeout 120 "$URAID" serve $name --ublk --fork >"$SERVE_OUT" 2>"$SERVE_OUT.err" || { cat "$SERVE_OUT" "$SERVE_OUT.err"; fail "serve --ublk"; }
  D1=$(sed -n "s/^serving '$name' .* on \(\/dev\/ublkb[0-9]*\)$/\1/p" "$SERVE_OUT")
  D2=$(sed -n "s/^serving volume 'safe' of '$name' .* on \(\/dev\/ublkb[0-9]*\)$/\1/p" "$SERVE_OUT")
  [ -b "$D1" ] && [ -b "$D2" ] && [ "$D1" != "$D2" ] || { cat "$SERVE_OUT"; fail "not two block devices in the serving lines"; }
  PID=$(jq -r .pid "$rec")
}

step "1. serve --ublk: a device per volume"
serve_ublk
cat "$SERVE_OUT"
echo "record: $(cat "$rec")"
[ "$(jq -r .bdev "$rec")" = "$D1" ] || fail "the record's first device is not $D1"
[ "$(jq -r '.volumes[0].bdev' "$rec")" = "$D2" ] || fail "the record's second device is not $D2"
[ "$(jq -r '.volumes[0].volume' "$rec")" = safe ] || fail "the record's second volume is not 'safe'"
st=$(uraid status --json $name)
cap1=$(jq -r '.volumes[0].capacity' <<<"$st")
cap2=$(jq -r '.volumes[1].capacity' <<<"$st")
u1=$(jq -r '.volumes[0].uuid' <<<"$st" | tr A-F a-f)
u2=$(jq -r '.volumes[1].uuid' <<<"$st" | tr A-F a-f)
[ "$(blockdev --getsize64 "$D1")" = "$cap1" ] || fail "$D1 has $(blockdev --getsize64 "$D1") bytes, 'fast' $cap1"
[ "$(blockdev --getsize64 "$D2")" = "$cap2" ] || fail "$D2 has $(blockdev --getsize64 "$D2") bytes, 'safe' $cap2"
lsblk -t "$D1" "$D2"
hints() { lsblk -n -b -d -o MIN-IO,OPT-IO "$1" | awk '{print $1, $2}'; }
[ "$(hints "$D1")" = "65536 262144" ] || fail "'fast' (RAID 0, 4 x 64K) hints: $(hints "$D1"), not 65536 262144"
# RAID 10: a stripe is one mirrored chunk.
[ "$(hints "$D2")" = "32768 32768" ] || fail "'safe' (RAID 10, chunk 32K) hints: $(hints "$D2"), not 32768 32768"
echo "sizes: $D1 $cap1, $D2 $cap2; hints: $D1 $(hints "$D1"), $D2 $(hints "$D2")"
text=$(uraid status $name)
grep -q "volume 'fast' exported as: ublk $D1" <<<"$text" || { echo "$text"; fail "status does not list $D1 for 'fast'"; }
grep -q "volume 'safe' exported as: ublk $D2" <<<"$text" || { echo "$text"; fail "status does not list $D2 for 'safe'"; }

step "2. the links"
b1=$(basename "$D1"); b2=$(basename "$D2")
[ "$(readlink /dev/uraid/$name)" = "../$b1" ] || fail "/dev/uraid/$name -> $(readlink /dev/uraid/$name || true)"
[ "$(readlink "/dev/uraid/$name:safe")" = "../$b2" ] || fail "/dev/uraid/$name:safe -> $(readlink "/dev/uraid/$name:safe" || true)"
[ "$(readlink "/dev/disk/by-id/uraid-$u1")" = "../../$b1" ] || fail "no by-id link of 'fast' ($u1)"
[ "$(readlink "/dev/disk/by-id/uraid-$u2")" = "../../$b2" ] || fail "no by-id link of 'safe' ($u2)"
[ "$(uraid udev-id "$b2" | head -1)" = "URAID_NAME=$name:safe" ] || fail "udev-id $b2: $(uraid udev-id "$b2")"
ls -l /dev/uraid/ "/dev/disk/by-id/uraid-$u1" "/dev/disk/by-id/uraid-$u2"

step "3. ext4 on both, fio verify on both"
mkdir -p "$WORK/fast" "$WORK/safe"
mkfs.ext4 -q -F /dev/uraid/$name
mkfs.ext4 -q -F "/dev/uraid/$name:safe"
mount /dev/uraid/$name "$WORK/fast"
mount "/dev/uraid/$name:safe" "$WORK/safe"
for v in fast safe; do
  head -c 2M /dev/urandom >"$WORK/$v/synced"
done
sync
sum_fast=$(md5sum <"$WORK/fast/synced"); sum_safe=$(md5sum <"$WORK/safe/synced")
[ "$sum_fast" != "$sum_safe" ] || fail "the two files are the same"

step "4. kill -9 while fio writes to both; serve again re-attaches both"
for v in fast safe; do
  fio --name=$v --filename="$WORK/$v/fio" --size=8M --rw=randwrite --bs=4k --ioengine=libaio --iodepth=8 --direct=1 \
    --verify=crc32c --verify_fatal=1 --verify_state_save=0 --randrepeat=1 --output-format=json >"$WORK/fio.$v.json" 2>&1 &
  eval "fio_$v=$!"
done
for v in fast safe; do
  for _ in $(seq 100); do [ "$(stat -c %b "$WORK/$v/fio" 2>/dev/null || echo 0)" -gt 256 ] && break; sleep 0.1; done
done
kill -KILL "$PID"
while kill -0 "$PID" 2>/dev/null; do sleep 0.1; done
[ -b "$D1" ] && [ -b "$D2" ] || fail "a device went with the server"
first1=$D1; first2=$D2
serve_ublk
grep -q "re-attached $first1" "$SERVE_OUT" && grep -q "re-attached $first2" "$SERVE_OUT" || { cat "$SERVE_OUT" "$SERVE_OUT.err"; fail "serve did not re-attach both devices"; }
[ "$D1" = "$first1" ] && [ "$D2" = "$first2" ] || fail "serve made $D1 $D2 instead of re-attaching $first1 $first2"
for v in fast safe; do
  eval "p=\$fio_$v"
  wait "$p" || { tail -20 "$WORK/fio.$v.json"; fail "fio on '$v' failed across the restart"; }
  jq -r ".jobs[0] | \"fio on $v across the restart: write \(.write.io_bytes) bytes, verified \(.read.io_bytes) bytes, errors \(.error)\"" "$WORK/fio.$v.json"
  [ "$(jq '.jobs[0].error' "$WORK/fio.$v.json")" = 0 ] || fail "fio on '$v' reported an error"
  findmnt -n "$WORK/$v" >/dev/null || fail "the mount of '$v' went"
done
[ "$(md5sum <"$WORK/fast/synced")" = "$sum_fast" ] || fail "'fast': a file synced before the kill reads back different"
[ "$(md5sum <"$WORK/safe/synced")" = "$sum_safe" ] || fail "'safe': a file synced before the kill reads back different"
dmesg | tail -n +"$((log_from + 1))" | grep -iE "ext4.*(error|abort)|I/O error, dev ublkb" && fail "the kernel logged errors"

step "5. unmount, e2fsck, clean stop"
umount "$WORK/fast" "$WORK/safe"
e2fsck -fn "$D1" >/dev/null || fail "e2fsck found errors on 'fast'"
e2fsck -fn "$D2" >/dev/null || fail "e2fsck found errors on 'safe'"
uraid stop $name >/dev/null
for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.2; done
kill -0 "$PID" 2>/dev/null && fail "serve did not stop"
[ ! -e "$D1" ] && [ ! -e "$D2" ] || fail "a device is left after a clean stop"
[ ! -e "$rec" ] || fail "the record is left after a clean stop"
[ ! -L "/dev/uraid/$name:safe" ] && [ ! -L "/dev/disk/by-id/uraid-$u2" ] || fail "a link of 'safe' is left"
echo "ublk_matrix: ok"
