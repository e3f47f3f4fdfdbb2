"""The shared backend conformance kit, run on torch:cpu (and torch:cuda:0 where present).

bfloat16 is left out of the kit's hypothesis value tests only (`value_dtypes_exclude`): most
of the kit's NumPy references dispatch on ``ndarray.dtype.kind``, which is ``'V'`` for
ml_dtypes' bfloat16. test_half_precision.py checks bfloat16 values against the same
references run on the exact float32 values instead; the kit's `test_convert_limits` (whose
reference takes bfloat16) converts to and from bfloat16 directly.
"""

from __future__ import annotations

from tenferro_runtime.testing.conformance import BackendConformance
from tenferro_torch.discovery import cuda_device_count


class _TorchConformance(BackendConformance):
    value_dtypes_exclude = ("bfloat16",)


class TestTorchConformance(_TorchConformance):
    """Every core primitive on torch:cpu against the reference."""

    device = "torch:cpu"


if cuda_device_count():  # a real suite on GPU machines; nothing to collect elsewhere

    class TestTorchCudaConformance(_TorchConformance):
        """Every core primitive on torch:cuda:0 against the reference."""

        device = "torch:cuda:0"
