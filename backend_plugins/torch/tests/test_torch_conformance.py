"""The shared backend conformance kit, run on torch:cpu (and torch:cuda:0 where present).

bfloat16 is left out of the kit's value tests only (`test_matches_reference`): the kit's
NumPy references dispatch on ``ndarray.dtype.kind``, which is ``'V'`` for ml_dtypes'
bfloat16, so they compute bfloat16 operands as bool. test_bfloat16.py checks bfloat16
values against the same references run on the exact float32 values instead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.testing.conformance import BackendConformance, _parametrize, context, resolve_device
from tenferro_torch.discovery import cuda_device_count


class _TorchConformance(BackendConformance):
    def pytest_generate_tests(self, metafunc: Any) -> None:
        ctx = context(resolve_device(type(self).device))
        if "variant" in metafunc.fixturenames:  # test_matches_reference
            ctx = replace(ctx, dtypes=tuple(d for d in ctx.dtypes if d is not D.bfloat16))
        _parametrize(metafunc, ctx)


class TestTorchConformance(_TorchConformance):
    """Every core primitive on torch:cpu against the reference."""

    device = "torch:cpu"


if cuda_device_count():  # a real suite on GPU machines; nothing to collect elsewhere

    class TestTorchCudaConformance(_TorchConformance):
        """Every core primitive on torch:cuda:0 against the reference."""

        device = "torch:cuda:0"
