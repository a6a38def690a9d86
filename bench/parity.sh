#!/usr/bin/env bash
# Parity throughput per core (RAID 5 P, RAID 6 P+Q, RAID 6 two-data recovery)
# for each parity kernel this CPU has, against the scalar kernel and an
# independent implementation. Prints a table in GB/s (10^9 bytes/s of data)
# with ratios to the scalar kernel.
#
# Usage: bench/parity.sh [--reps N] [--ms MS] [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --release -q -p uraid-core --example parity_bench -- "$@"
