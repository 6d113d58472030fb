"""In-process simulated cluster backend."""

from cluster.simulated.engine import SimulatedCluster
from cluster.simulated.traces import load_alibaba_nodes

__all__ = ["SimulatedCluster", "load_alibaba_nodes"]
