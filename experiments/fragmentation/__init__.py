"""The FGD experiment (Weng et al., "Beware of Fragmentation", USENIX ATC'23) on the Alibaba 2023 trace.

    state.py       the cluster as numpy arrays (per node, per node x GPU) and a pod's request; the shared filter
    measure.py     FGD's fragmentation measure (defined in scheduler/policy/workload.py) kept per node, and the
                   change a placement would make, vectorised over every candidate node (and GPU of a share)
    scorers.py     placement scorers behind one interface and a registry: random, dotprod, clustering,
                   packing, bestfit, fgd, and tidal (the live scheduler's kernel, scheduler/policy/gpuloss.py:
                   FGD's fragmentation plus CPU stranding and displacement; tidal-interference: shares placed with
                   the interference model)
    experiment.py  seeds, tuning to 1.3x capacity, the arrival loop, the metrics, runs over processes
    report.py      report.md, report.json and PNG plots
    variants.py    held-out pod lists derived from one trace (more shares, multi-GPU pods, gpu_spec, CPU-only pods)
    goodput.py     with the interference model (scheduler/policy/interference.py): share pods given measured H200
                   workloads, and the useful GPU work once shares of one GPU slow each other
    goodput_report.py  the goodput comparison of tidal and tidal-interference over several traces (table, plot)

No Django here: `scheduler/management/commands/fragmentation.py` is the thin command over `load()` and `run()`.
"""
