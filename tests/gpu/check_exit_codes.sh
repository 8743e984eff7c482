#!/usr/bin/env bash
# A job's exit code under `tuimon run` is its own (the job watched by `attach --plain` meanwhile):
# a CUDA loop that holds 4 GiB more after a while and ends normally (it once died of SIGABRT at its
# end: a daemon thread of the probe inside a torch call at finalization), and one that raises.
# Each case without tuimon first, then ROUNDS times under it. Prints a table last.
source tests/gpu/prelude.sh
ROUNDS=${ROUNDS:-3}
R=tests/workloads/regressing.py
P=tests/workloads/present.py
declare -a rows
one() {  # name, then the job's command
  local name=$1; shift
  "$@" > "$OUT/exit-$name-plain.log" 2>&1; local plain=$?
  local codes=""
  for i in $(seq "$ROUNDS"); do
    python3 -m tuimon run --headless -- "$@" > "$OUT/exit-$name-$i.log" 2>&1 &
    local job=$!; sleep 4
    timeout 60 python3 -m tuimon attach $job --plain > /dev/null 2>&1 &
    wait $job; codes="$codes $?"
  done
  rows+=("| $name | $plain | $codes |")
}
one grow python3 $R --device cuda --seconds 20 --slow-after 10 --slow-by 0 --grow-mib 4096
one raise python3 $P raise --steps 30 --device cuda
echo; echo "| job | exit code without tuimon | under tuimon run (each round) |"; echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}"
grep -l "terminate called\|Aborted" "$OUT"/exit-*.log 2>/dev/null | sed 's/^/aborted: /'
