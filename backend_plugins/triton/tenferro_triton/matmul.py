"""Triton matmul for `dot_general`: one tiled kernel over (B, M, K) x (B, K, N).

`dot_kernel` turns a dot_general signature into a closure: the operands are permuted and
reshaped (with torch: views where the layout allows, a copy only where it does not) to
(B, M, K) and (B, K, N), and their strides go to the kernel, so transposed or otherwise
strided operands are read in place. Programs are ordered in groups of GROUP_M rows of tiles
(as in the Triton matmul tutorial) for L2 reuse; block sizes are autotuned per shape bucket
(`autotune.py`). float16 and bfloat16 accumulate in float32, float32 in float32 with IEEE
products (TF32 only with ``TENFERRO_TRITON_TF32=1``), float64 in float64; other dtypes are
left to the torch kernel. Importing this module does not import triton or torch.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError

from .launch import Launcher

OP = "matmul.v2"  # autotune cache namespace; bump when the kernel or its configs change
SUPPORTED = (D.float16, D.bfloat16, D.float32, D.float64)
_INT32_MAX = 2**31 - 1
_GRID_Y_MAX = 65535  # CUDA's limit on grid axis 1, which runs over the batch


def _check(in_avals: tuple, out_aval: Any, contracting_dims: tuple, batch_dims: tuple) -> None:
    """Typed errors for a signature that is not a valid dot_general."""
    if len(in_avals) != 2:
        raise ArgumentError(f"dot_general: 2 operands (lhs, rhs), got {len(in_avals)}")
    lhs, rhs = in_avals
    if lhs.dtype != rhs.dtype:
        raise DTypeError(f"dot_general: lhs and rhs need one dtype, got {lhs.dtype} and {rhs.dtype}")
    try:
        (lc, rc), (lb, rb) = contracting_dims, batch_dims
    except (TypeError, ValueError):
        raise ShapeError(
            "dot_general: contracting_dims and batch_dims are pairs (lhs_axes, rhs_axes), "
            f"got {contracting_dims} and {batch_dims}"
        ) from None
    for name, axes, ndim in (("lhs", (*lc, *lb), len(lhs.shape)), ("rhs", (*rc, *rb), len(rhs.shape))):
        if len(set(axes)) != len(axes) or any(not 0 <= a < ndim for a in axes):
            raise ShapeError(f"dot_general: {name} contracting + batch axes {axes} must be distinct "
                             f"axes in range for rank {ndim}")
    for kind, la, ra in (("contracting", lc, rc), ("batch", lb, rb)):
        if len(la) != len(ra) or any(lhs.shape[i] != rhs.shape[j] for i, j in zip(la, ra)):
            raise ShapeError(f"dot_general: {kind} axes {la} of lhs {lhs.shape} and {ra} of rhs "
                             f"{rhs.shape} must pair up with equal sizes")
    lf = [i for i in range(len(lhs.shape)) if i not in lc and i not in lb]
    rf = [i for i in range(len(rhs.shape)) if i not in rc and i not in rb]
    expect = tuple([lhs.shape[i] for i in lb] + [lhs.shape[i] for i in lf] + [rhs.shape[i] for i in rf])
    if tuple(out_aval.shape) != expect or out_aval.dtype != lhs.dtype:
        raise ShapeError(f"dot_general: the result is {expect} {lhs.dtype}, the node says "
                         f"{tuple(out_aval.shape)} {out_aval.dtype}")


def dot_kernel(in_avals: tuple, out_aval: Any, contracting_dims: tuple, batch_dims: tuple) -> Any:
    """A kernel (lhs buffer, rhs buffer) -> result buffer for this dot_general signature, or
    None where Triton does not run it (the torch kernel does)."""
    _check(in_avals, out_aval, contracting_dims, batch_dims)
    lhs, rhs = in_avals
    if lhs.dtype not in SUPPORTED:
        return None
    (lc, rc), (lb, rb) = contracting_dims, batch_dims
    lf = [i for i in range(len(lhs.shape)) if i not in lc and i not in lb]
    rf = [i for i in range(len(rhs.shape)) if i not in rc and i not in rb]
    b = math.prod(lhs.shape[i] for i in lb)
    m = math.prod(lhs.shape[i] for i in lf)
    n = math.prod(rhs.shape[i] for i in rf)
    k = math.prod(lhs.shape[i] for i in lc)
    if max(m * k, k * n, m * n) > _INT32_MAX or b > _GRID_Y_MAX:  # 32-bit offsets, grid axis 1
        return None
    out_shape = tuple(out_aval.shape)
    lperm, rperm = (*lb, *lf, *lc), (*rb, *rc, *rf)
    lhs_id, rhs_id = lperm == tuple(range(len(lperm))), rperm == tuple(range(len(rperm)))
    tf32 = lhs.dtype == D.float32 and os.environ.get("TENFERRO_TRITON_TF32", "0") not in ("", "0")
    precision = "tf32" if tf32 else "ieee"
    f64 = lhs.dtype == D.float64
    dtype_name = lhs.dtype.name
    upcast = lhs.dtype == D.bfloat16 and _interpreted()

    if b == 0 or m == 0 or n == 0 or k == 0:
        def empty(x: Any, y: Any) -> Any:
            """No launch: an empty result, or zeros where only K is 0."""
            import torch

            make = torch.empty if b * m * n == 0 else torch.zeros
            return make(out_shape, dtype=x.dtype, device=x.device)

        return empty

    state: dict[str, Any] = {}  # filled on the first call: jit fn, tuned config, grid

    def run(x: Any, y: Any) -> Any:
        """Launches the matmul kernel on x (lhs) and y (rhs); the result is contiguous."""
        import torch

        if x.is_cuda and x.device.index != torch.cuda.current_device():
            with torch.cuda.device(x.device):  # Triton launches on the current device
                return run(x, y)
        a = (x if lhs_id else x.permute(lperm)).reshape(b, m, k)
        c = (y if rhs_id else y.permute(rperm)).reshape(b, k, n)
        if not _fits(a) or not _fits(c):  # strides too large for 32-bit offsets
            a, c = a.contiguous(), c.contiguous()
        out = torch.empty((b, m, n), dtype=x.dtype, device=x.device)
        args = (a, c, out, m, n, k, *a.stride(), *c.stride(), *out.stride())
        launch = state.get("launch")
        if launch is None:
            meta = {"ACC_F64": f64, "PRECISION": precision, "UPCAST": upcast}
            tuned = _tuned(f64)
            grid_of = functools.partial(_grid, b, m, n)
            from .autotune import target_name, tune_key

            key = tune_key(OP, dtype_name, target_name(x.device), {"B": b, "M": m, "N": n, "K": k})
            config = tuned.launch(key, grid_of, args, meta)
            state["launch"] = _launcher(tuned.fn, config, meta, k, grid_of(config.kwargs))
        else:
            launch(*args)
        return out.view(out_shape)

    return run


def _launcher(fn: Any, config: Any, meta: dict, k: int, grid: tuple) -> Launcher:
    """The tuned `config`'s launch of the kernel under its EVEN_K heuristic (`fn.fn`, with
    EVEN_K computed here once: the launcher then calls the compiled kernel directly)."""
    kw = {**meta, **config.all_kwargs(), "EVEN_K": k % config.kwargs["BLOCK_K"] == 0}
    jit = getattr(fn, "fn", fn)
    names = set(jit.arg_names)
    return Launcher(jit, grid, {n: v for n, v in kw.items() if n in names},
                    **{n: v for n, v in kw.items() if n not in names})


def _fits(t: Any) -> bool:
    """Whether every in-matrix offset of a (B, R, C) view fits in 32 bits."""
    _, r, c = t.shape
    _, sr, sc = t.stride()
    return (r - 1) * abs(sr) + (c - 1) * abs(sc) <= _INT32_MAX


def _grid(b: int, m: int, n: int, meta: dict) -> tuple[int, int]:
    """Tiles of the (M, N) output along axis 0, batch along axis 1."""
    return ((m + meta["BLOCK_M"] - 1) // meta["BLOCK_M"] * ((n + meta["BLOCK_N"] - 1) // meta["BLOCK_N"]), b)


def _prune(configs: list, named: dict[str, Any]) -> list:
    """Drops configs whose blocks are larger than a size needs (its power-of-two bucket, at
    least 16, the smallest `tl.dot` tile); keeps the smallest one if none is left."""
    from .autotune import bucket

    cap = {d: max(16, bucket(named[d[-1]])) for d in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
    kept = [c for c in configs if all(c.kwargs[d] <= cap[d] for d in cap)]
    if kept:
        return kept
    return [min(configs, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_K"])]


def _configs(interp: bool, f64: bool = False) -> list:
    """Candidate block configs: two tiny ones under the interpreter (tests stay fast), the
    Triton tutorial's set on CUDA (out-of-resource ones are skipped while tuning), and small
    tiles for float64, whose (M, K, N) products are held in registers."""
    import triton

    def cfg(bm: int, bn: int, bk: int, warps: int, stages: int) -> Any:
        return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                             num_warps=warps, num_stages=stages)

    if interp:
        return [cfg(16, 16, 16, 1, 1), cfg(32, 32, 32, 1, 1)]
    if f64:
        return [cfg(32, 32, 8, 4, 2), cfg(64, 32, 8, 4, 2), cfg(32, 64, 8, 4, 2), cfg(16, 16, 16, 1, 2)]
    return [
        cfg(128, 256, 64, 8, 3), cfg(64, 256, 32, 4, 4), cfg(128, 128, 32, 4, 4),
        cfg(128, 64, 32, 4, 4), cfg(64, 128, 32, 4, 4), cfg(128, 32, 32, 4, 4),
        cfg(64, 64, 32, 4, 3), cfg(64, 32, 32, 2, 5), cfg(32, 64, 32, 2, 5),
        cfg(32, 32, 32, 2, 4), cfg(16, 16, 16, 1, 2),
    ]


def _interpreted() -> bool:
    from .cache import interpreted

    return interpreted()


@functools.cache
def _tuned(f64: bool = False) -> Any:
    """The matmul jit kernel with its configs (built on first use: imports triton)."""
    from .autotune import Tuned

    return Tuned(OP + (".f64" if f64 else ""), _jit_kernel(), _configs(_interpreted(), f64),
                 prune=_prune)


@functools.cache
def _jit_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                      stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,
                      stride_cb, stride_cm, stride_cn,
                      ACC_F64: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
        pid = tl.program_id(0)
        bid = tl.program_id(1).to(tl.int64)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        # rows and columns past the edge read row/column 0 again (wrapped, so loads need no
        # mask) and are not stored
        a_ptrs = a_ptr + bid * stride_ab + (offs_m % M)[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + bid * stride_bb + offs_k[:, None] * stride_bk + (offs_n % N)[None, :] * stride_bn
        if ACC_F64:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in range(0, tl.cdiv(K, BLOCK_K)):
            if EVEN_K:
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
            else:
                k_left = K - kk * BLOCK_K
                a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
                b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            if UPCAST:  # the interpreter's dot reads bfloat16 as raw bits; products are exact
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            if ACC_F64:  # tl.dot has no float64 form on NVIDIA (Triton 3.6): products summed
                acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
            else:
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk

        c_ptrs = c_ptr + bid * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

    # K a multiple of BLOCK_K: the loads of the loop need no mask
    return triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BLOCK_K"] == 0})(matmul_kernel)


def bench_matmul(dtype: Any, m: int, n: int, k: int, device: str = "cuda") -> dict[str, float]:
    """TFLOP/s of this kernel and of `torch.matmul` on an (m, k) x (k, n) product on a CUDA
    device (tunes first if needed; `dtype` a tenferro or torch dtype)."""
    import torch
    import triton.testing

    from tenferro_core.dtypes import DType

    tdtype = getattr(torch, dtype.name) if isinstance(dtype, DType) else dtype
    ten = dtype if isinstance(dtype, DType) else getattr(D, str(tdtype).removeprefix("torch."))
    x = torch.randn((m, k), dtype=tdtype, device=device)
    y = torch.randn((k, n), dtype=tdtype, device=device)
    aval = _Aval
    kernel: Callable[[Any, Any], Any] | None = dot_kernel(
        (aval((m, k), ten), aval((k, n), ten)), aval((m, n), ten), ((1,), (0,)), ((), ()))
    if kernel is None:
        raise DTypeError(f"bench_matmul: {ten} has no Triton matmul")
    kernel(x, y)  # tunes (once per shape bucket) and compiles
    flops = 2.0 * m * n * k
    ms_triton = triton.testing.do_bench(lambda: kernel(x, y))
    ms_torch = triton.testing.do_bench(lambda: torch.matmul(x, y))
    return {"triton_tflops": flops / ms_triton * 1e-9, "torch_tflops": flops / ms_torch * 1e-9,
            "triton_ms": ms_triton, "torch_ms": ms_torch}


class _Aval:
    """A bare shape and dtype (what `dot_kernel` reads of an aval)."""

    def __init__(self, shape: tuple, dtype: Any) -> None:
        self.shape, self.dtype = tuple(shape), dtype
