"""The backend contract.

A backend plugin registers a `Backend`: named devices, the dtypes each supports,
host and DLPack transfer, a kernel table keyed by primitive name or family id,
and energy telemetry per device. The runtime never calls a backend for an op it
has no kernel for. Kernels take backend buffers and normalized params and return
a buffer (or a tuple of buffers for multi-result ops).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .dtypes import DType
from .energy import EnergyTelemetry

Kernel = Callable[..., Any]


@runtime_checkable
class Backend(Protocol):
    """What a backend plugin provides.

    Optional: `specialize(name, kernel, in_avals, out_avals)` returns the kernel to use for
    one call signature (asked once per signature, then cached by the runtime); `claims(obj)`
    returns the device id when `obj` is one of this backend's native buffers (so
    `from_dlpack(obj)` keeps it there), else None — without importing anything heavy.
    `compile(graph, device)` runs a whole optimized graph the backend's way (DESIGN.md
    section 7): it returns a function from input buffers to output buffers, or None to
    decline. Executors selected by name (`compile(f, backend="inductor")`) or provided by
    another plugin (Triton kernels for torch devices) register with
    `Registration.add_executor` instead.
    """

    name: str
    priority: int

    def devices(self) -> tuple[str, ...]:
        """Device ids this backend can run on now, e.g. ("cpu",) or ("cpu", "cuda:0")."""

    def supported_dtypes(self, device: str) -> frozenset[DType]:
        """The dtypes `device` can hold; others are a DTypeError, never a silent cast."""

    def kernels(self) -> Mapping[str, Kernel]:
        """Kernel table: primitive name or family id -> kernel. Must be cheap to build."""

    def from_host(self, array: np.ndarray, device: str) -> Any:
        """A buffer on `device` holding a copy of (or sharing) a C-contiguous host array."""

    def to_host(self, buf: Any) -> np.ndarray:
        """A NumPy array with the buffer's values (may share memory)."""

    def describe(self, buf: Any) -> tuple[tuple[int, ...], DType]:
        """Shape and dtype of a buffer of this backend."""

    def from_dlpack(self, obj: Any, device: str) -> Any:
        """A buffer sharing memory with an object that implements `__dlpack__`."""

    def to_dlpack(self, buf: Any, **kwargs: Any) -> Any:
        """The DLPack capsule of a buffer (the `__dlpack__` protocol)."""

    def dlpack_device(self, buf: Any) -> tuple[int, int]:
        """The `__dlpack_device__` pair of a buffer."""

    def telemetry(self, device: str) -> EnergyTelemetry:
        """Energy telemetry of a device (measured or estimated, labelled as such)."""


OPTIONAL_BACKEND_ATTRS: dict[str, str] = {
    "priority": "int: a backend's own kernel table has this priority (default -1)",
    "specialize": "specialize(name, kernel, in_avals, out_avals[, params=]) -> the kernel for one "
                  "signature (given the canonical params when it takes `params`)",
    "claims": "claims(obj) -> device id when obj is one of this backend's buffers, else None",
    "compile": "compile(graph, device) -> run(buffers) -> buffers for a whole graph, or None",
    "out_kernel": "out_kernel(name, kernel) -> fn(*bufs, out) writing into `out`, or None",
    "donatable": "donatable(buf, others) -> True when a donated input's buffer may be written",
    "fresh_results": "fresh_results(name, kernel) -> True when the kernel's results are always "
                     "new buffers, never views of its operands",
    "unstack": "unstack(buf) -> the buffers of buf's slices along its leading axis (views where "
               "the backend can): a scan's per-iteration operands",
    "stack": "stack(bufs) -> one fresh buffer of equal-shaped buffers on a new leading axis: a "
             "scan's stacked outputs",
    "preferred_conv_layout": "str: 'channels_first' or 'channels_last', the faster conv layout",
    "device_name": "device_name(device) -> the hardware's name (energy profiles), or None",
    "set_threads": "set_threads(n) -> None: use at most n threads for this backend's kernels "
                   "(process-wide pools; called with the runtime's `threads` before its first "
                   "device is made)",
}
"""Every other attribute the runtime looks up on a backend, with its contract: the runtime
reads these and nothing else (the conformance kit checks each one a backend has)."""

def read_only_dlpack(host: np.ndarray, copy_export: Callable[[], Any], **kwargs: Any) -> Any:
    """A DLPack capsule of `host` (a host array over a tensor's memory) marked read-only, as
    tensors are immutable: a consumer that reads DLPack's read-only flag (NumPy) gets a
    read-only view; one that cannot (DLPack < 1.0) gets `copy_export()`, a copy's capsule
    (unless it asked for ``copy=False``: NumPy's BufferError then)."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    view = host.view()
    view.flags.writeable = False
    try:
        return view.__dlpack__(**kwargs)
    except BufferError:
        if kwargs.get("copy") is False:
            raise
        return copy_export(**kwargs)


REQUIRED_BACKEND_ATTRS = (
    "name", "devices", "supported_dtypes", "kernels", "from_host", "to_host", "describe",
    "from_dlpack", "to_dlpack", "dlpack_device", "telemetry",
)
