#!/usr/bin/env bash
# Read errors met on the real kernel (issue 32 item 4; run by
# tests/vm/run-all, URAID and WORK from it). RAID 5 x3, chunk 64K, served
# as /dev/ublkbN; members m0 and m1 are device-mapper devices, linear over
# loop devices, whose tables are swapped (dmsetup reload + resume) for
# ones that fail a few sectors; m2 is a loop device.
#  1. dm-flakey with `error_reads` under 4 KiB of m0 (zeroed underneath
#     first): reads there fail with EIO, writes land. Reading through uraid
#     gives the right data (so it was reconstructed from m1 and the parity)
#     and uraid rewrites the range on m0: with the table swapped back to
#     linear, m0 holds the right data there. The re-read still fails (the
#     sectors stay bad, as a drive out of spare sectors), so m0 is failed,
#     as md does, and the Fail event says why.
#  2. The `error` target (reads and writes fail) under 4 KiB of m1 of a
#     fresh array on the same members: right data read, the rewrite
#     fails, m1 is failed.
# A read error that the rewrite cures (the member stays, the count moves)
# needs a device that remaps on write (dm-dust, which Debian's kernel
# lacks): it is shown on the host (crates/uraid/tests/e2e/read_repair.rs,
# crates/uraid-core/tests/read_repair.rs).
. "$(dirname "$0")/lib.sh"
name=rr
modprobe ublk_drv
modprobe dm_flakey 2>/dev/null || true

on_fail() {
  uraid status $name 2>&1 || true
  [ -n "${SERVE_OUT:-}" ] && tail -20 "$SERVE_OUT" "$SERVE_OUT.err" 2>/dev/null
}

# Swaps the table of dm device $1 (linear over $2, $3 sectors) for one
# where the 8 sectors at sector $4 go to target "$5".
bad_table() {
  local dev=$1 lower=$2 size=$3 s=$4 target=$5
  printf '0 %d linear %s 0\n%d 8 %s\n%d %d linear %s %d\n' "$s" "$lower" "$s" "$target" $((s + 8)) $((size - s - 8)) "$lower" $((s + 8)) |
    dmsetup reload "$dev" || fail "dmsetup reload $dev"
  dmsetup resume "$dev" || fail "dmsetup resume $dev"
}
linear_table() {
  echo "0 $3 linear $2 0" | dmsetup reload "$1" && dmsetup resume "$1" || fail "dmsetup back to linear"
}

step "members: dm linear over two loops, a loop; RAID 5 served on ublk"
loop_members 3 128M
size=$(blockdev --getsz "${L[0]}")
dmsetup create rr0 --table "0 $size linear ${L[0]} 0" || fail "dmsetup create rr0"
dmsetup create rr1 --table "0 $size linear ${L[1]} 0" || fail "dmsetup create rr1"
M=(/dev/mapper/rr0 /dev/mapper/rr1 "${L[2]}")
uraid create --level 5 --chunk 64K --name $name "${M[@]}" >/dev/null || fail "create over ${M[*]}"
SERVE_OUT=$WORK/serve.out
timeout 120 "$URAID" serve --ublk --fork --metrics 127.0.0.1:9198 "${M[@]}" >"$SERVE_OUT" 2>"$SERVE_OUT.err" || fail "serve --ublk"
DEV=$(sed -n "s/^serving '$name' .* on \(\/dev\/ublkb[0-9]*\)$/\1/p" "$SERVE_OUT")
[ -b "$DEV" ] || fail "no /dev/ublkbN in the serving line"
uraid monitor $name >"$WORK/monitor.log" 2>&1 &

head -c 256K /dev/urandom >"$WORK/data"
dd if="$WORK/data" of="$DEV" bs=64K oflag=direct status=none
start=$(uraid status $name --json | jq '.volumes[0].member_start')
# RAID 5 left-symmetric over 3: logical [0, 64K) is m0's first chunk,
# [64K, 128K) m1's.
cmp <(dd if="${L[0]}" bs=64K skip=$((start / 65536)) count=1 iflag=direct status=none) <(head -c 64K "$WORK/data") ||
  fail "logical [0, 64K) is not on m0 at $start: the layout is not what this test assumes"

step "1. dm-flakey error_reads under m0: right data, the range rewritten, m0 failed"
b0=$((start + 8192))
dd if=/dev/zero of="${L[0]}" bs=4K seek=$((b0 / 4096)) count=1 oflag=direct status=none
bad_table rr0 "${L[0]}" "$size" $((b0 / 512)) "flakey ${L[0]} $((b0 / 512)) 0 1 1 error_reads"
if dd if=/dev/mapper/rr0 of=/dev/null bs=4K skip=$((b0 / 4096)) count=1 iflag=direct status=none 2>/dev/null; then
  fail "a read of the flakey sectors passed"
fi
t0=$(now)
cmp <(dd if="$DEV" bs=64K count=2 iflag=direct status=none) <(head -c 128K "$WORK/data") || fail "wrong data read back over m0's bad sectors"
echo "read over the bad sectors: right data in $(since "$t0") s"
linear_table rr0 "${L[0]}" "$size"
cmp <(dd if="${L[0]}" bs=4K skip=$((b0 / 4096)) count=1 iflag=direct status=none) <(tail -c +8193 "$WORK/data" | head -c 4096) ||
  fail "m0 does not hold the reconstructed data where its sectors were bad: not rewritten"
echo "m0's bad sectors were rewritten with the reconstructed data"
uraid status $name
js=$(uraid status $name --json)
echo "$js" | jq -c '[.members[] | {device, state, read_errors_corrected, read_errors_uncorrected}]'
[ "$(echo "$js" | jq -r '.members[0].state')" = faulty ] || fail "m0 is in although its re-read failed"
wait_for 20 "the Fail event with its reason" grep -q "Fail.*could not be repaired" "$WORK/monitor.log"
grep "Fail" "$WORK/monitor.log"
cmp <(dd if="$DEV" bs=64K count=4 iflag=direct status=none) "$WORK/data" || fail "the data after m0 failed"
uraid stop $name >/dev/null || fail "uraid stop"

step "2. dm error target under m1 of a fresh array: right data, the rewrite fails, m1 failed"
linear_table rr1 "${L[1]}" "$size"
uraid create --level 5 --chunk 64K --name $name --force "${M[@]}" >/dev/null || fail "create again over ${M[*]}"
timeout 120 "$URAID" serve --ublk --fork "${M[@]}" >"$SERVE_OUT" 2>"$SERVE_OUT.err" || fail "serve --ublk again"
DEV=$(sed -n "s/^serving '$name' .* on \(\/dev\/ublkb[0-9]*\)$/\1/p" "$SERVE_OUT")
dd if="$WORK/data" of="$DEV" bs=64K oflag=direct status=none
b1=$((start + 16384))
dd if=/dev/zero of="${L[1]}" bs=4K seek=$((b1 / 4096)) count=1 oflag=direct status=none
bad_table rr1 "${L[1]}" "$size" $((b1 / 512)) error
cmp <(dd if="$DEV" bs=64K skip=1 count=1 iflag=direct status=none) <(tail -c +65537 "$WORK/data" | head -c 64K) ||
  fail "wrong data read back over m1's error range"
js=$(uraid status $name --json)
echo "$js" | jq -c '[.members[] | {device, state, read_errors_corrected}]'
[ "$(echo "$js" | jq -r '.members[1].state')" = faulty ] || fail "m1 is in although its rewrite failed"
[ "$(echo "$js" | jq -r '.members[0].state')" = active ] || fail "m0 left the array"
cmp <(dd if="$DEV" bs=64K count=4 iflag=direct status=none) "$WORK/data" || fail "the data after m1 failed"
uraid stop $name >/dev/null || fail "uraid stop"
dmsetup remove --retry rr0 rr1 || fail "dmsetup remove rr0 rr1 (left behind, later tests would scan them)"
echo "read_repair: ok"
