#!/usr/bin/env bash
# Make .venv with tuimon installed (editable). `setup.sh test` adds what the tests need.
# The venv sees the system's packages, so a GPU machine's own CUDA build of torch is used as is.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv --system-site-packages .venv
pip() { .venv/bin/python -m pip -q --disable-pip-version-check "$@" 2>&1 | grep -v "is ignored: it is neither" || true; }
pip install -e .
if [ "${1:-}" = test ]; then
  pip install -r requirements-dev.txt
elif ! .venv/bin/python -c "import torch" 2>/dev/null; then
  pip install "$(grep -E '^torch==' requirements-dev.txt)"   # for the demo workload
fi
# An editable install compiles nothing: bytecode now, or (with PYTHONDONTWRITEBYTECODE set) every start of
# the monitor compiles tuimon again (+0.5 s to the first frame on the dev machine; benchmarks/first_frame.py)
.venv/bin/python -m compileall -q tuimon >/dev/null || true
.venv/bin/python -c "import tuimon, torch" || { echo "setup failed: see the pip output above" >&2; exit 1; }
