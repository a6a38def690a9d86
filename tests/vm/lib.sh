# The setup the VM tests share (tests/vm/*.sh, run by tests/vm/run-all in
# the VM; URAID and WORK from it). A script starts with
#
#   . "$(dirname "$0")/lib.sh"
#
# which sets `-euo pipefail`, checks URAID and WORK, exports URAID_RUN_DIR
# ($WORK/run, made 0700), URAID_CONFIG ($WORK/uraid.conf) and
# URAID_STATE_DIR ($WORK/state), sets MNT ($WORK/mnt, made) and defines:
#
#   uraid ARGS...        the uraid binary under test ($URAID).
#   step TEXT            prints "== [S s] TEXT", S: seconds since the start.
#   fail TEXT            prints "FAIL: TEXT" on stderr, then runs the
#                        script's function `on_fail` if it defines one (to
#                        print a log), and exits 1.
#   now                  the time (s since the epoch, with decimals).
#   since T              seconds (one decimal) from T (a `now`) to now.
#   wait_for SECS WHAT CMD...
#                        runs CMD every 0.1 s until it succeeds; after SECS
#                        s fails with "WHAT: not within SECS s". Use it in
#                        place of a sleep that waits for a state.
#   gone PID             true when the process PID has exited (for wait_for).
#   loop_members N SIZE  N loop devices over sparse files of SIZE
#                        (truncate's units: 64M) on the guest's tmpfs; sets
#                        the array L to their paths (/dev/loopN).
#   null_members N MIB [ATTR=VALUE...]
#                        N memory-backed null_blk drives of MIB MiB each,
#                        made through configfs (so, unlike the module's gb=,
#                        smaller than 1 GiB), named /dev/nullb0..N-1 (the
#                        module is loaded with nr_devices=0 when it is not
#                        there); ATTR=VALUE are configfs attributes set
#                        before power-on (discard=1, blocksize=4096, ...;
#                        default max_sectors=1024 hw_queue_depth=64, which
#                        the testbed's notes recommend). Sets L.
#   serve_ublk NAME [OPTIONS...]
#                        `uraid serve NAME --ublk --fork OPTIONS` (within
#                        120 s); sets DEV (/dev/ublkbN, from the serving
#                        line), PID (the serve's, from RUN_DIR/NAME.ublk)
#                        and SERVE_OUT (its stdout; stderr in
#                        $SERVE_OUT.err); fails with both printed when serve
#                        fails or names no block device.
#   stop_serve NAME [--term]
#                        `uraid stop NAME` (fails when it does), or with
#                        --term a SIGTERM to PID (a read-only serve has no
#                        control socket); then waits up to 20 s for PID to
#                        exit.
#   kill9 PID            SIGKILL, and waits until PID is gone.
#
# run-all undoes what a script leaves (processes, mounts, nbd, loop devices,
# the null_blk, nbd and ublk_drv modules); null_members' configfs drives go
# with the module (run-all removes them before unloading it).
set -euo pipefail
: "${URAID:?set URAID to the uraid binary}" "${WORK:?set WORK to a scratch directory}"
export URAID_RUN_DIR=$WORK/run URAID_CONFIG=$WORK/uraid.conf URAID_STATE_DIR=$WORK/state
mkdir -p -m 0700 "$URAID_RUN_DIR"
MNT=$WORK/mnt
mkdir -p "$MNT"

uraid() { "$URAID" "$@"; }
step() { echo "== [${SECONDS} s] $*"; }
fail() {
  echo "FAIL: $*" >&2
  if declare -F on_fail >/dev/null; then on_fail >&2 || true; fi
  exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }

wait_for() {
  local secs=$1 what=$2 t0
  shift 2
  t0=$(now)
  until "$@"; do
    awk -v a="$t0" -v b="$(now)" -v s="$secs" 'BEGIN {exit !(b - a > s)}' && fail "$what: not within $secs s"
    sleep 0.1
  done
}
gone() { ! kill -0 "$1" 2>/dev/null; }

loop_members() {
  local n=$1 size=$2 i
  grep -q "^loop " /proc/modules || modprobe loop 2>/dev/null || true
  L=()
  for ((i = 0; i < n; i++)); do
    truncate -s "$size" "$WORK/m$i.img"
    L+=("$(losetup -f --show "$WORK/m$i.img")")
  done
}

null_members() {
  local n=$1 mib=$2 i d a
  shift 2
  grep -q "^null_blk " /proc/modules || modprobe null_blk nr_devices=0
  [ -d /sys/kernel/config/nullb ] || mount -t configfs none /sys/kernel/config 2>/dev/null || true
  [ -d /sys/kernel/config/nullb ] || fail "null_blk has no configfs directory (/sys/kernel/config/nullb)"
  L=()
  for ((i = 0; i < n; i++)); do
    d=/sys/kernel/config/nullb/nullb$i
    mkdir "$d"
    echo "$mib" >"$d/size"
    echo 1 >"$d/memory_backed"
    for a in max_sectors=1024 hw_queue_depth=64 "$@"; do
      echo "${a#*=}" >"$d/${a%%=*}" || fail "null_blk: cannot set ${a%%=*} to ${a#*=}"
    done
    echo 1 >"$d/power"
    [ -b "/dev/nullb$i" ] || udevadm settle --timeout=10 2>/dev/null || true
    [ -b "/dev/nullb$i" ] || fail "/dev/nullb$i did not appear after powering its configfs drive on"
    L+=("/dev/nullb$i")
  done
}

serve_ublk() {
  local name=$1
  shift
  SERVE_OUT=$WORK/serve.$RANDOM.out
  timeout 120 "$URAID" serve "$name" --ublk --fork "$@" >"$SERVE_OUT" 2>"$SERVE_OUT.err" ||
    { cat "$SERVE_OUT" "$SERVE_OUT.err"; fail "serve $name --ublk $*"; }
  DEV=$(sed -n "s/^serving '$name' .* on \(\/dev\/ublkb[0-9]*\)$/\1/p" "$SERVE_OUT")
  [ -n "$DEV" ] || { cat "$SERVE_OUT" "$SERVE_OUT.err"; fail "no /dev/ublkbN in the serving line"; }
  [ -b "$DEV" ] || fail "$DEV is not a block device"
  PID=$(jq -r .pid "$URAID_RUN_DIR/$name.ublk")
}

stop_serve() {
  if [ "${2:-}" = --term ]; then kill -TERM "$PID"; else uraid stop "$1" >/dev/null || fail "uraid stop $1"; fi
  wait_for 20 "serve $PID stopping" gone "$PID"
}

kill9() {
  kill -KILL "$1"
  while kill -0 "$1" 2>/dev/null; do sleep 0.05; done
}
