#!/usr/bin/env bash
# The ublk device's size after an online grow, in the VM (run by
# tests/vm/run-all; URAID and WORK from it). A RAID 5 volume of 64M on 3
# loop members of 96M is served on /dev/ublkbN with ext4 mounted, then
# grown while served (`uraid grow --size max NAME`: the room past it).
#
# Linux 6.12's ublk driver has no UBLK_CMD_UPDATE_SIZE (6.16+): the device
# cannot change size while it exists. Then serve says so, with the steps
# to take; `uraid status` says the device keeps its old size until the
# export restarts; the script takes exactly the steps serve printed
# (unmount, `uraid stop NAME`, `uraid serve NAME --ublk`, mount, resize2fs)
# and checks the new device has the grown size, resize2fs grows the
# filesystem, and the files written before read back (md5).
#
# With a driver that has UPDATE_SIZE (the live branch: it cannot run on
# 6.12, the kernel of tests/vm, so it has not been run there), serve says
# the device grew: the device has the new size at once and resize2fs grows
# the mounted filesystem, with no unmount.
set -euo pipefail
: "${URAID:?set URAID to the uraid binary}" "${WORK:?set WORK to a scratch directory}"
export URAID_RUN_DIR=$WORK/run URAID_CONFIG=$WORK/uraid.conf URAID_STATE_DIR=$WORK/state
mkdir -p -m 0700 "$URAID_RUN_DIR"
name=vmgrow
mnt=$WORK/mnt
mkdir -p "$mnt"
modprobe loop
modprobe ublk_drv
uraid() { "$URAID" "$@"; }
step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; dmesg | tail -15 >&2; exit 1; }
rec=$URAID_RUN_DIR/$name.ublk

L=()
for i in 0 1 2; do
  truncate -s 96M "$WORK/g$i.img"
  L+=("$(losetup -f --show "$WORK/g$i.img")")
done
uraid create --level 5 --chunk 64K --name $name --volume "$name,level=5,size=64M" "${L[@]}" >/dev/null

# serve_ublk: serves the array in the background on ublk; sets DEV, OUT.
serve_ublk() {
  OUT=$WORK/serve.$RANDOM
  timeout 120 "$URAID" serve $name --ublk --fork >"$OUT" 2>"$OUT.err" || { cat "$OUT" "$OUT.err"; fail "serve --ublk"; }
  DEV=$(sed -n "s/^serving '$name' .* on \(\/dev\/ublkb[0-9]*\)$/\1/p" "$OUT")
  [ -b "$DEV" ] || { cat "$OUT"; fail "no block device in the serving line"; }
}
stopped() {
  local pid=$1
  for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  fail "serve $pid did not stop"
}

step "1. serve --ublk, ext4 mounted, files written"
serve_ublk
size0=$(blockdev --getsize64 "$DEV")
mkfs.ext4 -q -F "$DEV"
mount "$DEV" "$mnt"
for f in a b c; do head -c 4M /dev/urandom >"$mnt/$f"; done
sync
(cd "$mnt" && md5sum a b c) >"$WORK/sums"
fs0=$(df -B1 --output=size "$mnt" | tail -1)
echo "device $DEV: $size0 bytes, ext4 of $fs0 bytes"

step "2. grow the served volume"
uraid grow --size max $name | tee "$WORK/grow.out"
grown=$(sed -n "s/.* grew from [0-9]* to \([0-9]*\) bytes.*/\1/p" "$WORK/grow.out" | head -1)
[ -n "$grown" ] && [ "$grown" -gt "$size0" ] || fail "grow printed no larger size"
for _ in $(seq 50); do grep -q "grew to $grown bytes\|grew from $size0 to $grown" "$OUT.err" && break; sleep 0.2; done
cat "$OUT.err"

if grep -q "$DEV grew from $size0 to $grown" "$OUT.err"; then
  # The live branch: a driver with UPDATE_SIZE (Linux 6.16+), never on 6.12.
  step "3. the driver resized $DEV: resize2fs online"
  [ "$(blockdev --getsize64 "$DEV")" = "$grown" ] || fail "$DEV has $(blockdev --getsize64 "$DEV") bytes, not $grown"
  resize2fs "$DEV"
else
  step "3. the driver cannot resize $DEV: the steps serve printed"
  msg=$(grep "cannot resize a device" "$OUT.err") || fail "serve said nothing of the device's size"
  grep -q "$DEV keeps $size0 bytes until the export restarts" <<<"$msg" || fail "serve did not say $DEV keeps $size0 bytes"
  [ "$(blockdev --getsize64 "$DEV")" = "$size0" ] || fail "$DEV changed size without UPDATE_SIZE"
  uraid status $name >"$WORK/status.out"
  grep "keeps" "$WORK/status.out" || true
  grep -q "$DEV keeps $size0 bytes until the export restarts (the volume has $grown)" "$WORK/status.out" \
    || fail "uraid status does not say $DEV keeps its old size"
  # Exactly what the message says, in its order: unmount, the two commands
  # between backquotes, mount, resize2fs.
  grep -q "unmount $DEV, then \`uraid stop $name\` and \`uraid serve $name --ublk\`" <<<"$msg" || fail "the steps changed: $msg"
  grep -q "grow the filesystem (resize2fs" <<<"$msg" || fail "the message does not say to grow the filesystem"
  pid=$(jq -r .pid "$rec")
  umount "$mnt"
  uraid stop $name >/dev/null
  stopped "$pid"
  serve_ublk
  size1=$(blockdev --getsize64 "$DEV")
  echo "after the restart: $DEV has $size1 bytes"
  [ "$size1" = "$grown" ] || fail "$DEV has $size1 bytes after the restart, not $grown"
  uraid status $name >"$WORK/status.out"
  grep -q "keeps" "$WORK/status.out" && fail "uraid status still says the device keeps its old size"
  mount "$DEV" "$mnt"
  resize2fs "$DEV"
fi

step "4. the filesystem grew, the files read back"
fs1=$(df -B1 --output=size "$mnt" | tail -1)
echo "ext4: $fs0 -> $fs1 bytes (device $size0 -> $grown)"
[ "$fs1" -gt $((fs0 + (grown - size0) / 2)) ] || fail "the filesystem did not grow: $fs0 -> $fs1"
(cd "$mnt" && md5sum -c --quiet "$WORK/sums") || fail "files changed"
head -c 8M /dev/urandom >"$mnt/d"
sync
umount "$mnt"
e2fsck -fn "$DEV" >/dev/null || fail "e2fsck found errors"
pid=$(jq -r .pid "$rec")
uraid stop $name >/dev/null
stopped "$pid"
echo "ublk_grow: ok"
