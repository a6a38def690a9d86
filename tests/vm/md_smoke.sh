#!/usr/bin/env bash
# bench/md.py does not rot (run by tests/vm/run-all; URAID and WORK from
# it): one level (RAID 0, the quickest: RAID 5's degraded reads and rebuild
# take minutes with a debug build under TCG) on tiny drives with high
# ceilings and 1 s tests. Checks that its table has every row of that
# level, each with a figure for md, uraid through ublk and uraid in
# process, the CPU line, and that --json wrote the rows.
. "$(dirname "$0")/lib.sh"
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=$WORK/md.out
step "bench/md.py --levels 0 (tiny)"
python3 "$repo/bench/md.py" --levels 0 --time 1 --size 32M --mbps 200 --iops 8000 --uraid "$URAID" \
  --json "$WORK/md.json" 2>&1 | tee "$out" || fail "bench/md.py failed"
table=$(sed -n '/^level /,$p' "$out")
num='[0-9]+\.[0-9]+'
for t in "SEQ1M Q8T1 read" "SEQ1M Q8T1 write" "RND4K Q32T1 read" "RND4K Q32T1 write"; do
  grep -Eq "^RAID 0 +$t +$num +$num +$num +$num +$num " <<<"$table" || fail "no row 'RAID 0 $t' with three figures and two ratios"
done
grep -q '^CPU, highest over the tests: ' <<<"$table" || fail "no CPU line"
rows=$(jq '.rows | length' "$WORK/md.json")
[ "$rows" = 4 ] || fail "--json holds $rows rows, not 4"
step "md_smoke: the table and --json have the 4 rows of RAID 0, each with its figures"
