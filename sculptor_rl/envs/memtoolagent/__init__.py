"""MemToolAgent (Er et al.): WorkBench-style tool use with a memory of past episodes.

- `env`: the environment, its memory retrieval and the reflector of failed episodes;
- `sandbox`: in-memory workplace databases and the 27 WorkBench tools with WorkBench's own semantics; the outcome
  check as WorkBench's `is_correct` (final state = gold's);
- `tasks`: the `workbench` task family: templates over five domains and multi-domain, train/test splits;
- `metrics`: outcome accuracy per domain, tool F1, parameter F1, full-sequence match (with intervals);
- `nestful`: the `nestful` family and NESTFUL's scoring (win rate where functions run, else full-sequence match);
- `importers`: WorkBench's published query/answer CSVs and NESTFUL's JSON files (with their spec files) as records;
- `entry`: the memory's unified entry format (query, tool calls, binary feedback, reflection) and how retrieved
  entries are shown to the model;
- `teacher`: the scripted teacher.
"""

from .env import MemToolAgentEnv, MemToolAgentParams

__all__ = ["MemToolAgentEnv", "MemToolAgentParams"]
