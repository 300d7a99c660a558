"""The ACM scripted teacher: a stateless policy that solves each long-context family with the six context tools
(SFT data without a strong model endpoint); `envs.teacher.ScriptedTeacher` runs it as a policy.

`teach(task, messages, tools=None) -> dict | str`: `messages` is the conversation as the model sees it now (the
rendered workspace: system, user, then the assistant and tool messages so far; `tools` is not read); the return value is the next assistant turn: a structured message making
tool calls (`toolcalls.assistant_message`, several per turn, run in order), which the loop renders in the policy's
own tool-call format with its chat template, or the final answer's text. Its state is read back from the
conversation (the structured calls it made, their results). It may use
`task["meta"]` for what the question asks about (keys, person, request) but never `task["answer"]`: the final
answer is read from the rendered, folded context, which proves the folds kept what the question needs.

Every teacher follows one plan:
1. search: `search_context` for what the question is about, to see where it lies;
2. fragment: each stretch of the long context between the spans worth keeping becomes one fragment
   (`fragment_context` with num_fragments=1 and the shortest whole-word markers, at least MIN_MARKER_CHARS
   long, whose first occurrences cut exactly that stretch); stretches shorter than the family's `min_gap`
   are left alone (a folded marker and two calls would cost more than they save);
3. fold: `fold_fragment` on every fragment made, all in one completion;
4. answer from the visible text with the family's own parser.
So the context shrinks to the system prompt, the intro, the kept spans, one marker per gap, and the question.
The long context is where the record's `meta.context` says (one span of its first user message: a fragment
never spans two messages, so MRCR's official chat is refused with an error naming the record); the answer is
given in the record's answer form, its family's or, for `format="official"` records, its benchmark's.

What each family searches for and keeps:
- pi_llm: keeps the stream's last TAIL_UPDATES updates (further back only when an asked key's last update
  lies before them, ~5 % of tasks with 3 keys) and folds everything before them into one marker: the fold's
  end is a fixed distance from the question, a position the student sees. No search: search_context lists a
  key's first matches, not its last, and with tens of updates per key its windows would hold more text than
  the stream itself. Answers each key's last visible value.
- needlebench: searches the asked person; the hit shows the statement naming that person's parent, which
  is searched next (one search per completion: the multi-hop walk), until a search shows no parent. Keeps
  the statements found; answers the eldest ancestor traced through the visible statements.
- mrcr: searches the asked request; keeps its i-th user/assistant exchange and folds everything around it,
  however short (another occurrence of the request must not stay visible); answers with the visible reply.
- babilong: searches the asked person; keeps their last move; answers its place.
Tool calls per task at the default sizes: pi_llm 2, needlebench needles + 1 searches
and 2 per stretch (12 at 3 needles, at most 18 at 5), mrcr 5, babilong 5.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from collections.abc import Callable

from ...longcontext import babilong, gsm_infinite, mrcr, needlebench, pi_llm, render_answer
from ...records import context_spans
from ...toolcalls import ToolCall, assistant_message, calls_of

Span = tuple[int, int]
SEARCH_ARGS = {"max_results": 50, "context_size": 100}
MIN_MARKER_CHARS = 12  # markers of a few words read naturally and are easy to copy


@dataclass(frozen=True)
class Strategy:
    searches: Callable[[dict, dict[str, str]], list[str]]  # (task, {query: result}) -> next queries, [] if done
    keep: Callable[[dict, str, dict[str, str]], list[Span]]  # (task, original user text, searched) -> spans
    answer: Callable[[dict, str], str]  # (task, rendered user text) -> final response
    needs: tuple[str, ...]  # what the question asks about, in task["meta"] (generated records carry it)
    min_gap: int = 300  # characters: shorter stretches between kept spans are not folded


def _turns(messages: list[dict]) -> list[tuple[ToolCall, str]]:
    """Every (call, result text) made so far, in order (the loop answers each call, malformed ones too)."""
    pairs, pending = [], []
    for m in messages:
        if m["role"] == "assistant":
            pending = calls_of(m)
        elif m["role"] == "tool" and pending:
            pairs.append((pending.pop(0), m["content"]))
    return pairs


def _user(messages: list[dict]) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


def _calls(calls: list[tuple[str, dict]]) -> dict:
    return assistant_message(calls)


def _markers(text: str, a: int, b: int) -> tuple[str, str] | None:
    """Shortest whole-word (start_marker, end_marker) with which fragment_context spans exactly text[a:b]:
    the tool takes the first start_marker in the message and the first end_marker after it."""
    words = [(a + m.start(), a + m.end()) for m in re.finditer(r"\S+", text[a:b])]
    start = next((text[a:e] for _, e in words if e - a >= MIN_MARKER_CHARS and text.find(text[a:e]) == a), None)
    if start is None:
        return None
    after = a + len(start)
    return next(((start, text[s:b]) for s, _ in reversed(words)
                 if s >= after and b - s >= MIN_MARKER_CHARS and text.find(text[s:b], after) == s), None)


def _context(task: dict) -> Span:
    """Where the record's long context lies (`meta.context`): one span of its first user message, the message
    the teachers fold in (a fragment never spans two messages)."""
    spans = context_spans(task)
    first = next((i for i, m in enumerate(task["messages"]) if m["role"] == "user"), None)
    if len(spans) != 1 or spans[0][0] != first:
        raise ValueError(f"task {task.get('id')!r}: the scripted teachers fold a long context that lies in the first "
                         f"user message; its meta.context has {len(spans)} span(s) in "
                         f"{len({i for i, _, _ in spans})} message(s) (a chat such as MRCR's official format)")
    return spans[0][1:]


def _fold_plan(task: dict, text: str, keep: list[Span], min_gap: int) -> list[tuple[str, str]]:
    """Markers for each stretch of the context outside the kept spans that is worth folding."""
    lo, hi = _context(task)
    edges = [lo, *(p for span in sorted(keep) for p in span), hi]
    plan = []
    for a, b in zip(edges[::2], edges[1::2]):
        stretch = text[a:b]
        a, b = a + len(stretch) - len(stretch.lstrip()), a + len(stretch.rstrip())
        markers = _markers(text, a, b) if b - a >= min_gap else None
        if markers:
            plan.append(markers)
    return plan


def _windows(results: dict[str, str]) -> str:
    """The text windows of search results, joined, with the «match» brackets removed."""
    found = [json.loads(w) for r in results.values() for w in re.findall(r'^- s[a-z0-9]{5}: .*?: (".*")$', r, re.M)]
    return "\n".join(found).replace("«", "").replace("»", "")


def _policy(strategy: Strategy, task: dict, messages: list[dict]) -> dict | str:
    missing = [k for k in strategy.needs if k not in (task.get("meta") or {})]
    if missing:
        raise ValueError(f"task {task.get('id')!r}: the {task['task']} teacher needs meta.{missing[0]} (what the "
                         f"question asks about), which generated records carry and imported ones do not")
    turns = _turns(messages)
    last = turns[-1][0].name if turns else None
    user = _user(messages)
    if last in (None, "search_context"):
        searched = {c.arguments["query"]: r for c, r in turns if c.name == "search_context"}
        queries = strategy.searches(task, searched)
        if queries:
            return _calls([("search_context", {"query": q, **SEARCH_ARGS}) for q in queries])
        plan = _fold_plan(task, user, strategy.keep(task, user, searched), strategy.min_gap)
        if plan:
            return _calls([("fragment_context", {"start_marker": s, "end_marker": e, "num_fragments": 1})
                           for s, e in plan])
    if last == "fragment_context":
        made = [i for c, r in turns if c.name == "fragment_context" for i in re.findall(r"^- (f[a-z0-9]{5}):", r, re.M)]
        if made:
            return _calls([("fold_fragment", {"fragment_id": i}) for i in made])
    return strategy.answer(task, user)


def _render(task: dict, answer) -> str:
    """`answer` (read from the visible context) in the record's answer form: its family's, or its benchmark's for
    a record in an official format (`longcontext.render_answer`)."""
    return render_answer({**task, "answer": answer})


def _once(queries: Callable[[dict], list[str]]) -> Callable[[dict, dict[str, str]], list[str]]:
    """One round of searches."""
    return lambda task, searched: [] if searched else queries(task)


# ---- pi_llm ----

def _update(key: str) -> re.Pattern:
    """One `key: value` update: a line of its own (generated), or one of the official stream's `key: value; `
    pieces; after a fold, a folded marker's `>` may precede it and a fragment tag's `<` follow it."""
    return re.compile(rf"(?<![^\s;>]){re.escape(key)}: ([^;\n<]*[^;\s<])", re.M)


TAIL_UPDATES = 10  # with 3 keys, all their last updates lie in the last 10 w.p. ~95 %


def _pi_keep(task: dict, user: str, searched: dict[str, str]) -> list[Span]:
    """The last TAIL_UPDATES updates of the stream, reaching further back only if an asked key's last update lies
    before them: the fold's end is a position the student sees, not one that needs the answer."""
    lo, hi = _context(task)
    updates = [m.start() for m in re.finditer(r"(?:^|(?<=; ))\S[^\n;]*?: ", user[:hi], re.M) if m.start() >= lo]
    lasts = [[*_update(key).finditer(user, lo, hi)][-1].start() for key in task["meta"]["asked_keys"]]
    return [(min([*updates[-TAIL_UPDATES:][:1], *lasts]), hi)]


def _pi_answer(task: dict, visible: str) -> str:
    values = {key: _update(key).findall(visible) for key in task["meta"]["asked_keys"]}
    return _render(task, {key: found[-1] for key, found in values.items() if found})


# ---- needlebench ----

def _nb_searches(task: dict, searched: dict[str, str]) -> list[str]:
    top = needlebench.eldest_ancestor(needlebench.parse_relations(_windows(searched)), task["meta"]["person"])
    return [] if top in searched else [top]


def _nb_keep(task: dict, user: str, searched: dict[str, str]) -> list[Span]:
    found, (lo, hi) = needlebench.parse_relations(_windows(searched)), _context(task)
    return [m.span() for p in needlebench.PATTERNS for m in p.finditer(user, lo, hi)
            if found.get(m["younger"]) == m["elder"]]


def _nb_answer(task: dict, visible: str) -> str:
    return _render(task, needlebench.eldest_ancestor(needlebench.parse_relations(visible), task["meta"]["person"]))


# ---- mrcr ----

def _exchange(request: str) -> re.Pattern:
    return re.compile(rf"^User: {re.escape(request)}\nAssistant: (.*)$", re.M)


def _mrcr_keep(task: dict, user: str, searched: dict[str, str]) -> list[Span]:
    lo, hi = _context(task)
    return [[*_exchange(task["meta"]["request"]).finditer(user, lo, hi)][task["meta"]["occurrence"] - 1].span()]


def _mrcr_answer(task: dict, visible: str) -> str:
    return _render(task, next(iter(_exchange(task["meta"]["request"]).findall(visible)), "unknown"))


# ---- babilong ----

def _babi_keep(task: dict, user: str, searched: dict[str, str]) -> list[Span]:
    lo, hi = _context(task)
    return [[m for m in babilong.FACT.finditer(user, lo, hi) if m["person"] == task["meta"]["person"]][-1].span()]


def _babi_answer(task: dict, visible: str) -> str:
    return _render(task, babilong.last_place(visible, task["meta"]["person"]) or "unknown")


# ---- gsm_infinite ----
# Searches "<quantity> equals" (only its definition has "equals" after it; a use of it never does) for the asked
# quantity, then for each quantity the definitions found use (one search per quantity, a level of the graph per
# completion), until every needed one is found. Keeps their statements and folds the longest stretches between them
# that GSM_CALLS allows (each fold costs a fragment and a fold call); answers by evaluating the asked quantity from
# the statements left visible.

GSM_CALLS = 19  # tool calls per task: under the loop's max_tool_calls (20)


def _gsm_found(searched: dict[str, str]) -> dict[str, gsm_infinite.Expr]:
    return gsm_infinite.parse_statements(_windows(searched))


def _gsm_searches(task: dict, searched: dict[str, str]) -> list[str]:
    found = _gsm_found(searched)
    queries = [f"{q} equals" for q in gsm_infinite.needed(found, task["meta"]["quantity"]) if q not in found]
    return [q for q in queries if q not in searched]  # a search that found nothing is not repeated


def _gsm_keep(task: dict, user: str, searched: dict[str, str]) -> list[Span]:
    found, (lo, hi) = _gsm_found(searched), _context(task)
    needs = set(gsm_infinite.needed(found, task["meta"]["quantity"]))
    spans = [m.span() for m in gsm_infinite.STATEMENT.finditer(user, lo, hi) if m["q"] in needs]
    edges = [lo, *(p for span in spans for p in span), hi]
    gaps = list(zip(edges[::2], edges[1::2]))
    folds = max(0, (GSM_CALLS - len(searched)) // 2)
    folded = sorted(sorted(gaps, key=lambda gap: gap[0] - gap[1])[:folds])  # the longest ones
    # what lies between the folded stretches is kept, short stretches of noise with the needed statements
    return [(a, b) for a, b in zip([lo, *(b for _, b in folded)], [a for a, _ in folded] + [hi]) if a < b]


def _gsm_answer(task: dict, visible: str) -> str:
    value = gsm_infinite.evaluate(gsm_infinite.parse_statements(visible), task["meta"]["quantity"])
    return _render(task, "unknown" if value is None else value)


STRATEGIES = {
    pi_llm.NAME: Strategy(lambda task, searched: [], _pi_keep, _pi_answer, ("asked_keys",)),
    needlebench.NAME: Strategy(_nb_searches, _nb_keep, _nb_answer, ("person",)),
    mrcr.NAME: Strategy(_once(lambda t: [t["meta"]["request"]]), _mrcr_keep, _mrcr_answer, ("request", "occurrence"),
                        min_gap=1),
    babilong.NAME: Strategy(_once(lambda t: [t["meta"]["person"]]), _babi_keep, _babi_answer, ("person",)),
    gsm_infinite.NAME: Strategy(_gsm_searches, _gsm_keep, _gsm_answer, ("quantity",)),
}


def teach(task: dict, messages: list[dict], tools=None) -> dict | str:
    """The next assistant turn for a long-context task (its family's strategy)."""
    return _policy(STRATEGIES[task["task"]], task, messages)
