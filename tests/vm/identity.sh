#!/usr/bin/env bash
# Which drive is which (issue 32, identity), on real NVMe controllers in the VM (run by
# tests/vm/run-all; URAID and WORK from it): the kernel's NVMe target (nvmet) with the loop
# transport exports three null_blk namespaces as /dev/nvmeXn1, each a controller answering
# real Identify commands with the serial and model set in configfs, the firmware revision
# being the target kernel's release.
#  1. `uraid create` RAID 5 over them; `uraid status NAME` names each member's model, serial
#     and firmware (from sysfs, as the kernel read them with Identify), and --json has them.
#  2. `uraid examine DEV` starts with the drive's identity and its world-wide ID.
#  3. With udev's /dev/disk/by-id links (udevd runs in the guest; a trigger makes them):
#     `uraid scan` prints each drive under its ARRAY line, `uraid scan --config FILE` writes
#     the by-id paths as members, and `uraid status NAME` (members from that file) works.
#     (The scan is limited to /dev/nvme*n1 by the config's `devices`: the null_blk drives
#     the target exports carry the same superblocks.)
#  4. A failed member stays named by its serial in `status` (the drive to pull).
#  5. `uraid serve --metrics --health-interval 2s`: uraid_member_info has each member's
#     model_name, serial_number and firmware_version; the real smartctl reads the drives'
#     health logs (smartctl_device_smart_status 1); a drive whose smartctl JSON is the
#     recorded one of a real drive with a critical warning gives
#     smartctl_device_critical_warning 16 and exactly one HealthWarning event (to --program);
#     promtool accepts the exposition.
. "$(dirname "$0")/lib.sh"

C=/sys/kernel/config/nvmet
cleanup() {
  [ -n "${SPID:-}" ] && kill "$SPID" 2>/dev/null && wait_for 20 "serve stopping" gone "$SPID" || true
  for i in 0 1 2; do nvme disconnect -n "uraidid$i" >/dev/null 2>&1 || true; done
  rm -f "$C"/ports/1/subsystems/* 2>/dev/null || true
  rmdir "$C"/ports/1 2>/dev/null || true
  for i in 0 1 2; do
    echo 0 >"$C/subsystems/uraidid$i/namespaces/1/enable" 2>/dev/null || true
    rmdir "$C/subsystems/uraidid$i/namespaces/1" "$C/subsystems/uraidid$i" 2>/dev/null || true
  done
}
trap cleanup EXIT

step "nvmet loop targets over null_blk"
null_members 3 256
modprobe nvmet
modprobe nvme-loop
# Under TCG on a loaded host a command can take seconds: long timeouts, so that no controller
# reset fails an I/O in the middle of the test.
for p in io_timeout admin_timeout; do echo 255 >"/sys/module/nvme_core/parameters/$p" 2>/dev/null || true; done
on_fail() { dmesg | grep -i -e nvme -e nullb | tail -20; }
[ -d "$C" ] || mount -t configfs none /sys/kernel/config 2>/dev/null || true
before=$(ls /sys/class/nvme 2>/dev/null | wc -l)
for i in 0 1 2; do
  S=$C/subsystems/uraidid$i
  mkdir "$S"
  echo 1 >"$S/attr_allow_any_host"
  echo "SN-URAID-000$i" >"$S/attr_serial"
  echo "uraid test drive" >"$S/attr_model"
  mkdir "$S/namespaces/1"
  echo "/dev/nullb$i" >"$S/namespaces/1/device_path"
  echo 1 >"$S/namespaces/1/enable"
done
mkdir "$C/ports/1"
echo loop >"$C/ports/1/addr_trtype"
for i in 0 1 2; do ln -s "$C/subsystems/uraidid$i" "$C/ports/1/subsystems/"; done
D=()
for i in 0 1 2; do
  nvme connect -t loop -n "uraidid$i" --keep-alive-tmo=255 --ctrl-loss-tmo=-1 >/dev/null
done
udevadm settle --timeout=20 2>/dev/null || true
# The namespace device of each subsystem, by its serial.
for i in 0 1 2; do
  dev=
  for b in /sys/block/nvme*n1; do
    [ "$(cat "$b/device/serial" 2>/dev/null | tr -d ' ')" = "SN-URAID-000$i" ] && dev=/dev/$(basename "$b")
  done
  [ -n "$dev" ] && [ -b "$dev" ] || fail "no namespace device for serial SN-URAID-000$i (nvme list: $(nvme list 2>&1))"
  D+=("$dev")
done
echo "drives: ${D[*]}"
fw=$(cat "/sys/block/$(basename "${D[0]}")/device/firmware_rev")
echo "firmware as the host read it: $fw"

step "1. status names model, serial and firmware"
uraid create --level 5 --chunk 64K --name vmid "${D[@]}" >/dev/null
uraid status "${D[@]}" >"$WORK/st.txt"
cat "$WORK/st.txt"
for i in 0 1 2; do
  grep -q "uraid test drive, serial SN-URAID-000$i, firmware $fw" "$WORK/st.txt" || fail "status does not name drive $i's model, serial and firmware"
done
uraid status --json "${D[@]}" >"$WORK/st.json"
for i in 0 1 2; do
  [ "$(jq -r ".members[$i].identity.serial" "$WORK/st.json")" = "SN-URAID-000$i" ] || fail "status --json member $i: $(jq -c ".members[$i]" "$WORK/st.json")"
done
[ "$(jq -r '.members[0].identity.transport' "$WORK/st.json")" = nvme-loop ] || fail "transport: $(jq -c '.members[0].identity' "$WORK/st.json")"
[ "$(jq -r '.members[0].identity.capacity' "$WORK/st.json")" = $((256 << 20)) ] || fail "capacity: $(jq -c '.members[0].identity' "$WORK/st.json")"

step "2. examine"
uraid examine "${D[1]}" >"$WORK/ex.txt"
head -3 "$WORK/ex.txt"
head -1 "$WORK/ex.txt" | grep -q "^${D[1]}: drive uraid test drive, serial SN-URAID-0001, firmware $fw" || fail "examine's first line: $(head -1 "$WORK/ex.txt")"
wwid=$(cat "/sys/block/$(basename "${D[1]}")/wwid")
grep -q "wwid $wwid" "$WORK/ex.txt" || fail "examine does not give the wwid $wwid"

step "3. by-id names: scan and scan --config"
udevadm trigger --subsystem-match=block --action=add 2>/dev/null || true
udevadm settle --timeout=30 2>/dev/null || true
ls -l /dev/disk/by-id/ 2>/dev/null | grep nvme || true
byid0=$(jq -r '.members[0].identity.by_id // empty' <(uraid status --json "${D[@]}"))
if [ -z "$byid0" ]; then
  fail "udev made no /dev/disk/by-id link for ${D[0]} (ls: $(ls /dev/disk/by-id 2>&1 | head -5))"
fi
echo "by-id of ${D[0]}: $byid0"
[ "$(readlink -f "$byid0")" = "${D[0]}" ] || fail "$byid0 does not lead to ${D[0]}"
# Only the NVMe namespaces: the null_blk drives behind the target carry the same superblocks
# (a scan of every device would see each member twice), as mdadm.conf's DEVICE line.
printf 'devices = ["/dev/nvme*n1"]\n' >"$WORK/by-id.conf"
export URAID_CONFIG=$WORK/by-id.conf
uraid scan >"$WORK/scan.txt"
cat "$WORK/scan.txt"
grep -q "^ARRAY name=vmid " "$WORK/scan.txt" || fail "scan found no array vmid"
grep -q "^   ${D[0]}: uraid test drive, serial SN-URAID-0000" "$WORK/scan.txt" || fail "scan does not name the drives"
uraid scan --config "$WORK/by-id.conf" >/dev/null
cat "$WORK/by-id.conf"
grep -q "\"$byid0\"" "$WORK/by-id.conf" || fail "scan --config did not write the by-id path $byid0"
grep '^members' "$WORK/by-id.conf" | grep -q '"/dev/nvme' && fail "scan --config wrote a kernel name although a by-id link exists"
uraid status vmid >"$WORK/st2.txt" || fail "status by name from the by-id config"
grep -q "serial SN-URAID-0002" "$WORK/st2.txt" || fail "status from the by-id config: $(cat "$WORK/st2.txt")"

step "4. a failed member stays named by its serial"
uraid fail "${D[@]}" --member "${D[2]}" >/dev/null
uraid status "${D[@]}" >"$WORK/st3.txt"
cat "$WORK/st3.txt"
grep -A1 "${D[2]} faulty" "$WORK/st3.txt" | grep -q "serial SN-URAID-0002" || fail "the faulty member's serial is not shown"

step "5. health: smartctl polled by serve, metrics, events"
# The NVMe target's health log is zeros; the warning path runs on the recorded smartctl JSON
# of a real drive whose critical warning is set (a Samsung PM1725a, see
# crates/uraid/tests/data/smartctl/README.md), given for the failed member ${D[2]} by a
# wrapper; the other drives are read by the real smartctl.
recorded=$(cd "$(dirname "$0")/../.." && pwd)/crates/uraid/tests/data/smartctl/nvme-null-SAMSUNG_MZWLL3T2HAJQ-00005-nvme0.json
cat >"$WORK/smartctl" <<EOS
#!/bin/sh
[ "\$3" = "${D[2]}" ] && { cat "$recorded"; exit 8; }
exec smartctl "\$@"
EOS
chmod +x "$WORK/smartctl"
printf '#!/bin/sh\necho "$*" >>%s\n' "$WORK/events.txt" >"$WORK/program"
chmod +x "$WORK/program"
smartctl --json -a "${D[0]}" >"$WORK/smart0.json" || true
echo "smartctl on ${D[0]}: exit status $(jq .smartctl.exit_status "$WORK/smart0.json"), passed $(jq .smart_status.passed "$WORK/smart0.json")"
URAID_SMARTCTL=$WORK/smartctl uraid serve --fork --metrics 127.0.0.1:9797 --health-interval 2s --program "$WORK/program" "${D[@]}" \
  >"$WORK/serve.out" 2>"$WORK/serve.err" || { cat "$WORK/serve.err"; fail "serve"; }
SPID=$(pgrep -f "uraid serve --fork --metrics 127.0.0.1:9797" | head -1 || true)
has_health() { curl -sf -o "$WORK/metrics.txt" http://127.0.0.1:9797/metrics && grep -q "^smartctl_device_critical_warning{.*device=\"${D[2]}\"" "$WORK/metrics.txt"; }
wait_for 120 "health in the metrics" has_health
# Three more polls: the warning is sent once.
sleep 7
curl -sf -o "$WORK/metrics.txt" http://127.0.0.1:9797/metrics
grep -e '^uraid_member_info' -e '^smartctl_' "$WORK/metrics.txt"
for i in 0 1; do
  grep '^uraid_member_info{' "$WORK/metrics.txt" | grep "serial_number=\"SN-URAID-000$i\"" | grep -q "model_name=\"uraid test drive\".*firmware_version=\"$fw\"" ||
    fail "uraid_member_info for drive $i"
  grep -q "^smartctl_device_smart_status{.*device=\"${D[$i]}\".* 1\$" "$WORK/metrics.txt" || fail "smartctl_device_smart_status of ${D[$i]}"
done
grep -q "^smartctl_device_critical_warning{.*device=\"${D[2]}\".* 16\$" "$WORK/metrics.txt" || fail "critical warning of ${D[2]}"
if command -v promtool >/dev/null; then
  promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.txt" 2>&1 || { cat "$WORK/promtool.txt"; fail "promtool rejects the metrics"; }
fi
cat "$WORK/events.txt"
[ "$(grep -c "^HealthWarning vmid ${D[2]}\$" "$WORK/events.txt")" = 1 ] || fail "HealthWarning for ${D[2]} not sent exactly once"
grep -q "^HealthWarning vmid ${D[0]}" "$WORK/events.txt" && fail "a HealthWarning for the healthy ${D[0]}"
grep -q 'HealthWarning' "$WORK/serve.err" && grep 'HealthWarning' "$WORK/serve.err" | head -2
uraid stop vmid >/dev/null || true
echo "PASS identity"
