"""LoCoMo's published JSON (snap-research/locomo, data/locomo10.json) as `tamem` records.

The file is a list of samples:

    {"sample_id": "conv-26",
     "conversation": {"speaker_a": ..., "speaker_b": ...,
                      "session_1_date_time": "1:56 pm on 8 May, 2023",
                      "session_1": [{"speaker": ..., "dia_id": "D1:1", "text": ..., ["blip_caption": ...]}, ...], ...},
     "qa": [{"question": ..., "answer": ..., "evidence": ["D1:3"], "category": 1..5}, ...], ...}

Categories as LoCoMo's evaluation code scores them: 1 multi-hop (comma lists), 2 temporal, 3 open-domain (gold cut
at ";"), 4 single-hop, 5 adversarial (no gold answer; left out, as the paper does). A shared image is kept as its
caption, the way LoCoMo's own QA prompt shows it. The records keep LoCoMo's question text and are scored by
LoCoMo's F1 (`metrics.answer_f1`); they have no oracle notes (extract them with an LLM, `extract`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .conversations import question_records

__all__ = ["LOCOMO_CATEGORIES", "load", "records"]

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def _conversation(sample: dict) -> dict:
    c = sample["conversation"]
    numbers = sorted(int(m[1]) for k in c if (m := re.fullmatch(r"session_(\d+)", k)))
    sessions = []
    for n in numbers:
        turns = [{"speaker": t["speaker"], "dia_id": t.get("dia_id", f"D{n}:{i + 1}"),
                  "text": t["text"] + (f" [shares {t['blip_caption']}]" if t.get("blip_caption") else "")}
                 for i, t in enumerate(c[f"session_{n}"])]
        if turns:
            sessions.append({"date_time": c.get(f"session_{n}_date_time", ""), "turns": turns})
    return {"id": f"locomo-{sample['sample_id']}", "speakers": [c["speaker_a"], c["speaker_b"]], "sessions": sessions}


def load(path: str | Path) -> list[tuple[dict, list[dict]]]:
    """(conversation, its scored questions) per sample; ValueError naming the sample and field on a bad file."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected LoCoMo's list of samples")
    out = []
    for k, sample in enumerate(data):
        try:
            convo = _conversation(sample)
            qas = [{"question": qa["question"], "answer": str(qa["answer"]), "evidence": qa.get("evidence", []),
                    "category": LOCOMO_CATEGORIES[qa["category"]]}
                   for qa in sample["qa"] if qa["category"] != 5]
        except (KeyError, TypeError) as e:
            raise ValueError(f"{path}: sample {k} ({sample.get('sample_id') if isinstance(sample, dict) else sample!r})"
                             f" lacks {e}") from None
        out.append((convo, qas))
    return out


def records(path: str | Path) -> list[dict]:
    """Every scored question of the file as a `tamem` record."""
    return [r for convo, qas in load(path)
            for r in question_records(convo, qas, source="locomo")]


def import_records(fmt: str, source: str | Path) -> list[dict]:
    """`sculptor-rl data import --format locomo`: the registry's importer call."""
    return records(source)
