"""Importers of the published benchmarks MemToolAgent evaluates on, as records of the `workbench` and `nestful`
families (`sculptor-rl data import --benchmark workbench|nestful`).

- WorkBench (github.com/olly-styles/WorkBench): `data/processed/queries_and_answers/<domain>_queries_and_answers.csv`
  with columns `query,answer,base_template,chosen_template,domains`; `answer` is a Python-literal list of call
  strings such as `calendar.update_event.func(event_id="00000055", field="event_name", new_value="...")` (possibly
  `[]`), read with `ast` (never evaluated). Every other column is kept in `meta` as released (`domains` as its list);
  `meta.template` (the template the env reports by) is `base_template`. WorkBench's own databases
  (`data/processed/*.csv`) are given as `database`, or found above `queries_and_answers/`: the records then run on
  them (`sandbox.load_database`); without them they run on the sandbox's generated database, where their ids may
  not exist.
- NESTFUL (github.com/IBM/NESTFUL; Basu et al., 2024): a JSON list (or JSONL) of `{"input", "output": [calls with
  "label" and "$var1.field$" references]}` (the GitHub release: `data/executable/executable-data.json`,
  `data/non-executable/non-executable-{glaive,sgd}-data.json`), or the hub's records with `sample_id`, `gold_answer`
  and `tools` too (`.parquet`, `.jsonl` or a `datasets` directory as downloaded); `output` and `tools` may be JSON
  text. A directory imports every `*-data.json` in it and below. Ids are `nestful-<sample_id>`, else
  `nestful-<file>-<row>` (the file name without "-data", so the three files' ids never collide). Tools: a record's
  own `tools` (the hub's), else its file's spec (`*-spec.json` beside it, or `spec`): the entries of the functions
  its gold sequence calls (the release names no per-record tool list); either way as OpenAI-style schemas, each with
  NESTFUL's `output_parameters` (the fields later calls refer to). The gold sequence's final `{"name": "var_result",
  "arguments": {"flights": "$var3$", ...}}` is not a call: it names which results make up the answer. It is kept in
  `meta.var_result` and left out of `answer` (the calls the agent makes and the sequence match compares).
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
    """Records from one WorkBench query/answer CSV or a directory of them. Without `database`, the release's own
    (`data/processed`, the folder above `queries_and_answers`) is used where it lies there."""
    if database is None:
        above = Path(source).resolve().parent if Path(source).is_dir() else Path(source).resolve().parent.parent
        database = above if (above / "calendar_events.csv").exists() else None
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


def _spec_schema(entry: dict) -> dict:
    """One NESTFUL spec entry (its parameters under `query_parameters`, `path_parameters`, `parameters` or
    `arguments`) as an OpenAI-style function schema; `output_parameters` kept beside the parameters."""
    params = {**(entry.get("path_parameters") or {}), **(entry.get("query_parameters") or {}),
              **(entry.get("arguments") or {})}
    listed = entry.get("parameters") or {}
    if "properties" in listed:  # glaive's entries are JSON schemas already
        properties, required = listed["properties"], list(listed.get("required") or [])
    else:
        params.update(listed)
        properties = {k: {key: v[key] for key in ("type", "description", "enum") if key in v}
                      for k, v in params.items()}
        for k, v in params.items():
            if v.get("allowed_values"):
                properties[k]["enum"] = v["allowed_values"]
        required = [k for k, v in params.items() if v.get("required")]
    return {"type": "function", "function": {
        "name": entry["name"], "description": entry.get("description", ""),
        "parameters": {"type": "object", "properties": properties, "required": required},
        "output_parameters": entry.get("output_parameters") or entry.get("output_parameter") or {}}}


def _spec(path: Path) -> dict[str, dict]:
    """{function name: schema} from a `*-spec.json` file."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a NESTFUL spec file ({e})") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("name"), str)
                                                for e in entries):
        raise ValueError(f"{path}: a spec file is a JSON list of tool entries with a name")
    return {e["name"]: _spec_schema(e) for e in entries}


def _nestful_sources(source: Path) -> list[Path]:
    """The GitHub release's `*-data.json` files under a directory, else the one file or `datasets` directory."""
    files = sorted(source.rglob("*-data.json")) if source.is_dir() else []
    return files or [source]


def import_nestful(source: str | Path, spec: str | Path | None = None) -> list[dict]:
    """Records from NESTFUL's files: the release's JSON lists (one, or a directory of `*-data.json`), or the hub's
    rows (`.parquet`, `.jsonl`, a `datasets` directory: `tasks.importers.read_rows`)."""
    records = []
    for path in _nestful_sources(Path(source)):
        sibling = path.with_name(path.name.replace("-data.json", "-spec.json"))
        spec_path = Path(spec) if spec else (sibling if sibling != path and sibling.exists() else None)
        records += _nestful_rows(path, _spec(spec_path) if spec_path else {})
    ids = [r["id"] for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{source}: sample_id {next(i for i in ids if ids.count(i) > 1)!r} occurs twice")
    return records


def _plain(value):
    """A column's value as JSON holds it (parquet gives numpy scalars and arrays)."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)))


def _nestful_rows(path: Path, spec: dict[str, dict]) -> list[dict]:
    from ...longcontext.importers import read_rows

    stem = path.name.removesuffix(".jsonl").removesuffix(".json").removesuffix(".parquet").removesuffix("-data")
    records = []
    for i, (where, _, item) in enumerate(read_rows(path)):
        if not isinstance(item, dict) or not isinstance(item.get("input"), str):
            raise ValueError(f"{where}: needs a string \"input\"")
        item = {k: _plain(v) for k, v in item.items()}
        calls = _json(item.get("output"), "output", where)
        if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                                  and isinstance(c.get("arguments", {}), dict) for c in calls):
            raise ValueError(f"{where}: output must be a list of {{\"name\", \"arguments\", \"label\"}}")
        final = [c for c in calls if c["name"] == "var_result"]
        calls = [c for c in calls if c["name"] != "var_result"]
        own = _json(item.get("tools"), "tools", where) or []
        if not isinstance(own, list) or not all(isinstance(t, dict) and (t.get("name") or t.get("function"))
                                                for t in own):
            raise ValueError(f"{where}: tools must be a list of tool specifications with a name")
        names = list(dict.fromkeys(c["name"] for c in calls))
        missing = [name for name in names if not own and spec and name not in spec]
        # a function the spec file lacks (the release has a few) is offered without parameters, and flagged
        tools = [t if t.get("type") == "function" else _spec_schema(t) for t in own] or [
            spec.get(name) or _spec_schema({"name": name,
                                            "description": "(NESTFUL's spec file has no entry for this function)"})
            for name in names if spec]
        kept = {k: v for k, v in item.items() if k not in ("input", "output", "tools", "sample_id")}
        sample = item.get("sample_id")
        records.append({"id": f"nestful-{sample}" if sample is not None else f"nestful-{stem}-{i:05d}",
                        "task": NESTFUL, "messages": [{"role": "user", "content": item["input"]}],
                        "answer": [{"name": c["name"], "arguments": c.get("arguments", {}),
                                    "label": c.get("label") or f"$var_{k}"} for k, c in enumerate(calls, 1)],
                        "meta": {**kept, "gold_answer": item.get("gold_answer"), "tools": tools,
                                 "sample_id": str(sample if sample is not None else i), "file": path.name,
                                 "source": "nestful", "domain": NESTFUL,
                                 **({"var_result": final[-1].get("arguments", {})} if final else {}),
                                 **({"tools_without_spec": missing} if missing else {})}})
    return records


def import_records(fmt: str, source: str | Path, database: str | Path | None = None,
                   spec: str | Path | None = None) -> list[dict]:
    """`sculptor-rl data import --format workbench|nestful`: the registry's importer call (`database` is
    WorkBench's option, `spec` NESTFUL's)."""
    if fmt == "workbench":
        if spec is not None:
            raise ValueError("unknown workbench option 'spec' (known: database)")
        return import_workbench(source, database)
    if database is not None:
        raise ValueError("unknown nestful option 'database' (known: spec)")
    return import_nestful(source, spec)
