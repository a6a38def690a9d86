#!/usr/bin/env bash
# Stable names of a served array's ublk device (run by tests/vm/run-all;
# URAID and WORK from it):
#  1. `uraid serve NAME --ublk` makes /dev/uraid/NAME -> ../ublkbN and
#     /dev/disk/by-id/uraid-UUID -> ../../ublkbN; both read the device;
#  2. `uraid udev-id ublkbN` prints the name and UUID from the record (nothing
#     for a device of another program; an error for a name not ublkbN);
#  3. contrib/udev/60-uraid.rules: with the links removed, a udev change
#     event makes them again (udevd's own links: in `udevadm info`'s DEVLINKS);
#  4. a clean stop removes the links (and /dev/uraid, left empty);
#  5. something that is not uraid's at /dev/uraid/NAME is left alone: the
#     serve goes on, says why there is no link, and the file is unchanged.
. "$(dirname "$0")/lib.sh"
name=vmlinks
modprobe ublk_drv

loop_members 2 64M
uraid create --level 1 --name $name "${L[@]}" >/dev/null
uuid=$(uraid examine "${L[0]}" | sed -n 's/^ *array uuid : //p')

# check_links: both links point at $DEV and read what it holds.
check_links() {
  local b; b=$(basename "$DEV")
  [ "$(readlink "/dev/uraid/$name")" = "../$b" ] || fail "/dev/uraid/$name -> $(readlink "/dev/uraid/$name"), not ../$b"
  [ "$(readlink "/dev/disk/by-id/uraid-$uuid")" = "../../$b" ] || fail "/dev/disk/by-id/uraid-$uuid -> $(readlink "/dev/disk/by-id/uraid-$uuid" || true)"
  local want; want=$(dd if="$DEV" bs=64k count=1 iflag=direct status=none | md5sum)
  [ "$(dd if="/dev/uraid/$name" bs=64k count=1 iflag=direct status=none | md5sum)" = "$want" ] || fail "/dev/uraid/$name reads other data"
  [ "$(dd if="/dev/disk/by-id/uraid-$uuid" bs=64k count=1 iflag=direct status=none | md5sum)" = "$want" ] || fail "the by-id link reads other data"
  echo "/dev/uraid/$name -> $(readlink "/dev/uraid/$name"); /dev/disk/by-id/uraid-$uuid -> $(readlink "/dev/disk/by-id/uraid-$uuid")"
}

step "1. serve --ublk makes the links"
serve_ublk $name
dd if=/dev/urandom of="$DEV" bs=64k count=1 oflag=direct status=none
check_links

step "2. uraid udev-id"
b=$(basename "$DEV")
got=$(uraid udev-id "$b")
echo "udev-id $b: $(echo $got)"
[ "$got" = "URAID_NAME=$name
URAID_UUID=$uuid" ] || fail "udev-id printed: $got"
[ -z "$(uraid udev-id ublkb999)" ] || fail "udev-id printed something for a device no record names"
if uraid udev-id sda 2>/dev/null; then fail "udev-id took sda"; fi

step "3. the udev rule"
if udevadm control --ping 2>/dev/null; then
  # udev runs programs with an environment of its own: the test's run directory given.
  sed "s#IMPORT{program}=\"/usr/local/sbin/uraid #IMPORT{program}=\"/usr/bin/env URAID_RUN_DIR=$URAID_RUN_DIR $URAID #" \
    contrib/udev/60-uraid.rules >/etc/udev/rules.d/60-uraid.rules
  udevadm control --reload
  rm "/dev/uraid/$name" "/dev/disk/by-id/uraid-$uuid"
  udevadm trigger --action=change "$DEV"
  udevadm settle --timeout=30
  udevadm info --query=property "$DEV" | grep -E "^(URAID_|DEVLINKS)" || true
  udevadm info --query=property "$DEV" | grep -q "^DEVLINKS=.*/dev/uraid/$name" || fail "udev did not add /dev/uraid/$name"
  udevadm info --query=property "$DEV" | grep -q "^DEVLINKS=.*/dev/disk/by-id/uraid-$uuid" || fail "udev did not add the by-id link"
  check_links
else
  echo "udevd does not run in this VM: the rule is not exercised"
fi

step "4. a clean stop removes the links"
stop_serve $name
[ ! -L "/dev/uraid/$name" ] || fail "/dev/uraid/$name is still there"
[ ! -L "/dev/disk/by-id/uraid-$uuid" ] || fail "the by-id link is still there"
[ ! -e /dev/uraid ] || [ -n "$(ls -A /dev/uraid)" ] || fail "/dev/uraid is left empty"
rm -f /etc/udev/rules.d/60-uraid.rules

step "5. something else at /dev/uraid/$name is left alone"
mkdir -p /dev/uraid
echo keep >"/dev/uraid/$name"
serve_ublk $name
cat "$SERVE_OUT.err"
[ "$(cat "/dev/uraid/$name")" = keep ] || fail "/dev/uraid/$name was changed"
grep -q "/dev/uraid/$name exists and is not a link: left alone" "$SERVE_OUT.err" || fail "serve did not say why there is no link"
[ "$(readlink "/dev/disk/by-id/uraid-$uuid")" = "../../$(basename "$DEV")" ] || fail "no by-id link"
stop_serve $name
[ "$(cat "/dev/uraid/$name")" = keep ] || fail "/dev/uraid/$name was removed or changed by the stop"
rm "/dev/uraid/$name"
echo "devlinks: ok"
