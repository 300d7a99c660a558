"""The ToolMem environment (Xiao et al., 2025): predict a tool's score on a task, pick the better of two tools, or
choose the tool to solve a task with and solve it, with a memory of the tools in context.

A `toolmem` record (`sculptor_rl.envs.toolmem.family`) asks for a 1-5 score (kind predict), for "A"/"B" (kind
select, A the more capable tool of the pair) or for a tool's name (kind choose). The mode decides what the model
knows of the tools (paper §3.1):
- `generic`: the tool's description only (the record's own prompt);
- `few-shot`: plus the top-`top_k` (12) training experiences of the tool, by BM25 against the task (raw
  examples: task prompt, rubric, score);
- `toolmem`: the induced memory, the top-`top_k` (12) entries of each proficiency category by BM25 against the task.
`memory` is a directory written by `build_memory`: `toolmem.jsonl` (the memory) and `experiences.jsonl` (the
training experiences it was induced from, which few-shot retrieves). Every rollout reads the same file version.
`counterfactual_memories` (a seed; toolmem mode; SFT data, not the paper's) shows each record counterfactual
memories: each tool's name over another tool's memory (a permutation of the tools), mirrored with probability 1/2
(`toolmem.memory.mirror`: scores s as 6 - s, proficient <-> weak). With the one fixed memory, a predictor trained on
the teacher's answers learns each tool's or each family's usual score and never reads the lines (measured: SFT
answered the same with the memory as without it, by tool, and after permuting the names only, by family); here
neither the name nor the task says the answer, only the lines shown.

Kind choose, by `solver` (who answers the task once the tool is chosen; paper §2.3, memory-augmented solving):
- `agent` (default): the next user turn is the task itself, its long context as the chosen tool shows it (the view
  the tool's experiences were made with, `experiences.shown_with`), and the agent's answer to it is scored by the
  task family's own scorer. A reply naming no tool ends the rollout with score 0;
- `tool`: the chosen tool's fixed reader answers; the score is the one its experience recorded (one turn).

Reward, from the exact scores: predict -|predicted - true| (-4 without a number), select 1 for the better tool,
else 0, choose the score above. `summarize` gives the paper's metrics: MAE, RMSE, Pearson (predict),
F1</F1>/accuracy of the pairs (select; and for predict, the paper's §4 way: two predicted scores of one task
compared, the more capable tool as A; and the tool a task's predictions rank best, `choice_from_predictions`);
for choose, the mean exact score of the chosen tools' own answers beside the best and each fixed tool, and with the
agent solver the mean score of the agent's answers (`solved`).

`build_memory` runs the induction (`toolmem.memory.induce`): the paper's on an engine (the policy's or an
OpenAI-compatible endpoint), or the deterministic rules, the offline substitute that needs no model; `teach` is a
scripted teacher that predicts from the memory it is shown (SFT data).
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path

import numpy as np

from ...engines.base import SamplingConfig
from ...jsonl import write_atomic, write_jsonl
from ...memory import MemoryStore, bm25_scores, load_snapshot, top_k
from ...memory.store import thaw
from ...stats import bootstrap_mean
from ...longcontext import score as score_task
from . import family
from .experiences import TOOLS, shown_with
from .memory import (CATEGORIES, INDUCTIONS, PHRASES, TASK_LENGTH, TEST_K, ToolMem, check_entry, in_band, induce,
                     mirror, model_induction, render_memory, rules_induction)
from .metrics import WORST_ERROR, choice_metrics, choices_from_predictions, prediction_metrics, selection_metrics
from ..base import Env

__all__ = ["MODES", "SOLVERS", "TOOLMEM_SYSTEM_PROMPT", "ToolMemEnv", "ToolMemParams", "build_memory"]

MODES = ("generic", "few-shot", "toolmem")
SOLVERS = ("agent", "tool")
TOOLMEM_SYSTEM_PROMPT = "You know the tools you work with: how well each one does on which tasks."
VIEW_HEAD = "The task, its context as shown by "  # opens the turn after a choice (the teacher finds it by this)
MEMORY_FILE, EXPERIENCES_FILE = "toolmem.jsonl", "experiences.jsonl"
RETRY_TEMPERATURE = 0.7  # a malformed induction answer is asked again sampled


@dataclass
class ToolMemParams:
    mode: str = "toolmem"  # generic | few-shot | toolmem
    memory: str = ""  # directory written by build_memory (few-shot and toolmem need it)
    top_k: int = TEST_K  # entries per category (toolmem) or experiences (few-shot) shown
    solver: str = "agent"  # kind choose: agent | tool, who answers the task through the chosen tool
    counterfactual_memories: int | None = None  # a seed: permuted and mirrored memories (toolmem mode, SFT data)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown toolmem mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.solver not in SOLVERS:
            raise ValueError(f"unknown toolmem solver {self.solver!r}; choose one of {', '.join(SOLVERS)}")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1, got {self.top_k!r}")
        if not isinstance(self.memory, str):
            raise ValueError(f"memory must be a directory path, got {self.memory!r}")
        seed = self.counterfactual_memories
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or self.mode != "toolmem"):
            raise ValueError(f"counterfactual_memories is an integer seed, in the toolmem mode; got {seed!r} in "
                             f"mode {self.mode!r}")


def load_memory(directory: str) -> tuple[ToolMem, tuple]:
    """The memory and the training experiences in `directory` (each file read once per version: every rollout
    reads them)."""
    path = Path(directory)
    entries = load_snapshot(path / MEMORY_FILE, check_entry).entries
    return ToolMem(MemoryStore(thaw(entries), check=check_entry)), load_snapshot(path / EXPERIENCES_FILE).entries


class ToolMemEnv(Env):
    name = "toolmem"
    Params = ToolMemParams
    system_prompt = TOOLMEM_SYSTEM_PROMPT
    task_families = (family.NAME,)

    @classmethod
    def eval_modes(cls) -> dict[str, tuple[str, dict]]:
        return {mode: (cls.name, {"mode": mode}) for mode in MODES}

    def __init__(self, task: dict, params: ToolMemParams | None = None, **kwargs):
        if task.get("task") != family.NAME:
            raise ValueError(f"the toolmem env runs {family.NAME!r} tasks, got {task.get('task')!r}")
        super().__init__(task, params, **kwargs)
        self.kind, self.exps = task["meta"]["kind"], task["meta"]["experiences"]
        self.text: str | None = None  # the last answer
        self.choice: str | None = None  # kind choose: the tool the first answer named
        if self.kind == "choose" and self.params.solver == "agent" and "source" not in task["meta"]:
            raise ValueError(f"toolmem record {task['id']!r} has no meta.source (the task the agent solves); "
                             "generate it again, or use solver=tool")
        if self.params.mode != "generic":  # checked here, not in the params: a config may name a memory built later
            if not all((Path(self.params.memory) / f).is_file() for f in (MEMORY_FILE, EXPERIENCES_FILE)):
                raise ValueError(f"the {self.params.mode} mode needs `memory`, a directory written by build_memory "
                                 f"(with {MEMORY_FILE} and {EXPERIENCES_FILE}); got {self.params.memory!r}")
            self.messages[-1] = {"role": "user", "content": self._prompt(*load_memory(self.params.memory))}

    def _shown(self, memory: ToolMem, tool: str, query: str) -> list[dict]:
        """The entries shown for `tool`: its own top-k per category, or with `counterfactual_memories` those of the
        tool a permutation drawn from the seed and the record's id gives it, mirrored or not (same on every run)."""
        seed = self.params.counterfactual_memories
        if seed is None:
            return memory.recall(tool, query, self.params.top_k)
        rng, tools = random.Random(f"{seed}:{self.task['id']}"), sorted(memory.tools())
        owners = rng.sample(tools, len(tools))
        mirrored = {t: rng.random() < 0.5 for t in tools}
        owner = dict(zip(tools, owners)).get(tool, tool)
        entries = memory.recall(owner, query, self.params.top_k)
        return [mirror(e) for e in entries] if mirrored.get(tool) else entries

    def _prompt(self, memory: ToolMem, train: tuple[dict, ...]) -> str:
        k, query = self.params.top_k, self.exps[0]["prompt"]
        if self.params.mode == "toolmem":
            memories = [render_memory(self._shown(memory, e["tool"], query)) for e in self.exps]
            shots = None
        else:  # few-shot: the GENERIC memory and the tool's most similar training experiences
            memories = [family.tool_description(e["tool"]) for e in self.exps]
            shots = []
            for e in self.exps:
                pool = [x for x in train if x["tool"] == e["tool"]]
                shots.append([pool[i] for i in top_k(bm25_scores(query, [x["prompt"] for x in pool]), k)])
        if self.kind == "predict":
            return family.predict_prompt(self.exps[0], memories[0], shots[0] if shots else None)
        return family.choice_prompt(self.kind, self.exps, memories, shots)

    def on_answer(self, text: str) -> bool:
        """Kind choose: the first answer names the tool; with the agent solver the task follows, as that tool shows
        it, and the agent's next answer is the one scored. Every other answer ends the rollout."""
        if self.kind == "choose" and self.choice is None:
            self.choice = family.parse_choice(text, [e["tool"] for e in self.exps])
            if self.choice is not None and self.params.solver == "agent":
                tool = TOOLS[self.choice]
                self.append({"role": "user", "content": f"{VIEW_HEAD}{tool.name} ({tool.shown()}); answer its "
                             f"question.\n\n{shown_with(self.task['meta']['source'], tool)}"})
                return True
        self.text = text
        return False

    def score(self, answer: str | None) -> float:
        """Kind choose with the agent solver: the task family's scorer on the agent's answer to the task (0 when the
        choice named no tool, or no answer came); else the toolmem family's scorer."""
        if self.kind == "choose" and self.params.solver == "agent":
            answered = self.choice is not None and answer is not None
            return score_task(self.task["meta"]["source"], answer) if answered else 0.0
        return super().score(answer)

    def reward(self, traj) -> float:
        if self.kind == "predict":
            predicted = family.parse_score(self.text or "")
            return -float(WORST_ERROR if predicted is None else abs(predicted - self.task["answer"]))
        return traj.score

    def info(self) -> dict:
        text = self.text or ""
        predicted = (family.parse_score(text) if self.kind == "predict" else
                     family.parse_choice(text) if self.kind == "select" else self.choice)
        return {"kind": self.kind, "predicted": predicted, "raw": [e["raw"] for e in self.exps],
                "tools": [e["tool"] for e in self.exps], "true": [e["score"] for e in self.exps],
                "task_id": self.exps[0]["task_id"], "family": self.exps[0]["family"],
                **({"solver": self.params.solver} if self.kind == "choose" else {}),
                **({"capability": self.task["meta"]["capability"]} if "capability" in self.task["meta"] else {})}

    @classmethod
    def summarize(cls, trajs: list, mode: str) -> dict:
        """Predict: MAE/RMSE/Pearson, and selection from two predicted scores of one task (paper §4, the more
        capable tool as A: by `experiences.CAPABILITY`, or the record's own `meta.capability`) and the choice of
        the tool a task's predictions rank best (a tie: an even pick among the tied, scored as their mean);
        select: F1</F1>/accuracy of the direct choices; choose: the chosen tools' mean score beside the oracle's,
        and the agent's own (`solved`) when it answered through the views it chose."""
        out = {}
        predicts = [t.info for t in trajs if t.info.get("kind") == "predict"]
        if predicts:
            out["prediction"] = prediction_metrics([i["predicted"] for i in predicts], [i["true"][0] for i in predicts])
            by_task, order = defaultdict(dict), {}
            for i in predicts:
                by_task[i["task_id"]][i["tools"][0]] = (i["predicted"], i["true"][0])
                order[i["task_id"]] = i.get("capability")
            pairs = [(ts[a], ts[b]) for task_id, ts in by_task.items()
                     for a, b in combinations(sorted(ts, key=lambda t: family.capability(t, order[task_id])), 2)]
            out["selection_from_predictions"] = selection_metrics(
                [a[0] for a, _ in pairs], [b[0] for _, b in pairs], [a[1] for a, _ in pairs], [b[1] for _, b in pairs])
            choices = choices_from_predictions(predicts)
            if choices:
                out["choice_from_predictions"] = choice_metrics(choices)
        selects = [t.info for t in trajs if t.info.get("kind") == "select"]
        if selects:
            choice = [i["predicted"] for i in selects]
            out["selection"] = selection_metrics([None if c is None else float(c == "A") for c in choice],
                                                 [None if c is None else float(c == "B") for c in choice],
                                                 [i["true"][0] for i in selects], [i["true"][1] for i in selects])
        chooses = [t for t in trajs if t.info.get("kind") == "choose"]
        if chooses:
            out["choice"] = choice_metrics([t.info for t in chooses])
            solved = [t.score for t in chooses if t.info["solver"] == "agent"]
            if solved:
                out["choice"].update(solved=float(np.mean(solved)), solved_ci=list(bootstrap_mean(solved)))
        return out


# ---- the induction on an engine ----

def llm_generate(llm, max_new_tokens: int = 256, retry_temperature: float = RETRY_TEMPERATURE):
    """`generate(prompts, attempt) -> texts` on `llm` (`envs.llm`): each prompt one user turn; the first attempt
    greedy, a retry at `retry_temperature` (seeded by the attempt), so that it does not repeat itself."""
    def generate(prompts: list[str], attempt: int) -> list[str]:
        sampling = SamplingConfig(temperature=retry_temperature, seed=attempt) if attempt else None
        return llm.ask([[{"role": "user", "content": p}] for p in prompts], max_new_tokens=max_new_tokens,
                       sampling=sampling, tag="induce")
    return generate


def build_memory(experiences: list[dict], out: str | Path, llm=None, retries: int = 2, max_new_tokens: int = 256,
                 induction: str = "model") -> dict:
    """Induce a ToolMem from training `experiences` and write the `memory` directory the env reads: the memory, the
    experiences (for few-shot) and `induction.json` (how it was induced, updates, retries, the failed answers).
    `induction` "model" (the paper's) asks `llm` (`envs.llm`); "rules" (`toolmem.memory`) needs none."""
    if induction not in INDUCTIONS:
        raise ValueError(f"unknown induction {induction!r}; choose one of {', '.join(INDUCTIONS)}")
    if induction == "model" and llm is None:
        raise ValueError("the model induction needs an LLM (or induction='rules', which needs none)")
    memory = ToolMem()
    step = rules_induction if induction == "rules" else \
        model_induction(llm_generate(llm, max_new_tokens), retries=retries)
    report = induce(memory, experiences, step)
    out = Path(out)
    memory.save(out / MEMORY_FILE)
    write_jsonl(experiences, out / EXPERIENCES_FILE)
    summary = {"induction": induction, **asdict(report), "entries": len(memory.store),
               "per_tool": {t: {c: len(memory.entries(t, c)) for c in CATEGORIES} for t in memory.tools()}}
    write_atomic(out / "induction.json", json.dumps(summary, indent=1))
    return summary
