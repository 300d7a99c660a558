"""`sculptor-rl eval` orchestration on the scripted teacher engine (no weights run, so it is fast): runs per
model × mode, resume, results.json, tables and plots, users' data, bad input. Real-model runs: test_eval_engines.py."""

import json
import logging

import pytest
from conftest import CountingTeacher

from sculptor_rl.cli import main
from sculptor_rl.eval.run import EvalConfig, _fingerprint, eval_tasks, evaluate, model_labels
from sculptor_rl.longcontext import FAMILIES
from sculptor_rl.envs.tasks import generate
from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.trajectory import read_trajectories


@pytest.fixture
def cfg(tmp_path, model_path):
    return EvalConfig(tasks=["babilong", "pi_llm"], num=4, out=str(tmp_path / "out"), context_budget=64,
                      chunk_tokens=32, sizes={"babilong": [{"context_tokens": 300}, {"context_tokens": 600}],
                                              "pi_llm": [{"keys": 2, "updates": 8}]})


def test_evaluate_runs_every_mode_and_writes_the_report(cfg, tmp_path):
    results = evaluate(cfg, engine=CountingTeacher(eval_tasks(cfg)))
    out = tmp_path / "out"
    runs = {run["mode"]: run for run in results["runs"]}
    assert [run["mode"] for run in results["runs"]] == ["acm", "full", "truncate", "bm25"]
    assert results["tasks"] == ["babilong", "pi_llm"] and results["models"] == ["smollm2-135m-instruct"]
    for run in runs.values():
        assert {t: s["n"] for t, s in run["tasks"].items()} == {"babilong": 4, "pi_llm": 4}
        assert {b: s["n"] for b, s in run["tasks"]["babilong"]["buckets"].items()} == {"300/6": 2, "600/6": 2}
    acm = runs["acm"]
    assert acm["average"] == 1.0  # the teachers solve these with the tools
    assert acm["overall"]["tool_calls_per_task"] > 1 and acm["overall"]["tool_entropy"] > 1
    assert acm["overall"]["context_reduction"] > 0.3 and acm["overall"]["format_error_rate"] == 0
    for mode in ("full", "truncate", "bm25"):
        # no tools: a teacher's first completion (a tool call) ends the rollout
        trajs = list(read_trajectories(out / "runs" / "smollm2-135m-instruct" / mode / "trajectories.jsonl"))
        assert len(trajs) == 8 and all(len(t.steps) == 1 for t in trajs)
        # babilong's teacher starts with a call (stopped, no answer); pi_llm's answers at once (a small context)
        assert {t.task: t.stop_reason for t in trajs} == {"babilong": "max_tool_calls", "pi_llm": "answer"}
        assert runs[mode]["tasks"]["babilong"]["accuracy"] == 0.0
    bucket = runs["truncate"]["tasks"]["babilong"]["buckets"]["600/6"]
    assert bucket["context_tokens_after"] < bucket["context_tokens_before"] - 300  # 64 tokens of context kept
    assert runs["full"]["overall"]["context_reduction"] == 0.0
    assert runs["bm25"]["overall"]["context_reduction"] > 0.2

    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(results))
    md = (out / "results.md").read_text()
    table = md.split("## Accuracy (%)\n\n")[1].split("\n\n")[0].splitlines()
    assert table[0] == "| Model | Mode | BABILong | PI-LLM | Avg. |"
    # 4 of 4 right: Wilson's 95 % interval [51.0, 100.0]
    assert table[2] == "| smollm2-135m-instruct | acm | 100.0 [51.0, 100.0] | 100.0 [51.0, 100.0] | 100.0 |"
    assert len(table) == 6
    assert "## Per length bucket" in md and "## Tool calls per task, by tool (acm)" in md
    for png in ("accuracy_vs_length.png", "tool_usage.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_skips_finished_runs_and_redoes_changed_ones(cfg, caplog):
    first = evaluate(cfg, engine=CountingTeacher(eval_tasks(cfg)))
    again = CountingTeacher(eval_tasks(cfg))
    with caplog.at_level(logging.INFO, logger="sculptor_rl.eval.run"):
        second = evaluate(cfg, engine=again)
    assert again.completions == 0 and caplog.text.count("skipping") == 4
    assert second["runs"] == json.loads(json.dumps(first["runs"]))
    caplog.clear()
    cfg.context_budget = 100  # only the truncate and bm25 runs depend on it
    third = CountingTeacher(eval_tasks(cfg))
    with caplog.at_level(logging.INFO, logger="sculptor_rl.eval.run"):
        evaluate(cfg, engine=third)
    assert third.completions == 16 and caplog.text.count("skipping") == 2
    assert caplog.text.count("settings changed (context_budget)") == 2


def test_a_saved_run_depends_on_the_files_its_paths_name(cfg, tmp_path):
    """A memory regrown in place or a checkpoint retrained into the same folder must not reuse old results."""
    memory, store, ckpt = tmp_path / "memory.jsonl", tmp_path / "store", tmp_path / "ckpt"
    store.mkdir()
    ckpt.mkdir()
    memory.write_text('{"a": 1}\n')
    (store / "toolmem.jsonl").write_text("x\n")
    (ckpt / "model.safetensors").write_bytes(b"0" * 8)
    cfg.environment_params = {"memory": str(memory), "more": [str(store), "not a path"]}

    def settings():
        return json.loads(json.dumps(_fingerprint(cfg, str(ckpt), "acm", [])))  # as summary.json holds it

    first = settings()
    assert settings() == first and set(first["files"]) == {str(ckpt), str(memory), str(store)}
    memory.write_text('{"a": 2}\n')
    second = settings()
    assert second["files"][str(memory)] != first["files"][str(memory)]
    (store / "toolmem.jsonl").write_text("y\n")
    third = settings()
    assert third["files"][str(store)] != second["files"][str(store)]
    (ckpt / "model.safetensors").write_bytes(b"1" * 9)
    assert settings()["files"][str(ckpt)] != third["files"][str(ckpt)]


def test_generated_tasks_are_spread_over_the_sizes(cfg):
    cfg.num = 5
    tasks = eval_tasks(cfg)
    buckets = [t["meta"]["bucket"] for t in tasks if t["task"] == "babilong"]
    assert buckets == ["300/6"] * 3 + ["600/6"] * 2
    assert len({t["id"] for t in tasks}) == len(tasks) == 10


def test_users_data_evaluates_the_same_way(tmp_path, cfg):
    path = tmp_path / "mine.jsonl"
    write_jsonl(generate("needlebench", 3, seed=1, context_tokens=300) + generate("babilong", 5, seed=1), path)
    cfg.data, cfg.tasks, cfg.num = str(path), ["babilong"], 2
    assert [t["id"] for t in eval_tasks(cfg)] == ["babilong-s1-00000", "babilong-s1-00001"]
    cfg.tasks, cfg.num = ["needlebench", "babilong"], None
    assert len(eval_tasks(cfg)) == 8
    cfg.tasks = ["mrcr"]
    with pytest.raises(ValueError, match="holds no task of the families mrcr"):
        eval_tasks(cfg)


def test_model_labels():
    assert model_labels([None, "/x/ckpt"]) == ["smollm2-135m-instruct", "ckpt"]
    assert model_labels(["a/run1/checkpoint-10", "b/run2/checkpoint-10/"]) == ["run1/checkpoint-10",
                                                                                 "run2/checkpoint-10"]
    with pytest.raises(ValueError, match="given twice"):
        model_labels(["/x/ckpt", "/x/ckpt/"])


def test_config_from_yaml_with_overrides(tmp_path):
    cfg = EvalConfig.from_yaml("configs/acm/eval_small.yaml", num=2, data=None)
    assert cfg.num == 2 and cfg.max_new_tokens == 256 and cfg.sampling.temperature == 0.0
    assert set(cfg.sizes) == {"pi_llm", "needlebench", "mrcr", "babilong", "gsm_infinite"} and cfg.context_budget == 600
    bad = tmp_path / "bad.yaml"
    bad.write_text("modes: [acm]\nbudget: 5\n")
    with pytest.raises(ValueError, match=f"{bad}: unknown key 'budget' for EvalConfig"):
        EvalConfig.from_yaml(bad)


@pytest.mark.parametrize("flags,message", [
    (["--modes", "acm,rag"], "unknown mode 'rag'"),
    (["--tasks", "pi_llm,ruler"], "unknown task 'ruler'"),
    (["--model", "/no/such/checkpoint"], "model path /no/such/checkpoint does not exist"),
    (["--num", "0"], "num must be at least 1"),
])
def test_cli_rejects_bad_input_before_starting_anything(flags, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["eval", *flags, "--out", str(tmp_path / "out")])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("path", ["configs/acm/eval_small.yaml", "configs/acm/eval_long.yaml"])
def test_shipped_configs_load_and_generate(path):
    cfg = EvalConfig.from_yaml(path, num=1)  # one task per family, of its first size
    tasks = eval_tasks(cfg)
    assert [t["task"] for t in tasks] == cfg.tasks == list(FAMILIES)
    assert tasks == [generate(f, 1, cfg.seed, **cfg.sizes[f][0])[0] for f in FAMILIES]


class ReloadableTeacher(CountingTeacher):
    """The scripted teachers behind the engine interface eval uses to switch models."""

    log: list = []

    def __init__(self, path, tasks):
        super().__init__(tasks)
        self.log.append(("start", path))

    def reload_weights(self, path):
        self.log.append(("reload", path))

    def close(self):
        self.log.append(("close", None))


def _checkpoint(model_path, out, **config_changes) -> str:
    """A checkpoint dir sharing the weights of `model_path`, with its own config.json."""
    from pathlib import Path

    out.mkdir()
    for f in Path(model_path).iterdir():
        (out / f.name).symlink_to(f)
    config = json.loads((Path(model_path) / "config.json").read_text())
    (out / "config.json").unlink()
    (out / "config.json").write_text(json.dumps({**config, **config_changes}))
    return str(out)


def test_one_engine_serves_every_model_whose_weights_fit(cfg, model_path, tmp_path, monkeypatch):
    import sculptor_rl.eval.run as run

    sft = _checkpoint(model_path, tmp_path / "sft", use_cache=False)  # what a trainer saves: same shapes
    wider = _checkpoint(model_path, tmp_path / "wider", num_hidden_layers=31)  # another architecture: a new engine
    ReloadableTeacher.log = []
    cfg.models, cfg.modes, cfg.tasks = [model_path, sft, wider], ["acm"], ["pi_llm"]
    monkeypatch.setattr(run, "make_engine", lambda kind, path, *a, **k: ReloadableTeacher(path, eval_tasks(cfg)))
    results = evaluate(cfg)
    assert ReloadableTeacher.log == [("start", model_path), ("reload", sft), ("close", None), ("start", wider),
                                     ("close", None)]
    assert [r["path"] for r in results["runs"]] == [model_path, sft, wider]


def test_checkpoint_modes_run_the_baselines_on_the_first_model_only(cfg, model_path, tmp_path, monkeypatch):
    """Table 2's layout: the base model in every mode, the checkpoints trained from it with the tools only; the
    paired comparisons are made where both models ran."""
    import sculptor_rl.eval.run as run
    from sculptor_rl.eval.report import accuracy_table

    sft = _checkpoint(model_path, tmp_path / "sft", use_cache=False)
    cfg.models, cfg.modes, cfg.checkpoint_modes, cfg.tasks = [model_path, sft], list(run.ACM_MODES), ["acm"], ["pi_llm"]
    ReloadableTeacher.log = []
    monkeypatch.setattr(run, "make_engine", lambda kind, path, *a, **k: ReloadableTeacher(path, eval_tasks(cfg)))
    results = evaluate(cfg)
    assert [(r["model"], r["mode"]) for r in results["runs"]] == [
        ("smollm2-135m-instruct", "acm"), ("smollm2-135m-instruct", "full"), ("smollm2-135m-instruct", "truncate"),
        ("smollm2-135m-instruct", "bm25"), ("sft", "acm")]
    assert {(c["mode"], c["a"], c["b"]) for c in results["comparisons"]} == {("acm", "smollm2-135m-instruct", "sft")}
    assert len(accuracy_table(results).splitlines()) == 2 + 5
    assert not (tmp_path / "out" / "runs" / "sft" / "full").exists()

    cfg.checkpoint_modes = ["acm", "summary"]
    with pytest.raises(ValueError, match="unknown mode 'summary'"):
        evaluate(cfg)
    cfg.modes, cfg.checkpoint_modes = ["full"], ["acm"]
    with pytest.raises(ValueError, match=r"checkpoint_modes \['acm'\] must be among modes \['full'\]"):
        evaluate(cfg)
