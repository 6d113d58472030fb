"""tidal: the command line of the Tidal GPU cluster. It speaks only Tidal's public REST API (no Django here)."""
__version__ = "0.1.0"
