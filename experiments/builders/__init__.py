"""Fluent builders of policy inputs (Kueue's pkg/util/testing is the model): shared by the tests, the benchmarks and
the experiments, so they live in code rather than under tests/ (and the tests import no benchmark).

scheduling.py jobs, nodes and snapshots for the scheduler's policy; colocation.py groups and nodes for the lending
and autoscaling policies; cluster.py a queued Alibaba-shaped cluster on the simulated training cluster."""
