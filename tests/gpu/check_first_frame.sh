#!/usr/bin/env bash
# The first frame (issue 42 item 9; budget <= 0.5 s): spawn until a 120x40 pty, rendered by pyte, holds
# at least 15 non-empty rows; `tuimon attach` on the demo job, `tuimon top` and nvitop, alternating, 7
# starts each (benchmarks/first_frame.py). nvitop and pyte are not on the GPU machine: carry them as
# wheels (here: bash .gpu/fetch-wheels.sh nvitop pyte wcwidth; there: source .gpu/activate.sh). BEFORE=DIR
# adds another tree of tuimon (e.g. git archive cf1431d | tar -x -C /tmp/before) beside this one. `top`
# fills fewer rows on a host of one GPU (its screen: the header, the GPU, its processes, the keys): its
# frame is TOP_ROWS non-empty rows (default 6; a start without a frame prints how many it reached).
source tests/gpu/prelude.sh
# Bytecode compiled first, as a pip install leaves it (without it every start compiles tuimon: +0.5 s on
# the dev machine; PYTHONDONTWRITEBYTECODE is set here)
python3 -m compileall -q tuimon ${BEFORE:+"$BEFORE/tuimon"} >/dev/null 2>&1
python3 -m tuimon run --headless -- python3 -m tuimon.workloads.demo_train --seconds 600 > "$OUT/demo.log" 2>&1 &
JOB=$!; sleep ${WARM:-20}
programs=("attach=sh -c 'cd $PWD && exec python3 -m tuimon attach $JOB'" "top:rows=${TOP_ROWS:-6}=sh -c 'cd $PWD && exec python3 -m tuimon top'")
[ -n "${BEFORE:-}" ] && programs+=("attach-before=sh -c 'cd $BEFORE && exec python3 -m tuimon attach $JOB'")
command -v nvitop >/dev/null && programs+=("nvitop=nvitop --interval 1") || echo "(no nvitop here: carry its wheel)"
python3 benchmarks/first_frame.py --starts ${STARTS:-7} "${programs[@]}" | tee "$OUT/first_frame.txt"
kill $JOB; wait $JOB 2>/dev/null
