"""How many CUDA devices torch will see, answered without importing torch where possible.

`python -m tenferro_runtime plugins` and `array_api.__array_namespace_info__().devices()`
list every backend's devices; importing torch for that would cost seconds. Once torch is
imported (by the user or by this backend's first use) it is asked directly. Before that:

* a torch build without CUDA (its ``torch/version.py`` says ``cuda = None``) has none;
* on Linux, the NVIDIA driver lists its GPUs under ``/proc/driver/nvidia/gpus``, filtered
  by ``CUDA_VISIBLE_DEVICES`` as the CUDA runtime does (indices up to the first invalid
  entry; UUID entries are counted);
* elsewhere (Windows, ROCm builds) torch is imported and asked.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from pathlib import Path

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def cuda_device_count() -> int:
    """The number of ``cuda:N`` devices torch has (or will have once imported)."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "cuda"):
        return torch.cuda.device_count()
    build = torch_build()
    if build.get("cuda") is None and build.get("hip") is None:
        return 0
    if build.get("hip") is None and sys.platform.startswith("linux"):
        physical = len(list(NVIDIA_GPUS.iterdir())) if NVIDIA_GPUS.is_dir() else 0
        return visible_count(physical, os.environ.get("CUDA_VISIBLE_DEVICES"))
    import torch

    return torch.cuda.device_count()


def torch_build() -> dict[str, object]:
    """The literal assignments of the installed ``torch/version.py`` (read, not imported)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return {}
    out: dict[str, object] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and node.value is not None:
            try:
                out[target.id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def visible_count(physical: int, env: str | None) -> int:
    """Devices left by ``CUDA_VISIBLE_DEVICES`` (None: all of them)."""
    if env is None:
        return physical
    seen: set[str] = set()
    for item in (s.strip() for s in env.split(",")):
        if item.isdigit():
            if int(item) >= physical or item in seen:
                break
        elif not item.startswith(("GPU-", "MIG-")):
            break
        seen.add(item)
    return len(seen)
