"""Importers of the published benchmarks MemToolAgent evaluates on, as records of the `workbench` and `nestful`
families (`sculptor-rl data import --benchmark workbench|nestful`).

- WorkBench (github.com/olly-styles/WorkBench): `data/processed/queries_and_answers/<domain>_queries_and_answers.csv`
  with columns `query,answer,base_template,chosen_template,domains`; `answer` is a Python-literal list of call
  strings such as `calendar.update_event.func(event_id="00000055", field="event_name", new_value="...")` (possibly
  `[]`), read with `ast` (never evaluated). Every other column is kept in `meta` as released (`domains` as its list);
  `meta.template` (the template the env reports by) is `base_template`. WorkBench's own databases
  (`data/processed/*.csv`) can be given as `database`: the records then run on them (`sandbox.load_database`);
  without it they run on the sandbox's generated database, where their ids may not exist.
- NESTFUL (Basu et al., 2024): a JSON list (or JSONL) of `{"sample_id", "input", "output": [calls with "label"
  and "$var_k.field$" references], "gold_answer", "tools"}`; `output` and `tools` may be JSON text.
Every bad record is a ValueError naming the file and row.
"""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

from .nestful import NAME as NESTFUL
from .sandbox import TOOLS
from .tasks import DOMAINS, NAME as WORKBENCH

__all__ = ["import_nestful", "import_workbench", "parse_call"]

_BY_FUNCTION = {name.split(".")[1]: name for name in TOOLS}


def parse_call(text: str) -> dict:
    """`domain.function.func(k="v", ...)` as {"name": "domain.function", "arguments": {...}}. A call without its
    domain (`search_customers.func(...)`, the MemToolAgent paper's Figure 7) is named by its function."""
    try:  # a newline inside a value is read as "\n", as WorkBench's calculate_metrics rewrites it before eval
        node = ast.parse(text.strip().replace("\n", "\\n"), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"not a call: {text!r} ({e.msg})") from None
    if not isinstance(node, ast.Call):
        raise ValueError(f"not a call: {text!r}")
    parts, func = [], node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    parts = [p for p in reversed(parts) if p != "func"]
    name = ".".join(parts)
    if name not in TOOLS and name in _BY_FUNCTION:
        name = _BY_FUNCTION[name]
    if name not in TOOLS:
        raise ValueError(f"unknown WorkBench tool {'.'.join(parts)!r} in {text!r}")
    if node.args:
        raise ValueError(f"positional arguments in {text!r}: WorkBench calls name their arguments")
    try:
        arguments = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except ValueError:
        raise ValueError(f"an argument of {text!r} is not a literal") from None
    return {"name": name, "arguments": {k: str(v) for k, v in arguments.items()}}


def _csv_files(source: str | Path) -> list[Path]:
    source = Path(source)
    files = sorted(source.glob("*_queries_and_answers.csv")) if source.is_dir() else [source]
    if not files:
        raise ValueError(f"{source}: no *_queries_and_answers.csv files in it")
    return files


def import_workbench(source: str | Path, database: str | Path | None = None) -> list[dict]:
    """Records from one WorkBench query/answer CSV or a directory of them."""
    records = []
    for path in _csv_files(source):
        file_domain = path.name.removesuffix("_queries_and_answers.csv")
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = {"query", "answer"} - set(reader.fieldnames or ())
            if missing:
                raise ValueError(f"{path}: no column {', '.join(sorted(missing))} (has {reader.fieldnames})")
            for row_number, row in enumerate(reader, 2):
                where = f"{path} row {row_number}"
                try:
                    strings = ast.literal_eval(row["answer"] or "[]")
                    if not isinstance(strings, list) or not all(isinstance(s, str) for s in strings):
                        raise ValueError("answer is not a list of call strings")
                    calls = [parse_call(s) for s in strings]
                except (ValueError, SyntaxError) as e:
                    raise ValueError(f"{where}: {e}") from None
                domain = file_domain if file_domain in DOMAINS else (row.get("domains") or "unknown")
                kept = {k: v for k, v in row.items() if k not in ("query", "answer")}
                if kept.get("domains", "").startswith("["):
                    kept["domains"] = ast.literal_eval(kept["domains"])
                meta = {**kept, "domain": domain, "source": "workbench",
                        "template": row.get("base_template") or row.get("template") or None}
                if database is not None:
                    meta["database"] = str(Path(database).resolve())
                records.append({"id": f"workbench-{file_domain}-{row_number - 2:05d}", "task": WORKBENCH,
                                "messages": [{"role": "user", "content": row["query"]}], "answer": calls,
                                "meta": meta})
    return records


def _json(value, what: str, where: str):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: {what} is not valid JSON ({e.msg})") from None
    return value


def import_nestful(path: str | Path) -> list[dict]:
    """Records from NESTFUL's JSON (a list) or JSONL file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        items = json.loads(text) if text.lstrip().startswith("[") else [json.loads(line) for line in
                                                                        text.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON or JSONL ({e.msg} at line {e.lineno})") from None
    records = []
    for i, item in enumerate(items):
        where = f"{path} record {i}"
        if not isinstance(item, dict) or not isinstance(item.get("input"), str):
            raise ValueError(f"{where}: needs a string \"input\"")
        calls = _json(item.get("output"), "output", where)
        if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                                  and isinstance(c.get("arguments", {}), dict) for c in calls):
            raise ValueError(f"{where}: output must be a list of {{\"name\", \"arguments\", \"label\"}}")
        sample = str(item.get("sample_id", i))
        records.append({"id": f"nestful-{sample}", "task": NESTFUL,
                        "messages": [{"role": "user", "content": item["input"]}],
                        "answer": [{"name": c["name"], "arguments": c.get("arguments", {}),
                                    "label": c.get("label") or f"$var_{k}"} for k, c in enumerate(calls, 1)],
                        "meta": {"gold_answer": item.get("gold_answer"), "tools": _json(item.get("tools", []), "tools",
                                                                                        where),
                                 "sample_id": sample, "source": "nestful", "domain": NESTFUL}})
    return records
