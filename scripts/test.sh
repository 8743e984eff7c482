#!/usr/bin/env bash
# Set up (first time), lint, type-check, and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
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
