"""ToolMem (Xiao et al., 2025): a learnable memory of what each tool is good and bad at, to predict a tool's
score on a task and to choose the better tool.

- `env`: the environment (predict, choose, or choose and solve);
- `experiences`: experiences with exact feedback, generated offline — context strategies ("tools") on the
  long-context task families, scored by the families' scorers — with train/test splits;
- `eval_runs`: saved `sculptor-rl eval` runs as experiences, a tool being a model in one mode ("sft_final/acm"),
  split into train and test by task;
- `biggen`: BiGGen Bench's published records (per-model responses, judge scores, rubrics, feedback) as experiences;
- `memory`: the memory (per tool, four proficiency categories), its update rule with the paper's LLM induction step
  or the deterministic rules (offline, not the paper's), retrieval;
- `family`: the `toolmem` task family (score prediction and pair selection records over test experiences);
- `metrics`: MAE, RMSE, Pearson; F1</F1> and accuracy of pair selection;
- `teacher`: the scripted teacher.
"""

from .env import ToolMemEnv, ToolMemParams

__all__ = ["ToolMemEnv", "ToolMemParams"]
