"""The Kubernetes API emulator and its cluster actors, for testing the Kubernetes backend where no API server runs."""
from cluster.emulator.server import Emulator

__all__ = ["Emulator"]
