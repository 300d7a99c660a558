#!/usr/bin/env bash
# GSPO over Algorithm 1's samples, ablated (issue 18, item 2): importance-sampling level (sequence: one ratio per
# sample, TRL's GSPO; rollout: one ratio over all of a rollout's samples, the Sculptor paper's eq. 2) x loss
# weighting (per-sample: each sample one term; per-rollout: each rollout one term, eq. 1). Each variant starts
# from the same SFT checkpoint with the same RL tasks, seed and steps (configs/acm/rl_long_cpu.yaml, at the round
# size and learning rate the README's ablation table was measured with: 2 tasks x 4 rollouts, lr 1e-5; the long
# recipe has since moved to 4 tasks and 2e-5), then all four and the start are evaluated on the same held-out
# tasks: results.md has each one's intervals and the paired comparisons, each variant against the SFT start.
#   scripts/gspo_ablation.sh [STEPS]      (after ./scripts/quickstart.sh or the long recipe has made its SFT)
# Env: SFT (default runs/long/sft/final, else runs/quickstart/sft/final), DATA (the run's data/ dir), OUT
# (default runs/ablation), DRY_RUN=1 (print each variant's plan with `rl validate`; train and evaluate nothing).
# Finished variants are skipped; an interrupted one resumes from its last checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-7}
sft=${SFT:-$([ -d runs/long/sft/final ] && echo runs/long/sft/final || echo runs/quickstart/sft/final)}
data=${DATA:-$(dirname "$(dirname "$sft")")/data}
out=${OUT:-runs/ablation}
for f in "$sft/config.json" "$data/rl.jsonl" "$data/eval.jsonl"; do
  [ -e "$f" ] || { echo "missing $f: run ./scripts/quickstart.sh first, or set SFT / DATA" >&2; exit 2; }
done
export TOKENIZERS_PARALLELISM=false
models=(--model "$sft")
for level in sequence rollout; do
  for weighting in per-sample per-rollout; do
    dir="$out/$level-$weighting"
    [ -d "$dir/final" ] || .venv/bin/sculptor-rl rl ${DRY_RUN:+validate} --config configs/acm/rl_long_cpu.yaml --model "$sft" \
      --tasks "$data/rl.jsonl" --output_dir "$dir" --max_steps "$steps" \
      --steps_per_generation 8 --gradient_accumulation_steps 8 --learning_rate 1e-5 \
      --importance_sampling_level "$level" --loss_weighting "$weighting"
    models+=(--model "$dir/final")
  done
done
[ -z "${DRY_RUN:-}" ] || exit 0
.venv/bin/sculptor-rl eval "${models[@]}" --data "$data/eval.jsonl" --modes acm --max-new-tokens 160 \
  --max-tool-calls 8 --out "$out/eval"
echo "table: $out/eval/results.md"
