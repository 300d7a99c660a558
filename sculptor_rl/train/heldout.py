"""Held-out evaluation during RL: every `heldout_steps` optimizer steps (and after the last), the policy runs the
held-out tasks (`heldout_tasks`) through the agent loop in each mode asked (`heldout_modes`: modes of the
environment's `eval_modes()`, default the environment itself), greedy, with the engine given the step's weights
first; the usual metrics (`metrics.summarize`) go into the step's log entry as `eval/<mode>/<metric>`, beside the
training metrics (log history, report_to backends, curves.png, `sculptor-rl view`).

Each rank runs its share of the tasks (every `world`-th) and the metrics are over all of them (`gather_object`).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace

from accelerate.utils import gather_object
from transformers import TrainerCallback

from ..agent.loop import LoopConfig, run_rollouts
from ..engines import SamplingConfig
from ..envs import RewardConfig, env_class, make_env_factory
from ..metrics import summarize

log = logging.getLogger(__name__)

__all__ = ["HeldOutEval", "METRICS", "modes_of"]

METRICS = ("accuracy", "correct", "reward", "format_error_rate", "tool_calls_per_task", "context_reduction")


def modes_of(environment: str, asked: list[str] | None) -> dict[str, tuple[str, dict]]:
    """mode -> (environment, parameters) of the modes asked (None: the environment itself), checked."""
    modes = env_class(environment).eval_modes()
    if not asked:
        return {environment: (environment, {})}
    unknown = [m for m in asked if m not in modes]
    if unknown:
        raise ValueError(f"heldout_modes {unknown}: the {environment} environment's modes are {', '.join(modes)}")
    return {m: modes[m] for m in asked}


class HeldOutEval(TrainerCallback):
    """Runs the held-out evaluation at the end of every `every`-th optimizer step of `trainer` (a
    `SculptorGRPOTrainer`) and at the last one."""

    def __init__(self, trainer, tasks: list[dict], modes: list[str] | None, every: int):
        if every < 1:
            raise ValueError(f"heldout_steps must be at least 1, got {every}")
        self.trainer, self.every = trainer, every
        self.tasks = tasks[trainer.rank::trainer.world]  # this rank's share
        self.modes = modes_of(trainer.args.environment, modes)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0 or state.global_step >= state.max_steps:
            self.evaluate()
        return control

    def evaluate(self) -> dict[str, float]:
        """The held-out metrics of the current weights, also added to the step's log entry."""
        t, args = self.trainer, self.trainer.args
        t.sync_engine()
        loop = LoopConfig.of(args)
        out = {}
        for mode, (environment, params) in self.modes.items():
            make_env = make_env_factory(environment, {**(args.environment_params or {}), **params}
                                        if environment == args.environment else params, seed=args.seed,
                                        reward=RewardConfig.of(args), tokenizer=t.processing_class, llm=t.env_llm)
            with self._generating():
                trajs = run_rollouts(self.tasks, t.engine, t.fmt, make_env, loop, progress=False)
            light = [replace(x, messages=[], steps=[replace(s, prompt_ids=[], logprobs=None) for s in x.steps])
                     for x in trajs]
            s = summarize(gather_object(light))
            for key in METRICS:
                out[f"eval/{mode}/{key}"] = float(s[key])
        for key, value in out.items():
            t._metrics["train"][key].append(value)  # averaged into the step's log entry with the rest
        log.info("held-out evaluation at step %d: %s", t.state.global_step,
                 ", ".join(f"{k} {v:.3f}" for k, v in out.items() if k.endswith("/accuracy")))
        return out

    @contextlib.contextmanager
    def _generating(self):
        """Greedy decoding on the engine; the HF engine generates with the policy itself, unwrapped, in eval mode
        (as the trainer's rounds do)."""
        t = self.trainer
        sampling = getattr(t.engine, "sampling", None)
        if sampling is not None:
            t.engine.sampling = SamplingConfig(temperature=0.0, seed=t.args.seed)
        try:
            if t.args.engine == "hf":
                from trl.models import unwrap_model_for_generation

                with unwrap_model_for_generation(t.model_wrapped, t.accelerator,
                                                 gather_deepspeed3_params=t.args.ds3_gather_for_generation) as model:
                    t.engine.model = model.eval()
                    try:
                        yield
                    finally:
                        model.train()
            else:
                yield
        finally:
            if sampling is not None:
                t.engine.sampling = sampling
