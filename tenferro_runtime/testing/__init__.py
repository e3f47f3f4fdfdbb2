"""tenferro_runtime.testing: the backend conformance kit.

A backend package checks its device against the NumPy reference with::

    from tenferro_runtime.testing.conformance import BackendConformance

    class TestMyBackendConformance(BackendConformance):
        device = "mybackend:gpu0"

Modules:

* `conformance` - the pytest suite (`BackendConformance`), see its docstring;
* `reference` - NumPy reference implementations of every core primitive,
  written from docs/primitives.md independently of any backend;
* `cases*` - per-primitive hypothesis input generators, `error_cases` - bad
  inputs and the typed errors they must raise;
* `strategies` - shapes, dtype-aware values and non-contiguous layouts;
* `tolerance` - dtype-aware result comparison.

The kit needs pytest and hypothesis (the ``testing`` extra: ``pip install
"tenferro[testing]"``); `tenferro_core` never imports it, nor anything above it.
"""

from __future__ import annotations

__all__ = ["cases", "conformance", "error_cases", "reference", "strategies", "tolerance"]
