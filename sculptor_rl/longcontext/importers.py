"""Importers of the published benchmarks: a file or `datasets` directory in a benchmark's own release format
→ task records (the format of sculptor_rl/records.py), scored by that benchmark's rule
(`benchmark_scoring`). Nothing is downloaded: the user points at what they downloaded.

Input: `.jsonl`, `.json` (a list of objects), `.parquet`, `.csv`/`.tsv`, or a directory written by
`datasets.Dataset.save_to_disk` (a `DatasetDict`'s splits are read in turn; BABILong names its splits by task).
A record keeps the benchmark's own prompt text, answer and metadata columns (in `meta`, beside `bucket`,
`approx_tokens`, `question` and `benchmark`), carries no system message (a benchmark's own system message moves
to `meta.system_prompt`), and says where its long context lies:

    meta.context = [{"message": i, "start": s, "end": e}, ...]   # character spans of messages[i]["content"]

one span for a prompt in one message; for MRCR's chat, one span per earlier turn. `records.context_spans` reads it.
A missing column is one ValueError naming the file, the row and the column.
"""

from __future__ import annotations

import ast
import csv
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from . import gsm_infinite
from .benchmark_scoring import BABILONG_LABELS, BENCHMARKS
from .common import approx_tokens, length_bin, release_record

__all__ = ["FORMATS", "import_benchmark", "read_rows"]


def import_benchmark(fmt: str, source: str | Path, **options) -> list[dict]:
    """Records of benchmark `fmt` (one of `FORMATS`) from `source`. Options: `articles=FILE` (frames: the
    Wikipedia texts, {"url", "text"} per JSONL line or one {url: text} JSON object); babilong: `task=qa1` and
    `length=4k` (when neither a column nor the file or split name says them) and `prompts=FILE` (its per-task
    prompts)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown benchmark format {fmt!r} (known: {', '.join(FORMATS)})")
    convert, required, allowed = FORMATS[fmt]
    unknown = set(options) - set(allowed)
    if unknown:
        raise ValueError(f"unknown {fmt} option {sorted(unknown)[0]!r} (known: {', '.join(allowed) or 'none'})")
    if fmt == "frames" and options.get("articles"):
        options["articles"] = _read_articles(options["articles"])
    if fmt == "babilong" and options.get("prompts"):
        options["prompts"] = _read_prompts(options["prompts"])
    records, first_seen = [], {}
    # ids the release does not give: from the file or directory name, so that files imported apart stay apart
    name = Path(source).name if Path(source).is_dir() else Path(source).stem
    for number, (where, split, row) in enumerate(read_rows(source)):
        if not isinstance(row, dict):
            raise ValueError(f"{where}: a {fmt} record must be an object, got {type(row).__name__}")
        for column in required:
            if row.get(column) is None:
                raise ValueError(f"{where}: missing column {column!r} (a {fmt} record has {', '.join(required)})")
        default_id = f"{fmt}-{name}-{split + '-' if split else ''}{number:05d}"
        hints = {"where": where, "split": split, "source": str(source), **options}
        record = convert(row, str(row.get("_id") or row.get("id") or default_id), hints)
        if record["id"] in first_seen:
            raise ValueError(f"{where}: duplicate id {record['id']!r} (first at {first_seen[record['id']]})")
        first_seen[record["id"]] = where
        records.append(record)
    if not records:
        raise ValueError(f"{source}: no {fmt} records in it")
    return records


def read_rows(source: str | Path) -> Iterator[tuple[str, str | None, object]]:
    """(where, split, row) for every row of a .jsonl/.json/.parquet/.csv/.tsv file or `datasets` directory."""
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if path.is_dir():
        yield from _dataset_rows(path)
        return
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        from ..jsonl import iter_jsonl

        for where, row in iter_jsonl(path):
            yield where, None, row
    elif suffix == ".json":
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not a JSON file ({e})") from None
        if not isinstance(rows, list):
            raise ValueError(f"{path}: a .json file must hold a list of records")
        for number, row in enumerate(rows):
            yield f"{path} item {number}", None, row
    elif suffix == ".parquet":
        from ..records import _parquet_rows

        for where, row in _parquet_rows(str(path)):
            yield where, None, row
    elif suffix in (".csv", ".tsv"):
        csv.field_size_limit(sys.maxsize)  # a benchmark's context is one field of megabytes
        with path.open(newline="", encoding="utf-8") as f:
            for number, row in enumerate(csv.DictReader(f, delimiter="\t" if suffix == ".tsv" else ","), 2):
                yield f"{path} line {number}", None, row
    else:
        raise ValueError(f"{path}: unknown file type (use .jsonl, .json, .parquet, .csv, .tsv or a datasets directory)")


def _dataset_rows(path: Path) -> Iterator[tuple[str, str | None, object]]:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except (OSError, ValueError, FileNotFoundError) as e:
        raise ValueError(f"{path}: not a directory written by datasets' save_to_disk ({e})") from None
    splits = loaded.items() if isinstance(loaded, datasets.DatasetDict) else [(None, loaded)]
    for split, dataset in splits:
        for number, row in enumerate(dataset):
            yield f"{path}{f' [{split}]' if split else ''} row {number}", split, row


# ---- the formats ----


def _messages(prompt, where: str) -> tuple[list[dict], str | None]:
    """A benchmark's prompt (text, chat messages, or their JSON) → (user/assistant messages, system text)."""
    if isinstance(prompt, str):
        try:
            parsed = json.loads(prompt)
        except json.JSONDecodeError:
            parsed = None
        prompt = parsed if isinstance(parsed, list) else [{"role": "user", "content": prompt}]
    if not (isinstance(prompt, list) and prompt and all(
            isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role") in (
                "system", "user", "assistant") for m in prompt)):
        raise ValueError(f"{where}: column 'prompt' must be text or a list of chat messages (role, content)")
    system = "\n\n".join(m["content"] for m in prompt if m["role"] == "system") or None
    messages = [{"role": m["role"], "content": m["content"]} for m in prompt if m["role"] != "system"]
    if not messages or messages[-1]["role"] != "user":
        raise ValueError(f"{where}: the prompt must end with a user message")
    return messages, system


def _last_user_span(messages: list[dict], start: int, end: int) -> tuple[list[tuple[int, int, int]], str]:
    """The span in the last (user) message, and that message's text outside it (the question)."""
    text = messages[-1]["content"]
    return [(len(messages) - 1, start, end)], (text[:start] + text[end:]).strip()


def _pi_llm(row: dict, rid: str, hints: dict) -> dict:
    """giantfish-fly/pi-llm (core, sequential_additional): `prompt` (chat messages as JSON, or text) whose
    update stream is one long `key: value; ` line, `answer_formatted` ({key: last value} as JSON)."""
    where = hints["where"]
    messages, system = _messages(row["prompt"], where)
    answer = row["answer_formatted"]
    if isinstance(answer, str):
        try:
            answer = json.loads(answer)
        except json.JSONDecodeError:
            answer = None
    if not (isinstance(answer, dict) and answer and all(isinstance(v, str) for v in answer.values())):
        raise ValueError(f"{where}: column 'answer_formatted' must be a JSON object {{key: value}}")
    text = messages[-1]["content"]
    start, end, pos = 0, 0, 0  # the stream is the prompt's longest line
    for line in text.split("\n"):
        if len(line.strip()) > end - start:
            start = pos + len(line) - len(line.lstrip())
            end = pos + len(line.rstrip())
        pos += len(line) + 1
    spans, question = _last_user_span(messages, start, end)
    # the experiment's variable (OpenCompass weighs by it); the report shows each bucket's mean length beside it
    n = row.get("n_updates")
    bucket = f"{n} updates" if n is not None else length_bin(approx_tokens(text))
    return release_record("pi_llm", rid, messages, answer, spans, question, bucket, row, ("prompt", "answer_formatted"),
                   system)


_DOCUMENT = re.compile(r"<(Document|文档)>\n?(.*?)\n?</\1>", re.DOTALL)


def _needlebench(row: dict, rid: str, hints: dict) -> dict:
    """NeedleBench v2 as OpenCompass builds it (opencompass/datasets/needlebench_v2/multi.py): `prompt` with
    the haystack inside `<Document>...</Document>` (`<文档>` in Chinese), `answer` the eldest ancestor; the
    optional columns `length`, `depth`, `num_needles`, `language` are kept."""
    messages, system = _messages(row["prompt"], hints["where"])
    found = _DOCUMENT.search(messages[-1]["content"])
    if not found:
        raise ValueError(f"{hints['where']}: column 'prompt' has no <Document>...</Document> block")
    spans, question = _last_user_span(messages, found.start(2), found.end(2))
    length = row.get("length") or length_bin(approx_tokens(messages[-1]["content"]))
    bucket = f"{length}/{row['num_needles']}" if row.get("num_needles") is not None else str(length)
    return release_record("needlebench", rid, messages, str(row["answer"]), spans, question, bucket, row,
                   ("prompt", "answer"), system)


def _mrcr_bin(tokens: int) -> str:
    """OpenAI MRCR's token bins, 4k-8k, 8k-16k, ..., continued below 4k (1k-2k, 2k-4k; "<1k")."""
    if tokens < 1024:
        return "<1k"
    low = 1024
    while tokens >= 2 * low:
        low *= 2
    return f"{low // 1024}k-{2 * low // 1024}k"


def _mrcr(row: dict, rid: str, hints: dict) -> dict:
    """openai/mrcr: `prompt` (the chat as a JSON list of messages; the last user message asks to prepend
    `random_string_to_prepend` to the i-th reply), `answer` (with that prefix), `n_needles`,
    `desired_msg_index`, `total_messages`, `n_chars` kept in meta. The chat stays a chat: every turn before
    the last is context."""
    messages, system = _messages(row["prompt"], hints["where"])
    spans = [(i, 0, len(m["content"])) for i, m in enumerate(messages[:-1])]
    bin_ = _mrcr_bin(approx_tokens("".join(m["content"] for m in messages)))
    bucket = f"{bin_}/{row['n_needles']}" if row.get("n_needles") is not None else bin_
    return release_record("mrcr", rid, messages, str(row["answer"]), spans, messages[-1]["content"], bucket, row,
                   ("prompt", "answer"), system)


BABILONG_INSTRUCTION = ("The context below hides a few facts among unrelated text. Answer the question at the end "
                        "using only those facts: give the answer in your first sentence.")
_BABILONG_PARTS = ("instruction", "examples", "post_prompt")
# booydar/babilong babilong/prompts.py DEFAULT_TEMPLATE = TASK_TEMPLATE + "\n\n" + USER_TEMPLATE, filled by
# `get_formatted_input` (the context stripped, the whole stripped).
BABILONG_TASK_TEMPLATE = "{instruction}\n\n{examples}\n\n{post_prompt}"
BABILONG_USER_TEMPLATE = "<context>\n{context}\n</context>\n\nQuestion: {question}"


def _babilong(row: dict, rid: str, hints: dict) -> dict:
    """RMT-team/babilong (booydar/babilong): `input` (the facts in filler), `question`, `target`. The bAbI task
    (qa1...qa20) comes from a `task` column, the split, the file name or the `task` option; the length bucket
    (0k...128k) from a `length` column, the path or the `length` option. The prompt is babilong/prompts.py's
    DEFAULT_TEMPLATE filled as its `get_formatted_input` fills it, its parts per task from the `prompts` option
    (a JSON file {"qa1": {"instruction", "examples", "post_prompt"}}, e.g. the repository's DEFAULT_PROMPTS),
    else a generic instruction of ours and empty examples and post_prompt (as the official runs without them)."""
    source = f"{hints['source']} {hints['split'] or ''}"
    qa = re.search(r"\bqa\d+", str(row.get("task") or hints.get("task") or hints["split"] or ""))
    qa = qa or re.search(r"(?<![a-z])qa\d+(?![0-9])", source)
    if not qa:
        raise ValueError(f"{hints['where']}: cannot tell the bAbI task (qa1, qa2, ...): add a 'task' column, name "
                         f"the file or split after it, or pass task=qa1")
    if qa.group(0) not in BABILONG_LABELS:
        raise ValueError(f"{hints['where']}: BABILong has tasks qa1-qa20, not {qa.group(0)}")
    length = row.get("length") or hints.get("length")
    if not length:
        found = re.search(r"(?<![a-z0-9.])(\d+(?:\.\d+)?k)(?![a-z0-9])", source, re.IGNORECASE)
        length = found.group(1) if found else length_bin(approx_tokens(row["input"]))
    prompts = hints.get("prompts")
    if prompts is not None and qa.group(0) not in prompts:
        raise ValueError(f"{hints['where']}: the prompts file has no prompt for {qa.group(0)}")
    parts = prompts[qa.group(0)] if prompts is not None else {"instruction": BABILONG_INSTRUCTION}
    context = str(row["input"]).strip()
    head = (BABILONG_TASK_TEMPLATE.format(**{k: parts.get(k, "") for k in _BABILONG_PARTS}) + "\n\n"
            + BABILONG_USER_TEMPLATE.split("{context}")[0]).lstrip()
    tail = BABILONG_USER_TEMPLATE.split("{context}")[1].format(question=row["question"])
    text = f"{head}{context}{tail}".rstrip()
    messages = [{"role": "user", "content": text}]
    spans = [(0, len(head), len(head) + len(context))]
    return release_record("babilong", rid, messages, str(row["target"]).strip(), spans, str(row["question"]),
                   f"{length}/{qa.group(0)}", row, ("input", "question", "target", "task", "length"),
                   babilong_task=qa.group(0))


def _read_prompts(path) -> dict[str, dict]:
    """BABILong's per-task prompts: one JSON object {task: {"instruction", "examples", "post_prompt"}}."""
    try:
        prompts = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a JSON file of prompts ({e})") from None
    if not (isinstance(prompts, dict) and all(
            isinstance(p, dict) and set(p) <= set(_BABILONG_PARTS) and all(isinstance(v, str) for v in p.values())
            for p in prompts.values())):
        raise ValueError(f"{path}: prompts must be one JSON object {{task: {{{', '.join(_BABILONG_PARTS)}: text}}}}")
    return prompts


# LongBench v2's zero-shot prompt (THUDM/LongBench, prompts/0shot.txt), filled as pred.py fills it.
LONGBENCH_V2_PROMPT = ("Please read the following text and answer the question below.\n\n<text>\n$DOC$\n</text>\n\n"
                       "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n"
                       "(D) $C_D$\n\nFormat your response as follows: \"The correct answer is (insert answer here)\".")
_LONGBENCH_QUESTION = LONGBENCH_V2_PROMPT[  # what follows the context: where its span ends
    LONGBENCH_V2_PROMPT.index("\n</text>"):LONGBENCH_V2_PROMPT.index("$Q$")]
_LONGBENCH_COLUMNS = ("_id", "question", "choice_A", "choice_B", "choice_C", "choice_D", "answer", "context")


def _longbench_v2(row: dict, rid: str, hints: dict) -> dict:
    """THUDM/LongBench-v2: `_id`, `domain`, `sub_domain`, `difficulty`, `length` (short/medium/long),
    `question`, `choice_A`..`choice_D`, `answer` (a letter), `context`."""
    answer = str(row["answer"]).strip()
    if answer not in ("A", "B", "C", "D"):
        raise ValueError(f"{hints['where']}: column 'answer' must be one of A, B, C, D, got {answer!r}")
    # prompts/0shot.txt filled as pred.py fills it: one replace after another, in its order
    text = LONGBENCH_V2_PROMPT.replace("$DOC$", str(row["context"]).strip())
    for mark, column in (("$Q$", "question"), *((f"$C_{c}$", f"choice_{c}") for c in "ABCD")):
        text = text.replace(mark, str(row[column]).strip())
    start = text.index("<text>\n") + len("<text>\n")
    messages = [{"role": "user", "content": text}]
    bucket = f"{row.get('length') or 'any'}/{row.get('difficulty') or 'any'}"
    return release_record("longbench_v2", rid, messages, answer, [(0, start, text.rindex(_LONGBENCH_QUESTION))],
                   str(row["question"]).strip(), bucket, row, _LONGBENCH_COLUMNS)


def _read_articles(path) -> dict[str, str]:
    """{url: text} from a JSON object or from JSONL lines {"url": ..., "text": ...}."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        articles = json.loads(path.read_text(encoding="utf-8"))
        if not (isinstance(articles, dict) and all(isinstance(v, str) for v in articles.values())):
            raise ValueError(f"{path}: articles must be one JSON object {{url: text}}")
        return articles
    from ..jsonl import iter_jsonl

    articles = {}
    for where, row in iter_jsonl(path):
        if not (isinstance(row, dict) and isinstance(row.get("url"), str) and isinstance(row.get("text"), str)):
            raise ValueError(f"{where}: an article line must be {{\"url\": ..., \"text\": ...}}")
        articles[row["url"]] = row["text"]
    return articles


LINK_COLUMN = r"wikipedia_link_\d+\+?"  # wikipedia_link_1 .. wikipedia_link_10, wikipedia_link_11+ (the rest)


def _links(row: dict, where: str) -> list[str]:
    """The record's Wikipedia links: `wiki_links` (a list, or its Python/JSON text), else `wikipedia_link_N`."""
    links = row.get("wiki_links")
    if isinstance(links, str):
        try:
            links = ast.literal_eval(links)  # literals only: never runs code
        except (ValueError, SyntaxError):
            raise ValueError(f"{where}: column 'wiki_links' is not a list of links") from None
    if links is None:
        numbered = sorted((int(k.rsplit("_", 1)[1].rstrip("+")), v) for k, v in row.items()
                          if re.fullmatch(LINK_COLUMN, k) and v)
        links = [v for _, v in numbered]
    if not (isinstance(links, list) and all(isinstance(link, str) for link in links)):
        raise ValueError(f"{where}: column 'wiki_links' is not a list of links")
    return links


FRAMES_INDEX = ("", "Unnamed: 0", "id")  # test.tsv's first column has no name; pandas and copies name it


def _frames(row: dict, rid: str, hints: dict) -> dict:
    """google/frames-benchmark (test.tsv): its unnamed index column (the record is `frames-<index>`), `Prompt`
    (the question), `Answer`, `wiki_links` (and `wikipedia_link_1`...), `reasoning_types`. The release holds no
    article text: with `articles=FILE` the linked articles become the context, without it the record is the
    question alone (no long context)."""
    where, question = hints["where"], str(row["Prompt"]).strip()
    index = next((str(row[k]) for k in FRAMES_INDEX if row.get(k) not in (None, "")), None)
    rid = rid if index is None else f"frames-{index}"
    links = _links(row, where)
    tail = f"Question: {question}\nGive your final answer after `Answer:`."
    articles = hints.get("articles")
    if articles:
        missing = [link for link in links if link not in articles]
        if missing:
            raise ValueError(f"{where}: no text for article {missing[0]} in the articles file")
        head = "Answer the question using the Wikipedia articles below.\n\n"
        docs = "\n\n".join(f"<article url=\"{link}\">\n{articles[link]}\n</article>" for link in links)
        text, spans = f"{head}{docs}\n\n{tail}", [(0, len(head), len(head) + len(docs))]
    else:
        text, spans = tail, []
    reasoning = str(row.get("reasoning_types") or "")
    row = {k: v for k, v in row.items() if not re.fullmatch(LINK_COLUMN, k)}  # in meta.links
    return release_record("frames", rid, [{"role": "user", "content": text}], str(row["Answer"]).strip(), spans, question,
                   f"{len(links)} docs", row, ("Prompt", "Answer", *FRAMES_INDEX, "wiki_links"), links=links,
                   reasoning_types=[t.strip() for t in reasoning.split("|") if t.strip()])


# format -> (converter, required columns, options)
FORMATS: dict[str, tuple[Callable[[dict, str, dict], dict], tuple[str, ...], tuple[str, ...]]] = {
    "pi_llm": (_pi_llm, ("prompt", "answer_formatted"), ()),
    "needlebench": (_needlebench, ("prompt", "answer"), ()),
    "mrcr": (_mrcr, ("prompt", "answer", "random_string_to_prepend"), ()),
    "babilong": (_babilong, ("input", "question", "target"), ("task", "length", "prompts")),
    "longbench_v2": (_longbench_v2, _LONGBENCH_COLUMNS, ()),
    "frames": (_frames, ("Prompt", "Answer"), ("articles",)),
    "gsm_infinite": (gsm_infinite.convert_row, gsm_infinite.COLUMNS, ()),
}
assert tuple(FORMATS) == BENCHMARKS
