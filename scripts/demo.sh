#!/usr/bin/env bash
# Set up (first time) and run tuimon on its bundled training workload (GPU if there is one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/tuimon demo "$@"
