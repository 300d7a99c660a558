"""The `toolmem` task family: predict a tool's score on a task, or choose a tool for it (paper §3-4).

Records are built from test-split experiences (`generate`: `experiences.generate_experiences`'s context
strategies; `from_experiences`: given ones, such as saved eval runs' in `eval_runs`, predict and select only); the
model never sees the tools' answers or feedback, only the task as `experience["prompt"]` states it:
- kind `predict`: one (task, tool) experience; answer its 1-5 score. Scored 1 - |predicted - true| / 4 (0
  without a number);
- kind `select`: two tools A and B on one task with unequal scores (the pairs the paper's selection metrics
  count); answer "A" or "B", the one that scored higher. Scored 1 or 0. A is the more capable tool of the pair
  (`experiences.CAPABILITY`, or the order `from_experiences` is given, kept as `meta.capability`), as in the
  paper's pairs (§4, "more capable model is on the left"), so F1< ("worse") measures finding the tasks where the
  stronger tool does worse, F1> ("better") those where it does better;
- kind `choose`: every tool on one task whose tools' scores differ; answer the name of the tool to solve it with.
  `meta.source` is that task's own record. Scored here by what that tool's answer scored exactly (in [0, 1]); the
  `toolmem` environment by default has the agent answer the task itself through the chosen tool's view instead.
A record's user message is the paper's GENERIC prompt (§B.2: the memory is the tool's description); the
`toolmem` environment shows its FEW-SHOT or TOOLMEM memory in its place (`predict_prompt`, `choice_prompt`).

    {"id": "toolmem-predict-test-s0-00003", "task": "toolmem", "messages": [...], "answer": 4 | "A" | "B" | <tool>,
     "meta": {"kind": "predict" | "select" | "choose", "bucket": "<kind>/<family>", "experiences": [<exp>, ...],
              "source": <the task record> (choose), "capability": [<tool>, ...] (from_experiences)}}
"""

from __future__ import annotations

import re
from itertools import combinations

NAME = "toolmem"
KINDS = ("predict", "select", "choose")
TASK_HEAD = "\n\nThe tools answer the following task prompt: "  # ends the tools' sections of a choice prompt

__all__ = ["KINDS", "NAME", "TASK_HEAD", "capability", "capability_order", "choice_prompt", "from_experiences",
           "generate", "parse_choice", "parse_score", "predict_prompt", "render_answer", "score", "tool_description"]


def tool_description(tool: str) -> str:
    """The GENERIC memory of a tool: what it is, nothing of how well it does (the paper's "A large language
    model"); a tool that is no context strategy (a BiGGen Bench model) is a large language model."""
    from .experiences import TOOLS

    return TOOLS[tool].description if tool in TOOLS else "A large language model."


def _examples(examples: list[dict]) -> str:
    return "\n\n".join(f"Task Prompt: {e['prompt']}\nRubric: {e['rubric']}\nModel's Score: {e['score']}"
                       for e in examples)


def predict_prompt(experience: dict, memory: str, examples: list[dict] | None = None) -> str:
    """Paper §B.2 "Predict Score": TOOLMEM/GENERIC (`memory` the induced entries or the tool's description), or
    FEW-SHOT (`examples`: raw training experiences of the tool)."""
    tool, rubric = experience["tool"], experience["rubric"]
    shots = (f"Here are some examples of the model's performance on some tasks:\n\n{_examples(examples)}\n\n"
             f"Based on those samples and your memory of {tool},") if examples else \
        f"Based on your memory of model {tool},"
    return (f"Your current memory (knowledge) of the tool {tool} is:\n{memory}\n{shots} predict the score this model "
            f"will get for answering the following task prompt: \"{experience['prompt']}\".\n\n"
            f"The scoring metric used here is a 5-point Likert scale:\n{rubric}\n\n"
            f"Now return a score between 1 and 5, based on your memory of {tool}'s capabilities and limitations.\n"
            "Return a single number only, nothing else.")


def tool_header(kind: str, index: int, tool: str) -> str:
    """How a choice prompt opens a tool's section: "Tool A is X." (select) or "Tool X." (choose)."""
    return f"Tool {'AB'[index]} is {tool}." if kind == "select" else f"Tool {tool}."


def choice_prompt(kind: str, exps: list[dict], memories: list[str], examples: list[list] | None = None) -> str:
    """Choose a tool (the paper compares predicted scores; here one question names the tools): the better of two
    (select, answer A or B) or one of all (choose, answer its name)."""
    parts = []
    for i, (e, memory) in enumerate(zip(exps, memories)):
        parts.append(f"{tool_header(kind, i, e['tool'])} Your current memory (knowledge) of {e['tool']} is:\n{memory}")
        if examples and examples[i]:
            parts.append(f"Examples of {e['tool']}'s performance on some tasks:\n\n{_examples(examples[i])}")
    ask = ("Which tool will get the higher score, based on your memory of their capabilities and limitations?\n"
           "Return A or B only, nothing else." if kind == "select" else
           "Which tool should answer it: the one that will get the highest score, based on your memory of their "
           "capabilities and limitations? Return the tool's name only, nothing else.")
    return ("\n\n".join(parts) + f"{TASK_HEAD}\"{exps[0]['prompt']}\".\n\n"
            f"The scoring metric used here is a 5-point Likert scale:\n{exps[0]['rubric']}\n\n{ask}")


def generate(num: int, seed: int = 0, kind: str = "predict", split: str = "test") -> list[dict]:
    """`num` records of `kind` from `split` experiences (deterministic by seed)."""
    from ...longcontext.common import check_range
    from .experiences import CAPABILITY, TOOLS, experience, generate_tasks

    check_range("num", num, 0)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    tasks = max(1, -(-num // len(TOOLS)))
    while True:  # select: as many tasks as it takes to find `num` pairs with unequal scores
        sources = {r["id"]: r for r in generate_tasks(tasks, seed, split)}
        items = _items([experience(r, tool) for r in sources.values() for tool in TOOLS.values()], kind, CAPABILITY)
        if len(items) >= num:
            break
        if tasks > 100 * (num + 1):
            raise ValueError(f"no {num} tool pairs with unequal scores in {tasks} tasks")
        tasks *= 2
    return _records(items[:num], kind, f"{split}-s{seed}", sources=sources)


def from_experiences(experiences: list[dict], kind: str, order: list[str], num: int | None = None,
                     tag: str = "given") -> list[dict]:
    """The first `num` (all: None) records of `kind` from given experiences, in their order (ids
    `toolmem-<kind>-<tag>-<index>`); `order` the tools most capable first (A of a pair; kept as `meta.capability`,
    which the env's summary pairs predictions by), e.g. `capability_order` of the training experiences. Predict and
    select only: a choose record's agent answers the task through the chosen context strategy's view
    (`experiences.shown_with`), which a tool that is a model has not."""
    if kind not in ("predict", "select"):
        raise ValueError(f"records from given experiences are of kind predict or select, got {kind!r}")
    return _records(_items(experiences, kind, order)[:num], kind, tag, order=order)


def _records(items: list[list[dict]], kind: str, tag: str, sources: dict | None = None,
             order: list[str] | None = None) -> list[dict]:
    records = []
    for index, exps in enumerate(items):
        if kind == "predict":
            prompt, answer = predict_prompt(exps[0], tool_description(exps[0]["tool"])), exps[0]["score"]
        else:
            prompt = choice_prompt(kind, exps, [tool_description(e["tool"]) for e in exps])
            best = max(exps, key=lambda e: e["raw"])  # the first of the best
            answer = "AB"[exps.index(best)] if kind == "select" else best["tool"]
        meta = {"kind": kind, "bucket": f"{kind}/{exps[0]['family']}", "experiences": exps}
        if order is not None:
            meta["capability"] = list(order)
        if kind == "choose":  # what the agent solves after its choice (envs.toolmem)
            meta["source"] = sources[exps[0]["task_id"]]
        records.append({"id": f"{NAME}-{kind}-{tag}-{index:05d}", "task": NAME,
                        "messages": [{"role": "user", "content": prompt}], "answer": answer, "meta": meta})
    return records


def _items(experiences: list[dict], kind: str, order) -> list[list[dict]]:
    """One experience per predict record; per select record, two tools of one task with unequal scores, the more
    capable first (by `order`); per choose record, all tools of one task unless they all scored the same."""
    if kind == "predict":
        return [[e] for e in experiences]
    groups: dict[str, list[dict]] = {}
    for e in experiences:
        groups.setdefault(e["task_id"], []).append(e)
    items = []
    for group in groups.values():
        if kind == "choose":
            items += [group] if len({e["raw"] for e in group}) > 1 else []
            continue
        for a, b in combinations(sorted(group, key=lambda e: capability(e["tool"], order)), 2):
            if a["score"] != b["score"]:
                items.append([a, b])
    return items


def capability(tool: str, order=None) -> int:
    """The tool's rank, 0 the most capable, in `order` (the tools most capable first; by default
    `experiences.CAPABILITY`): what sorts a pair into A and B."""
    from .experiences import CAPABILITY

    order = CAPABILITY if order is None else order
    if tool not in order:
        raise ValueError(f"tool {tool!r} has no capability rank (ranked: {', '.join(order)})")
    return list(order).index(tool)


def capability_order(experiences: list[dict]) -> list[str]:
    """The experiences' tools, most capable first: by mean exact score (ties by name), the way
    `experiences.CAPABILITY` was measured."""
    raws: dict[str, list[float]] = {}
    for e in experiences:
        raws.setdefault(e["tool"], []).append(e["raw"])
    return sorted(raws, key=lambda t: (-sum(raws[t]) / len(raws[t]), t))


def parse_score(response: str) -> int | None:
    """The predicted 1-5 score: the first number 1-5 standing alone in the response."""
    found = re.search(r"(?<![\d.])([1-5])(?:\.0+)?(?![\d.]*\d)", response)
    return int(found.group(1)) if found else None


def parse_choice(response: str, tools: list[str] | None = None) -> str | None:
    """The chosen tool: the first standalone A or B ("A", "Tool B", "B."), or of `tools`, the name that comes
    first in the response."""
    if tools is None:
        found = re.search(r"\b([AB])\b", response)
        return found.group(1) if found else None
    at = {t: m.start() for t in tools if (m := re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", response))}
    return min(at, key=at.get) if at else None


def score(record: dict, response: str) -> float:
    if record["meta"]["kind"] == "predict":
        predicted = parse_score(response)
        return 0.0 if predicted is None else 1 - abs(predicted - record["answer"]) / 4
    if record["meta"]["kind"] == "select":
        return float(parse_choice(response) == record["answer"])
    exps = record["meta"]["experiences"]
    chosen = parse_choice(response, [e["tool"] for e in exps])
    return next((e["raw"] for e in exps if e["tool"] == chosen), 0.0)


def render_answer(answer) -> str:
    return str(answer)
