#!/usr/bin/env bash
# A takeover the old server cannot grant (run by tests/vm/run-all; URAID
# and WORK from it): `uraid serve NAME --ublk --takeover` while a request
# on the device cannot be answered, because a member hangs. A RAID 1 of
# two dm members over loop devices is served on /dev/ublkbN; the data area
# of both members is suspended (dmsetup suspend: its I/O waits in the
# kernel) and a direct read of the device is started, so it stays in
# flight. The takeover must be refused after the old server's quiet limit (10 s), with
# an error that says so, and change nothing: the old serve keeps the
# device and the record, the new one exits 1 without touching the array.
# (Before the scan skipped suspended dm devices, the new serve hung in its
# scan for the array's members, reading the suspended device.) Then the
# members resume: the read completes with the right data, and the
# device still reads and writes through the old serve.
. "$(dirname "$0")/lib.sh"
name=vmbusy
modprobe ublk_drv
loop_members 2 64M
dm=()
outer=()
cleanup_dm() {
  local d
  for d in "${dm[@]}"; do
    dmsetup resume "$d" 2>/dev/null || true
  done
}
trap cleanup_dm EXIT
on_fail() { cleanup_dm; cat "${SERVE_OUT:-/dev/null}" "${SERVE_OUT:-/dev/null}.err" "$WORK/taker.out" 2>/dev/null; dmesg | tail -15; }
# Each member: its first MiB (superblock, bitmap) straight on the loop
# device, the rest (the data area) through an inner dm-linear device that
# the test suspends, so that a data read hangs and a scan still reads the
# superblock. The scan skips the inner device while it is suspended (it
# would wait on it).
for i in 0 1; do
  sz=$(blockdev --getsz "${L[$i]}")
  dmsetup create "uraidbusyin$i" --table "0 $((sz - 2048)) linear ${L[$i]} 2048" || fail "dmsetup create"
  dm+=("uraidbusyin$i")
  printf '0 2048 linear %s 0\n2048 %s linear /dev/mapper/uraidbusyin%s 0\n' "${L[$i]}" $((sz - 2048)) $i |
    dmsetup create "uraidbusy$i" || fail "dmsetup create (two segments)"
  outer+=("uraidbusy$i")
done
uraid create --level 1 --name $name /dev/mapper/uraidbusy0 /dev/mapper/uraidbusy1 >/dev/null

step "1. serve --ublk; a block written"
serve_ublk $name
old=$PID
head -c 1M /dev/urandom >"$WORK/block"
dd if="$WORK/block" of="$DEV" bs=1M count=1 oflag=direct status=none
sum=$(md5sum <"$WORK/block")
echo "served by $old on $DEV"

step "2. members suspended, a read in flight"
for d in "${dm[@]}"; do dmsetup suspend "$d"; done
dd if="$DEV" of="$WORK/read" bs=1M count=1 iflag=direct status=none &
reader=$!
sleep 1
kill -0 $reader 2>/dev/null || fail "the read finished although both members are suspended"

step "3. the takeover is refused after the quiet limit, and changes nothing"
t0=$(now)
if timeout -s KILL 90 "$URAID" serve $name --ublk --takeover >"$WORK/taker.out" 2>&1; then
  fail "the takeover succeeded with a request in flight that cannot be answered"
fi
echo "refused after $(since "$t0") s:"
cat "$WORK/taker.out"
grep -q "not answered within 10 s" "$WORK/taker.out" || fail "the refusal does not say the requests in flight were not answered"
grep -q "keeps serving" "$WORK/taker.out" || fail "the refusal does not say the old serve keeps serving"
kill -0 "$old" || fail "the old serve $old exited"
[ "$(jq -r .pid "$URAID_RUN_DIR/$name.ublk")" = "$old" ] || fail "the record no longer names the old serve"
[ -b "$DEV" ] || fail "$DEV is gone"
kill -0 $reader 2>/dev/null || fail "the read finished before the members resumed"

step "4. members resume: the read completes, the device still serves"
for d in "${dm[@]}"; do dmsetup resume "$d"; done
wait_for 60 "the read in flight to complete" gone $reader
wait $reader || fail "the read in flight failed"
[ "$(md5sum <"$WORK/read")" = "$sum" ] || fail "the read in flight returned other data"
head -c 1M /dev/urandom >"$WORK/block2"
dd if="$WORK/block2" of="$DEV" bs=1M count=1 seek=2 oflag=direct status=none || fail "a write after the refusal failed"
dd if="$DEV" of="$WORK/read2" bs=1M count=1 skip=2 iflag=direct status=none
cmp -s "$WORK/block2" "$WORK/read2" || fail "a write after the refusal reads back different"
uraid status $name >"$WORK/status.out"
grep "served by" "$WORK/status.out" || true
grep -q "served by uraid serve (pid $old)" "$WORK/status.out" || fail "status does not show the old serve"
stop_serve $name
for d in "${outer[@]}" "${dm[@]}"; do dmsetup remove --retry "$d"; done
dm=()
echo "ublk_takeover_busy: ok"
