#!/usr/bin/env bash
# The test suite, slow tests (real vLLM engine, training) included. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false
.venv/bin/python -m pytest -q --durations=25 "$@"
