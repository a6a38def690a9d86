#!/usr/bin/env bash
# A client's TRIM reaches block-device members as a discard (issue 29), in the VM (run by
# tests/vm/run-all; URAID and WORK from it). The members are null_blk drives with discard and
# no write-zeroes (memory_backed=1 discard=1: write_zeroes_max_bytes 0, like many SATA SSDs),
# on which fallocate(PUNCH_HOLE), a WRITE_ZEROES, fails with EOPNOTSUPP.
#  1. RAID 0 served by `uraid serve`, the kernel's NBD client on its unix socket, ext4 on
#     /dev/nbd0, files written, synced and deleted, fstrim: every member counts discards
#     (fields 12-15 of /sys/block/nullbN/stat), serve never says "does not support discard",
#     e2fsck is clean.
#  2. RAID 5 on the same kind of drives: a discarded chunk may read back anything and parity
#     needs zeros there, which these drives can only write, so the volume does not pass TRIM
#     on (as md's RAID 5 without devices_handle_discard_safely): fstrim succeeds, no discard and
#     no zero-writing reaches the drives, the files' data is intact, e2fsck is clean.
# Prints the members' queue limits and discard counters.
. "$(dirname "$0")/lib.sh"
mnt=$MNT

# 128 MiB each, through configfs (the module's gb= cannot go under 1 GiB):
# ext4 on a smaller volume is made and trimmed faster.
null_members 5 128 discard=1
modprobe nbd
for i in 0 1 2 3 4; do
  q=/sys/block/nullb$i/queue
  echo "nullb$i: discard_max_bytes $(cat $q/discard_max_bytes) discard_granularity $(cat $q/discard_granularity) write_zeroes_max_bytes $(cat $q/write_zeroes_max_bytes)"
  [ "$(cat $q/discard_max_bytes)" -gt 0 ] || fail "nullb$i does not discard"
  [ "$(cat $q/write_zeroes_max_bytes)" = 0 ] || fail "nullb$i has write-zeroes: not the case this test is about"
done
# Discard requests and sectors of /dev/nullbN (fields 12 and 14 of its stat).
discards() { awk '{print $12, $14}' "/sys/block/nullb$1/stat"; }

# run NAME LEVEL DEVICES...: creates and serves the array, connects /dev/nbd0, ext4 with
# 24 MiB of files (checksummed), deleted but one, fstrim; leaves the discard counters of the
# members before and after the fstrim in $before and $after, fstrim's output in $trimmed.
run() {
  local name=$1 level=$2; shift 2
  local devs=("$@") d i
  uraid create --level "$level" --chunk 64K --name "$name" "${devs[@]}" >/dev/null
  uraid serve --fork --socket "$WORK/$name.sock" "${devs[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err"
  nbd-client -N "$name" -unix "$WORK/$name.sock" /dev/nbd0 >/dev/null
  echo "/dev/nbd0: discard_max_bytes $(cat /sys/block/nbd0/queue/discard_max_bytes)"
  mkfs.ext4 -q -E nodiscard /dev/nbd0
  # No background zeroing of the inode tables (slow under TCG).
  mount -o noinit_itable /dev/nbd0 "$mnt"
  for i in 0 1 2; do
    head -c 8M /dev/urandom >"$mnt/f$i"
  done
  (cd "$mnt" && sha256sum f0 >"$WORK/$name.sum")
  sync
  rm "$mnt/f1" "$mnt/f2"
  sync
  before=$(for d in "${devs[@]}"; do discards "${d#/dev/nullb}"; done)
  trimmed=$(fstrim -v "$mnt")
  sync
  after=$(for d in "${devs[@]}"; do discards "${d#/dev/nullb}"; done)
  echo "fstrim: $trimmed"
  paste <(printf '%s\n' "${devs[@]}") <(echo "$before") <(echo "$after") |
    awk '{printf "%s: discard requests %d -> %d, discarded sectors %d -> %d\n", $1, $2, $4, $3, $5}'
  (cd "$mnt" && sha256sum -c --quiet "$WORK/$name.sum") || fail "$name: f0 does not read back"
  umount "$mnt"
  e2fsck -fn /dev/nbd0 >/dev/null 2>&1 || fail "$name: e2fsck found errors after fstrim"
  nbd-client -d /dev/nbd0 >/dev/null
  uraid stop "$name" >/dev/null
  if grep -i "does not support discard\|refused a discard\|refused a zeroing" "$WORK/$name.err"; then fail "$name: serve warned about discard"; fi
}

step "1. RAID 0 on null_blk (discard, no write-zeroes): fstrim reaches every member as discards"
run d0 0 /dev/nullb0 /dev/nullb1
paste <(echo "$before") <(echo "$after") | while read -r r0 s0 r1 s1; do
  [ "$r1" -gt "$r0" ] && [ "$s1" -gt "$s0" ] || fail "RAID 0: a member got no discard from fstrim ($r0 $s0 -> $r1 $s1)"
done
total=$(paste <(echo "$before") <(echo "$after") | awk '{s += $4 - $2} END {print s * 512}')
echo "RAID 0: $total bytes discarded on the members"
[ "$total" -ge $((16 << 20)) ] || fail "RAID 0: only $total bytes discarded, 16 MiB of files were deleted"

step "2. RAID 5 on the same drives: TRIM is not passed on (parity needs zeros they can only write)"
run d5 5 /dev/nullb2 /dev/nullb3 /dev/nullb4
[ "$before" = "$after" ] || fail "RAID 5 sent discards to its members: its parity would no longer hold"
echo "RAID 5: no discard reached the members; data intact, e2fsck clean"
echo "PASS"
