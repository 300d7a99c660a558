"""NESTFUL nested call sequences (Basu et al., 2024; github.com/IBM/NESTFUL): the output of one call feeds the
next (a task family, `nestful`).

A sequence is a list of calls `{"name", "arguments", "label": "$var_k"}`; an argument `"$var_k.result$"` stands
for the result of the call labelled `$var_k`, `"$var_k.field$"` for one field of it (NESTFUL's own files write
labels `var1` and references `$var1.field$`; both are read). The generated tasks are MathQA-like word problems over
four executable functions (add, subtract, multiply, divide), so a sequence can be executed and its final result
compared with the gold answer (NESTFUL's win rate). NESTFUL's own records (imported, `importers.import_nestful`)
carry their own tools (`meta.tools`, from the record or the spec file shipped beside the data); a record whose
functions are not these four is scored by full-sequence match, as NESTFUL scores sequences it cannot run (its
GitHub release's "executable" functions call RapidAPI, which needs keys and the network, so none runs here).

A record:

    {"id": "nestful-train-s0-00001", "task": "nestful", "messages": [{"role": "user", "content": question}],
     "answer": [{"name": "multiply", "arguments": {"arg_0": 4, "arg_1": 12}, "label": "$var_1"}, ...],
     "meta": {"gold_answer": 41.0, "template": "...", "split": "train", "tools": [<schemas>]}}

In the memtoolagent env the agent calls the record's tools one at a time; the env labels its k-th successful call
`$var_k` and checks that references name earlier calls; an executable function runs on the resolved values, any
other call is recorded (its result is what the sequence match compares: its place, name and arguments).
Score: the last call's result equals the gold answer (executable), else the calls equal the gold sequence.
"""

from __future__ import annotations

import json
import random
import re

from .metrics import canonical
from .tasks import split_of

NAME = "nestful"
__all__ = ["FUNCTIONS", "NAME", "NestfulError", "call", "calls_in", "executable", "execute", "generate", "label_key",
           "render_answer", "resolve", "same_sequence", "score", "step", "tool_schemas", "won"]

FUNCTIONS = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
             "divide": lambda a, b: a / b}
_REF = re.compile(r"^\$(var_?\d+)\.result\$$")
_ANY_REF = re.compile(r"\$(var_?\d+)(?:\.[^$]*)?\$")  # "$var1$", "$var1.skyId$", "$var_2.result$"


class NestfulError(Exception):
    pass


def tool_schemas(record: dict | None = None) -> list[dict]:
    """The record's own tools (`meta.tools`), else the four executable functions."""
    own = ((record or {}).get("meta") or {}).get("tools")
    if own:
        return own
    return [{"type": "function", "function": {
        "name": name, "description": f"{name.capitalize()} two numbers: arg_0 {sym} arg_1.",
        "parameters": {"type": "object", "properties": {
            "arg_0": {"type": "number", "description": 'A number, or "$var_k.result$" (the result of call k).'},
            "arg_1": {"type": "number", "description": 'A number, or "$var_k.result$".'}},
            "required": ["arg_0", "arg_1"]}}}
        for name, sym in (("add", "+"), ("subtract", "-"), ("multiply", "*"), ("divide", "/"))]


def label_key(label: str) -> str:
    """`$var_1`, `var1` and `$var1` are one label: `var1`."""
    return label.strip("$").replace("_", "")


def resolve(value, results: dict):
    """An argument with a `$var_k.result$` reference replaced by that call's result."""
    if isinstance(value, str):
        m = _REF.match(value.strip())
        if m:
            key = label_key(m.group(1))
            if key not in results:
                raise NestfulError(f"{value} refers to no earlier call (known: "
                                   f"{', '.join('$var_' + k[3:] for k in results) or 'none yet'}).")
            return results[key]
        try:
            return float(value)
        except ValueError:
            raise NestfulError(f'{value!r} is neither a number nor a reference like "$var_1.result$".') from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NestfulError(f"arguments are numbers or references, got {json.dumps(value)[:40]}.")
    return value


def call(name: str, arguments, results: dict) -> float:
    """One function call with references resolved against `results` (label -> result)."""
    if name not in FUNCTIONS:
        raise NestfulError(f"unknown function {name!r}; the functions are {', '.join(FUNCTIONS)}.")
    if not isinstance(arguments, dict) or sorted(arguments) != ["arg_0", "arg_1"]:
        raise NestfulError(f"{name} takes exactly arg_0 and arg_1.")
    a, b = resolve(arguments["arg_0"], results), resolve(arguments["arg_1"], results)
    if name == "divide" and b == 0:
        raise NestfulError("division by zero.")
    return round(FUNCTIONS[name](a, b), 6)


def _references(value) -> list[str]:
    """The labels an argument value refers to (in strings, lists and objects)."""
    if isinstance(value, str):
        return [label_key(m.group(1)) for m in _ANY_REF.finditer(value)]
    if isinstance(value, dict):
        return [k for v in value.values() for k in _references(v)]
    if isinstance(value, list):
        return [k for v in value for k in _references(v)]
    return []


def step(record: dict, name: str, arguments, results: dict, label: str) -> tuple[str, float | None]:
    """One call of an episode on `record`: (the tool's reply, its value). An executable record's function runs on
    the resolved values; any other call is checked (one of the record's tools, a JSON object of arguments, every
    reference to an earlier call) and recorded: its reply names the label and the output fields to refer to."""
    if executable(record) or not (record.get("meta") or {}).get("tools"):
        value = call(name, arguments, results)
        return f"{label} = {value:g}", value
    tools = {t["function"]["name"]: t["function"] for t in tool_schemas(record)}
    if name not in tools:
        raise NestfulError(f"unknown function {name!r}; this task's functions are {', '.join(tools)}.")
    if not isinstance(arguments, dict):
        raise NestfulError(f"{name}'s arguments must be a JSON object.")
    unknown = [k for k in _references(arguments) if k not in results]
    if unknown:
        raise NestfulError(f"${unknown[0]} refers to no earlier call (known: "
                           f"{', '.join('$var_' + k[3:] for k in results) or 'none yet'}).")
    fields = list(tools[name].get("output_parameters") or {})
    where = f'; pass a field on as "{label}.{fields[0]}$" ({", ".join(fields)})' if fields else ""
    return f"{label} holds the output of {name} (not run here: the sequence is what is scored){where}.", None


def execute(calls: list[dict]) -> float | None:
    """The result of the last call of a labelled sequence; None when a call fails."""
    results: dict = {}
    value = None
    for i, c in enumerate(calls, 1):
        try:
            value = call(c["name"], c["arguments"], results)
        except (NestfulError, KeyError, TypeError):
            return None
        results[label_key(c.get("label") or f"var{i}")] = value
    return value


def _c(name, a, b, k):
    return {"name": name, "arguments": {"arg_0": a, "arg_1": b}, "label": f"$var_{k}"}


def _ref(k):
    return f"$var_{k}.result$"


def _shop(rng):
    n1, p1, n2, p2 = rng.randint(2, 9), rng.randint(3, 20), rng.randint(2, 9), rng.randint(3, 20)
    q = f"A shop sells {n1} pens at ${p1} each and {n2} notebooks at ${p2} each. How much does it take in?"
    return q, [_c("multiply", n1, p1, 1), _c("multiply", n2, p2, 2), _c("add", _ref(1), _ref(2), 3)]


def _share(rng):
    total, extra, parts = rng.randint(10, 90) * 3, rng.randint(1, 9) * 3, 3
    q = (f"Rs. {total + extra} is divided so that one person gets Rs. {extra} more and the rest is split equally "
         f"among {parts} people. What is one equal share?")
    return q, [_c("subtract", total + extra, extra, 1), _c("divide", _ref(1), parts, 2)]


def _speed(rng):
    d1, d2, t = rng.randint(20, 90), rng.randint(20, 90), rng.randint(2, 5)
    q = f"A car drives {d1} km and then {d2} km in {t} hours in all. What is its average speed in km/h?"
    return q, [_c("add", d1, d2, 1), _c("divide", _ref(1), t, 2)]


def _discount(rng):
    price, pct, n = rng.randint(20, 200), rng.choice([10, 20, 25, 50]), rng.randint(2, 6)
    q = f"An item costs ${price} and is sold at {pct}% off. What do {n} of them cost?"
    return q, [_c("multiply", price, pct, 1), _c("divide", _ref(1), 100, 2), _c("subtract", price, _ref(2), 3),
               _c("multiply", _ref(3), n, 4)]


TEMPLATES = [_shop, _share, _speed, _discount]


def generate(num: int, seed: int = 0, split: str = "train") -> list[dict]:
    """`num` problems, templates in turn; `split` as the workbench family's (a hash of the question)."""
    out = []
    for i in range(num):
        template, rng = TEMPLATES[i % len(TEMPLATES)], random.Random(f"nestful-{seed}-{split}-{i}")
        for _ in range(1000):
            query, calls = template(rng)
            if split_of(query) == split:
                break
        out.append({"id": f"nestful-{split}-s{seed}-{i:05d}", "task": NAME,
                    "messages": [{"role": "user", "content": query}], "answer": calls,
                    "meta": {"gold_answer": execute(calls), "template": template.__name__.strip("_"),
                             "split": split, "domain": "nestful"}})
    return out


def calls_in(text: str) -> list[dict]:
    """The calls a one-shot answer gives: a JSON list (NESTFUL's output format) or Hermes tool calls. A final
    `var_result` pseudo-call (NESTFUL's way of naming the answer's parts) is not a call and is dropped, as the
    importer drops it from the gold sequence."""
    from ...toolcalls import HermesParser

    start, end = text.find("["), text.rfind("]")
    if start >= 0 and end > start:
        try:
            calls = json.loads(text[start:end + 1])
            if isinstance(calls, list) and all(isinstance(c, dict) and "name" in c for c in calls):
                return [{"name": c["name"], "arguments": c.get("arguments", {}), "label": c.get("label")}
                        for c in calls if c["name"] != "var_result"]
        except json.JSONDecodeError:
            pass
    return [{"name": c.name, "arguments": c.arguments} for c in HermesParser().parse(text).calls if c.name]


def won(record: dict, calls: list[dict]) -> bool:
    """NESTFUL's win: the sequence executes to the gold answer."""
    value, gold = execute(calls), record["meta"].get("gold_answer")
    return value is not None and gold is not None and abs(value - float(gold)) <= 1e-6 * max(1.0, abs(float(gold)))


def executable(record: dict) -> bool:
    return record["meta"].get("gold_answer") is not None and all(c["name"] in FUNCTIONS for c in record["answer"])


def same_sequence(pred: list[dict], gold: list[dict]) -> bool:
    """NESTFUL's full-sequence match: the same calls in order, names and arguments (references `$var_1.x$` =
    `$var1.x$`). Labels are not compared: the k-th call is var k, so the order carries them (the release itself
    labels two calls of non-executable-sgd's record 18 `var2`)."""
    def plain(calls):
        return [(c["name"], canonical(c.get("arguments", {}))) for c in calls]
    return plain(pred) == plain(gold)


def score(record: dict, response: str | list[dict]) -> float:
    """NESTFUL's win (the calls execute to the gold answer) where the record's functions are executable here;
    else its full-sequence match."""
    calls = calls_in(response) if isinstance(response, str) else response
    return float(won(record, calls) if executable(record) else same_sequence(calls, record["answer"]))


def render_answer(answer: list[dict]) -> str:
    return json.dumps(answer)
