"""Co-location simulation (no Django): inference + training on one simulated cluster, virtual clock."""

from colocation.sim.config import GroupSpec, SimConfig
from colocation.sim.run import CoLocationSim, Metrics, run_sim

__all__ = ["CoLocationSim", "GroupSpec", "Metrics", "SimConfig", "run_sim"]
