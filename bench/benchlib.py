"""What every benchmark prints at the top of its table: the machine it ran on."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def machine() -> str:
    """CPU count and model, and the Python version, e.g. ``2 CPUs (Intel Xeon ...), Python 3.11.7``."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}"
