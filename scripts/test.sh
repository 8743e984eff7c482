#!/usr/bin/env bash
# Set up (first time), lint, and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
.venv/bin/ruff check tuimon tests benchmarks
exec .venv/bin/python -m pytest -q "$@"
