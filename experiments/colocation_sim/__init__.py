"""Co-location simulation (no Django): inference + training on one simulated cluster, virtual clock."""

from experiments.colocation_sim.config import GroupSpec, SimConfig
from experiments.colocation_sim.run import CoLocationSim, Metrics, run_sim

__all__ = ["CoLocationSim", "GroupSpec", "Metrics", "SimConfig", "run_sim"]
