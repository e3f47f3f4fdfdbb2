"""Where generated kernels and autotuning results are kept, and how kernels run here."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$TENFERRO_TRITON_CACHE, else ~/.cache/tenferro/triton (created on first use)."""
    path = Path(os.environ.get("TENFERRO_TRITON_CACHE") or Path.home() / ".cache" / "tenferro" / "triton")
    path.mkdir(parents=True, exist_ok=True)
    return path


def interpreted() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
