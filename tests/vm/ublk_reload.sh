#!/usr/bin/env bash
# `systemctl reload uraid@NAME` in the VM (run by tests/vm/run-all; URAID
# and WORK from it), without systemd: the unit's ExecReload sends SIGHUP
# to the main process, and systemd's side of the notify protocol is a
# small listener on NOTIFY_SOCKET that records each message with the pid
# that sent it (SCM_CREDENTIALS), as systemd sees them. A RAID 5 of 3 loop
# members is served with --ublk (not forked, as the unit runs it), ext4
# mounted and a file written; SIGHUP to the serve. Checked: a new serve
# process took the device over (same /dev/ublkbN, same mount, the file
# reads back after a cache drop, writes go on), the old one exited; the old
# one told the notify socket MAINPID=<new pid> and never STOPPING=1; the
# new one said READY=1. Then SIGHUP to an NBD-only serve is ignored with a
# message, and it keeps serving.
. "$(dirname "$0")/lib.sh"
name=vmrl
modprobe ublk_drv
loop_members 3 96M
uraid create --level 5 --chunk 64K --name $name "${L[@]}" >/dev/null
on_fail() { cat "$WORK"/serve*.out "$WORK"/serve*.err "$WORK/notify.log" 2>/dev/null; }

# systemd's side: every datagram on NOTIFY_SOCKET, as "PID: MESSAGE" lines.
cat >"$WORK/notify.py" <<'EOF'
import os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
out = open(sys.argv[2], "a", buffering=1)
while True:
    msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
    pid = next((struct.unpack("iII", d[:12])[0] for l, t, d in anc if l == socket.SOL_SOCKET and t == socket.SCM_CREDENTIALS), 0)
    for line in msg.decode().splitlines():
        out.write(f"{pid}: {line}\n")
EOF
python3 "$WORK/notify.py" "$WORK/notify.sock" "$WORK/notify.log" &
wait_for 20 "the notify listener" test -S "$WORK/notify.sock"
export NOTIFY_SOCKET=$WORK/notify.sock

step "1. serve --ublk as the unit does (main process, Type=notify); ext4 mounted"
"$URAID" serve $name --ublk >"$WORK/serve1.out" 2>"$WORK/serve1.err" &
old=$!
wait_for 120 "READY=1 from the serve" grep -q "^$old: READY=1" "$WORK/notify.log"
DEV=$(sed -n "s/^serving '$name' .* on \(\/dev\/ublkb[0-9]*\)$/\1/p" "$WORK/serve1.out")
[ -b "$DEV" ] || fail "no block device served"
mkfs.ext4 -q -F "$DEV"
mount "$DEV" "$MNT"
mount_before=$(findmnt -n -o SOURCE,TARGET,FSTYPE "$MNT")
head -c 2M /dev/urandom >"$MNT/before"
sync
sum=$(md5sum <"$MNT/before")
echo "served by $old on $DEV: $mount_before"

step "2. SIGHUP (ExecReload=/bin/kill -HUP \$MAINPID)"
t0=$(now)
kill -HUP $old
wait_for 120 "MAINPID= from the old serve" grep -q "^$old: MAINPID=" "$WORK/notify.log"
new=$(sed -n "s/^$old: MAINPID=\([0-9]*\)$/\1/p" "$WORK/notify.log" | tail -1)
[ -n "$new" ] && [ "$new" != "$old" ] || fail "MAINPID names no new process: '$new'"
wait_for 120 "the old serve $old exiting" gone $old
wait_for 120 "READY=1 from the new serve $new" grep -q "^$new: READY=1" "$WORK/notify.log"
echo "reloaded in $(since "$t0") s: main process $old -> $new"
cat "$WORK/notify.log"
grep -q "^$old: STOPPING=1" "$WORK/notify.log" && fail "the old serve said STOPPING=1: systemd would stop the unit"
kill -0 "$new" || fail "the new serve $new is not running"
[ "$(jq -r .pid "$URAID_RUN_DIR/$name.ublk")" = "$new" ] || fail "the record does not name the new serve"
[ "$(findmnt -n -o SOURCE,TARGET,FSTYPE "$MNT")" = "$mount_before" ] || fail "the mount changed: $(findmnt -n "$MNT")"
grep -q "reload: started .* (pid $new) to take array '$name' over" "$WORK/serve1.err" || fail "the old serve did not log the reload"

step "3. the data and the device after the reload"
echo 3 >/proc/sys/vm/drop_caches
[ "$(md5sum <"$MNT/before")" = "$sum" ] || fail "a file written before the reload reads back different"
head -c 2M /dev/urandom >"$MNT/after"
sum2=$(md5sum <"$MNT/after")
sync
echo 3 >/proc/sys/vm/drop_caches
[ "$(md5sum <"$MNT/after")" = "$sum2" ] || fail "a file written after the reload reads back different"
umount "$MNT"
e2fsck -fn "$DEV" >/dev/null || fail "e2fsck found errors"
uraid stop $name >/dev/null || fail "uraid stop"
wait_for 30 "the new serve stopping" gone "$new"
grep -q "^$new: STOPPING=1" "$WORK/notify.log" || fail "the new serve did not say STOPPING=1 on a real stop"

step "4. SIGHUP to an NBD-only serve: ignored, it keeps serving"
"$URAID" serve $name --socket "$WORK/$name.sock" >"$WORK/serve3.out" 2>"$WORK/serve3.err" &
nbd=$!
wait_for 120 "READY=1 from the NBD serve" grep -q "^$nbd: READY=1" "$WORK/notify.log"
kill -HUP $nbd
wait_for 20 "the reload refusal in the log" grep -q "reload: SIGHUP ignored" "$WORK/serve3.err"
grep "reload:" "$WORK/serve3.err"
sleep 1
kill -0 $nbd || fail "SIGHUP ended the NBD-only serve"
uraid status $name >"$WORK/status.out"
grep -q "served by uraid serve (pid $nbd)" "$WORK/status.out" || { cat "$WORK/status.out"; fail "status does not show the NBD serve"; }
uraid stop $name >/dev/null
wait_for 30 "the NBD serve stopping" gone "$nbd"
echo "ublk_reload: ok"
