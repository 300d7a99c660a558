"""The environment contract: everything the model can see and do in one rollout, behind hooks with defaults.

The agent loop (`sculptor_rl.agent.loop`) knows an environment only through this class. Per rollout it builds
one (`make_env(task, index)`, see `sculptor_rl.envs.make_env_factory`), then at every step reads `tools` and
`render()`, `append()`s the model's and the tools' messages, `execute()`s each call, and at the end asks for
`score()`, `reward()` and `info()`. A subclass overrides what it needs:

- `system_prompt`: given to every record, generated or a user's own (records carry none); a record's own
  system message follows it in the same system turn;
- `tools`: the schemas the model holds now (read at every step: they may change);
- `render()` / `original()`: the messages as shown now, and before any in-place rewrite (index-aligned);
- `append(message)`, `execute(name, arguments) -> ToolResult` (default: no tools);
- `on_answer(text) -> bool`: a completion without tool calls; True when the env appended the next user turn
  and the rollout goes on (a multi-turn session; default False: the answer ends the rollout);
- `on_cap(reason) -> bool`: the loop would stop the rollout at a cap ("max_tool_calls", "max_context_tokens");
  True when the env instead ended the turn in progress (failed) and opened the next one, as after `on_answer`
  (default False: the cap ends the rollout). The loop's caps thus apply per turn of a session that goes on;
- `score(answer) -> float` (default: the task family's scorer), `reward(traj) -> float` (default: design
  eq. 4, `reward.compute_reward`), `info() -> dict` (the env's record of the rollout, `Trajectory.info`).

Two optional class-level hooks make an environment of one's own go through `data generate`, `collect --teacher
scripted` and `pipeline` like a built-in one (None: the environment has none; a built-in's families are generated
and taught by the modules its registry entry names):

- `generate(num, seed, params) -> list[dict]`: `num` task records of its `task_families`, the same for the same
  (num, seed, params) (`params`: `data generate --param K=V`; an environment of several families finds the one
  asked for under `params["task"]`);
- `teach(task, messages, tools=None) -> dict | str`: its scripted teacher (the contract of `envs.teacher`: the next
  assistant turn, a structured message of tool calls or the final answer's text, read from the conversation so far).

And for `sculptor-rl eval --environment NAME`, class-level: `task_families` (the generated families it runs by
default), `eval_modes()` (its modes: mode -> the environment that runs it and that one's parameters) and
`summarize(trajs, mode)` (the env's own metrics of a mode's trajectories, beside the usual ones).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..toolcalls import ToolResult
from .reward import RewardConfig, compute_reward

__all__ = ["Env", "NoParams", "ToolResult", "with_system"]


@dataclass
class NoParams:
    """The parameters of an environment that takes none."""


def with_system(prompt: str, messages: list[dict]) -> list[dict]:
    """`messages` (copied) headed by the environment's system prompt; a record's own system message is kept
    after it, in the same turn."""
    messages = [dict(m) for m in messages]
    if not prompt:
        return messages
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{prompt}\n\n{messages[0]['content']}"}, *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]


class Env:
    """A rollout's environment over `task` (a record: id, messages, and for scoring task + answer)."""

    name = "plain"  # the registry's name for it
    Params = NoParams  # a dataclass of the env's parameters, checked by the registry
    system_prompt = ""
    tools: list[dict] = []
    task_families: tuple[str, ...] = ()  # what `eval` generates for this env by default
    # optional hooks (see the module docstring): a classmethod `generate(num, seed, params) -> list[dict]` and a
    # staticmethod `teach(task, messages, tools=None) -> dict | str`
    generate = None
    teach = None

    @classmethod
    def eval_modes(cls) -> dict[str, tuple[str, dict]]:
        """`eval`'s modes: mode -> (environment name, its parameters); the user's `environment_params` are
        merged over them. Default: the env itself as its one mode (by import path: found in every process, however
        the run named it)."""
        return {cls.name: (f"{cls.__module__}:{cls.__qualname__}", {})}

    @classmethod
    def summarize(cls, trajs: list, mode: str) -> dict:
        """The env's own metrics of one eval mode's trajectories (plain JSON, under the env's name in
        results.json); the usual accuracy/score/context metrics are computed for every env anyway."""
        return {}

    # Cross-episode memory (an environment whose memory lives across episodes, MemToolAgent's): the store reaches
    # the environment as `params.memory`, a frozen snapshot; a driver (`crossepisode.run_rounds`, the RL trainer's
    # `memory_updates`) adds the entries of each round with `memory_entries`, checked by `check_memory_entry`.
    check_memory_entry = None  # entry -> entry (ValueError on a bad one); None: the env keeps no such memory

    @classmethod
    def memory_entries(cls, trajs: list, num_generations: int, params, llm=None, critique: bool = True,
                       **tags) -> list[dict]:
        """The entries a round of `trajs` (each consecutive `num_generations` one task's group) adds to the memory
        its environments read (`params`: theirs); failures critiqued by `llm` (`envs.llm`; None: the env's offline
        stand-in), or not at all without `critique`. `tags` (round=, step=) go into every entry."""
        raise NotImplementedError(f"the {cls.name} environment keeps no memory across episodes")

    @classmethod
    def report(cls, results: dict, out=None) -> list[str]:
        """The env's own section of an eval report (markdown parts, from its `summarize` numbers in
        `results["runs"]`), its plots written to the folder `out` when given. Default: none."""
        return []

    def __init__(self, task: dict, params=None, *, seed: int = 0, reward: RewardConfig | None = None,
                 tokenizer=None, llm=None):
        self.task, self.params, self.seed, self.tokenizer = task, params or self.Params(), seed, tokenizer
        self.llm = llm  # `envs.llm.LLM` the run wired (None: the env's offline stand-ins)
        self.reward_config = reward or RewardConfig()
        self.messages = with_system(self.system_prompt, task["messages"])

    @classmethod
    def conversation(cls, messages: list[dict], params=None, *, seed: int = 0, tokenizer=None, llm=None) -> "Env":
        """The env over a served client's conversation (no answer: nothing is scored)."""
        return cls({"id": "conversation", "messages": messages}, params, seed=seed, tokenizer=tokenizer, llm=llm)

    def render(self) -> list[dict]:
        return [dict(m) for m in self.messages]

    def original(self) -> list[dict]:
        return self.render()

    def append(self, message: dict) -> None:
        self.messages.append(dict(message))

    def execute(self, name, arguments) -> ToolResult:
        return ToolResult(f"Error: no tools are available here (called {name!r}).", ok=False, modified=False)

    def on_answer(self, text: str) -> bool:
        return False

    def on_cap(self, reason: str) -> bool:
        return False

    def score(self, answer: str | None) -> float:
        """How correct the final answer is, in [0, 1]: the task family's scorer; 0 without an answer (a cap
        stopped the rollout) or without an expected one (a served request)."""
        if answer is None or self.task.get("answer") is None:
            return 0.0
        from .tasks import score  # imports the family's module: only an environment that scores this way needs it

        return score(self.task, answer)

    def reward(self, traj) -> float:
        return compute_reward(traj, self.reward_config)

    def info(self) -> dict:
        return {}

    # The run viewer (`sculptor-rl view`) draws each step's context as spans. `view_spans`: span kind -> {"label",
    # "color"} merged over the viewer's own kinds (template, system, user, fragment, assistant, tool).
    view_spans: dict[str, dict] = {}

    @staticmethod
    def context_events(call: dict) -> list[dict]:
        """How one recorded call (`CallRecord`) changed the context, for the viewer: {"fragment": id, "state":
        visible|folded|summarized|restored, "chars": n, "summary_chars": n} or {"message": i, "state": "deleted"}.
        Default: none (the viewer then shows the messages as they were appended)."""
        return []
