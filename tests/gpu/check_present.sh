#!/usr/bin/env bash
# Issue 21 on the GPU machine: a loop stuck in a sync on a spinning kernel, a hand-written SGD loop,
# a job dying of CUDA OOM (tests/gpu/check_present.py), and what the present-moment machinery costs a
# step: benchmarks/step_overhead.py on this tree and on an older one ($OLD, a copy of the tree before
# it) one after the other. Prints tables last.
source tests/gpu/prelude.sh
nvidia-smi -L
python3 tests/gpu/check_present.py "$OUT/present" --device cuda ${CASES:-sync-stuck manual oom} 2>&1 | tee "$OUT/present.log"
cp "$OUT/present/sync_stuck.jsonl" "$OUT/" 2>/dev/null
if [ -n "${OLD:-}" ] && [ -d "$OLD" ]; then
  (cd "$OLD" && python3 setup.py -q build_ext --inplace >/dev/null 2>&1)
  for round in 1 2; do
    for tree in "$OLD" "$PWD"; do
      echo "== step_overhead, round $round, $( [ "$tree" = "$PWD" ] && echo this tree || echo the older tree )"
      (cd "$tree" && PYTHONPATH=$tree:${PYTHONPATH#*:} python3 benchmarks/step_overhead.py --device cuda --pairs 8 2>&1 | tail -4)
    done
  done 2>&1 | tee "$OUT/step_overhead.log"
fi
