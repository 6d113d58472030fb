"""In-process simulated cluster backend."""

from cluster.simulated.engine import SimulatedCluster

__all__ = ["SimulatedCluster"]
