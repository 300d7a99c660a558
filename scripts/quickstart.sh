#!/usr/bin/env bash
# The main job: the quickstart pipeline on the embedded default model (offline): on the GPU where `nvidia-smi`
# works (configs/quickstart_gpu.yaml), on the CPU elsewhere (configs/quickstart.yaml). A --config of yours wins.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export TOKENIZERS_PARALLELISM=false
config=configs/quickstart.yaml
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then config=configs/quickstart_gpu.yaml; fi
.venv/bin/sculptor-rl pipeline --config "$config" "$@"
