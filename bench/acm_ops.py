"""Time the ACM workspace on a ~128k-token context against a plain `str.find` scan of the same text.

    python bench/acm_ops.py

Builds a deterministic ~512k-char conversation (32 user documents + short assistant turns), fragments every
document into 10 pieces, folds every other piece, then reports median times per call.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from sculptor_rl.acm import Workspace  # noqa: E402 - needs the sys.path line above

TARGET_CHARS = 512_000
DOCUMENTS = 32


def build_conversation(seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    nouns, adjectives = (
        ["ledger", "sensor", "ticket", "invoice", "route", "batch"],
        ["red", "late", "new", "open", "final"],
    )
    messages = [{"role": "system", "content": "You manage your own context with the ACM tools."}]
    per_document = TARGET_CHARS // DOCUMENTS
    for d in range(DOCUMENTS):
        lines, size, k = [f"DOCUMENT {d} BEGIN"], 0, 0
        while size < per_document:
            record, value = rng.randrange(10_000), rng.randrange(10**6)
            line = (
                f"[{d}:{k}] The {rng.choice(adjectives)} {rng.choice(nouns)} of record {record} reports value {value}."
            )
            lines.append(line)
            size, k = size + len(line) + 1, k + 1
        lines.append(f"DOCUMENT {d} END")
        messages.append({"role": "user", "content": "\n".join(lines)})
        messages.append({"role": "assistant", "content": f"Noted document {d}."})
    return messages


def median_seconds(fn, repeats: int = 15) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def find_all(lowered: list[str], needle: str) -> int:
    """The plain baseline: every non-overlapping occurrence, one str.find loop per message."""
    hits = 0
    for text in lowered:
        pos = text.find(needle)
        while pos >= 0:
            hits += 1
            pos = text.find(needle, pos + len(needle))
    return hits


def main() -> None:
    messages = build_conversation()
    chars = sum(len(m["content"]) for m in messages)
    ws = Workspace(messages)
    setup = time.perf_counter()
    for d in range(DOCUMENTS):
        text = ws.call(
            "fragment_context",
            {"start_marker": f"DOCUMENT {d} BEGIN", "end_marker": f"DOCUMENT {d} END", "num_fragments": 10},
        )
        for fragment_id in [line[2:8] for line in text.splitlines()[1:]][::2]:
            ws.call("fold_fragment", {"fragment_id": fragment_id})
    setup = time.perf_counter() - setup
    lowered = [m["content"].lower() for m in messages]

    def plain_copy() -> list[dict]:
        return [{"role": m["role"], "content": m["content"]} for m in messages]

    print(
        f"context: {len(messages)} messages, {chars:,} chars (~{chars // 4:,} tokens); "
        f"320 fragments, 160 folded; setup (32 fragment_context + 160 fold_fragment) {setup * 1e3:.1f} ms total"
    )
    print(f"{'operation':<44} {'ours (ms)':>10} {'plain (ms)':>11} {'ratio':>7}")
    rows = []
    for query in ("record 4242 ", "value 99", "the"):
        hits = find_all(lowered, query.lower())
        ours = median_seconds(lambda q=query: ws.call("search_context", {"query": q, "role": "all"}))
        plain = median_seconds(lambda q=query: find_all(lowered, q.lower()))
        rows.append((f"search_context {query!r} ({hits:,} hit{'s' * (hits != 1)})", ours, plain))
    ours = median_seconds(
        lambda: ws.call("search_context", {"query": "the", "role": "all", "max_results": 50, "context_size": 1000})
    )
    rows.append(("search_context 'the' max_results=50 ctx=1000", ours, plain))
    rows.append(("render()  vs  copying the message dicts", median_seconds(ws.render), median_seconds(plain_copy)))
    rows.append(
        ("render(tags=False)  vs  copying", median_seconds(lambda: ws.render(tags=False)), median_seconds(plain_copy))
    )
    for name, ours, plain in rows:
        print(f"{name:<44} {ours * 1e3:>10.3f} {plain * 1e3:>11.3f} {ours / plain:>7.2f}")


if __name__ == "__main__":
    main()
