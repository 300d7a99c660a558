"""The task record and its IO: records to JSONL/Parquet and back, or from a Hugging Face `datasets` name or
directory.

A record (one JSON object per line in files):

    {"id": "pi_llm-s0-00012", "task": "pi_llm",
     "messages": [{"role": "user", "content": <intro>\\n\\n<long context>\\n\\n<question with answer format>}],
     "answer": <JSON value: a str, or {key: value} for pi_llm>,
     "meta": {"bucket": "4/64", "approx_tokens": 1443, <generation params>, <what the question asks about:
              asked_keys (pi_llm), person (needlebench, babilong), request and occurrence (mrcr)>,
              "question": <the question>, "context": [{"message": 0, "start": 83, "end": 5712}]}}

`task` names the family that scores it (`sculptor_rl.envs.tasks`); `meta.context` says where a long context lies
(character spans of messages, `context_spans`). Records carry no system message: the environment a record runs in
gives its own.

Every record is validated on load; a bad one raises ValueError naming the file, the line or row, and the
problem. In Parquet, `answer` and `meta` are stored as JSON text in columns `answer_json` and `meta_json`:
their types differ between families (a str, a dict), which a Parquet column cannot hold. The loader accepts
either form, so users' own Parquet or `datasets` data may use plain `answer`/`meta` columns.
"""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Collection, Iterable, Iterator

from .jsonl import iter_jsonl

REQUIRED = ("id", "task", "messages", "answer")
ROLES = ("system", "user", "assistant", "tool")


def write_parquet(records: Iterable[dict], path: str | Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"id": r["id"], "task": r["task"],
             "messages": [{"role": m["role"], "content": m["content"]} for m in r["messages"]],
             "answer_json": json.dumps(r["answer"], ensure_ascii=False),
             "meta_json": json.dumps(r.get("meta", {}), ensure_ascii=False)} for r in records]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def load_tasks(source: str | Path, split: str = "train", limit: int | None = None,
               known: Collection[str] | None = None, check=None, hint=None) -> list[dict]:
    """Records from a `.jsonl` file, a `.parquet` file, or a `datasets` name or directory (`split` is used
    only there). At most `limit` records, in order. An empty source is an error, not an empty run. `known`: the
    task names a record may have (None: any). `check(record)`: the caller's own checks of each record (a ValueError,
    given the record's place); `hint(task)`: what to do about an unknown task, said after its error."""
    source = str(source)
    if source.endswith(".jsonl"):
        rows = iter_jsonl(source)
    elif source.endswith(".parquet"):
        rows = _parquet_rows(source)
    elif Path(source).is_file():
        raise ValueError(f"{source}: unknown task file format (use .jsonl, .parquet or a datasets directory)")
    else:
        rows = _datasets_rows(source, split)
    records, first_seen = [], {}
    for where, row in rows:
        if limit is not None and len(records) >= limit:
            break
        record = validate(_decode(row, where), where, known, hint)
        if check is not None:
            try:
                check(record)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
        if record["id"] in first_seen:
            raise ValueError(f"{where}: duplicate id {record['id']!r} (first at {first_seen[record['id']]})")
        first_seen[record["id"]] = where
        records.append(record)
    if not records and limit != 0:
        raise ValueError(f"{source}: no task records in it")
    return records


def context_spans(record: dict) -> list[tuple[int, int, int]]:
    """(message index, start, end) of each piece of the record's long context (`meta.context`: a list of
    {"message": i, "start": s, "end": e}, character spans of `messages[i]["content"]`), checked against its
    messages; a record without one, or with a span outside its messages, is a ValueError naming the record."""
    spans = (record.get("meta") or {}).get("context")
    if not isinstance(spans, list):
        raise ValueError(f"task {record.get('id')!r}: no meta.context (where its long context lies); generate "
                         f"tasks with `sculptor-rl data generate`, import published benchmarks with "
                         f"`sculptor-rl data import`, or add the spans yourself")
    messages, out = record["messages"], []
    for span in spans:
        try:
            i, start, end = span["message"], span["start"], span["end"]
            if not (0 <= i < len(messages) and 0 <= start <= end <= len(messages[i]["content"])):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"task {record.get('id')!r}: meta.context span {span!r} is not inside its messages") \
                from None
        out.append((i, start, end))
    return out


def validate(record, where: str = "record", known: Collection[str] | None = None, hint=None) -> dict:
    """The record itself if it has the required fields with the right types, else ValueError (an unknown task's
    ends with `hint(task)` where given)."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    for field in REQUIRED:
        if record.get(field) is None:
            raise ValueError(f"{where}: missing required field {field!r} (required: {', '.join(REQUIRED)})")
    for field in ("id", "task"):
        if not isinstance(record[field], str) or not record[field]:
            raise ValueError(f"{where}: field {field!r} must be a non-empty string, got {record[field]!r}")
    if known is not None and record["task"] not in known:
        raise ValueError(f"{where}: unknown task {record['task']!r} (known: {', '.join(sorted(known))})"
                         + (f"; {hint(record['task'])}" if hint else ""))
    messages = record["messages"]
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: field 'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
            raise ValueError(f"{where}: messages[{i}] must be {{'role': one of {ROLES}, 'content': str}}, "
                             f"got {m!r:.200}")
    if not isinstance(record.get("meta", {}), dict):
        raise ValueError(f"{where}: field 'meta' must be an object")
    if "context" in record.get("meta", {}):
        try:
            context_spans(record)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    return record


def _decode(row, where: str):
    """Parquet/datasets rows: `*_json` columns decoded, `meta` defaulted, null message keys dropped."""
    if not isinstance(row, dict):
        return row
    row = dict(row)
    for field in ("answer", "meta"):
        if isinstance(row.get(f"{field}_json"), str):
            try:
                row[field] = json.loads(row.pop(f"{field}_json"))
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: column '{field}_json' is not valid JSON ({e.msg})") from None
    row.setdefault("meta", {})
    if isinstance(row.get("messages"), list):
        row["messages"] = [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m
                           for m in row["messages"]]
    return row


def _parquet_rows(path: str) -> Iterator[tuple[str, object]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except (pa.ArrowException, OSError) as e:  # truncated, corrupt, or not Parquet at all
        raise ValueError(f"{path}: not a readable Parquet file ({e})") from None
    for number, row in enumerate(rows):
        yield f"{path} row {number}", row


def _datasets_rows(source: str, split: str) -> Iterator[tuple[str, object]]:
    import datasets

    try:
        rows = datasets.load_dataset(source, split=split)
    except (OSError, ValueError) as e:  # not found, no data files, no such split, hub unreachable
        raise ValueError(f"{source}: cannot load it as a datasets name or directory ({e})") from None
    for number, row in enumerate(rows):
        yield f"{source} [{split}] row {number}", row
