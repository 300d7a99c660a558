"""Time `sculptor-rl view` on a file of 2,000 trajectories: writing the page, loading it in headless Chromium,
opening a trajectory's timeline, filtering the list.

    python bench/view_render.py [--num 2000] [--out /tmp/view-bench] [--screenshots DIR]

The trajectories are real: the scripted teachers of the four long-context families through the agent loop with
the embedded model's tokenizer (`rollout --engine scripted`), num/4 tasks per family, written once to OUT and
reused. `--screenshots DIR` also saves a timeline, a compare view and the list (what docs/viewer.md shows).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from sculptor_rl.envs.tasks import generate  # noqa: E402 - needs the sys.path line above
from sculptor_rl.jsonl import write_jsonl  # noqa: E402
from sculptor_rl.rollout import RolloutConfig, rollout_to_file  # noqa: E402
from sculptor_rl.view import write_page  # noqa: E402
from sculptor_rl.view.browser import Chromium  # noqa: E402

FAMILIES = ("pi_llm", "needlebench", "mrcr", "babilong")


def trajectories(out: Path, num: int) -> Path:
    path = out / "trajectories.jsonl"
    if path.exists() and sum(1 for _ in path.open()) == num:
        return path
    tasks = [t for family in FAMILIES for t in generate(family, num // len(FAMILIES), seed=7)]
    write_jsonl(tasks, out / "tasks.jsonl")
    rollout_to_file(tasks, RolloutConfig(engine="scripted"), path)
    return path


def in_page(b: Chromium, script: str) -> float:
    """Milliseconds the page takes to run `script` (synchronous DOM work: a render)."""
    return b.js(f"(() => {{ const t = performance.now(); {script}; return performance.now() - t; }})()")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num", type=int, default=2000)
    p.add_argument("--out", default="/tmp/view-bench")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--screenshots", default=None)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    source = trajectories(out, args.num)
    t = time.perf_counter()
    page = write_page(source, out / "view.html", tasks=out / "tasks.jsonl")
    write_s = time.perf_counter() - t
    result = {"trajectories": sum(1 for _ in source.open()), "input_mb": source.stat().st_size / 2**20,
              "page_mb": page.stat().st_size / 2**20, "write_page_s": write_s}
    loads, opens, filters = [], [], []
    with Chromium() as b:
        for _ in range(args.repeats):
            b.open("about:blank")
            loads.append(b.open(page.as_uri()))  # navigation to the load event: the list's first page drawn
            assert b.js("document.querySelectorAll('#list tr.row').length") == 50
            last = result["trajectories"] - 1
            opens.append(in_page(b, f"history.replaceState(null, '', '#v=t&i={last}'); render()"))
            b.js("history.replaceState(null, '', '#v=list'); render()")
            filters.append(in_page(b, "const e = document.getElementById('f-outcome'); e.value = 'wrong';"
                                      "e.dispatchEvent(new Event('change'))"))
        assert not b.errors, b.errors
        if args.screenshots:
            shots = Path(args.screenshots)
            b.js("history.replaceState(null, '', '#v=list'); state.f.outcome = ''; render()")
            b.screenshot(shots / "view-list.png", max_height=900)
            i = b.js("D.rows.findIndex(r => r.task === 'pi_llm' && r.steps >= 3)")
            b.js(f"history.replaceState(null, '', '#v=t&i={i}&s=1&k=3'); render()")
            b.screenshot(shots / "view-timeline.png", max_height=1100)
    result.update(load_s=statistics.median(loads), open_trajectory_ms=statistics.median(opens),
                  filter_ms=statistics.median(filters))
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}, indent=1))


if __name__ == "__main__":
    main()
