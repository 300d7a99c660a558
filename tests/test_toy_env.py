"""The toy environment of docs/writing-an-environment.md, run as written: rollout → samples → one SFT step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sculptor_rl.engines import Completion
from sculptor_rl.envs import ENVS
from sculptor_rl.rollout import RolloutConfig, rollout
from sculptor_rl.samples import policy_samples, write_samples
from sculptor_rl.toolcalls import HermesParser, format_tool_call

PAGE = Path(__file__).resolve().parents[1] / "docs" / "writing-an-environment.md"


def readme_environment() -> type:
    """The page's code, executed: it registers `calculator`."""
    section = PAGE.read_text().split("# Writing an environment\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(code.splitlines()) <= 35  # about 30 lines
    if "calculator" not in ENVS:
        exec(compile(code, str(PAGE), "exec"), {"__name__": "readme_toy_env"})
    return ENVS["calculator"]


class Adder:
    """A text policy: call `add` on the question's numbers, then reply with what the tool said."""

    max_model_len = None

    def generate(self, requests):
        out = []
        for r in requests:
            if r.messages[-1]["role"] == "tool":
                out.append(Completion(text=r.messages[-1]["content"]))
            else:
                a, b = map(int, re.findall(r"\d+", r.messages[-1]["content"]))
                out.append(Completion(text=format_tool_call("add", {"a": a, "b": b})))
        return out


def tasks(n: int = 4) -> list[dict]:
    return [{"id": f"sum-{i}", "task": "calculator", "messages": [{"role": "user", "content": f"What is {i} + 7?"}],
             "answer": i + 7} for i in range(n)]


def test_the_toy_environment_rolls_out(fmt):
    env_cls = readme_environment()
    env = env_cls(tasks(1)[0])
    assert env.render()[0] == {"role": "system", "content": env_cls.system_prompt}
    assert not env.execute("add", {"a": 1}).ok and env.execute("add", {"a": 1, "b": 2}).text == "3"
    trajs = rollout(tasks(), RolloutConfig(environment="calculator"), fmt=fmt, engine=Adder(), progress=False)
    assert [t.answer for t in trajs] == ["7", "8", "9", "10"]
    assert all(t.score == 1.0 and t.reward == 1.0 and t.num_tool_calls == 1 for t in trajs)
    assert [c["name"] for c in trajs[0].steps[0].calls] == ["add"]
    parsed = HermesParser().parse(trajs[0].steps[0].text)
    assert parsed.calls[0].arguments == {"a": 0, "b": 7}


@pytest.mark.slow
def test_toy_environment_rollout_samples_and_one_sft_step(fmt, model_path, tmp_path):
    from conftest import digest

    from sculptor_rl.train.sft import SculptorSFTConfig, build_trainer

    readme_environment()
    trajs = rollout(tasks(), RolloutConfig(environment="calculator"), fmt=fmt, engine=Adder(), progress=False)
    samples = policy_samples(trajs, fmt.provenance)
    # no tool modifies the context: one sample per rollout, both completions trained in it
    assert len(samples) == 4 and all(s.completions == [0, 1] for s in samples)
    assert sum(sum(s.loss_mask) for s in samples) == sum(t.generated_tokens for t in trajs)
    write_samples(samples, tmp_path / "samples.jsonl")
    cfg = SculptorSFTConfig(model=model_path, samples=str(tmp_path / "samples.jsonl"), output_dir=str(tmp_path / "sft"),
                            max_steps=1, per_device_train_batch_size=4, learning_rate=1e-4, use_cpu=True, bf16=False,
                            logging_steps=1, report_to="none", save_strategy="no")
    trainer = build_trainer(cfg)
    before = digest(trainer.model)
    trainer.train()
    (logged,) = [e for e in trainer.state.log_history if "loss" in e]
    assert trainer.state.global_step == 1 and 0 < logged["loss"] < 20 and digest(trainer.model) != before
