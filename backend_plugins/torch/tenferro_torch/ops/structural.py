"""Structural kernels: layout, conversion, slicing, padding, gather/scatter, creation.

Layout changes return torch views (buffers are immutable, so sharing is safe); kernels that
write (``dynamic_update_slice``, ``pad``, ``scatter``) write into a fresh clone. Index
tensors are converted to int64 first: torch reads uint8 and bool index tensors as masks.
"""

from __future__ import annotations

import math

import torch

from .common import TORCH_BY_NAME


def _broadcast_in_dim(x, *, shape, broadcast_dimensions):
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = x.shape[i]
    return x.reshape(expanded).expand(shape)


def convert(x, *, new_dtype):
    """`convert`: to bool is "nonzero" (either part of a complex number); complex to a real
    or integer dtype takes the real part (torch would warn); otherwise torch's C casts."""
    target = TORCH_BY_NAME[new_dtype.name]
    if target is torch.bool:
        return x != 0
    if x.is_complex() and not target.is_complex:
        x = torch.real(x)
    out = x.to(target)
    if (x.dtype in _HALF or target in _HALF) and x.is_floating_point() and target.is_floating_point:
        # torch's casts from and to 16-bit floats lose a NaN's sign bit (float16 -nan to
        # float32 is +nan, float32 +nan to bfloat16 is -nan), which copysign and signbit
        # read: a NaN becomes the quiet NaN with the source's sign, set on the bits. Not its
        # payload: torch's bfloat16 kernels round a NaN of payload 0x7fff into the sign bit
        ints = out.view(_BITS[target])
        quiet = torch.tensor(_QUIET_NAN[target], dtype=ints.dtype)
        signed = torch.where(x.view(_BITS[x.dtype]) < 0, quiet | torch.iinfo(ints.dtype).min, quiet)
        out = torch.where(torch.isnan(out), signed, ints).view(target)
    return out


_HALF = (torch.float16, torch.bfloat16)
_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64}
_QUIET_NAN = {torch.float16: 0x7E00, torch.bfloat16: 0x7FC0, torch.float32: 0x7FC00000,
              torch.float64: 0x7FF8000000000000}


def _slice(x, *, start_indices, limit_indices, strides):
    return x[tuple(map(slice, start_indices, limit_indices, strides))]


def _window(shape, starts, sizes) -> tuple[slice, ...]:
    """Slices of the window at `starts` (0-d tensors) clamped into [0, n - size], as in JAX."""
    out = []
    for s, n, k in zip(starts, shape, sizes):
        start = min(max(int(s), 0), n - k)
        out.append(slice(start, start + k))
    return tuple(out)


def _dynamic_slice(x, *starts, slice_sizes):
    return x[_window(x.shape, starts, slice_sizes)]


def _dynamic_update_slice(x, update, *starts):
    out = x.clone()
    out[_window(x.shape, starts, update.shape)] = update
    return out


def pad(x, value, *, padding_config):
    """`pad`: fill with the 0-d `value`, place x with interior gaps, then crop negative edges."""
    core = [n + max(n - 1, 0) * i for n, (_, _, i) in zip(x.shape, padding_config)]
    lo = [max(lo, 0) for lo, _, _ in padding_config]
    hi = [max(hi, 0) for _, hi, _ in padding_config]
    out = value.expand([a + c + b for a, c, b in zip(lo, core, hi)]).clone()
    out[tuple(slice(a, a + c, i + 1) for a, c, (_, _, i) in zip(lo, core, padding_config))] = x
    return out[tuple(slice(max(-l, 0), n - max(-h, 0))
                     for (l, h, _), n in zip(padding_config, out.shape))]


def _gather(x, indices, *, axes):
    batch = tuple(indices.shape[:-1])
    if not axes:
        return x.reshape((1,) * len(batch) + tuple(x.shape)).expand(batch + tuple(x.shape))
    others = [i for i in range(x.ndim) if i not in axes]
    rest = tuple(x.shape[i] for i in others)
    if indices.numel() == 0 or 0 in rest:  # nothing to take (a gathered axis may be empty)
        return torch.zeros(batch + rest, dtype=x.dtype, device=x.device)
    idx = indices.to(torch.int64)
    rows = tuple(idx[..., k].clamp(0, x.shape[a] - 1) for k, a in enumerate(axes))
    return x.permute(list(axes) + others)[rows]


def _scatter(add: bool):
    """scatter / scatter_add: out-of-range index rows are dropped; duplicates add (or one wins)."""

    def kernel(x, indices, updates, *, axes):
        nrows = math.prod(indices.shape[:-1])
        if nrows == 0 or x.numel() == 0:
            return x.clone()
        upd = updates.reshape((nrows,) + tuple(updates.shape[indices.ndim - 1:]))
        if not axes:  # every (empty) index row addresses the whole operand
            if not add:
                return upd[-1].clone()
            if x.dtype is torch.bool:
                return x | upd.any(0)
            out = x.clone()  # rows added one after another, as duplicates below (a sum rounds once)
            out.unsqueeze(0).index_put_((torch.zeros(nrows, dtype=torch.int64, device=x.device),), upd,
                                        accumulate=True)
            return out
        flat = indices.reshape(nrows, len(axes)).to(torch.int64)
        bounds = torch.tensor([x.shape[a] for a in axes], device=flat.device)
        keep = ((flat >= 0) & (flat < bounds)).all(1)
        upd, flat = upd[keep], flat[keep]
        out = x.clone()
        view = out.permute(list(axes) + [i for i in range(x.ndim) if i not in axes])
        view.index_put_(tuple(flat[:, k] for k in range(len(axes))), upd, accumulate=add)
        return out

    return kernel


def _iota(*, dtype, shape, dimension, device):
    n = shape[dimension]
    view = [1] * len(shape)
    view[dimension] = n
    # int64, then wrap/round once
    line = torch.arange(n, device=device.id).to(TORCH_BY_NAME[dtype.name])
    return line.reshape(view).expand(shape).contiguous()


def _fill_value(value, dtype):
    """`fill_value` as a Python number of the target's kind, converted as `convert` would."""
    if dtype.kind == "b":
        return bool(value)
    if isinstance(value, complex) and dtype.kind != "c":
        value = value.real
    if dtype.kind in "iu":
        if isinstance(value, float):
            value = math.trunc(value) if math.isfinite(value) else 0  # unspecified: any value
        value = int(value) % (1 << dtype.bits)
        return value - (1 << dtype.bits) if dtype.kind == "i" and value >> (dtype.bits - 1) else value
    return complex(value) if dtype.kind == "c" else float(value)


def _full(*, shape, fill_value, dtype, device):
    value = _fill_value(fill_value, dtype)
    target = TORCH_BY_NAME[dtype.name]
    if dtype.kind in "biu" or _in_range(value, target):
        return torch.full(shape, value, dtype=target, device=device.id)
    # torch.full refuses values beyond the type's range; float64 -> target rounds them once
    wide = torch.complex128 if dtype.kind == "c" else torch.float64
    return torch.tensor(value, dtype=wide, device=device.id).to(target).expand(shape).clone()


def _in_range(value, target) -> bool:
    limit = torch.finfo(target).max
    parts = (value.real, value.imag) if isinstance(value, complex) else (value,)
    return all(abs(p) <= limit or not math.isfinite(p) for p in parts)


KERNELS = {
    "reshape": lambda x, *, new_sizes: x.reshape(new_sizes),
    "transpose": lambda x, *, permutation: x.permute(permutation),
    "broadcast_in_dim": _broadcast_in_dim, "convert": convert,
    "bitcast_convert": lambda x, *, new_dtype: x.view(TORCH_BY_NAME[new_dtype.name]),
    "slice": _slice, "dynamic_slice": _dynamic_slice, "dynamic_update_slice": _dynamic_update_slice,
    "pad": pad, "concatenate": lambda *xs, dimension: torch.cat(xs, dim=dimension),
    "reverse": lambda x, *, dimensions: torch.flip(x, dimensions) if dimensions else x,
    "gather": _gather, "scatter": _scatter(False), "scatter_add": _scatter(True),
    "iota": _iota, "full": _full, "copy": torch.clone,
}
