"""Kernels for uint16, uint32 and uint64, which torch stores but can barely compute on.

torch 2.13 holds these dtypes (views, copies, casts, NumPy and DLPack exchange) but has no
add, compare, reduce, flip or index_put kernels for them. Each kernel here is built from
what torch has, and gives NumPy's results bit for bit:

* bit-exact ops (add, sub, mul, neg, bitwise ops, shift_left, sums, products, scans,
  matmul, and all data movement) run on the same-width signed view, the "twin" (no copy):
  two's complement arithmetic yields the unsigned result's bits;
* order (comparisons, maximum/minimum/clamp, max/min, argmax/argmin, sort/argsort) runs
  on the twin with its top bit flipped, which maps unsigned order onto signed order;
* shift_right is logical: shift once with the top bit cleared, then arithmetically;
* div, rem, pow: uint16/uint32 in int64 (exact) and truncated back; uint64 through int64
  bit patterns: long division by signed division (Hacker's Delight 9-3), and pow with an
  exponent >= 2**63 reduced mod 2**62 (the odd residues mod 2**64 have orders dividing
  2**62; even bases give 0);
* convert goes through int64: uint64 >= 2**63 to a float rounds a halved int64 with the
  dropped bit kept as a sticky bit (one rounding, as NumPy's C cast); floats >= 2**63 to
  uint64 are offset by 2**63.

The kernels take any dtype (other operands go to the ordinary kernel, e.g. a float gather
with uint64 indices), so `specialize` hands one out for every signature involving these
dtypes, operand or result (convert to uint32, argmax with index_dtype uint64).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from tenferro_core import dtypes as D

from . import elementwise, reductions, structural
from .common import TORCH_BY_NAME, same

TWIN: dict[torch.dtype, torch.dtype] = {
    torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64,
}
"""The emulated dtypes and their same-width signed twins."""
TWIN_DTYPE: dict[D.DType, D.DType] = {D.uint16: D.int16, D.uint32: D.int32, D.uint64: D.int64}
EMULATED = frozenset(TWIN_DTYPE)
_BITS = {torch.int16: 16, torch.int32: 32, torch.int64: 64}
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
Kernel = Callable[..., Any]


def involved(avals: Iterable[Any]) -> bool:
    """Whether any of `avals` has a dtype this module emulates."""
    return any(a.dtype in EMULATED for a in avals)


def _top(twin: torch.dtype) -> int:
    """The sign bit of a signed dtype, as the (negative) Python int with only that bit set."""
    return -(1 << (_BITS[twin] - 1))


def _key(x: torch.Tensor) -> torch.Tensor:
    """The twin with its top bit flipped: keys compare as signed as x compares unsigned."""
    twin = TWIN[x.dtype]
    return x.view(twin) ^ _top(twin)


def _unkey(k: torch.Tensor, unsigned: torch.dtype) -> torch.Tensor:
    return (k ^ _top(k.dtype)).view(unsigned)


def widen(x: torch.Tensor) -> torch.Tensor:
    """uint16/uint32 as int64 of the same value (uint64: its int64 bit pattern)."""
    s = x.view(TWIN[x.dtype])
    if s.dtype is torch.int64:
        return s
    return s.to(torch.int64) & ((1 << _BITS[s.dtype]) - 1)


def narrow(v: torch.Tensor, unsigned: torch.dtype) -> torch.Tensor:
    """int64 (or any integer) values as `unsigned`, wrapped mod 2**bits as C casts do."""
    return v.to(TWIN[unsigned]).view(unsigned)


def _wrap(base: Kernel, *, data: Sequence[int] | None = None, order: bool = False,
          back: bool = True) -> Kernel:
    """`base` on the twins (or, with `order`, the order keys) of the emulated operands at
    positions `data` (all by default); with `back` the result is viewed as their dtype."""
    to_twin = _key if order else (lambda x: x.view(TWIN[x.dtype]))

    def kernel(*args: Any, **params: Any) -> Any:
        args_ = list(args)
        unsigned = None
        for i in range(len(args_)) if data is None else data:
            if args_[i].dtype in TWIN:
                unsigned = args_[i].dtype
                args_[i] = to_twin(args_[i])
        out = base(*args_, **params)
        if not back or unsigned is None:
            return out
        return _unkey(out, unsigned) if order else out.view(unsigned)

    return kernel


def _index_out(kernel: Kernel) -> Kernel:
    """`kernel` whose `index_dtype` may be emulated: computed in the twin, viewed back."""

    def wrapped(*args: Any, index_dtype: D.DType, **params: Any) -> Any:
        twin = TWIN_DTYPE.get(index_dtype)
        if twin is None:
            return kernel(*args, index_dtype=index_dtype, **params)
        return kernel(*args, index_dtype=twin, **params).view(TORCH_BY_NAME[index_dtype.name])

    return wrapped


# ---- arithmetic with unsigned semantics ----------------------------------------------


def _uge(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a >= b for int64 bit patterns read as uint64, as int64 0/1."""
    return ((a ^ _I64_MIN) >= (b ^ _I64_MIN)).to(torch.int64)


def _divmod64(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """uint64 quotient and remainder of int64 bit patterns; both 0 where y == 0.

    Hacker's Delight 9-3: a divisor >= 2**63 gives 0 or 1; otherwise halve x (logically),
    divide signed, double, and correct the quotient by at most one."""
    zero = y == 0
    big = y < 0
    d = torch.where(zero | big, 1, y)
    q = torch.div((x >> 1) & _I64_MAX, d, rounding_mode="trunc") << 1
    q = q + _uge(x - q * d, d)
    q = torch.where(zero, 0, torch.where(big, _uge(x, y), q))
    return q, torch.where(zero, 0, x - q * y)


def _pow64(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x ** y mod 2**64 of int64 bit patterns read as uint64."""
    huge = y < 0  # y >= 2**63: odd x ** y == x ** (y mod 2**62); even x ** y == 0
    out = torch.pow(x, torch.where(huge, y & ((1 << 62) - 1), y))
    return torch.where(huge & ((x & 1) == 0), 0, out)


def _unsigned_arith(name: str, in_int64: Kernel, on_uint64: Kernel) -> Kernel:
    """A binary kernel: uint16/uint32 in int64 (`in_int64`), uint64 on its int64 bits."""
    base = elementwise.KERNELS[name]

    def kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        u = x.dtype
        if u is torch.uint64:
            return on_uint64(x.view(torch.int64), y.view(torch.int64)).view(u)
        if u in TWIN:
            return narrow(in_int64(widen(x), widen(y)), u)
        return base(x, y)

    return kernel


def _shift_right(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Logical shift; counts of at least the width give 0."""
    u = x.dtype
    if u not in TWIN:
        return elementwise.KERNELS["shift_right"](x, y)
    s, n = x.view(TWIN[u]), y.view(TWIN[u])
    ok = (n >= 0) & (n < _BITS[s.dtype])  # counts >= 2**(bits-1) read negative here
    cleared = (s >> 1) & (-_top(s.dtype) - 1)
    out = torch.where(ok, cleared >> torch.where(ok & (n > 0), n - 1, 0), 0)
    return torch.where(n == 0, s, out).view(u)


def _sign(x: torch.Tensor) -> torch.Tensor:
    if x.dtype not in TWIN:
        return elementwise.KERNELS["sign"](x)
    return (x.view(TWIN[x.dtype]) != 0).to(TWIN[x.dtype]).view(x.dtype)


def _abs(x: torch.Tensor) -> torch.Tensor:
    """|x| is x for unsigned operands."""
    return same(x) if x.dtype in TWIN else elementwise.KERNELS["abs"](x)


# ---- conversion ------------------------------------------------------------------------


def _u64_to_float(v: torch.Tensor, new_dtype: D.DType) -> torch.Tensor:
    """uint64 (int64 bit patterns) to a float or complex dtype, rounded once."""
    f = TORCH_BY_NAME[D.real_of(new_dtype).name]
    half = ((v >> 1) & _I64_MAX) | (v & 1)  # the dropped bit stays as a sticky bit
    out = torch.where(v < 0, half.to(f) * 2, v.to(f))
    return out.to(TORCH_BY_NAME[new_dtype.name])


def _float_to_int64(x: torch.Tensor, *, to_uint64: bool) -> torch.Tensor:
    """Truncated to int64; with `to_uint64`, values >= 2**63 as uint64 bit patterns."""
    if not to_uint64:
        return x.to(torch.int64)
    big = x >= 2.0**63
    v = torch.where(big, x - 2.0**63, x).to(torch.int64)
    return torch.where(big, v ^ _I64_MIN, v)


def _convert(x: torch.Tensor, *, new_dtype: D.DType) -> torch.Tensor:
    """`convert` where either side is emulated, by way of int64 (C casts, as NumPy's)."""
    src_twin, dst_twin = TWIN.get(x.dtype), TWIN_DTYPE.get(new_dtype)
    if src_twin is None and dst_twin is None:
        return structural.convert(x, new_dtype=new_dtype)
    if new_dtype is D.bool_:
        return x.view(src_twin) != 0
    if src_twin is not None:
        if x.dtype is torch.uint64 and new_dtype.kind in "fc":
            return _u64_to_float(x.view(torch.int64), new_dtype)
        x = widen(x)
    if dst_twin is None:
        return structural.convert(x, new_dtype=new_dtype)
    if x.is_complex():
        x = torch.real(x)
    if x.is_floating_point():
        x = _float_to_int64(x, to_uint64=new_dtype is D.uint64)
    return x.to(TORCH_BY_NAME[dst_twin.name]).view(TORCH_BY_NAME[new_dtype.name])


# ---- indices and creation -------------------------------------------------------------


def _index64(idx: torch.Tensor, *, saturate: bool) -> torch.Tensor:
    """Emulated index tensors as int64; uint64 >= 2**63 saturates (gather clamps it to the
    last row, as NumPy's clip) or wraps negative (scatter drops it, as NumPy's astype)."""
    if idx.dtype is torch.uint64:
        v = idx.view(torch.int64)
        return torch.where(v < 0, _I64_MAX, v) if saturate else v
    return widen(idx) if idx.dtype in TWIN else idx


def _with_indices(base: Kernel, position: int, *, saturate: bool) -> Kernel:
    def kernel(*args: Any, **params: Any) -> Any:
        args_ = list(args)
        args_[position] = _index64(args_[position], saturate=saturate)
        return base(*args_, **params)

    return kernel


def _starts(base: Kernel, first: int) -> Kernel:
    """`base` with emulated start scalars (from position `first`) as Python ints (a uint64
    tensor >= 2**63 has no int())."""

    def kernel(*args: Any, **params: Any) -> Any:
        starts = [int(s.item()) if s.dtype in TWIN else s for s in args[first:]]
        return base(*args[:first], *starts, **params)

    return kernel


def _created(base: Kernel) -> Kernel:
    """A creation kernel (iota, full) made in the twin dtype and viewed as the emulated one."""

    def kernel(*, dtype: D.DType, **params: Any) -> Any:
        twin = TWIN_DTYPE.get(dtype)
        if twin is None:
            return base(dtype=dtype, **params)
        return base(dtype=twin, **params).view(TORCH_BY_NAME[dtype.name])

    return kernel


def _kernels() -> dict[str, Kernel]:
    E, S, R = elementwise.KERNELS, structural.KERNELS, reductions.KERNELS
    out: dict[str, Kernel] = {}
    for name in ("neg", "conj", "real", "imag", "floor", "ceil", "round", "trunc", "bitwise_not",
                 "add", "sub", "mul", "bitwise_and", "bitwise_or", "bitwise_xor", "shift_left"):
        out[name] = _wrap(E[name])
    for name in ("isnan", "isinf", "isfinite", "eq", "ne"):
        out[name] = _wrap(E[name], back=False)
    for name in ("maximum", "minimum", "clamp"):
        out[name] = _wrap(E[name], order=True)
    for name in ("lt", "le", "gt", "ge"):
        out[name] = _wrap(E[name], order=True, back=False)
    out["abs"] = _abs
    out["sign"] = _sign
    out["select"] = _wrap(E["select"], data=(1, 2))
    out["div"] = _unsigned_arith("div", elementwise.unsigned_div, lambda x, y: _divmod64(x, y)[0])
    out["rem"] = _unsigned_arith("rem", elementwise.int_rem, lambda x, y: _divmod64(x, y)[1])
    out["pow"] = _unsigned_arith("pow", torch.pow, _pow64)
    out["shift_right"] = _shift_right
    for name in ("reshape", "broadcast_in_dim", "pad", "concatenate", "reverse", "copy"):
        out[name] = _wrap(S[name])
    out["convert"] = _convert
    out["dynamic_slice"] = _starts(S["dynamic_slice"], 1)
    out["dynamic_update_slice"] = _starts(_wrap(S["dynamic_update_slice"], data=(0, 1)), 2)
    out["gather"] = _with_indices(_wrap(S["gather"], data=(0,)), 1, saturate=True)
    for name in ("scatter", "scatter_add"):
        out[name] = _with_indices(_wrap(S[name], data=(0, 2)), 1, saturate=False)
    out["iota"], out["full"] = _created(S["iota"]), _created(S["full"])
    for name in ("reduce_sum", "reduce_prod", "cumsum", "dot_general"):
        out[name] = _wrap(R[name])
    for name in ("reduce_max", "reduce_min", "sort"):
        out[name] = _wrap(R[name], order=True)
    for name in ("argmax", "argmin", "argsort"):
        out[name] = _index_out(_wrap(R[name], order=True, back=False))
    return out


KERNELS: dict[str, Kernel] = _kernels()
