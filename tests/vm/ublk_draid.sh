#!/usr/bin/env bash
# A declustered array on ublk in the VM (issue 33; run by tests/vm/run-all,
# URAID and WORK from it): draid5 (4 data + 1 parity chunks per group, one
# distributed spare) over 8 loop devices, served by `uraid serve --ublk`.
#  1. the device has the volume's size; fio writes it with crc32c in every
#     block (4K-256K requests, queue depth 16);
#  2. `uraid fail` takes a member out while fio writes: the service puts its
#     role into the distributed spare and rebuilds it in the background
#     while fio goes on; fio's own verify pass reads everything back;
#  3. status --json lists the distributed spare in use (role, rebuilt) and
#     the volume clean again; `uraid status` shows the role in the spare;
#  4. after the rebuild, a second fio pass (verify only) reads all the data
#     back with the failed member's chunks coming from the spare chunks;
#     `uraid check` finds no mismatch; a clean stop removes the device.
. "$(dirname "$0")/lib.sh"
name=vmdraid
modprobe ublk_drv
on_fail() {
  dmesg | tail -25
  [ -n "${SERVE_OUT:-}" ] && cat "$SERVE_OUT.err" 2>/dev/null | tail -20
}
log_from=$(dmesg | wc -l)

loop_members 8 24M
uraid create --level draid5 --data 4 --spares 1 --chunk 64K --name $name "${L[@]}" >/dev/null

step "1. serve --ublk"
serve_ublk $name
cap=$(uraid status --json $name | jq -r '.volumes[0].capacity')
[ "$(blockdev --getsize64 "$DEV")" = "$cap" ] || fail "$DEV has $(blockdev --getsize64 "$DEV") bytes, the volume $cap"
size=$((cap / 1048576))M
echo "draid5 4d+1p+1s over 8 x 24M: $DEV, $cap bytes"

# fio over the whole device, crc32c in every block; ARGS added.
job() {
  fio --name=draid --filename="$DEV" --size="$size" --rw=randwrite --bsrange=4k-256k --ioengine=libaio --iodepth=16 \
    --direct=1 --verify=crc32c --verify_fatal=1 --verify_state_save=0 --randrepeat=1 --output-format=json "$@"
}

step "2. fio writes; a member fails meanwhile"
job >"$WORK/fio1.json" 2>&1 &
fio=$!
# Until fio has written a few MiB.
wait_for 60 "fio writing" bash -c "[ \$(awk '\$3 == \"$(basename "$DEV")\" {print \$10}' /proc/diskstats) -gt 8192 ]"
kill -0 $fio 2>/dev/null || { cat "$WORK/fio1.json"; fail "fio ended before the failure"; }
uraid fail $name --member 3 >"$WORK/fail.out" || { cat "$WORK/fail.out"; fail "uraid fail --member 3"; }
echo "member 3 failed with fio writing"
wait $fio || { tail -20 "$WORK/fio1.json"; fail "fio (write and verify) failed across the failure"; }
jq -r '.jobs[0] | "fio: wrote \(.write.io_bytes) bytes, verified \(.read.io_bytes) bytes, errors \(.error)"' "$WORK/fio1.json"
[ "$(jq '.jobs[0].error' "$WORK/fio1.json")" = 0 ] || fail "fio reported an error"

step "3. the rebuild into the distributed spare"
spare_done() {
  st=$(uraid status --json $name)
  jq -e '.distributed_spares == [{"spare": 0, "role": 3, "recovery_offset": null}]' <<<"$st" >/dev/null
}
wait_for 120 "the rebuild into the distributed spare" spare_done
echo "status --json: $(jq -c '{distributed_spares, member3: .members[3].state, volume: .volumes[0].state}' <<<"$st")"
[ "$(jq -r '.members[3].state' <<<"$st")" = spared ] || fail "role 3 is not spared: $st"
[ "$(jq -r '.volumes[0].state' <<<"$st")" = clean ] || fail "the volume is not redundant again: $st"
text=$(uraid status $name)
echo "$text"
grep -q "role 3: .* spared in distributed spare 0" <<<"$text" || fail "uraid status does not show role 3 in distributed spare 0"

step "4. fio verifies all the data after the rebuild"
job --verify_only >"$WORK/fio2.json" 2>&1 || { tail -20 "$WORK/fio2.json"; fail "fio verify after the rebuild"; }
jq -r '.jobs[0] | "fio verify after the rebuild: \(.read.io_bytes) bytes, errors \(.error)"' "$WORK/fio2.json"
[ "$(jq '.jobs[0].read.io_bytes' "$WORK/fio2.json")" -gt 0 ] || fail "the verify pass read nothing"
out=$(uraid check --json $name) || fail "uraid check: $out"
[ "$(jq '.[0].report.mismatches' <<<"$out")" = 0 ] || fail "check found mismatches: $out"
dmesg | tail -n +"$((log_from + 1))" | grep -i "I/O error, dev $(basename "$DEV")" && fail "the kernel logged I/O errors on $DEV"
stop_serve $name
[ ! -e "$DEV" ] || fail "$DEV is left after a clean stop"
echo "ublk_draid: ok"
