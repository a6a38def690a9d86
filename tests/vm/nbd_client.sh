#!/usr/bin/env bash
# The kernel's NBD client (Debian's nbd-client 3.24 and nbd.ko) on a uraid
# export, in the VM (run by tests/vm/run-all; URAID and WORK from it):
#  1. unix socket: the nbd-client command `uraid serve` prints, run as
#     printed; ext4, fio --verify=crc32c, a member failed and a spare rebuilt
#     while fio writes, everything read back, a live scrub, disconnect;
#  2. TLS over TCP with client certificates (nbd-client's GnuTLS, TLS 1.2):
#     the printed command with its placeholders filled in; a client without
#     a certificate is refused; the data of 1 reads back; fio; disconnect;
#  3. the server restarted under a connected /dev/nbd0: what the kernel's
#     client does then, and the way back (README, "The kernel's NBD client").
# Prints the fio bandwidths measured (MB/s = 10^6 bytes/s; TCG guest: compare
# only within one run).
set -euo pipefail
: "${URAID:?set URAID to the uraid binary}" "${WORK:?set WORK to a scratch directory}"
export URAID_RUN_DIR=$WORK/run URAID_CONFIG=$WORK/uraid.conf URAID_STATE_DIR=$WORK/state
mkdir -p -m 0700 "$URAID_RUN_DIR"
name=vmnbd
mnt=$WORK/mnt
mkdir -p "$mnt"
modprobe loop
modprobe nbd
uraid() { "$URAID" "$@"; }
step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# Four members of 96 MiB (loop devices over files on the guest's tmpfs):
# a RAID 5 of three, and a spare.
L=()
for i in 0 1 2 3; do
  truncate -s 96M "$WORK/m$i.img"
  L+=("$(losetup -f --show "$WORK/m$i.img")")
done
uraid create --level 5 --chunk 64K --name $name "${L[@]:0:3}"

# fio NAME FILE SIZE RW BS [fio options...]: one job on FILE with crc32c
# checksums (written then read back, or with --verify_only read back only);
# prints its bandwidth, fails when fio does or a block does not verify.
fio_job() {
  local job=$1 file=$2 size=$3 rw=$4 bs=$5; shift 5
  local out
  out=$(fio --name="$job" --filename="$file" --size="$size" --rw="$rw" --bs="$bs" --ioengine=libaio --iodepth=16 \
    --direct=1 --verify=crc32c --verify_fatal=1 --randrepeat=1 --output-format=json "$@") ||
    { echo "$out" | tail -20; fail "fio $job on $file"; }
  echo "$out" | jq -r --arg j "$job" '.jobs[0] | "fio \($j): write \(.write.bw_bytes / 1e6 | . * 10 | round / 10) MB/s, read (verify) \(.read.bw_bytes / 1e6 | . * 10 | round / 10) MB/s, errors \(.error)"'
  [ "$(echo "$out" | jq '.jobs[0].error')" = 0 ] || fail "fio $job reported an error"
}

# The nbd-client line `uraid serve` printed (stdout in $1).
hint() { sed -n "s/^with the kernel's nbd module: //p" "$1"; }
# Whether /dev/$1 is connected (nbd-client -c: 0 yes, 1 no).
connected() { nbd-client -c "/dev/$1" >/dev/null 2>&1; }
served_pid() { uraid status --json $name | jq -r '.served_by.pid // empty'; }
# Waits until the array's rebuild is done: no progress, volume clean.
wait_rebuilt() {
  local i st
  for i in $(seq 300); do
    st=$(uraid status --json $name)
    if [ "$(echo "$st" | jq -r '.progress == null and .volumes[0].state == "clean"')" = true ]; then return 0; fi
    sleep 1
  done
  echo "$st"; fail "the rebuild did not finish in 300 s"
}

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
mount /dev/nbd0 "$mnt"
fio_job before "$mnt/before" 32M write 128k

step "1. a member fails while fio writes; the spare takes over and is rebuilt"
uraid add $name --spare "${L[3]}" --quiet
fio --name=during --filename="$mnt/during" --size=32M --rw=randwrite --bs=16k --ioengine=libaio --iodepth=16 --direct=1 \
  --verify=crc32c --verify_fatal=1 --randrepeat=1 --output-format=json >"$WORK/during.json" 2>&1 &
fio_pid=$!
sleep 2
kill -0 $fio_pid 2>/dev/null || { cat "$WORK/during.json"; fail "fio ended before the failure: make it longer"; }
uraid fail $name --member 1 --quiet
wait $fio_pid || { tail -20 "$WORK/during.json"; fail "fio during the failure and the rebuild"; }
jq -r '.jobs[0] | "fio during (a member failed, spare rebuilt): write \(.write.bw_bytes / 1e6 | . * 10 | round / 10) MB/s, verify \(.read.bw_bytes / 1e6 | . * 10 | round / 10) MB/s, errors \(.error)"' "$WORK/during.json"
wait_rebuilt
uraid status $name | sed -n '1,8p'
uraid status --json $name | jq -e --arg s "${L[3]}" '.members[1].device == $s and .members[1].state == "active"' >/dev/null ||
  fail "role 1 is not the spare, active"
# Everything written before and during reads back.
sync; echo 3 >/proc/sys/vm/drop_caches
fio_job before "$mnt/before" 32M write 128k --verify_only
fio_job during "$mnt/during" 32M randwrite 16k --verify_only
uraid check --json $name | jq -e '.[0].report.mismatches == 0 and .[0].report.stripes_checked > 0' >/dev/null ||
  fail "the live scrub found mismatches"
echo "live scrub: no mismatch"
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
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=uraid vm test CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -keyout ca-key.pem -out ca-cert.pem 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
  printf 'extendedKeyUsage=clientAuth\n' >client.ext
  for who in server client; do
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$who" -keyout $who-key.pem -out $who.csr 2>/dev/null
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
# A client without a certificate of the CA is refused in the TLS handshake.
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
mount /dev/nbd0 "$mnt"
fio_job before "$mnt/before" 32M write 128k --verify_only
fio_job during "$mnt/during" 32M randwrite 16k --verify_only
fio_job tls "$mnt/tls" 32M write 128k
umount "$mnt"
nbd-client -d /dev/nbd0
! connected nbd0 || fail "/dev/nbd0 still connected after nbd-client -d"
uraid stop $name

step "3. the server restarts under a connected /dev/nbd0"
serve_unix() { uraid serve --fork --socket "$WORK/$name.sock" "${members[@]}" >>"$WORK/serve3.out" 2>>"$WORK/serve3.err"; }
# read_ok: whether a direct 4 KiB read of /dev/nbd0 succeeds now.
read_ok() { dd if=/dev/nbd0 of=/dev/null bs=4k count=1 iflag=direct status=none 2>"$WORK/dd.err"; }
serve_unix
nbd-client -N $name -unix "$WORK/$name.sock" /dev/nbd0
mount /dev/nbd0 "$mnt"
fio_job restart "$mnt/restart" 16M write 128k
sync
pid=$(served_pid)
kill -TERM "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
echo "server stopped (SIGTERM) under the mounted /dev/nbd0"
if read_ok; then r1="read ok"; else r1="read fails: $(cat "$WORK/dd.err")"; fi
connected nbd0 && c1="connected" || c1="not connected"
echo "while the server is down: $r1; nbd-client -c: $c1"
serve_unix
sleep 2
if read_ok; then r2="read ok"; else r2="read fails: $(cat "$WORK/dd.err")"; fi
connected nbd0 && c2="connected" || c2="not connected"
echo "after the server is back (2 s): $r2; nbd-client -c: $c2"
# The way back: unmount, disconnect, connect again, check, mount.
umount "$mnt" 2>&1 || true
nbd-client -d /dev/nbd0 || true
nbd-client -N $name -unix "$WORK/$name.sock" /dev/nbd0
connected nbd0 || fail "reconnecting /dev/nbd0 failed"
fsck.ext4 -n /dev/nbd0 >"$WORK/fsck.out" 2>&1 || { cat "$WORK/fsck.out"; fail "fsck after the restart"; }
mount /dev/nbd0 "$mnt"
fio_job restart "$mnt/restart" 16M write 128k --verify_only
fio_job before "$mnt/before" 32M write 128k --verify_only
umount "$mnt"
nbd-client -d /dev/nbd0

step "3b. the same with nbd-client -persist (ioctl mode: -nonetlink)"
nbd-client -N $name -unix "$WORK/$name.sock" /dev/nbd0 -persist -nonetlink
connected nbd0 || fail "/dev/nbd0 not connected with -persist -nonetlink"
mount /dev/nbd0 "$mnt"
pid=$(served_pid)
kill -TERM "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
if read_ok; then r1="read ok"; else r1="read fails: $(cat "$WORK/dd.err")"; fi
connected nbd0 && c1="connected" || c1="not connected"
echo "-persist, while the server is down: $r1; nbd-client -c: $c1"
serve_unix
sleep 3
if read_ok; then r2="read ok"; else r2="read fails: $(cat "$WORK/dd.err")"; fi
connected nbd0 && c2="connected" || c2="not connected"
echo "-persist, after the server is back (3 s): $r2; nbd-client -c: $c2"
if (fio_job restart "$mnt/restart" 16M write 128k --verify_only); then echo "-persist: the mounted filesystem reads back"; else echo "-persist: the mounted filesystem does not read back"; fi
umount "$mnt" 2>&1 || true
nbd-client -d /dev/nbd0 || true
uraid stop $name
echo "nbd_client: all checks passed"
