#!/usr/bin/env bash
# The README's first filesystem example, run as written on a kernel with
# ublk_drv: the code block after the marker that names this script,
# with $D0 $D1 and $DIR set up as the README's walkthrough sets them up
# (two loop devices, a RAID 0 named fast with 128K chunks).
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")/../.." && pwd)
block=$(awk '/readme-test: skip: .*tests\/vm\/readme_ublk.sh/ {on=1; next}
             on && /^    / {print substr($0, 5); seen=1; next}
             on && seen && !/^    / && !/^$/ {exit}' "$here/README.md")
[ -n "$block" ] || fail "readme_ublk: no block after the marker in README.md"
mkdir -p "$WORK/bin"; ln -sf "$URAID" "$WORK/bin/uraid"
export PATH=$WORK/bin:$PATH DIR=$WORK
modprobe loop
truncate -s 256M "$DIR/d0.img" "$DIR/d1.img"
D0=$(losetup -f --show --direct-io=on "$DIR/d0.img"); D1=$(losetup -f --show --direct-io=on "$DIR/d1.img")
export D0 D1
uraid create --level 0 --chunk 128K --name fast "$D0" "$D1" >/dev/null
echo "readme_ublk: running the README's block:"; echo "$block" | sed 's/^/  | /'
out=$(bash -euo pipefail -c "$block" 2>&1) || { echo "$out"; echo "readme_ublk: the README's block failed"; exit 1; }
echo "$out"
# What the block's comments claim.
echo "$out" | grep -q '/dev/ublkb' || { echo "readme_ublk: serve did not print a /dev/ublkbN"; exit 1; }
echo "$out" | grep -E '^ *ublkb[0-9]+ +[0-9]+ +131072 +262144 ' >/dev/null || { echo "readme_ublk: lsblk -t does not show MIN-IO 131072, OPT-IO 262144"; exit 1; }
[ ! -e /dev/uraid/fast ] || { echo "readme_ublk: /dev/uraid/fast is left after the stop"; exit 1; }
losetup -d "$D0" "$D1"
echo "readme_ublk: ok"
