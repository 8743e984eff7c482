#!/usr/bin/env bash
# Issue 24 on the GPU machine (GPU memory): a planted allocator-retry loop named memory pressure
# (tuimon's retries per step beside the loop's own), the same loop with expandable segments not
# named, a job dying of CUDA OOM (EXITED with the allocator's last gauges), a 5-step memory capture
# of a small transformer read by torch's own _memory_viz, and what recording the history costs.
# ~3.5 minutes on an H100. Prints a table last.
source tests/gpu/prelude.sh
nvidia-smi -L
python3 tests/gpu/check_memory.py "$OUT/memory" ${CASES:-} 2>&1 | tee "$OUT/memory.log"
