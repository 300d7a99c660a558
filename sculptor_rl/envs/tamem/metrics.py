"""TA-Mem's answer metrics (LoCoMo's rules), its RL reward, and the per-category summary of an eval mode.

- `normalize`: LoCoMo's `normalize_answer` (snap-research/locomo, task_eval/evaluation.py): commas dropped,
  lower case, punctuation removed, the words a/an/the/and removed, whitespace squashed;
- `token_f1`: LoCoMo's `f1_score`: F1 of the normalized words, each stemmed by NLTK's PorterStemmer;
- `answer_f1`: LoCoMo's per-category rule: multi-hop answers are comma lists (the mean over gold items of the
  best F1 of any predicted item), an open-domain gold answer is cut at its first ";", the rest is `token_f1`;
- `bleu1`: BLEU-1 of the normalized words (clipped unigram precision times the brevity penalty
  exp(1 - len(gold)/len(prediction)) when the prediction is shorter), the usual LoCoMo-table BLEU-1 but on
  LoCoMo's normalization instead of a tokenizer that needs downloaded data.
`summarize` groups trajectories by category (read from the task id, which ends with it, so the baselines'
trajectories group too): F1, BLEU-1 (where the trajectory carries it: the tamem env's `info`), tokens per question
(every step's prompt + completion tokens, the paper's token usage), turns (completions) per question, and the
tool-usage distribution (the paper's Fig. 2).
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter, defaultdict
from functools import lru_cache

__all__ = ["CATEGORIES", "PAPER_TABLE_I", "answer_f1", "bleu1", "category_of", "normalize", "reward", "summarize",
           "table", "token_f1"]

CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain")  # LoCoMo's scored ones (5, adversarial, is not)
# TA-Mem paper, Table I (LoCoMo, GPT-4o-mini): per category (F1, BLEU-1) in %, and tokens per question; the paper's
# mean turns per question (TA-Mem, Fig. 2, adversarial questions left out) is 2.71
PAPER_TABLE_I = {
    "Mem0 (paper)": {"multi-hop": (38.72, 27.13), "temporal": (48.93, 40.51), "open-domain": (28.64, 21.58),
                     "single-hop": (47.65, 38.72), "tokens": 1764, "turns": None},
    "TA-Mem (paper)": {"multi-hop": (35.62, 27.84), "temporal": (55.95, 51.47), "open-domain": (26.42, 21.82),
                       "single-hop": (44.87, 38.74), "tokens": 3755, "turns": 2.71},
}
_ORDER = ("multi-hop", "temporal", "open-domain", "single-hop")  # Table I's column order
_PUNCT = set(string.punctuation)


def normalize(text: str) -> str:
    text = "".join(ch for ch in str(text).replace(",", "").lower() if ch not in _PUNCT)
    return " ".join(re.sub(r"\b(a|an|the|and)\b", " ", text).split())


@lru_cache(maxsize=1)
def _stem():
    from nltk.stem import PorterStemmer

    return PorterStemmer().stem


def token_f1(prediction: str, gold: str) -> float:
    pred = [_stem()(w) for w in normalize(prediction).split()]
    ref = [_stem()(w) for w in normalize(gold).split()]
    same = sum((Counter(pred) & Counter(ref)).values())
    if not same:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def answer_f1(prediction: str, gold: str, category: str) -> float:
    gold = str(gold)
    if category == "multi-hop":
        preds = [p.strip() for p in prediction.split(",")]
        golds = [g.strip() for g in gold.split(",")]
        return sum(max(token_f1(p, g) for p in preds) for g in golds) / len(golds)
    if category == "open-domain":
        gold = gold.split(";")[0].strip()
    return token_f1(prediction, gold)


def bleu1(prediction: str, gold: str) -> float:
    pred, ref = normalize(prediction).split(), normalize(gold).split()
    if not pred or not ref:
        return 0.0
    clipped = sum((Counter(pred) & Counter(ref)).values())
    penalty = 1.0 if len(pred) > len(ref) else math.exp(1 - len(ref) / len(pred))
    return penalty * clipped / len(pred)


def category_of(task_id: str) -> str:
    return next((c for c in CATEGORIES if task_id.endswith(c)), "other")


def reward(traj, cfg, max_turns: int) -> float:
    """The RL reward: the answer's F1 (the score, in [0, 1]); `cfg.format_error_penalty` on a format error,
    `cfg.cap_penalty` when a cap stopped the rollout or it took more than `max_turns` turns."""
    if traj.format_errors:
        return cfg.format_error_penalty
    if traj.stop_reason != "answer" or len(traj.steps) > max_turns:
        return cfg.cap_penalty
    return traj.score


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _bleu(t, gold: dict[str, str] | None) -> float | None:
    if gold is not None:
        return bleu1(t.answer or "", gold[t.task_id])
    return t.info.get("bleu1")


def summarize(trajs: list, gold: dict[str, str] | None = None) -> dict:
    """Per category (and "all" over the four): n, f1, bleu1, tokens, turns, tool_calls and the tool shares.
    BLEU-1 against `gold` (task id -> answer) when given, else as the trajectory's env recorded it (if it did)."""
    groups = defaultdict(list)
    for t in trajs:
        groups[category_of(t.task_id)].append(t)
    groups["all"] = [t for c in CATEGORIES for t in groups.get(c, [])]
    out = {}
    for name in [*CATEGORIES, "other", "all"]:
        group = groups.get(name)
        if not group:
            continue
        tools = sum((t.tool_counts for t in group), Counter())
        total = sum(tools.values())
        out[name] = {
            "n": len(group),
            "f1": _mean([t.score for t in group]),
            "bleu1": _mean([b for t in group if (b := _bleu(t, gold)) is not None]),
            "tokens": _mean([sum(len(s.prompt_ids) + len(s.completion_ids) for s in t.steps) for t in group]),
            "turns": _mean([len(t.steps) for t in group]),
            "tool_calls": _mean([t.num_tool_calls for t in group]),
            "tool_share": {k: v / total for k, v in sorted(tools.items())},
        }
    return out


def table(rows: dict[str, dict]) -> str:
    """Table I's layout: per row (a label -> `summarize`'s output) F1 and BLEU-1 (%) per category, tokens and turns
    per question; the paper's TA-Mem and Mem0 rows first."""
    head = "| Method | " + " | ".join(f"{c} F1 | {c} BLEU-1" for c in _ORDER) + " | Tokens | Turns |"
    lines = [head, "|---" * (2 * len(_ORDER) + 3) + "|"]

    def cell(v, scale=100.0, digits=2):
        return "–" if v is None else f"{v * scale:.{digits}f}"

    for label, paper in PAPER_TABLE_I.items():
        lines.append(f"| {label} | " + " | ".join(f"{paper[c][0]:.2f} | {paper[c][1]:.2f}" for c in _ORDER)
                     + f" | {paper['tokens']} | {cell(paper['turns'], 1)} |")
    for label, s in rows.items():
        lines.append(f"| {label} | " + " | ".join(f"{cell(s.get(c, {}).get('f1'))} | {cell(s.get(c, {}).get('bleu1'))}"
                                                  for c in _ORDER)
                     + f" | {cell(s.get('all', {}).get('tokens'), 1, 0)} | {cell(s.get('all', {}).get('turns'), 1)} |")
    return "\n".join(lines)
