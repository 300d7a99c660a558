"""A trajectory as a timeline of its context: for each step, the context the engine saw as a list of spans.

A span is one piece of the context: the chat template's own tokens with the tool schemas, the system prompt, user
text, each fragment an environment made of it, the model's turns and the tool results. Its state is `visible`,
`folded`, `summarized`, `restored` (shown again after a fold or summary) or `deleted` (gone from the context).

Built from what a rollout record holds (`Trajectory`): the final messages, each step's prompt and completion ids,
its calls and their results. How a call changed the context the environment says (`Env.context_events`; ACM's
read from its tools' results); the loop records no per-step copy of the context.

Token counts: each completion is its ids (`completion_ids`), exact. A step's tool results are the ids the next
prompt adds after that completion (exact, the template's wrapping included) where that prompt extends the last
one, else their characters / 4. The task's messages at a step are exact in sum (the prompt's ids less the turns
after them); the template's share of it (its own tokens and the tool schemas) is the first prompt's less the task
messages' tokens the loop counted (`context_tokens_before`), and the rest is split among the messages' spans (system,
text, fragments) in proportion to their characters / 4. A record without ids (none is written
today) is estimated throughout; each span says which (`exact`).
"""

from __future__ import annotations

import re

from ..envs.base import Env
from ..samples import build_samples
from ..trajectory import Trajectory

__all__ = ["STATES", "KINDS", "timeline", "summary_row"]

STATES = ("visible", "folded", "summarized", "restored", "deleted")
# span kind -> label and colour; an environment's `view_spans` is merged over these
KINDS = {
    "template": {"label": "chat template + tool schemas", "color": "#9aa5b1"},
    "system": {"label": "system", "color": "#6c7a89"},
    "user": {"label": "user text", "color": "#3d7ebf"},
    "fragment": {"label": "fragment", "color": "#2e9e6b"},
    "assistant": {"label": "model turn", "color": "#c9822b"},
    "tool": {"label": "tool result", "color": "#8e5ab5"},
}
FRAGMENT_TAG = re.compile(r'<fragment id="(?P<id>[^"]+)"(?P<folded> folded chars=\d+ />)?'
                          r'(?P<summary> summary focus="[^"]*">)?(?(folded)|(?(summary)|>)(?P<body>.*?)</fragment>)',
                          re.S)
TEMPLATE_NOTE = ("The chat template's own tokens and the tool schemas it renders: the prompt's ids less the "
                 "messages' share, fitted over the steps (the schemas' text is not in the record).")
TEXT_LIMIT = 20000  # characters of a span's text kept for the page (the rest said, not shown)


def _tokens(chars: int) -> float:
    return chars / 4


def _clip(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + f"\n… ({len(text) - TEXT_LIMIT} more characters)"


def _pieces(content: str) -> list[dict]:
    """The final view of a message cut at its fragment tags: text pieces and fragments (id, final state, text)."""
    out, pos = [], 0
    for m in FRAGMENT_TAG.finditer(content):
        if m.start() > pos:
            out.append({"text": content[pos:m.start()]})
        state = "folded" if m["folded"] else "summarized" if m["summary"] else "visible"
        out.append({"fragment": m["id"], "final": state, "text": m["body"] or "", "marker": m[0] if m["folded"] else ""})
        pos = m.end()
    if pos < len(content):
        out.append({"text": content[pos:]})
    return out


def _history(traj: Trajectory, env: type[Env]) -> list[list[dict]]:
    """The context events (`Env.context_events`) of each step's calls, in order."""
    return [[e for c in step.calls for e in (env.context_events(c) or [])] for step in traj.steps]


def _split_after(messages: list[dict], traj: Trajectory) -> tuple[int, list[list[dict]]]:
    """Where the task's messages end (the first assistant turn) and the messages each step added after it: its
    assistant turn, then its tool results (and a new user turn after a step that went on)."""
    q = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    per_step: list[list[dict]] = [[] for _ in traj.steps]
    k = -1
    for m in messages[q:]:
        if m["role"] == "assistant":
            k += 1
        if 0 <= k < len(per_step):
            per_step[k].append(m)
    return q, per_step


def _originals(pieces: list[dict], original: str, sizes: dict[str, int]) -> None:
    """Each fragment's original text, where the task's message is at hand: the final view's text pieces are the
    original's verbatim, and each fragment takes its size (from the call that made it) in between. Left as it is
    where the view does not line up with the original."""
    pos, found = 0, {}
    for p in pieces:
        if "fragment" not in p:
            if original[pos:pos + len(p["text"])] != p["text"]:
                return
            pos += len(p["text"])
        elif p["fragment"] in sizes:
            found[id(p)] = original[pos:pos + sizes[p["fragment"]]]
            pos += sizes[p["fragment"]]
        else:
            return
    if pos != len(original):
        return
    for p in pieces:
        if id(p) in found:
            p.update(text=found[id(p)], final="visible", original=True)


def timeline(traj: Trajectory, env: type[Env] = Env, task: dict | None = None) -> dict:
    """The page's record of one trajectory: its header values, its samples (Algorithm 1) and its steps, each with
    the context as spans (see the module docstring). `task`: the record it ran on, for the original text of
    fragments folded at the end (the final messages hold only their markers)."""
    messages = traj.messages
    q, added = _split_after(messages, traj)
    events = _history(traj, env)
    sizes = {e["fragment"]: e["chars"] for step in events for e in step if "fragment" in e and e.get("chars")}
    samples = build_samples(traj) if traj.steps else []
    sample_of = {c: k for k, s in enumerate(samples) for c in s.completions}
    fragments: dict[str, dict] = {}  # id -> {"state", "chars", "summary_chars"}: those made so far
    deleted: set[int] = set()  # messages gone from the context
    pieces = [_pieces(m["content"]) for m in messages[:q]]
    if task and task.get("messages"):  # the env's system prompt may head the task's messages (`with_system`)
        offset = q - len(task["messages"])
        for i, parts in enumerate(pieces):
            if i >= offset >= 0 and any("fragment" in p for p in parts):
                _originals(parts, task["messages"][i - offset]["content"], sizes)
    fits = []  # per step: (its task spans, its template span, the task's exact tokens), where the ids are known
    steps = []
    turns: list[dict] = []  # spans of the turns before this step (model turns, tool results, user turns)
    for k, step in enumerate(traj.steps):
        ids_known = bool(step.prompt_ids)
        before = sum(s["tokens"] for s in turns)
        task_spans = []
        for i, (m, parts) in enumerate(zip(messages[:q], pieces)):
            if i in deleted:
                task_spans.append(_span(m["role"], f"{m['role']} message {i} (deleted)", "deleted", 0, m["content"], i))
                continue
            shown_any = any("fragment" in p and p["fragment"] in fragments for p in parts)
            if not shown_any:  # before any fragment of it: the message whole (its original text, where the record has it)
                text = "".join(p["text"] if "text" in p and "fragment" not in p else _fragment_text(p) for p in parts)
                chars = sum(len(p["text"]) if "fragment" not in p else sizes.get(p["fragment"], len(p["text"]) or 40)
                            for p in parts)
                task_spans.append(_span(m["role"], f"{m['role']} message {i}", "visible", _tokens(chars), text, i))
                continue
            for p in parts:
                if "fragment" not in p:
                    task_spans.append(_span(m["role"], f"{m['role']} text (message {i})", "visible",
                                            _tokens(len(p["text"])), p["text"], i))
                    continue
                f = fragments.get(p["fragment"], {"state": "visible", "chars": len(p["text"])})
                state = f["state"]
                if state == "folded":
                    size = _tokens(40)
                elif state == "summarized":
                    size = _tokens(f.get("summary_chars") or len(p["text"]) or 40)
                else:
                    size = _tokens(f["chars"])
                text = _fragment_text(p, f)
                task_spans.append({**_span("fragment", f"fragment {p['fragment']}", state, size, text, i),
                                   "id": p["fragment"]})
        head = _span("template", KINDS["template"]["label"], "visible", 0, TEMPLATE_NOTE, None)
        completion = _span("assistant", f"model turn {k}", "visible", len(step.completion_ids) or _tokens(len(step.text)),
                           step.text, None, exact=bool(step.completion_ids))
        completion.update(step=k, trained=True, current=True)
        earlier = [dict(s, current=False, trained=s["kind"] == "assistant" and sample_of.get(s["step"]) == sample_of[k])
                   for s in turns]
        spans = ([head] if ids_known else []) + task_spans + earlier + [completion]
        fits.append((task_spans, head, len(step.prompt_ids) - before) if ids_known else None)
        steps.append({
            "step": k, "sample": sample_of.get(k, 0), "cut": k in {s.completions[-1] for s in samples},
            "prompt_tokens": len(step.prompt_ids), "completion_tokens": len(step.completion_ids),
            "finish_reason": step.finish_reason, "next_turn": step.next_turn, "modified": step.modified,
            "calls": [{"name": c["name"], "arguments": c["arguments"], "ok": c["ok"], "modified": c["modified"],
                       "format_error": c["format_error"], "result": _clip(c["result"])} for c in step.calls],
            "events": events[k], "spans": spans,
        })
        # the context after this step: its calls' events, then its turn and results appended
        for e in events[k]:
            if "message" in e and e.get("state") == "deleted":
                deleted.add(e["message"])
            elif "fragment" in e:
                f = fragments.setdefault(e["fragment"], {"state": "visible", "chars": 0})
                f["chars"] = e.get("chars", f["chars"])
                f["summary_chars"] = e.get("summary_chars", f.get("summary_chars"))
                f["state"] = e.get("state", f["state"])
        turns.append({**completion, "current": False, "label": f"model turn {k}"})
        nxt = traj.steps[k + 1].prompt_ids if k + 1 < len(traj.steps) else None
        grown = step.prompt_ids + step.completion_ids
        exact = bool(nxt) and len(nxt) >= len(grown) and nxt[: len(grown)] == grown
        results = [m for m in added[k][1:]] if added[k] else []
        if not results:
            results = [{"role": "tool", "content": c["result"]} for c in step.calls]
        chars = [max(len(m["content"]), 1) for m in results]
        total = len(nxt) - len(grown) if exact else None
        for m, n in zip(results, chars):
            kind = "tool" if m["role"] == "tool" else m["role"]
            size = total * n / sum(chars) if total is not None else _tokens(n)
            turns.append({**_span(kind, f"{'tool result' if kind == 'tool' else kind + ' turn'} of step {k}",
                                  "visible", size, m["content"], None, exact=total is not None), "step": k})
    _calibrate([f for f in fits if f is not None], traj.context_tokens_before)
    texts: dict[str, int] = {}  # each text once: a span refers to it by number (a context repeats at every step)
    for st in steps:
        for sp in st["spans"]:
            sp["tokens"] = round(sp["tokens"], 1)
            sp["text"] = texts.setdefault(_clip(sp["text"]), len(texts))
    return {
        "rollout_id": traj.rollout_id, "task_id": traj.task_id, "task": traj.task, "score": traj.score,
        "reward": traj.reward, "stop_reason": traj.stop_reason, "answer": traj.answer,
        "counts": {"tool_calls": traj.num_tool_calls, "format_errors": traj.format_errors,
                   "per_tool": dict(traj.tool_counts), "generated_tokens": traj.generated_tokens,
                   "context_tokens_before": traj.context_tokens_before,
                   "context_tokens_after": traj.context_tokens_after,
                   "context_reduction": round(traj.context_reduction, 4)},
        "info": traj.info, "tokenizer": traj.tokenizer.get("name", ""),
        "samples": [{"completions": s.completions, "tokens": len(s.input_ids), "trained": sum(s.loss_mask)}
                    for s in samples],
        "steps": steps, "texts": list(texts),
    }


def _calibrate(fits: list[tuple[list[dict], dict, int]], first: int) -> None:
    """Split each step's exact task tokens among its spans. The template's share (its own tokens and the tool
    schemas) is the first prompt's task tokens less `first`, the task messages' own tokens as the loop counted
    them (`context_tokens_before`); where that does not fit, it is fitted by least squares over the steps (tokens =
    template + a x characters / 4). Then each step's spans are scaled to sum to its exact count."""
    if not fits:
        return
    xs = [sum(s["tokens"] for s in spans) for spans, _, _ in fits]
    ys = [total for _, _, total in fits]
    template = ys[0] - first
    if not (first > 0 and template >= 0):
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 1.0
        template = my - a * mx
        if not (var and a > 0 and template >= 0):  # one context size only, or a fit that makes no sense: a = 1
            template = max(min(y - x for x, y in zip(xs, ys)), 0)
    for (spans, head, total), x in zip(fits, xs):
        head["tokens"] = min(template, max(total, 0))
        scale = max(total - head["tokens"], 0) / x if x else 0.0
        for s in spans:
            s["tokens"] *= scale


def _fragment_text(p: dict, f: dict | None = None) -> str:
    """A fragment's text as the record holds it: its body where it ended visible or restored, its summary where it
    ended summarized; a fragment folded at the end left only its marker in the final messages."""
    if p["final"] == "folded":
        return f"[this fragment was folded at the end of the rollout: its text is not in the record]\n{p['marker']}"
    if p["final"] == "summarized" and (f or {}).get("state") != "summarized":
        return f"[this fragment was summarized at the end: the record holds its summary]\n{p['text']}"
    return p["text"]


def _span(kind: str, label: str, state: str, tokens: float, text: str, message: int | None,
          exact: bool = False) -> dict:
    return {"kind": kind, "label": label, "state": state, "tokens": tokens, "exact": exact, "text": text,
            "message": message}


def summary_row(traj: Trajectory, source: str) -> dict:
    """The list's row of a trajectory (what the filters read)."""
    return {"source": source, "rollout_id": traj.rollout_id, "task_id": traj.task_id, "task": traj.task,
            "score": traj.score, "reward": traj.reward, "correct": traj.score >= 1.0, "stop_reason": traj.stop_reason,
            "steps": len(traj.steps), "calls": traj.num_tool_calls, "format_errors": traj.format_errors,
            "at_cap": traj.stop_reason == "max_tool_calls", "reduction": round(traj.context_reduction, 4)}
