"""A WorkBench-style tool sandbox with checkable outcomes (MemToolAgent's general-purpose tool use).

- `sandbox`: in-memory workplace databases and the 27 WorkBench tools with WorkBench's own semantics; the outcome
  check as WorkBench's `is_correct` (final state = gold's);
- `tasks`: the `workbench` task family: templates over five domains and multi-domain, train/test splits;
- `metrics`: outcome accuracy per domain, tool F1, parameter F1, full-sequence match (with intervals);
- `nestful`: the `nestful` family and NESTFUL's scoring (win rate where functions run, else full-sequence match);
- `importers`: WorkBench's published query/answer CSVs and NESTFUL's JSON files (with their spec files) as records.
"""
