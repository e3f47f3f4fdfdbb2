"""tenferro-fft: the Array API 2024.12 fft extension, with AD rules.

Also reachable as ``tenferro_runtime.array_api.fft`` once the plugin is loaded. Three
ops do the work (`_ops`: complex-to-complex, real-to-complex, complex-to-real, run by
scipy.fft on the NumPy backend); n/s padding and truncation, hfft/ihfft, the frequencies
and the shifts are compositions with core primitives. See docs/fft.md.
"""

from __future__ import annotations

from ._freq import fftfreq, fftshift, ifftshift, rfftfreq
from ._ops import fft_p, irfft_p, rfft_p
from ._transforms import fft, fftn, hfft, ifft, ifftn, ihfft, irfft, irfftn, rfft, rfftn

__version__ = "0.1.0"

__all__ = [
    "fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
    "fftfreq", "rfftfreq", "fftshift", "ifftshift",
    "fft_p", "rfft_p", "irfft_p",
]
