"""Stage 1, ingest: sacct output (text in any delimiter, or `--json`) into the one normalized table.

The field registry (`registry`) names every sacct field the report reads; `fields` holds one parser per field;
`text` and `jsonin` are the two readers; `normalize` turns their raw strings into `schema.SCHEMA`; `usage`
rolls the usage TRES up to each job (`usage_rules`: its rules and one job's rollup, numpy-free, for `gpuclust
job`); `period` is the report period every later stage clips to.

`fast/` is the fenced fast path: the direct text reader, the byte kernels, sorting and the process's memory
settings. Everything in it must give exactly what the reference forms here give (the property tests in
tests/unit/test_accounting_ingest_fast.py and test_accounting_perf_equivalence.py hold them equal); nothing
outside ingest needs to read it to understand a figure.

Imports run one way through the stages: ingest -> history -> figures -> output, then `pipeline` on top.
"""
