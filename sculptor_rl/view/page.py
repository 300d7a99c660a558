"""`sculptor-rl view PATH`: one self-contained HTML page of a run folder, a trajectories file or a samples file.

The page holds its data as JSON inside it (no network, opens from disk): a small row per trajectory for the
list and its filters, and each trajectory's timeline (`timeline.timeline`) as a JSON string the page parses only
when the trajectory is opened; the list is paged. A folder is searched for what the project writes:
`**/trajectories.jsonl` (rollout, collect, eval's `runs/<model>/<mode>/`), RL's `rollouts/step-N.rankR.jsonl`,
`**/samples.jsonl`, eval's `results.json` (its table, intervals and paired tests as `eval.report` wrote them) and
the trainers' log history (the newest `checkpoint-*/trainer_state.json` of each training folder).
"""

from __future__ import annotations

import functools
import http.server
import json
import re
from pathlib import Path

from ..envs import env_class
from ..envs.base import Env
from ..jsonl import iter_jsonl
from ..samples import read_samples
from ..trajectory import Trajectory
from .metrics import METRICS, definition
from .timeline import KINDS, STATES, summary_row, timeline

__all__ = ["collect", "write_page", "serve"]

TEMPLATE = Path(__file__).with_name("template.html")
ROLLOUT_FILE = re.compile(r"step-(\d+)\.rank(\d+)\.jsonl$")


def _kind(path: Path) -> str | None:
    """"trajectories", "samples" or None, from a JSONL file's first record."""
    for _, record in iter_jsonl(path):
        if isinstance(record, dict) and "steps" in record:
            return "trajectories"
        if isinstance(record, dict) and "loss_mask" in record:
            return "samples"
        return None
    return None


def _source(path: Path, root: Path) -> str:
    """A trajectories file's label: its folder under the run (eval: `model · mode`; RL: `step N`)."""
    if m := ROLLOUT_FILE.search(path.name):
        return f"{path.parent.parent.relative_to(root) if path.parent.parent != root else 'rl'} step {int(m[1])}" + \
            (f" rank {m[2]}" if m[2] != "0" else "")
    rel = path.parent.relative_to(root) if path.parent != root and root in path.parents else Path(path.parent.name)
    parts = rel.parts
    if len(parts) >= 3 and parts[-3] == "runs":  # eval: runs/<model>/<mode>
        return f"{parts[-2]} · {parts[-1]}"
    return str(rel) if str(rel) != "." else path.stem


def _environment(path: Path, root: Path, given: str | type[Env] | None, results: dict) -> type[Env] | None:
    """The environment whose hooks draw a file's trajectories: the one asked for, else an eval mode's (its
    folder's name among the eval environment's modes), else None (chosen per trajectory, `_env_of`)."""
    if given:
        return env_class(given) if isinstance(given, str) else given
    for res_dir, res in results.items():
        env = res.get("environment") or "acm"
        modes = env_class(env).eval_modes()
        if res_dir in path.parents and path.parent.name in modes:
            return env_class(modes[path.parent.name][0])
    return None


@functools.cache
def _acm() -> type[Env]:
    return env_class("acm")


def _env_of(traj: Trajectory) -> type[Env]:
    """ACM's hooks for a trajectory that calls ACM's tools, else the contract's defaults."""
    names = {t["function"]["name"] for t in _acm().tools}
    return _acm() if any(c["name"] in names for s in traj.steps for c in s.calls) else Env


_ORDER = {k: i for i, k in enumerate(METRICS)}


def _order(key: str) -> tuple[int, str]:
    """Curves in the order of METRICS (rollouts, loss, time, the Trainer's), a family's at its place, others last."""
    return _ORDER.get(key, _ORDER.get(key.split("/", 1)[0] + "/*", len(_ORDER))), key


def _curves(root: Path) -> list[dict]:
    """The log history of each training folder under `root` (its newest checkpoint's trainer_state.json)."""
    out = []
    newest: dict[Path, tuple[int, Path]] = {}
    for state in root.rglob("trainer_state.json"):
        folder = state.parent.parent if state.parent.name.startswith("checkpoint-") else state.parent
        step = json.loads(state.read_text()).get("global_step", 0)
        if folder not in newest or step >= newest[folder][0]:
            newest[folder] = (step, state)
    for folder, (_, state) in sorted(newest.items()):
        history = [e for e in json.loads(state.read_text()).get("log_history", []) if "step" in e]
        keys = list(dict.fromkeys(k for e in history for k, v in e.items()
                                  if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)))
        keys.sort(key=_order)
        out.append({"name": str(folder.relative_to(root)) if folder != root else folder.name,
                    "metrics": [{"key": k, "definition": definition(k) or "",
                                 "points": [[e["step"], e[k]] for e in history if isinstance(e.get(k), (int, float))]}
                                for k in keys]})
    return out


def _eval_table(results: dict) -> dict:
    """What the page shows of an eval's results.json: per run and family, accuracy (and its interval), n,
    reward, format errors, context reduction; the paired comparisons as `eval.report.comparisons` computed them."""
    runs = []
    for run in results.get("runs", []):
        families = {}
        for family, s in run.get("tasks", {}).items():
            families[family] = {k: s.get(k) for k in ("n", "accuracy", "correct", "reward", "format_error_rate",
                                                       "context_reduction", "tool_calls_per_task")}
            families[family]["ci"] = s.get("ci", {})
        runs.append({"model": run.get("model"), "mode": run.get("mode"), "average": run.get("average"),
                     "families": families})
    return {"tasks": results.get("tasks", []), "runs": runs, "comparisons": results.get("comparisons", [])}


def _samples_rows(path: Path, source: str) -> list[dict]:
    rows = []
    for k, s in enumerate(read_samples(path)):
        runs, start = [], 0  # runs of equal mask: [trained?, tokens]
        for i in range(1, len(s.loss_mask) + 1):
            if i == len(s.loss_mask) or s.loss_mask[i] != s.loss_mask[start]:
                runs.append([s.loss_mask[start], i - start])
                start = i
        rows.append({"source": source, "index": k, "rollout_id": s.rollout_id, "completions": s.completions,
                     "tokens": len(s.input_ids), "trained": sum(s.loss_mask), "reward": s.reward, "runs": runs})
    return rows


def _tasks(files: list[Path]) -> dict[str, dict]:
    """Task records by id, from the JSONL files among `files` that hold them (id, task, messages; no steps)."""
    out = {}
    for f in files:
        for _, record in iter_jsonl(f):
            if not (isinstance(record, dict) and "messages" in record and "id" in record and "steps" not in record):
                break
            out.setdefault(record["id"], record)
    return out


def collect(path: str | Path, environment: str | type[Env] | None = None, tasks: str | Path | None = None) -> dict:
    """The page's data of `path` (a folder, a trajectories file or a samples file); `tasks`: a task file for the
    original text of folded fragments (default: the task files found in the folder)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    root = path if path.is_dir() else path.parent
    files = sorted(p for p in root.rglob("*.jsonl") if not p.name.endswith(".partial")) if path.is_dir() else [path]
    result_files = sorted(root.rglob("results.json")) if path.is_dir() else []
    results = {}
    for f in result_files:
        try:
            results[f.parent] = json.loads(f.read_text())
        except json.JSONDecodeError:
            continue
    records = _tasks([Path(tasks)] if tasks else [f for f in files if _kind(f) is None])
    rows, details, samples = [], [], []
    kinds = dict(KINDS)
    for f in files:
        kind = _kind(f)
        if kind is None:
            continue
        source = _source(f, root)
        if kind == "samples":
            samples += _samples_rows(f, source)
            continue
        env = _environment(f, root, environment, results)
        for where, record in iter_jsonl(f):
            try:
                traj = Trajectory.from_json(record)
            except TypeError as e:
                raise ValueError(f"{where}: not a trajectory record ({e})") from None
            used = env or _env_of(traj)
            kinds.update(used.view_spans)
            rows.append(summary_row(traj, source))
            details.append(json.dumps(timeline(traj, used, records.get(traj.task_id)), ensure_ascii=False))
    if path.is_file() and not rows and not samples:
        raise ValueError(f"{path}: neither trajectories nor samples (records with 'steps' or 'loss_mask')")
    return {"title": str(path), "rows": rows, "details": details, "samples": samples, "kinds": kinds,
            "states": list(STATES),
            "curves": _curves(root) if path.is_dir() else [],
            "evals": [{"name": str(d.relative_to(root)) if d != root else d.name, **_eval_table(r)}
                      for d, r in results.items()]}


def _embedded(data: dict) -> str:
    """JSON safe inside a <script> element ('</' and '<!--' cannot end or open anything there)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")


def render(data: dict) -> str:
    return TEMPLATE.read_text().replace("/*DATA*/null", _embedded(data), 1)


def write_page(path: str | Path, out: str | Path | None = None, environment: str | None = None,
               tasks: str | Path | None = None) -> Path:
    """Write the page of `path` to `out` (default: `view.html` in the folder, or beside the file); returns it."""
    path = Path(path)
    out = Path(out) if out else (path / "view.html" if path.is_dir() else path.with_suffix(".html"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(collect(path, environment, tasks)), encoding="utf-8")
    return out


def serve(page: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1 (only) that serves `page` at `/`; the caller runs `serve_forever`."""
    body = page.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            if self.path.split("?")[0] not in ("/", "/" + page.name):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
