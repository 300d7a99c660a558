"""A WorkBench-style tool sandbox with checkable outcomes (MemToolAgent's general-purpose tool use).

- `sandbox`: in-memory workplace databases and the 27 WorkBench tools; the outcome check (final state = gold);
- `tasks`: the `workbench` task family: templates over five domains and multi-domain, train/test splits;
- `metrics`: outcome accuracy per domain, tool F1, parameter F1, full-sequence match (with intervals);
- `importers`: WorkBench's published query/answer CSVs and NESTFUL's JSON as records.
"""
