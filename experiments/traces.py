"""Where the experiments find the Alibaba GPU 2023 trace: the traces folder (settings.TRACES_DIR) by name."""
import os
from pathlib import Path

from django.conf import settings

ALIBABA = "alibaba-gpu-2023"


def pods_path(value: str) -> Path:
    """A path, or the name of a pod list in the traces folder (`default`, `gpuspec10`, ...)."""
    path = Path(value)
    if path.exists() or os.sep in value or value.endswith(".csv"):
        return path
    return Path(settings.TRACES_DIR) / ALIBABA / f"openb_pod_list_{value}.csv"
