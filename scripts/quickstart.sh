#!/usr/bin/env bash
# The main job: the quickstart pipeline on the embedded default model (CPU, offline).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export TOKENIZERS_PARALLELISM=false
.venv/bin/sculptor-rl pipeline --config configs/quickstart.yaml "$@"
