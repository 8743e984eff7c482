#!/usr/bin/env bash
# Run a command beside CPU burners, as a loaded machine runs the tests: each burner is a Python
# process that spins (`while True: pass`), started before the command and killed by its PID when
# the command ends (or fails, or is interrupted). --runs N runs the command N times in a row and
# stops at the first failure: the suite holds under load when it passes every time.
#
#   scripts/burners.sh [-n BURNERS] [--runs N] -- COMMAND [ARGS...]
#   scripts/burners.sh --runs 3 -- bash scripts/test.sh        # issue 27: 3 full runs, 2 burners, 2 cores
#   scripts/burners.sh -- .venv/bin/python -m pytest tests/test_ranks.py -q -p no:cacheprovider
#
# Defaults: 2 burners, 1 run. Exit status: the command's (the first failing run's).
set -uo pipefail
burners=2 runs=1
while [ $# -gt 0 ]; do
  case "$1" in
    -n) burners=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: $0 [-n BURNERS] [--runs N] -- COMMAND [ARGS...]" >&2; exit 2; }
python=$(command -v python3 || command -v python)
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait "${pids[@]}" 2>/dev/null; pids=(); }
trap stop EXIT
trap 'stop; exit 130' INT TERM
for _ in $(seq "$burners"); do
  "$python" -c "while True: pass" &
  pids+=($!)
done
echo "burners: $burners (PIDs ${pids[*]}) on $(nproc) cores" >&2
status=0
for run in $(seq "$runs"); do
  start=$(date +%s)
  "$@"
  status=$?
  echo "run $run of $runs: exit $status after $(( $(date +%s) - start )) s (beside $burners burners)" >&2
  [ $status -eq 0 ] || break
done
exit $status
