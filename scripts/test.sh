#!/usr/bin/env bash
# Set up (first time), lint, type-check, and run the test suite.
#   bash scripts/test.sh [--newest-textual] [PYTEST ARGS...]
# --newest-textual: the suite against the newest Textual release (and the newest of what it needs,
# Rich included), whatever pyproject.toml pins: pip installs them into .newest-textual/, which goes
# first on PYTHONPATH; .venv stays as it is. Prints the versions it tests.
set -euo pipefail
cd "$(dirname "$0")/.."
newest=0
if [ "${1:-}" = --newest-textual ]; then
  newest=1
  shift
fi
bash scripts/setup.sh test
if [ "$newest" = 1 ]; then
  rm -rf .newest-textual
  .venv/bin/python -m pip -q --disable-pip-version-check install --upgrade --target .newest-textual textual 2>&1 \
    | grep -v "is ignored: it is neither" || true
  [ -d .newest-textual/textual ] || { echo "--newest-textual: pip could not install textual" >&2; exit 1; }
  export PYTHONPATH="$PWD/.newest-textual${PYTHONPATH:+:$PYTHONPATH}"
  .venv/bin/python -c "import importlib.metadata as m, textual, rich
print('newest-textual: textual', m.version('textual'), 'rich', m.version('rich'), 'from', textual.__file__)"
fi
# The real-terminal test drives tuimon through tmux; install it where we can (Debian, as root).
# The exporter's test scrapes it with a real Prometheus server (Debian's package).
need=()
command -v tmux >/dev/null || need+=(tmux)
command -v prometheus >/dev/null || need+=(prometheus)
if [ ${#need[@]} -gt 0 ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  apt-get install -y -q "${need[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${need[@]}" >/dev/null 2>&1; } || true
fi
.venv/bin/ruff check tuimon tests benchmarks scripts
.venv/bin/python -m mypy  # tuimon/ as pyproject.toml's [tool.mypy] says (cached in .mypy_cache: ~2 s once warm)
exec .venv/bin/python -m pytest -q "$@"
