"""The run viewer in a real browser (headless Chromium from the system's packages, `scripts/setup.sh` installs it):
pages of a synthetic run that goes through every span state and of a real small run (the scripted teachers through
the agent loop, with the embedded model's tokenizer) open without console errors; the spans, token counts, sample
cuts and calls shown are the trajectory's; a span's text shows on click; the filters, the compare view and the
run page work."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from sculptor_rl.acm import TOOL_SCHEMAS
from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.cli import main as cli
from sculptor_rl.engines.base import Completion
from sculptor_rl.envs import env_class
from sculptor_rl.envs.acm.env import AcmEnv
from sculptor_rl.envs.tasks import generate
from sculptor_rl.eval.report import comparisons
from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.metrics import per_rollout, summarize
from sculptor_rl.rollout import RolloutConfig, rollout_to_file
from sculptor_rl.toolcalls import ToolResult
from sculptor_rl.samples import build_samples, policy_samples, write_samples
from sculptor_rl.trajectory import read_trajectories, write_trajectories
from sculptor_rl.view import collect, timeline, write_page
from sculptor_rl.view.browser import CHROMIUM, Chromium
from sculptor_rl.view.metrics import definition
from sculptor_rl.view.page import render
from sculptor_rl.view.timeline import STATES

DROP = {"type": "function", "function": {"name": "drop_message", "description": "Remove a message from the context.",
                                          "parameters": {"type": "object", "properties": {"index": {"type": "integer"}},
                                                         "required": ["index"]}}}


class PruningEnv(AcmEnv):
    """ACM plus a tool that deletes a message from the context (as MemAct-style pruning does): the viewer's
    `deleted` state, said through the environment's own `context_events` hook."""

    name = "pruning"
    tools = [*TOOL_SCHEMAS, DROP]
    view_spans = {"fragment": {"label": "fragment (pruning env)", "color": "#117a65"}}

    def __init__(self, task, params=None, **kwargs):
        super().__init__(task, params, **kwargs)
        self.dropped: set[int] = set()

    def execute(self, name, arguments):
        if name != "drop_message":
            return super().execute(name, arguments)
        self.dropped.add(arguments["index"])
        return ToolResult(f"Dropped message {arguments['index']}.", ok=True, modified=True)

    def render(self):
        return [{**m, "content": ""} if i in self.dropped else m for i, m in enumerate(super().render())]

    @staticmethod
    def context_events(call):
        if call["name"] == "drop_message" and call["ok"]:
            return [{"message": call["arguments"]["index"], "state": "deleted"}]
        return AcmEnv.context_events(call)


def _call(name, **arguments):
    return {"function": {"name": name, "arguments": arguments}}


class PlanEngine:
    """A scripted policy: fragment the user's context, search it, fold one fragment and summarize another,
    restore the first, drop the system message, then answer (`answers`: per task id; a task id in `broken` writes
    one malformed call first)."""

    max_model_len = None

    def __init__(self, answers: dict[str, str], broken: set[str] = frozenset()):
        self.answers, self.broken = answers, broken

    def generate(self, requests):
        return [self._next(r) for r in requests]

    def _next(self, req):
        done = sum(m["role"] == "assistant" for m in req.messages)
        task_id = req.rollout_id.split("/")[0]
        plan = ["bad"] if task_id in self.broken else []
        plan += ["fragment", "search", "fold", "restore", "drop", "answer"]
        what = plan[min(done, len(plan) - 1)]
        if what == "bad":
            return Completion(text="<tool_call>{not json</tool_call>")
        if what == "fragment":
            user = next(m for m in req.messages if m["role"] == "user")["content"]
            lines = [line for line in user.splitlines() if line.strip()]
            return Completion(text="", message={"role": "assistant", "content": "", "tool_calls": [_call(
                "fragment_context", start_marker=lines[1][:30], end_marker=lines[-2][-30:], num_fragments=3)]})
        made = re.findall(r"^- (f[a-z0-9]{5}):", "\n".join(m["content"] for m in req.messages if m["role"] == "tool"),
                          re.M)
        calls = {"search": [_call("search_context", query="the")],
                 "fold": [_call("fold_fragment", fragment_id=made[0]),
                          _call("summarize_fragment", fragment_id=made[1], focus="names")],
                 "restore": [_call("restore_fragment", fragment_id=made[0])],
                 "drop": [_call("drop_message", index=0)]}.get(what)
        if calls is None:
            return Completion(text=self.answers[task_id])
        return Completion(text="", message={"role": "assistant", "content": "", "tool_calls": calls})


def _results(runs: dict[str, list]) -> dict:
    """An eval's results.json for `runs` (model -> trajectories in mode acm), its comparisons by eval.report."""
    families = sorted({t.task for trajs in runs.values() for t in trajs})
    out = {"environment": "acm", "tasks": families, "models": list(runs), "modes": ["acm"], "runs": []}
    for model, trajs in runs.items():
        per_task = {f: summarize([t for t in trajs if t.task == f]) for f in families}
        out["runs"].append({"model": model, "mode": "acm", "tasks": per_task, "overall": summarize(trajs),
                            "average": sum(s["accuracy"] for s in per_task.values()) / len(per_task),
                            "rollouts": per_rollout(trajs)})
    out["comparisons"] = comparisons(out)
    return out


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory, fmt):
    """An eval-shaped folder: two checkpoints (sft, gspo) in mode acm on the same 4 tasks, through the real loop
    with the pruning env; wrong answers, a format error and a rollout at the tool-call cap among them; its
    results.json; a trainer_state.json with logged metrics."""
    root = tmp_path_factory.mktemp("synthetic")
    tasks = generate("babilong", 2, seed=1) + generate("needlebench", 2, seed=1)
    (root / "eval").mkdir()
    write_jsonl(tasks, root / "eval" / "tasks.jsonl")
    right = {t["id"]: str(t["answer"]) for t in tasks}
    runs = {}
    for model, answers, broken, capped in [("sft", {**right, tasks[0]["id"]: "nobody"}, {tasks[1]["id"]}, 2),
                                           ("gspo", right, set(), None)]:
        engine = PlanEngine(answers, broken)
        trajs = []
        for group, cap in [(tasks[:capped], 20), (tasks[capped:capped + 1], 4), (tasks[capped + 1:], 20)] \
                if capped else [(tasks, 20)]:  # the task after `capped` stops at a cap of 4 tool calls
            trajs += run_rollouts(group, engine, fmt, lambda task, i: PruningEnv(task, seed=i),
                                  LoopConfig(max_tool_calls=cap, schedule="lockstep"), progress=False)
        write_trajectories(trajs, root / "eval" / "runs" / model / "acm" / "trajectories.jsonl")
        runs[model] = trajs
    (root / "eval" / "results.json").write_text(json.dumps(_results(runs)))
    history = [{"step": s, "reward": -0.5 + 0.2 * s, "accuracy": 0.1 * s, "loss": 0.3 / s, "tools/fold_fragment": 1.0,
                "time/generation_s": 2.0 + s, "clip_ratio/high_mean": 0.0} for s in range(1, 6)]
    (root / "rl" / "checkpoint-5").mkdir(parents=True)
    (root / "rl" / "checkpoint-5" / "trainer_state.json").write_text(json.dumps(
        {"global_step": 5, "log_history": history}))
    return root, runs


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory, fmt):
    """A real small run: the scripted teachers of two families through the agent loop, and their samples."""
    root = tmp_path_factory.mktemp("teachers")
    tasks = generate("pi_llm", 3, seed=0) + generate("mrcr", 3, seed=0)
    write_jsonl(tasks, root / "tasks.jsonl")
    trajs = rollout_to_file(tasks, RolloutConfig(engine="scripted"), root / "trajectories.jsonl", fmt=fmt)
    write_samples(policy_samples(trajs), root / "samples.jsonl")
    return root, trajs


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), "headless Chromium is missing: run scripts/setup.sh (it installs it with apt)"
    with Chromium() as b:
        yield b


def show(b: Chromium, page: Path, hash_: str = "") -> None:
    if b.js("location.href").split("#")[0] != page.as_uri():
        b.open(page.as_uri() + (f"#{hash_}" if hash_ else ""))
    else:
        b.js(f"history.replaceState(null, '', '#' + {json.dumps(hash_)}); render();")  # no hashchange: drawn once
    deadline = time.monotonic() + 10
    while b.js("document.body.dataset.view") is None and time.monotonic() < deadline:
        time.sleep(0.05)


def test_synthetic_run_every_state_spans_counts_and_text(synthetic, browser, tmp_path):
    root, runs = synthetic
    page = write_page(root, tmp_path / "view.html", environment=None)
    data = collect(root)
    assert len(data["rows"]) == 8 and {r["source"] for r in data["rows"]} == {"sft · acm", "gspo · acm"}
    # the eval dir names no pruning env: the page draws with ACM's hooks, so "deleted" is absent there ...
    assert not any(sp["state"] == "deleted" for d in data["details"] for st in json.loads(d)["steps"]
                   for sp in st["spans"])
    # ... and with the environment's own hooks (as `--environment pkg.module:Class` gives) every state is drawn
    page = tmp_path / "pruning.html"
    page.write_text(_render_with(root, PruningEnv))
    traj = runs["gspo"][0]
    index = next(i for i, r in enumerate(collect(root)["rows"]) if r["rollout_id"] == traj.rollout_id
                 and r["source"] == "gspo · acm")
    show(browser, page, f"v=t&i={index}")
    assert browser.errors == []
    expected = timeline(traj, PruningEnv, _task(root, traj.task_id))
    shown = browser.js("""[...document.querySelectorAll('.step')].map(s => ({
        step: +s.dataset.step, cut: s.classList.contains('cut'),
        prompt: s.querySelector('.prompt-tokens').textContent, completion: s.querySelector('.completion-tokens').textContent,
        calls: s.querySelectorAll('.call').length,
        spans: [...s.querySelectorAll('.span')].map(x => [x.dataset.kind, x.dataset.state, +x.dataset.tokens,
                                                         x.classList.contains('trained')])}))""")
    assert len(shown) == len(traj.steps) == 6
    assert {sp[1] for st in shown for sp in st["spans"]} == set(STATES)
    cuts = {s.completions[-1] for s in build_samples(traj)}
    for st, step, exp in zip(shown, traj.steps, expected["steps"]):
        assert st["prompt"] == f"prompt {len(step.prompt_ids)} tokens"
        assert st["completion"] == f"completion {len(step.completion_ids)} tokens"
        assert st["calls"] == len(step.calls) and st["cut"] == (st["step"] in cuts)
        assert [sp[:3] for sp in st["spans"]] == [[s["kind"], s["state"], s["tokens"]] for s in exp["spans"]]
        # every token of the step is drawn: the spans add up to the prompt's ids + the completion's
        assert sum(sp[2] for sp in st["spans"]) == pytest.approx(len(step.prompt_ids) + len(step.completion_ids),
                                                                 abs=0.1 * len(st["spans"]))
        # the loss mask: the completion of this step is trained in its sample, and no tool result ever is
        assert st["spans"][-1][3] and not any(sp[3] for sp in st["spans"] if sp[0] == "tool")
    assert browser.js("document.getElementById('count-calls').textContent") == f"calls {traj.num_tool_calls}"
    assert browser.js("document.getElementById('count-samples').textContent") == f"samples {len(build_samples(traj))}"
    # a fragment's text on click: the one folded, then restored by step 3 (shown so at step 4), from the task record
    k = next(k for k, s in enumerate(expected["steps"][4]["spans"]) if s["state"] == "restored")
    browser.js(f"document.querySelector('.span[data-step=\"4\"][data-k=\"{k}\"]').click()")
    text = browser.js("document.getElementById('detail-text').textContent")
    assert text == expected["texts"][expected["steps"][4]["spans"][k]["text"]] and len(text) > 50
    assert text in _task(root, traj.task_id)["messages"][0]["content"]
    assert "restored" in browser.js("document.getElementById('detail-meta').textContent")
    assert browser.js("getComputedStyle(document.querySelector('.span[data-kind=\"fragment\"]')).backgroundColor") \
        == "rgb(17, 122, 101)"  # the env's own colour (view_spans)
    # SCULPTOR_VIEW_SCREENSHOTS=docs/images keeps this one for the docs (every span state)
    shots = Path(os.environ.get("SCULPTOR_VIEW_SCREENSHOTS") or tmp_path)
    assert browser.screenshot(shots / "view-states.png", max_height=1300).stat().st_size > 10_000
    assert browser.errors == []


def _task(root: Path, task_id: str) -> dict:
    return next(json.loads(line) for line in (root / "eval" / "tasks.jsonl").read_text().splitlines()
                if json.loads(line)["id"] == task_id)


def _render_with(root: Path, env) -> str:
    return render(collect(root, env))


def test_filters_and_compare(synthetic, browser, tmp_path):
    root, runs = synthetic
    page = write_page(root, tmp_path / "view.html")
    show(browser, page, "v=list")
    rows = lambda: browser.js("document.querySelectorAll('#list tr.row').length")  # noqa: E731
    all_trajs = [t for trajs in runs.values() for t in trajs]
    assert rows() == len(all_trajs) == 8

    def pick(id_, value):
        browser.js(f"""(() => {{ const e = document.getElementById('{id_}');
            if (e.type === 'checkbox') e.checked = {json.dumps(value)}; else e.value = {json.dumps(value)};
            e.dispatchEvent(new Event('change')); }})()""")

    pick("f-outcome", "wrong")
    assert rows() == sum(t.score < 1 for t in all_trajs) > 0
    pick("f-outcome", "")
    pick("f-fmt", True)
    assert rows() == sum(t.format_errors > 0 for t in all_trajs) == 1
    pick("f-fmt", False)
    pick("f-cap", True)
    assert rows() == sum(t.stop_reason == "max_tool_calls" for t in all_trajs) > 0
    pick("f-cap", False)
    pick("f-task", "needlebench")
    pick("f-source", "gspo · acm")
    assert rows() == sum(t.task == "needlebench" for t in runs["gspo"]) == 2
    pick("f-rmin", "0.5")
    assert rows() == sum(t.task == "needlebench" and t.reward >= 0.5 for t in runs["gspo"])
    assert browser.errors == []
    # compare: the same task under both checkpoints, side by side
    task_id = runs["sft"][0].task_id
    show(browser, page, f"v=compare&task={task_id}")
    panels = browser.js("""[...document.querySelectorAll('.panel')].map(p => ({title: p.querySelector('h2').textContent,
        steps: p.querySelectorAll('.step').length}))""")
    by_source = {m: next(t for t in trajs if t.task_id == task_id) for m, trajs in runs.items()}
    assert sorted(p["title"].split(" · ")[0] for p in panels) == ["gspo", "sft"]
    for p in panels:
        assert p["steps"] == len(by_source[p["title"].split(" · ")[0]].steps)
    assert browser.screenshot(tmp_path / "compare.png").stat().st_size > 10_000
    assert browser.errors == []


def test_run_page_curves_and_eval_tables(synthetic, browser, tmp_path):
    root, _ = synthetic
    page = write_page(root, tmp_path / "view.html")
    show(browser, page, "v=run")
    charts = browser.js("[...document.querySelectorAll('.chart')].map(c => [c.dataset.key, c.querySelector('p')"
                        ".textContent, c.querySelectorAll('circle').length])")
    assert [c[0] for c in charts] == ["reward", "accuracy", "tools/fold_fragment", "loss", "clip_ratio/high_mean",
                                      "time/generation_s"]  # in the order of the definitions (rollouts, loss, time)
    assert all(c[1] == definition(c[0]) and c[2] == 5 for c in charts)
    results = json.loads((root / "eval" / "results.json").read_text())
    cells = browser.js("[...document.querySelectorAll('.eval-table tr')].slice(1).map(r => [...r.cells].map(c => "
                       "c.textContent))")
    for run, row in zip(results["runs"], cells):
        s = run["tasks"]["babilong"]
        assert row[:3] == [run["model"], "acm", f"{100 * s['accuracy']:.1f} [{100 * s['ci']['accuracy'][0]:.1f}, "
                                                f"{100 * s['ci']['accuracy'][1]:.1f}]"]
    paired = browser.js("document.querySelectorAll('.paired-table tr').length")
    assert paired - 1 == len(results["comparisons"]) > 0
    assert browser.js("document.querySelectorAll('.family-table tr').length") - 1 == 2 * 2
    assert browser.screenshot(tmp_path / "run.png").stat().st_size > 10_000
    assert browser.errors == []


def test_real_run_trajectories_and_samples(teacher_run, browser, tmp_path, capsys):
    root, trajs = teacher_run
    cli(["view", str(root), "--out", str(tmp_path / "view.html")])
    assert "wrote" in capsys.readouterr().out
    page = tmp_path / "view.html"
    show(browser, page, "v=list")
    assert browser.js("document.querySelectorAll('#list tr.row').length") == len(trajs)
    for i, traj in enumerate(trajs):
        show(browser, page, f"v=t&i={i}")
        steps = browser.js("[...document.querySelectorAll('.step')].map(s => [s.querySelector('.prompt-tokens')"
                           ".textContent, s.querySelectorAll('.span').length, [...s.querySelectorAll('.span')]"
                           ".reduce((a, x) => a + +x.dataset.tokens, 0)])")
        expected = timeline(traj, env_class("acm"))
        assert [s[0] for s in steps] == [f"prompt {len(s.prompt_ids)} tokens" for s in traj.steps]
        assert [s[1] for s in steps] == [len(s["spans"]) for s in expected["steps"]]
        for (_, n, total), step in zip(steps, traj.steps):
            assert total == pytest.approx(len(step.prompt_ids) + len(step.completion_ids), abs=0.1 * n)
        states = {sp["state"] for s in expected["steps"] for sp in s["spans"]}
        assert "folded" in states or traj.task == "mrcr"  # PI-LLM's teacher folds its stream
    show(browser, page, "v=samples")
    samples = [s for t in trajs for s in build_samples(t)]
    assert browser.js("document.getElementById('tab-samples').textContent") == f"Samples ({len(samples)})"
    assert browser.errors == []


def test_every_logged_rl_metric_has_a_definition():
    """The keys the RL trainer and its loss log (read from their source) each have a line on the run page and
    in docs/metrics.md."""
    src = Path(__file__).resolve().parents[1] / "sculptor_rl" / "train"
    text = (src / "rl.py").read_text() + (src / "loss.py").read_text()
    keys = set(re.findall(r'_metrics\["train"\]\[f?"([^"]+)"\]', text)) | set(re.findall(r'stats\["([^"]+)"\]', text))
    keys |= set(re.findall(r'"(clip_ratio/[a-z_]+|ratio_mean)":', text))
    keys = {re.sub(r"\{[^}]*\}", "x", k) for k in keys}
    keys |= {f"time/{p}_s" for p in ("weight_sync", "generation", "trainer_idle", "engine_idle", "scoring",
                                     "training")}
    keys |= {"reward", "accuracy", "correct", "format_error_rate", "tool_calls_per_task", "tool_entropy",
             "context_reduction", "generated_tokens", "restores_after_fold"}
    missing = sorted(k for k in keys if not definition(k))
    assert not missing, f"logged without a definition: {missing}"
    doc = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    assert not [k for k in keys if f"`{k}`" not in doc and f"`{k.split('/')[0]}/*`" not in doc]


def test_bad_input_is_a_clear_error(tmp_path):
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "a", "task": "x", "messages": [], "answer": 1}) + "\n")
    with pytest.raises(ValueError, match="neither trajectories nor samples"):
        collect(tmp_path / "tasks.jsonl")
    with pytest.raises(FileNotFoundError):
        collect(tmp_path / "nothing")


def test_serve_on_loopback_only(teacher_run, tmp_path):
    import threading
    import urllib.error
    import urllib.request

    from sculptor_rl.view import serve

    root, _ = teacher_run
    page = write_page(root / "samples.jsonl", tmp_path / "samples.html")
    server = serve(page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address
        assert host == "127.0.0.1"
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read()
        assert body == page.read_bytes() and b'"samples":[{' in body
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/../etc/passwd", timeout=10)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
