#!/usr/bin/env bash
# Manual CUDA-graph captures under the probe (tuimon/probe/graphs.py): each loop of
# tests/workloads/cuda_graphs.py plainly, then under `tuimon run --headless` (attached once, 12 s in),
# then, where OLD names another tuimon tree (the probe before graphs.py), under that one.
# Prints a table last: exit codes and the loops' own step counts.
# PAIRS=N: instead, issue 43's +-2% measure: the forward loop plainly and under `tuimon run --headless`,
# N pairs alternating ABBA, SECONDS_ each, and the step-count ratio tuimon / plain per pair and in all
# (each run's exit code is printed; a pair with a run that printed no step count is left out).
source tests/gpu/prelude.sh
W=tests/workloads/cuda_graphs.py
SECONDS_=${SECONDS_:-20}
declare -a rows
one() {  # name, then the loop's arguments
  local name=$1; shift
  python3 $W "$@" --seconds $SECONDS_ > "$OUT/graph-$name-plain.log" 2>&1; local plain=$?
  local ps; ps=$(grep -o 'steps [0-9]*' "$OUT/graph-$name-plain.log" | cut -d' ' -f2)
  python3 -m tuimon run --headless -- python3 $W "$@" --seconds $SECONDS_ > "$OUT/graph-$name-tuimon.log" 2>&1 &
  local job=$!; sleep 12
  python3 -m tuimon attach $job --once --json > "$OUT/graph-$name-attach.json" 2> "$OUT/graph-$name-attach.err"
  wait $job; local code=$?
  local ts; ts=$(grep -o 'steps [0-9]*' "$OUT/graph-$name-tuimon.log" | cut -d' ' -f2)
  local verdict; verdict=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d.get('verdict',{}).get('code'), d.get('steps'))" "$OUT/graph-$name-attach.json" 2>/dev/null)
  local old="-"
  if [ -n "${OLD:-}" ]; then
    PYTHONPATH=$OLD:$PYTHONPATH TUIMON_PACKAGE_ROOT=$OLD python3 -m tuimon run --headless -- python3 $W "$@" --seconds $SECONDS_ > "$OUT/graph-$name-old.log" 2>&1
    old="exit $? steps $(grep -o 'steps [0-9]*' "$OUT/graph-$name-old.log" | cut -d' ' -f2) $(grep -o 'cudaError[A-Za-z]*\|capture[a-z ]*invalid[a-z]*' "$OUT/graph-$name-old.log" | head -1)"
  fi
  rows+=("| $name | $plain | $ps | $code | $ts | $verdict | $old |")
}
if [ -n "${PAIRS:-}" ]; then
  tot_p=0; tot_t=0
  for k in $(seq 1 "$PAIRS"); do
    order="plain tuimon"; [ $((k % 2)) = 0 ] && order="tuimon plain"
    for arm in $order; do
      pre=(); [ $arm = tuimon ] && pre=(python3 -m tuimon run --headless --)
      ${pre[@]+"${pre[@]}"} python3 $W forward --capture-at 200 --seconds $SECONDS_ > "$OUT/graph-pair$k-$arm.log" 2>&1
      echo "pair $k $arm exit $? $(grep -o '^steps [0-9][0-9]*' "$OUT/graph-pair$k-$arm.log" | tail -1)"
    done
    p=$(grep -o '^steps [0-9][0-9]*' "$OUT/graph-pair$k-plain.log" | tail -1 | cut -d' ' -f2)
    t=$(grep -o '^steps [0-9][0-9]*' "$OUT/graph-pair$k-tuimon.log" | tail -1 | cut -d' ' -f2)
    [ -n "$p" ] && [ -n "$t" ] && [ "$p" -gt 0 ] && { tot_p=$((tot_p + p)); tot_t=$((tot_t + t)); python3 -c "print('pair $k: tuimon / plain', round($t / $p, 3))"; }
  done
  [ $tot_p -gt 0 ] && python3 -c "print('all pairs: tuimon / plain', round($tot_t / $tot_p, 3), '(budget 0.98 .. 1.02)')"
  exit 0
fi
one forward-global forward --capture-at 200
one forward-recapture forward --capture-at 200 --recapture-every 500
one forward-thread-local forward --capture-at 200 --mode thread_local
one whole-global whole --capture-at 200
echo; echo "| loop | exit plain | steps plain | exit under tuimon | steps under tuimon | attach 12 s in: verdict, steps | old probe |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
