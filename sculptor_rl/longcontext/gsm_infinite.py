"""GSM-Infinite style (Zhou et al. 2025, "GSM-Infinite: How do your LLMs behave over infinitely increasing context
length and reasoning complexity?", github.com/Infini-AI-Lab/gsm_infinite): a graph of quantities, each sentence
defining one ("The number of adult owl in Pine Ridge equals 3 plus the number of adult crow in Oak Marsh."), the
few the question needs shuffled among many that it does not (the benchmark's noise is the same kind of sentence,
so it cannot be told apart by its look); the question asks for one quantity ("How many adult owl does Pine Ridge
have?"). Parameters: `ops`, the statements the solution needs (its `Define` steps, the release's `op`), and
`context_tokens`, the length the noise fills. Exact integer answer, scored as `common.score_value` (`Answer: N`).

Every quantity a statement uses is defined in the text, none twice; values stay in [0, MAX_VALUE]. A statement's
definition (after "equals") is at most 94 characters (the name lists' longest names), so the window of a search
hit for "<quantity> equals" (100 characters each side in the teachers' searches) shows it whole.

The release (the medium and hard subsets, `InfiniAILab/gsm_infinite_{medium,hard}_{0,8k,...}` on the Hugging Face
hub, one split per op; the repository's `data/realistic` JSONL) has the columns `problem` (the statements),
`question`, `solution` ("Define ... as B; so B = 2. ... Answer: 2."), `op`, `id`, `template`, `mode`, `length`,
`d` (2 medium, 3 hard), and `messages` on the hub: `convert_row` imports it (`sculptor-rl data import --format
gsm_infinite`), `score_official` is its evaluator's rule, `official_row` writes a generated record as such a row.
The symbolic subset (`answer_list` of variables, judged by an LLM's extraction) is not read.
"""

from __future__ import annotations

import hashlib
import json
import re

from .common import approx_tokens, check_range, length_bin, make_record, release_record, size_label, task_rng
from .common import render_value as render_answer  # noqa: F401 (the family API)
from .common import score_value

NAME = "gsm_infinite"

# At most 6 letters each, and no animal inside another as a word: "adult owl in" never matches "adult barn owl in".
ANIMALS = (
    "owl crow wolf bear deer fox otter heron lynx bison moose eagle parrot hare badger beaver raven finch gecko tapir "
    "koala lemur okapi zebra camel llama mole vole stoat ibis crane stork swan goose duck robin wren quail puma panda "
    "sloth hyena jackal bobcat"
).split()
# Place names of two words, at most 12 characters.
PLACES = tuple(f"{a} {b}" for a in "Pine Cedar Maple Oak Elm Birch Aspen Fern".split()
               for b in "Ridge Valley Creek Hollow Zoo Ranch Farm Marsh".split())
QUANTITIES = tuple(f"adult {animal} in {place}" for place in PLACES for animal in ANIMALS)
MAX_VALUE = 999

_QUANTITY = r"adult [a-z]+ in [A-Z][a-z]+ [A-Z][a-z]+"
_REF = rf"the number of ({_QUANTITY})"
# (op, pattern of the definition, its rendering); k is a constant, a and b quantities
FORMS = {
    "const": (r"(?P<k>\d+)", "{k}"),
    "copy": (rf"{_REF}", "the number of {a}"),
    "add": (rf"(?P<k>\d+) plus {_REF}", "{k} plus the number of {a}"),
    "times": (rf"(?P<k>\d+) times {_REF}", "{k} times the number of {a}"),
    "plus": (rf"{_REF} plus {_REF}", "the number of {a} plus the number of {b}"),
    "minus": (rf"{_REF} minus {_REF}", "the number of {a} minus the number of {b}"),
}
# one statement: it never spans a line, a fragment tag or a folded marker
STATEMENT = re.compile(rf"The number of (?P<q>{_QUANTITY}) equals (?P<expr>[^.<>\n]*)\.")
_EXPRS = [(op, re.compile(pattern)) for op, (pattern, _) in FORMS.items()]

Expr = tuple[str, int | None, tuple[str, ...]]  # (op, constant or None, quantities used)


def statement(quantity: str, expr: Expr) -> str:
    op, k, used = expr
    return f"The number of {quantity} equals {FORMS[op][1].format(k=k, **dict(zip('ab', used)))}."


def parse_statements(text: str) -> dict[str, Expr]:
    """{quantity: its definition} for every whole statement in `text` (a cut one, as at a search window's edge,
    does not match: a statement ends with its period)."""
    out = {}
    for m in STATEMENT.finditer(text):
        for op, pattern in _EXPRS:
            found = pattern.fullmatch(m["expr"])
            if found:
                k = found.groupdict().get("k")
                out[m["q"]] = (op, None if k is None else int(k), tuple(g for g in found.groups() if g != k))
                break
    return out


def evaluate(defs: dict[str, Expr], quantity: str, seen: frozenset = frozenset()) -> int | None:
    """The value of `quantity` from the definitions, or None when one it needs is missing (or defined in a cycle)."""
    if quantity not in defs or quantity in seen:
        return None
    op, k, used = defs[quantity]
    values = [evaluate(defs, q, seen | {quantity}) for q in used]
    if None in values:
        return None
    return {"const": lambda: k, "copy": lambda: values[0], "add": lambda: k + values[0],
            "times": lambda: k * values[0], "plus": lambda: values[0] + values[1],
            "minus": lambda: values[0] - values[1]}[op]()


def needed(defs: dict[str, Expr], quantity: str) -> list[str]:
    """`quantity` and every quantity its definition reaches, defined or not, each once, the asked one first."""
    out, todo = [], [quantity]
    while todo:
        q = todo.pop(0)
        if q not in out:
            out.append(q)
            todo += list(defs[q][2]) if q in defs else []
    return out


def solution(defs: dict[str, Expr], quantity: str) -> str:
    """The release's solution text: one `Define <quantity> as <var>; so <var> = ... = <value>.` per needed
    quantity, operands first, then `Answer: <value>.`"""
    order: list[str] = []

    def visit(q: str) -> None:
        if q not in order:
            for used in defs[q][2]:
                visit(used)
            order.append(q)

    visit(quantity)
    names = dict(zip(order, "BCDEFGHJKLMNPQRSTUVWXYZ"))  # enough for the generator's 20 ops
    steps = []
    for q in order:
        op, k, used = defs[q]
        var, args = names[q], [names[u] for u in used]
        values = [str(evaluate(defs, u)) for u in used]
        sign = {"add": "+", "times": "*", "plus": "+", "minus": "-"}.get(op)
        if op == "const":
            step = f"{k}"
        elif op == "copy":
            step = f"{args[0]} = {values[0]}"
        elif op in ("add", "times"):
            step = f"{k} {sign} {args[0]} = {k} {sign} {values[0]} = {evaluate(defs, q)}"
        else:
            step = f"{args[0]} {sign} {args[1]} = {values[0]} {sign} {values[1]} = {evaluate(defs, q)}"
        steps.append(f"Define {q} as {var}; so {var} = {step}.")
    return " ".join([*steps, f"Answer: {evaluate(defs, quantity)}."])


def ask(quantity: str) -> str:
    """The release's question about a quantity: "How many adult owl does Pine Ridge have?"."""
    animal, place = re.fullmatch(r"adult (\w+) in (.+)", quantity).groups()
    return f"How many adult {animal} does {place} have?"


def _expr(rng, value: dict[str, int], pending: list[str], used: list[str], last: bool) -> Expr:
    """The next needed statement: it uses the pending quantities (defined, not yet used), so that every one of
    them is needed, and at most two stay pending, so that the last statement can use them all."""
    if len(pending) == 2:
        a, b = sorted(pending, key=lambda q: -value[q])
        return ("minus" if value[a] + value[b] > MAX_VALUE or rng.random() < 0.5 else "plus", None, (a, b))
    if not pending or (not last and rng.random() < 0.35):
        return ("const", rng.randint(1, 12), ())
    a = pending[0]
    choices = ["copy", "add", "times", *(["plus", "minus"] if used else [])]
    op = rng.choice(choices)
    if op == "times" and value[a] * 4 > MAX_VALUE:
        op = "add"
    if op == "add":
        if value[a] + 9 <= MAX_VALUE:
            return ("add", rng.randint(1, 9), (a,))
        op = "copy"
    if op == "times":
        return ("times", rng.randint(2, 4), (a,))
    if op in ("plus", "minus"):
        b = rng.choice(used)
        if op == "plus" and value[a] + value[b] <= MAX_VALUE:
            return ("plus", None, (a, b))
        return ("minus", None, (a, b) if value[a] >= value[b] else (b, a))
    return ("copy", None, (a,))


def _noise(rng, value: dict[str, int], operands: list[str]) -> Expr:
    """A statement the question does not need: a constant, or an operation on quantities it may use (the needed
    ones among them, as in the benchmark, where noise hangs off the needed graph)."""
    op = rng.choice(["const", "const", *FORMS])
    a, b = rng.sample(operands, 2)
    if op == "const" or (op == "times" and value[a] * 4 > MAX_VALUE):
        return ("const", rng.randint(1, 12), ())
    if op == "times":
        return ("times", rng.randint(2, 4), (a,))
    if op == "add" and value[a] + 9 <= MAX_VALUE:
        return ("add", rng.randint(1, 9), (a,))
    if op in ("copy", "add"):
        return ("copy", None, (a,))
    if op == "plus" and value[a] + value[b] <= MAX_VALUE:
        return ("plus", None, (a, b))
    return ("minus", None, (a, b) if value[a] >= value[b] else (b, a))


MAX_CONTEXT_TOKENS = 40000  # what the name lists allow (QUANTITIES statements of ~85 characters)


def generate(num: int, seed: int = 0, ops: int = 4, context_tokens: int = 2000) -> list[dict]:
    """`num` problems whose solution takes `ops` statements, among noise statements filling about
    `context_tokens` tokens."""
    check_range("ops", ops, 1, 20)
    check_range("context_tokens", context_tokens, 100, MAX_CONTEXT_TOKENS)
    params = {"ops": ops, "context_tokens": context_tokens}
    records = []
    for index in range(num):
        rng = task_rng(NAME, seed, index)
        names = rng.sample(QUANTITIES, len(QUANTITIES))
        defs: dict[str, Expr] = {}
        value: dict[str, int] = {}
        pending: list[str] = []
        for step in range(ops):
            quantity = names.pop()
            defs[quantity] = expr = _expr(rng, value, pending, [q for q in defs if q not in pending], step == ops - 1)
            pending = [q for q in pending if q not in expr[2]] + [quantity]
            value[quantity] = evaluate(defs, quantity)
        (asked,) = pending
        sentences = [statement(q, e) for q, e in defs.items()]
        operands = list(defs)  # what noise may use: the needed quantities, then the noise constants
        size = sum(len(s) + 1 for s in sentences)
        while size < 4 * context_tokens:
            if not names:
                raise ValueError(f"context_tokens={context_tokens} needs more quantities than the name lists hold")
            quantity = names.pop()
            expr = _noise(rng, value, operands) if len(operands) >= 2 else ("const", rng.randint(1, 12), ())
            defs[quantity] = expr
            value[quantity] = evaluate(defs, quantity)
            if expr[0] == "const":
                operands.append(quantity)
            sentences.append(statement(quantity, expr))
            size += len(sentences[-1]) + 1
        rng.shuffle(sentences)
        lines, i = [], 0
        while i < len(sentences):  # lines of 3-6 statements: fragmenting has line and sentence boundaries
            width = rng.randint(3, 6)
            lines.append(" ".join(sentences[i:i + width]))
            i += width
        intro = ("Each sentence below defines one quantity, as a number or from other quantities; every quantity "
                 "a sentence uses is defined somewhere in the text.")
        question = f"{ask(asked)} Answer with the number, in the form `Answer: N`."
        records.append(make_record(NAME, seed, index, intro, "\n".join(lines), question, value[asked],
                                   bucket=f"{size_label(context_tokens)}/{ops}", params=params, quantity=asked))
    return records


def score(record: dict, response: str) -> float:
    return score_value({**record, "answer": str(record["answer"])}, response)


# ---- the release format ----

# The evaluator's keywords in the order it tries them, each with the text that ends the number after it (None: the
# digits that follow); "oxed{" and "is " are looked up last in the response, the others first.
OFFICIAL_KEYWORDS = (("answer: ", "."), ("solution: ", "."), ("oxed{", "}"), ("**answer:** ", "."),
                     ("**answer: ", "**"), ("final answer: answer: ", "."), ("\nanswer: ", "."),
                     ("\\text{answer: } ", None), ("is ", "."), ("answer: ", "\n"))


def official_answer(response: str) -> int | None:
    """The integer GSM-Infinite's evaluator reads in a response, or None.

    Rule of Infini-AI-Lab/gsm_infinite, gsm-infinite/pred/eval_realistic.py (`criteriaoutput`): a character before
    a backspace becomes "b" (a `\\boxed` whose `\\b` was read as an escape), the response is lower-cased; for each
    keyword of OFFICIAL_KEYWORDS in turn, the text from after it to its end mark (or to the end of the response)
    counts when Python's `int()` reads it; else the next keyword. One difference: after `\\text{answer: } ` the
    reference reads digits past the end of the response (an IndexError), here they stop there.
    """
    text = re.sub(".\x08", "b", response).lower()
    for key, end in OFFICIAL_KEYWORDS:
        begin = text.rfind(key) if key in ("oxed{", "is ") else text.find(key)
        if begin < 0:
            continue
        start = stop = begin + len(key)
        if end is None:
            while stop < len(text) and text[stop].isdigit():
                stop += 1
        else:
            stop = text.find(end, start)
            stop = len(text) if stop < 0 else stop
        try:
            return int(text[start:stop])
        except ValueError:
            continue
    return None


def score_official(record: dict, response: str) -> float:
    """GSM-Infinite (medium, hard): 1.0 if the evaluator's integer (`official_answer`) is the solution's."""
    return float(official_answer(response) == record["answer"])


def solution_answer(solution: str) -> int | None:
    """The answer of a release row: the integer between the solution's first `Answer: ` and the next period (the
    evaluator's reading of its key; without a period, to the end, where the reference's slice drops the last
    character)."""
    start = solution.find("Answer: ")
    if start < 0:
        return None
    start += len("Answer: ")
    end = solution.find(".", start)
    try:
        return int(solution[start:end if end >= 0 else len(solution)])
    except ValueError:
        return None


# Our own wording of the rules the release's prompts state for its three templates (zoo animals, schools in
# cities, movies at festivals), for rows without a `messages` column.
INSTRUCTION = ("Answer the question below. Each sentence of the problem defines one quantity. A total for a place "
               "(the total number of adult animals in a location, of schools in a city, of movies at a festival) is "
               "the sum over every kind ever mentioned for that place in this problem; a kind never mentioned for a "
               "place is 0 there. An average (newborn children per animal, teachers per school, nominations per "
               "movie) may differ between places; a total of children, teachers or nominations is the sum over "
               "kinds of the average times the count. Give the final answer in the form 'Answer: xxx', where xxx "
               "is the number.")
COLUMNS = ("problem", "question", "solution")
_USED = ("problem", "question", "messages", "id")


def convert_row(row: dict, rid: str, hints: dict) -> dict:
    """A release row → a task record. The prompt is the row's `messages` (the hub's), else INSTRUCTION, the
    problem and the question; the long context is the problem, found in the last user message. The answer is the
    solution's. The release's `id` counts problems per generator run and repeats across a split's files, so a
    record imported from a row is named by its op, template, mode, that id and a digest of its problem text;
    `rid` otherwise (a generated record's own id, `official.convert`)."""
    where = hints["where"]
    answer = solution_answer(str(row["solution"]))
    if answer is None:
        raise ValueError(f"{where}: column 'solution' has no integer after 'Answer: '")
    problem, question = str(row["problem"]).strip(), str(row["question"]).strip()
    messages, system = _prompt(row, problem, question, where)
    start = messages[-1]["content"].find(problem)
    if start < 0:
        raise ValueError(f"{where}: the last user message of column 'messages' does not hold column 'problem'")
    if rid == str(row.get("id")):
        digest = hashlib.sha1(f"{problem}\n{question}".encode()).hexdigest()[:8]
        rid = "-".join(str(p) for p in (NAME, row.get("length"), f"op{row.get('op')}", row.get("template"),
                                         row.get("mode"), row.get("id"), digest) if p is not None)
    text = messages[-1]["content"]
    spans = [(len(messages) - 1, start, start + len(problem))]
    length = row.get("length") or length_bin(approx_tokens(text))
    bucket = f"{length}/{row['op']}" if row.get("op") is not None else str(length)
    return release_record(NAME, rid, messages, answer, spans, question, bucket, row, _USED, system,
                   release_id=row.get("id"))


def _prompt(row: dict, problem: str, question: str, where: str) -> tuple[list[dict], str | None]:
    prompt = row.get("messages")
    if prompt is None:
        return [{"role": "user", "content": f"{INSTRUCTION}\n\nProblem: {problem}\nQuestion: {question}"}], None
    if isinstance(prompt, str):
        try:
            prompt = json.loads(prompt)
        except json.JSONDecodeError:
            prompt = None
    if not (isinstance(prompt, list) and prompt and all(
            isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
            and isinstance(m.get("content"), str) for m in prompt) and prompt[-1]["role"] == "user"):
        raise ValueError(f"{where}: column 'messages' must be chat messages (role, content) ending with a user one")
    system = "\n\n".join(m["content"] for m in prompt if m["role"] == "system") or None
    return [{"role": m["role"], "content": m["content"]} for m in prompt if m["role"] != "system"], system


def official_row(record: dict, context: str) -> dict:
    """A generated record as the release's row: its statements on one line, `Define ... Answer: N.` solution."""
    meta = record["meta"]
    sentences = [m[0] for m in STATEMENT.finditer(context)]
    defs = parse_statements(context)
    return {"problem": "".join(f"{s} " for s in sentences), "question": ask(meta["quantity"]),
            "solution": solution(defs, meta["quantity"]), "op": meta["ops"], "id": int(record["id"].rsplit("-", 1)[1]),
            "template": "crazy_zootopia", "mode": "normalforward", "length": size_label(meta["context_tokens"]),
            "d": 2}
