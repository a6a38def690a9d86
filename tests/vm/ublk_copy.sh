#!/usr/bin/env bash
# ublk's two ways of moving a request's data (run by tests/vm/run-all):
#  1. by default (the driver has UBLK_F_USER_COPY) uraid copies it itself,
#     by io_uring's workers off the queue thread: the record says
#     user_copy; fio writes requests of 4K-512K and reads them back
#     verified (crc32c) on the raw device; SEQ1M Q8T1 and RND4K Q32T1 reads
#     measured;
#  2. URAID_UBLK_USER_COPY=0: the kernel copies it on the queue thread, as
#     before: the record says so; the same verified fio job; the same read.
# The two reads are printed side by side (TCG guest: compare only within
# one run; bench/md.py is the benchmark).
. "$(dirname "$0")/lib.sh"
name=vmcopy
modprobe ublk_drv
null_members 3 256
uraid create --level 0 --chunk 64K --name $name "${L[@]}" >/dev/null

verify() {
  local out
  out=$(fio --name=verify --filename="$DEV" --size=48M --rw=randwrite --bsrange=4k-512k --ioengine=libaio --iodepth=16 \
    --direct=1 --verify=crc32c --verify_fatal=1 --verify_state_save=0 --randrepeat=1 --output-format=json) ||
    { echo "$out" | tail; fail "fio verify ($1)"; }
  [ "$(echo "$out" | jq '.jobs[0].error')" = 0 ] || fail "fio reported an error ($1)"
  echo "$1: fio verify of 48M in 4K-512K requests: no error"
}
# SEQ1M Q8T1 read MB/s, then RND4K Q32T1 read IOPS, on one line.
reads() {
  fio --output-format=json --filename="$DEV" --ioengine=libaio --direct=1 --numjobs=1 --size=192M --time_based --runtime=3 \
    --ramp_time=1 --name=seq --rw=read --bs=1M --iodepth=8 --name=rnd --stonewall --rw=randread --bs=4k --iodepth=32 |
    jq -r '"\(.jobs[0].read.bw_bytes / 1e6 | floor) MB/s SEQ1M Q8T1, \(.jobs[1].read.iops | floor) IOPS RND4K Q32T1"'
}

step "1. user copy (the default)"
serve_ublk $name
[ "$(jq -r .user_copy "$URAID_RUN_DIR/$name.ublk")" = true ] || fail "the device was not made with user copy: $(cat "$URAID_RUN_DIR/$name.ublk")"
verify "user copy"
user=$(reads)
stop_serve $name

step "2. the kernel's copy (URAID_UBLK_USER_COPY=0)"
URAID_UBLK_USER_COPY=0 serve_ublk $name
[ "$(jq -r .user_copy "$URAID_RUN_DIR/$name.ublk")" = false ] || fail "URAID_UBLK_USER_COPY=0 made a user-copy device"
verify "kernel copy"
kernel=$(reads)
stop_serve $name
echo "reads of RAID 0 x3 null_blk through /dev/ublkbN: user copy $user; kernel copy $kernel"
echo "ublk_copy: ok"
