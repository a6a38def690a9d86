#!/usr/bin/env bash
# The kernel's NBD client (Debian's nbd-client 3.24 and nbd.ko) on a uraid
# export, in the VM (run by tests/vm/run-all; URAID and WORK from it):
#  1. unix socket: the nbd-client command `uraid serve` prints, run as
#     printed; ext4, fio --verify=crc32c, a member failed and a spare rebuilt
#     while fio writes, everything read back, disconnect;
#  2. TLS over TCP with client certificates (nbd-client's GnuTLS, TLS 1.2):
#     the printed command with its placeholders filled in; a client without
#     a certificate is refused; the data of 1 reads back; fio; disconnect;
#  3. the server restarted under a connected /dev/nbd0: what the kernel's
#     client does then, and the way back (README, "The kernel's NBD client").
# Prints the fio bandwidths measured (MB/s = 10^6 bytes/s; TCG guest: compare
# only within one run).
. "$(dirname "$0")/lib.sh"
name=vmnbd
mnt=$MNT
cd "$WORK"   # fio keeps its verify state files in the current directory
modprobe nbd

# Four members of 32 MiB (loop devices over files on the guest's tmpfs):
# a RAID 5 of three, and a spare.
loop_members 4 32M
uraid create --level 5 --chunk 64K --name $name "${L[@]:0:3}"

# fio_run JOB...: one fio with crc32c checksums (a job writes then reads
# back, or with --verify_only reads back only); JOB is `--name=NAME
# --filename=FILE --size=... --rw=... --bs=... [--verify_only]`. Prints each
# job's bandwidth; fails when fio does or a block does not verify.
fio_run() {
  local out
  out=$(fio --ioengine=libaio --iodepth=16 --direct=1 --verify=crc32c --verify_fatal=1 --randrepeat=1 \
    --output-format=json "$@" 2>"$WORK/fio.err") || { echo "$out" | tail -20; cat "$WORK/fio.err"; fail "fio $*"; }
  echo "$out" | jq -r --arg t "$SECONDS" '.jobs[] | "fio \(.jobname): write \(.write.bw_bytes / 1e6 | . * 10 | round / 10) MB/s, read (verify) \(.read.bw_bytes / 1e6 | . * 10 | round / 10) MB/s, errors \(.error) [at \($t) s]"'
  [ "$(echo "$out" | jq '[.jobs[].error] | add')" = 0 ] || fail "fio reported an error: $*"
}
# The jobs: NAME, 2M sequential 128K (4M random 16K for `during`).
job() {
  case $1 in
    during) echo "--name=during --filename=$mnt/during --size=4M --rw=randwrite --bs=16k" ;;
    *) echo "--name=$1 --filename=$mnt/$1 --size=2M --rw=write --bs=128k" ;;
  esac
}

# The nbd-client line `uraid serve` printed (stdout in $1).
hint() { sed -n "s/^with the kernel's nbd module: //p" "$1"; }
# Whether /dev/$1 is connected (nbd-client -c: 0 yes, 1 no).
connected() { nbd-client -c "/dev/$1" >/dev/null 2>&1; }
served_pid() { uraid status --json $name | jq -r '.served_by.pid // empty'; }
# Waits until the array's rebuild is done: no progress, volume clean.
wait_rebuilt() {
  local i st
  for i in $(seq 240); do
    st=$(uraid status --json $name)
    if [ "$(echo "$st" | jq -r '.progress == null and .volumes[0].state == "clean"')" = true ]; then return 0; fi
    sleep 0.5
  done
  echo "$st"; fail "the rebuild did not finish in 120 s"
}
# ext4 without its background inode table zeroing (slow under TCG, and
# I/O the figures should not carry).
mount_fs() { mount -o noinit_itable /dev/nbd0 "$mnt"; }

step "1. unix socket: serve, and the nbd-client command it prints"
uraid serve --fork --socket "$WORK/$name.sock" "${L[@]:0:3}" >"$WORK/serve1.out" 2>"$WORK/serve1.err"
cmd=$(hint "$WORK/serve1.out")
echo "serve printed: $cmd"
[[ $cmd == "nbd-client -N $name -unix $WORK/$name.sock /dev/nbd0" ]] || fail "unexpected hint: $cmd"
bash -c "$cmd"
connected nbd0 || fail "/dev/nbd0 is not connected after: $cmd"
cap=$(uraid status --json $name | jq '.volumes[0].capacity')
[ "$(blockdev --getsize64 /dev/nbd0)" = "$cap" ] || fail "/dev/nbd0 has $(blockdev --getsize64 /dev/nbd0) bytes, the volume $cap"
echo "/dev/nbd0: $cap bytes, logical block $(blockdev --getss /dev/nbd0), connected (nbd-client -c)"
mkfs.ext4 -q /dev/nbd0
mount_fs
fio_run $(job before)

step "1. a member fails while fio writes; the spare takes over and is rebuilt"
uraid add $name --spare "${L[3]}" --quiet >"$WORK/add.out"; head -1 "$WORK/add.out"
fio --ioengine=libaio --iodepth=16 --direct=1 --verify=crc32c --verify_fatal=1 --randrepeat=1 --output-format=json \
  $(job during) >"$WORK/during.json" 2>"$WORK/during.err" &
fio_pid=$!
kill -0 $fio_pid 2>/dev/null || { cat "$WORK/during.json" "$WORK/during.err"; fail "fio ended before the failure: make it longer"; }
uraid fail $name --member 1 --quiet >"$WORK/fail.out"; head -1 "$WORK/fail.out"
kill -0 $fio_pid 2>/dev/null && echo "fio still writing after the failure"
wait $fio_pid || { tail -20 "$WORK/during.json" "$WORK/during.err"; fail "fio during the failure and the rebuild"; }
jq -r '.jobs[0] | "fio during (a member failed, spare rebuilt): write \(.write.bw_bytes / 1e6 | . * 10 | round / 10) MB/s, verify \(.read.bw_bytes / 1e6 | . * 10 | round / 10) MB/s, errors \(.error)"' "$WORK/during.json"
wait_rebuilt
uraid status $name | sed -n '2,7p'
uraid status --json $name | jq -e --arg s "${L[3]}" '.members[1].device == $s and .members[1].state == "active"' >/dev/null ||
  fail "role 1 is not the spare, active"
# Everything written before and during reads back, not from the page cache.
echo 3 >/proc/sys/vm/drop_caches
fio_run $(job before) --verify_only $(job during) --verify_only
step "1. clean disconnect"
umount "$mnt"
nbd-client -d /dev/nbd0
! connected nbd0 || fail "/dev/nbd0 still connected after nbd-client -d"
uraid stop $name
members=("${L[0]}" "${L[3]}" "${L[2]}")

step "2. TLS over TCP with client certificates"
pki=$WORK/pki
mkdir -p "$pki"
(
  cd "$pki"
  # EC P-256 keys: RSA key generation is slow under TCG.
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1)
  openssl req -x509 "${ec[@]}" -nodes -days 2 -subj "/CN=uraid vm test CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -keyout ca-key.pem -out ca-cert.pem 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
  printf 'extendedKeyUsage=clientAuth\n' >client.ext
  for who in server client; do
    openssl req "${ec[@]}" -nodes -subj "/CN=$who" -keyout $who-key.pem -out $who.csr 2>/dev/null
    openssl x509 -req -in $who.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
      -extfile $who.ext -out $who-cert.pem 2>/dev/null
  done
)
port=10819
uraid serve --fork --tcp 127.0.0.1:$port --tls-cert "$pki/server-cert.pem" --tls-key "$pki/server-key.pem" \
  --tls-verify-peer --tls-ca "$pki/ca-cert.pem" "${members[@]}" >"$WORK/serve2.out" 2>"$WORK/serve2.err"
cmd=$(hint "$WORK/serve2.out")
echo "serve printed: $cmd"
sed -n '/^  (CA.pem/p' "$WORK/serve2.out"
# A client without a certificate of the CA is refused in the TLS handshake
# (nbd-client's own message is misleading: its TLS proxy fails the
# handshake in the background, and it reports a bad negotiation magic).
if nbd-client -N $name 127.0.0.1 $port /dev/nbd1 -cacertfile "$pki/ca-cert.pem" >"$WORK/nocert.out" 2>&1; then
  cat "$WORK/nocert.out"; fail "nbd-client without a client certificate got in"
fi
! connected nbd1 || fail "/dev/nbd1 connected without a client certificate"
echo "without a client certificate: refused ($(tail -1 "$WORK/nocert.out"))"
# The printed command, its placeholders filled in.
cmd=${cmd//CA.pem/$pki/ca-cert.pem}
cmd=${cmd//CLIENT-CERT.pem/$pki/client-cert.pem}
cmd=${cmd//CLIENT-KEY.pem/$pki/client-key.pem}
echo "running: $cmd"
bash -c "$cmd"
connected nbd0 || fail "/dev/nbd0 is not connected after: $cmd"
mount_fs
fio_run $(job before) --verify_only $(job during) --verify_only $(job tls)
umount "$mnt"
nbd-client -d /dev/nbd0
! connected nbd0 || fail "/dev/nbd0 still connected after nbd-client -d"
uraid stop $name

step "3. the server restarts under a connected /dev/nbd0"
serve_unix() { uraid serve --fork --socket "$WORK/$name.sock" "${members[@]}" >>"$WORK/serve3.out" 2>>"$WORK/serve3.err"; }
stop_server() {
  local pid
  pid=$(served_pid)
  kill -TERM "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
}
# probe WHEN [SECS]: a direct 4 KiB read of /dev/nbd0 (given SECS, 15 by
# default) and nbd-client -c, printed.
probe() {
  local r c
  if timeout "${2:-15}" dd if=/dev/nbd0 of=/dev/null bs=4k count=1 iflag=direct status=none 2>"$WORK/dd.err"; then r="read ok"
  else r="read fails ($(tr '\n' ' ' <"$WORK/dd.err"))"; fi
  connected nbd0 && c="connected" || c="not connected"
  echo "$1: $r; nbd-client -c: $c"
  [ "$r" = "read ok" ]
}
# connect_again [OPTIONS]: nbd-client on /dev/nbd0 once the kernel has let
# go of its last connection (nbd-client -d returns before the teardown
# ends; a connect meanwhile fails "Failed to setup device").
connect_again() {
  try_connect() { nbd-client -N $name -unix "$WORK/$name.sock" /dev/nbd0 "$@" >"$WORK/connect.out" 2>&1; }
  wait_for 30 "nbd-client connecting /dev/nbd0 again ($(cat "$WORK/connect.out" 2>/dev/null))" try_connect "$@"
  cat "$WORK/connect.out"
}
serve_unix
connect_again
mount_fs
fio_run $(job restart)
sync
stop_server
echo "server stopped (SIGTERM) under the mounted /dev/nbd0"
# Observed with nbd-client 3.24 on 6.12 (netlink, the default): reads fail
# with EIO, the device stays "connected", and it does not come back by
# itself when the server does (README, "The kernel's NBD client").
! probe "while the server is down" || fail "a read of /dev/nbd0 succeeded with the server down"
serve_unix
sleep 2
! probe "after the server is back (2 s)" || fail "/dev/nbd0 came back by itself: update the README"
# The way back: unmount, disconnect, connect again, check, mount.
timeout 20 umount "$mnt" 2>&1 || echo "umount: exit status $?"
timeout 20 nbd-client -d /dev/nbd0 || echo "nbd-client -d: exit status $?"
connect_again
connected nbd0 || fail "reconnecting /dev/nbd0 failed"
fsck.ext4 -n /dev/nbd0 >"$WORK/fsck.out" 2>&1 || { cat "$WORK/fsck.out"; fail "fsck after the restart"; }
echo "fsck.ext4 -n after the restart: clean"
mount_fs
fio_run $(job restart) --verify_only $(job before) --verify_only
umount "$mnt"
nbd-client -d /dev/nbd0

# -persist (only in ioctl mode, -nonetlink, in 3.24): printed, not
# asserted (whether it reconnects later is nbd-client's business); what
# waits is bounded shorter (a read 5 s, fio's read-back 20 s).
step "3b. the same with nbd-client -persist (ioctl mode: -nonetlink)"
connect_again -persist -nonetlink
connected nbd0 || fail "/dev/nbd0 not connected with -persist -nonetlink"
mount_fs
stop_server
probe "-persist, while the server is down" 5 || true
serve_unix
sleep 2
probe "-persist, after the server is back (2 s)" 5 || true
if timeout 20 bash -c "cd $WORK; fio --direct=1 --ioengine=libaio --verify=crc32c --verify_only --output-format=terse $(job restart) >/dev/null"; then
  echo "-persist: the mounted filesystem reads back"
else
  echo "-persist: the mounted filesystem does not read back"
fi
timeout 20 umount "$mnt" 2>&1 || echo "umount: exit status $?"
p=$(nbd-client -c /dev/nbd0 || true)
timeout 20 nbd-client -d /dev/nbd0 || echo "nbd-client -d: exit status $?"
[ -n "$p" ] && kill "$p" 2>/dev/null || true
uraid stop $name
echo "nbd_client: all checks passed"
