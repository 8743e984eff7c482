# Sourced by the GPU check scripts: the repo on PYTHONPATH, $OUT, a private channel folder, and
# the probe's C hot path built where a compiler is.
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TUIMON_SHM_DIR=$(mktemp -d)
if command -v gcc >/dev/null && python3 -c "import setuptools" 2>/dev/null; then
  python3 setup.py -q build_ext --inplace >/dev/null 2>&1
fi
