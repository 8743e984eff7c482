#!/usr/bin/env bash
# Issues 21 and 22 on the GPU machine: the present moment (a spinning kernel, manual SGD, CUDA OOM:
# check_present.py), the lines behind the time (check_lines.py: copies, launches outside the model, a
# non-foreach optimizer, a Python hot spot, a wait; a compiled model), and the probe's cost now
# (benchmarks/step_overhead.py, this tree and $OLD, the tree before, one after the other). Tables last.
source tests/gpu/prelude.sh
nvidia-smi -L
python3 tests/gpu/check_present.py "$OUT/present" --device cuda ${PRESENT_CASES:-sync-stuck manual oom} 2>&1 | tee "$OUT/present.log" | tail -6
cp "$OUT/present/sync_stuck.jsonl" "$OUT/" 2>/dev/null
python3 tests/gpu/check_lines.py "$OUT/lines" ${LINE_KINDS:-} 2>&1 | tee "$OUT/lines.log" | tail -14
if [ -n "${OLD:-}" ] && [ -d "$OLD" ]; then
  (cd "$OLD" && python3 setup.py -q build_ext --inplace >/dev/null 2>&1)
  for round in 1 2; do
    for tree in "$OLD" "$PWD"; do
      echo "== step_overhead, round $round, $( [ "$tree" = "$PWD" ] && echo this tree || echo the older tree )"
      (cd "$tree" && PYTHONPATH=$tree:${PYTHONPATH#*:} python3 benchmarks/step_overhead.py --device cuda --pairs 8 2>&1 | tail -3)
    done
  done 2>&1 | tee "$OUT/step_overhead.log"
fi
