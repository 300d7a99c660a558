"""Generated tasks in the published benchmarks' own formats (`generate(..., format="official")`), so training
can target what evaluation measures.

A generated record becomes the row its benchmark releases (the columns `importers` reads: PI-LLM's one-line
`key: value; ` stream and `answer_formatted`, NeedleBench's `<Document>` prompt with a `\\boxed{}` answer,
MRCR's chat with its random prefix, BABILong's `input`/`question`/`target`), and that row goes through the
benchmark's importer: the record is exactly what `sculptor-rl data import` makes of such a row, and is scored by
the benchmark's own rule (`benchmark_scoring`). The generated record's own meta (its parameters and what the
question asks about) is kept beside the importer's, so the scripted teachers can run on it.
"""

from __future__ import annotations

import json
import random
import re
import string

from . import gsm_infinite
from .common import ordinal, size_label
from ..records import context_spans
from .importers import FORMATS

__all__ = ["convert", "official_row"]

# The prompts of the releases (the layouts `importers` reads; see tests/test_importers.py for a row of each).
PI_LLM_PROMPT = ("As my secretary, I need you to carefully read a text stream where the values of multiple keys are "
                 "being continuously updated. The keys to track include {keys}.\n\nThe text stream starts on the next "
                 "line.\n {stream}\n\nWhat are the current value of {asked} you are tracking? End your response "
                 "with: 'The current value of <key> is <value>.'")
NEEDLEBENCH_PROMPT = ("This is a test of long-text capability.\nThe content of the long document is as follows\n\n"
                      "<Document>\n{document}\n</Document>\n\nBased on the information in the document, now please "
                      "answer: who is the eldest relative that '{person}' can trace back to in the context?\n"
                      "At the end of your response, remember to put your final answer within \\boxed{{}}.")
MRCR_QUESTION = ("Prepend {prefix} to the {nth} (1 indexed) {what}. Do not include any other text in your "
                 "response.")


def _context(record: dict) -> str:
    ((i, start, end),) = context_spans(record)
    return record["messages"][i]["content"][start:end]


def _pi_llm(record: dict) -> dict:
    meta = record["meta"]
    stream = "".join(f"{line}; " for line in _context(record).split("\n"))
    asked = meta["asked_keys"]
    which = f"each key ({', '.join(asked)})" if meta["query"] == "all" else f"the key {asked[0]}"
    keys = list(dict.fromkeys(line.split(": ", 1)[0] for line in _context(record).split("\n")))
    prompt = PI_LLM_PROMPT.format(keys=", ".join(keys), stream=stream.rstrip(), asked=which)
    return {"prompt": json.dumps([{"role": "user", "content": prompt}]),
            "answer_formatted": json.dumps(record["answer"]), "n_updates": meta["updates"], "n_keys": meta["keys"]}


def _needlebench(record: dict) -> dict:
    meta = record["meta"]
    return {"prompt": NEEDLEBENCH_PROMPT.format(document=_context(record), person=meta["person"]),
            "answer": record["answer"], "length": size_label(meta["context_tokens"]), "num_needles": meta["needles"]}


_EXCHANGE = re.compile(r"^User: (.*)\nAssistant: (.*)$", re.M)


def _mrcr(record: dict) -> dict:
    meta = record["meta"]
    chat = []
    for request, reply in _EXCHANGE.findall(_context(record)):
        chat += [{"role": "user", "content": request}, {"role": "assistant", "content": reply}]
    rng = random.Random(record["id"])
    prefix = "".join(rng.choices(string.ascii_letters + string.digits, k=10))
    what = re.sub(r"^(Write|Tell me) an? |\.$", "", meta["request"])  # "Write a riddle about X." -> "riddle about X"
    chat.append({"role": "user", "content": MRCR_QUESTION.format(prefix=prefix, nth=ordinal(meta["occurrence"]),
                                                                 what=what)})
    return {"prompt": json.dumps(chat), "answer": prefix + record["answer"], "random_string_to_prepend": prefix,
            "n_needles": meta["needles"], "total_messages": len(chat), "n_chars": len(_context(record))}


def _babilong(record: dict) -> dict:
    meta = record["meta"]
    return {"input": _context(record), "question": f"Where is {meta['person']}?", "target": record["answer"],
            "task": "qa1", "length": size_label(meta["context_tokens"])}


ROWS = {"pi_llm": _pi_llm, "needlebench": _needlebench, "mrcr": _mrcr, "babilong": _babilong,
        "gsm_infinite": lambda record: gsm_infinite.official_row(record, _context(record))}


def official_row(record: dict) -> dict:
    """The row the benchmark of `record`'s family would release for it."""
    if record["task"] not in ROWS:
        raise ValueError(f"no official format for task {record['task']!r} (have: {', '.join(ROWS)})")
    return ROWS[record["task"]](record)


def convert(record: dict) -> dict:
    """A generated record in its benchmark's official format (see the module docstring)."""
    convert_row = FORMATS[record["task"]][0]
    out = convert_row(official_row(record), record["id"], {"where": record["id"], "split": None, "source": "generated"})
    own = {k: v for k, v in record["meta"].items() if k not in ("bucket", "approx_tokens", "question", "context")}
    return {**out, "meta": {**own, **out["meta"]}}
