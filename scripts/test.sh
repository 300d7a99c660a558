#!/usr/bin/env bash
# The test suite, slow tests (real vLLM engine, training) included. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false
# the suite's temp files (checkpoints of the embedded model) peak near 4.6 GB: say so now, not 15 minutes in
tmp="${TMPDIR:-/tmp}"
free_gb=$(df -Pk "$tmp" | awk 'NR == 2 {print int($4 / 1048576)}')
if (( free_gb < 6 )); then
    echo "error: $tmp has $free_gb GB free; the tests need 6 GB there (free some, or set TMPDIR to a roomier disk)" >&2
    exit 1
fi
.venv/bin/python -m pytest -q --durations=25 "$@"
