"""`sculptor-rl data check`: an imported benchmark's gold answers replayed through the scorer that will score a
model on it, before anyone trusts a number from it.

Per record three responses are scored: the gold answer as the benchmark's answer form renders it
(`envs.tasks.render_answer`: should score 1), an empty response (should score 0 unless doing nothing is right, as in
WorkBench's queries that need no change) and a wrong answer (the gold of the next record whose gold differs:
should score below 1 unless the two happen to agree). `check` returns the counts, the means per group (a domain, a
category, a task, a length bucket) and the ids where the gold scores below 1 or the others score above 0.
Experiences (ToolMem's, `data import --format biggen`: a tool's judged answer, no task) are checked as the `toolmem`
family's predict records made from them, whose gold is the judge's 1-5 score.
"""

from __future__ import annotations

__all__ = ["check", "report"]

KINDS = ("gold", "empty", "wrong")


def _group(record: dict) -> str:
    meta = record.get("meta") or {}
    for key in ("file", "domain", "category", "babilong_task", "bucket"):
        if meta.get(key) is not None:
            return str(meta[key])
    return "all"


def _tasks(records: list[dict]) -> list[dict]:
    """The task records to check: experiences become the predict records of the toolmem family's `from_experiences`,
    each under its experience's id (the ids checked for repeats are the file's)."""
    if not records or "task" in records[0]:
        return records
    from .registry import family

    toolmem = family("toolmem")
    tasks = toolmem.from_experiences(records, "predict", toolmem.capability_order(records))
    return [{**t, "id": t["meta"]["experiences"][0]["id"]} for t in tasks]


def check(records: list[dict]) -> dict:
    """The scores of gold, empty and wrong responses per record, their means per group, and the outliers."""
    from .tasks import render_answer, score

    records = _tasks(records)
    golds = [render_answer(r) for r in records]
    rows = []
    for i, record in enumerate(records):
        others = (j % len(records) for j in range(i + 1, i + len(records)))
        other = next((j for j in others if records[j]["answer"] != record["answer"]), None)
        rows.append({"id": record["id"], "group": _group(record), "gold": score(record, golds[i]),
                     "empty": score(record, ""), "wrong": None if other is None else score(record, golds[other])})
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    groups["all"] = rows

    def means(group: list[dict]) -> dict:
        out = {"n": len(group)}
        for kind in KINDS:
            values = [r[kind] for r in group if r[kind] is not None]
            out[kind] = sum(values) / len(values) if values else None
        return out

    ids = [r["id"] for r in records]
    return {"records": len(records), "unique_ids": len(set(ids)),
            "groups": {name: means(group) for name, group in groups.items()},
            "gold_below_1": [r["id"] for r in rows if r["gold"] < 1.0],
            "empty_above_0": [r["id"] for r in rows if r["empty"] > 0.0],
            "wrong_at_1": [r["id"] for r in rows if r["wrong"] == 1.0]}


def report(result: dict, title: str) -> str:
    """`check`'s result as a Markdown table and the outlier lines."""
    cell = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    lines = [f"{title}: {result['records']} records, {result['unique_ids']} unique ids", "",
             "| group | n | gold | empty | wrong |", "|---|---:|---:|---:|---:|"]
    for name, m in result["groups"].items():
        lines.append(f"| {name} | {m['n']} | {cell(m['gold'])} | {cell(m['empty'])} | {cell(m['wrong'])} |")
    lines.append("")
    for key, what in (("gold_below_1", "gold < 1 (the scorer does not credit the gold answer)"),
                      ("empty_above_0", "empty > 0"), ("wrong_at_1", "wrong = 1 (another record's gold)")):
        ids = result[key]
        lines.append(f"{what}: {len(ids)}" + (f" ({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''})"
                                              if ids else ""))
    return "\n".join(lines)
