"""Entry point of tenferro-forge: registers each promoted kernel of the registry with dispatch.

One `Chooser` per (backend, op) sits above the default kernel; dispatch asks its
``choose_kernel`` once per call signature (inside the dispatch memo) and it answers with the
promoted kernel whose device, dtype, params and shape bucket match, or None (the default
kernel runs). Entries measured on another device fingerprint or other versions, with a
source whose hash differs, or edited by hand are skipped with a note in ``python -m
tenferro_runtime plugins`` (and a warning for a corrupt registry or a source mismatch).
``TENFERRO_FORGE_DISABLE=1`` turns it all off; ``TENFERRO_FORGE_COUNT=1`` counts calls of
promoted kernels in `CALLS` (off by default: no wrapper per call).
"""

from __future__ import annotations

import hashlib
import os
import types
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from tenferro_core.errors import KernelError
from tenferro_core.plugins import hookimpl

PRIORITY = 1000
SELECTED: Counter = Counter()
"""id -> call signatures dispatch chose the promoted kernel for."""
CALLS: Counter = Counter()
"""id -> calls of the promoted kernel (with TENFERRO_FORGE_COUNT=1)."""


class ForgeWarning(UserWarning):
    """A registry entry (or the registry) Forge's plugin could not use."""


def _plain(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


class Chooser:
    """The kernel dispatch sees for one (backend, op): picks a promoted kernel per signature."""

    def __init__(self, backend: str, op: str, base: Path):
        self.backend, self.op, self.base = backend, op, base
        self.entries: list[dict] = []
        self.loaded: dict[str, Any] = {}

    def __call__(self, *bufs: Any, **params: Any) -> Any:
        raise KernelError(
            f"tenferro-forge's chooser for {self.op!r} was called as a kernel; only "
            f"dispatch (Device.kernel_for) may use it, through choose_kernel"
        )

    def choose_kernel(self, device: Any, avals: tuple, out_avals: tuple, params: dict) -> Any:
        from .registry import params_signature, shape_bucket

        if not avals or any(a.shape != avals[0].shape for a in avals):
            return None
        bucket = shape_bucket(avals[0].shape)
        sig = params_signature(_plain(dict(params)))
        for e in self.entries:
            if (
                e["device"] == device.name
                and all(a.dtype.name == e["dtype"] for a in avals)
                and e["params_signature"] == sig
                and bucket in e["shape_buckets"]
            ):
                fn = self.load(e)
                if fn is not None:
                    SELECTED[e["id"]] += 1
                    return fn
        return None

    def load(self, entry: dict) -> Any:
        kid = entry["id"]
        if kid not in self.loaded:
            self.loaded[kid] = None
            path = self.base / entry["source"]
            try:
                code = path.read_bytes()
                if hashlib.sha256(code).hexdigest() != entry["source_hash"]:
                    raise ValueError("its source changed since promotion (hash mismatch)")
                module = types.ModuleType(f"tenferro_forge_kernel_{kid}")
                module.__file__ = str(path)
                exec(compile(code, str(path), "exec"), module.__dict__)  # noqa: S102  (hash-checked source)
                fn = module.kernel
            except Exception as exc:
                warnings.warn(
                    f"tenferro-forge: promoted kernel {kid} not used: {exc}", ForgeWarning, stacklevel=2
                )
                return None
            self.loaded[kid] = _counting(kid, fn) if os.environ.get("TENFERRO_FORGE_COUNT") == "1" else fn
        return self.loaded[kid]


def _counting(kid: str, fn: Any) -> Any:
    def counted(*bufs: Any, **params: Any) -> Any:
        CALLS[kid] += 1
        return fn(*bufs, **params)

    return counted


def usable(entry: Any, base: Path) -> str | None:
    """None when `entry` may serve here, else why not (for the note)."""
    from .registry import device_fingerprint, entry_hash, file_hash, versions

    need = (
        "id",
        "op",
        "backend",
        "device",
        "dtype",
        "params_signature",
        "shape_buckets",
        "source",
        "source_hash",
        "device_fingerprint",
        "versions",
        "entry_hash",
    )
    if not isinstance(entry, dict) or any(k not in entry for k in need):
        return "malformed entry (fields missing)"
    if entry_hash(entry) != entry["entry_hash"]:
        return "entry edited by hand (its hash does not match)"
    if entry["device_fingerprint"] != device_fingerprint(entry["device"]):
        return f"measured on another machine (device fingerprint {entry['device_fingerprint']})"
    here = versions()
    if entry["versions"] != here:
        diff = {k: (entry["versions"].get(k), v) for k, v in here.items() if entry["versions"].get(k) != v}
        return f"measured under other versions {diff} (promoted, now)"
    path = base / entry["source"]
    if not path.is_file():
        return "its source file is missing"
    if file_hash(path) != entry["source_hash"]:
        return "its source changed since promotion (hash mismatch)"
    return None


@hookimpl
def tenferro_register(registry) -> None:
    from .errors import RegistryError
    from .registry import read_index, root

    if os.environ.get("TENFERRO_FORGE_DISABLE", "") not in ("", "0"):
        registry.add_note("promoted kernels off (TENFERRO_FORGE_DISABLE is set)")
        return
    base = root()
    try:
        index = read_index(base)
    except RegistryError as exc:
        warnings.warn(f"tenferro-forge: {exc}", ForgeWarning, stacklevel=2)
        registry.add_note(f"registry ignored: {exc}")
        return
    choosers: dict[tuple[str, str], Chooser] = {}
    for kid, entry in sorted(index["entries"].items()):
        why = usable(entry, base)
        if why is not None:
            if "hash" in why:
                warnings.warn(
                    f"tenferro-forge: promoted kernel {kid} ignored: {why}", ForgeWarning, stacklevel=2
                )
            registry.add_note(f"promoted kernel {kid} ignored: {why}")
            continue
        key = (entry["backend"], entry["op"])
        if key not in choosers:
            choosers[key] = Chooser(*key, base)
        choosers[key].entries.append(entry)
        registry.add_note(
            f"promoted kernel {kid} serves {entry['op']} on {entry['device']} "
            f"{entry['dtype']} shapes {'/'.join(entry['shape_buckets'])}"
        )
    for (backend, op), chooser in choosers.items():
        registry.add_kernel(backend, op, chooser, priority=PRIORITY)
