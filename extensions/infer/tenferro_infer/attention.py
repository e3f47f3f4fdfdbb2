"""Attention over a paged KV cache, for a varlen batch of sequences in one call, and a plain
(unpaged) reference attention.

**How new K/V reach the pools.** The pools are tensors the `KVCache` owns, and one small
extension op, `kv_update_p` (``tenferro_infer.kv_update.v1``), writes a step's new K/V rows
into their slots *in place* and returns the K/V rows the step reads (a gather by slot,
``slot = block_id * block_size + offset``). Writing in place is the point: a functional
scatter would copy a whole pool (all blocks) for every layer at every step. Three choices
keep this sound inside tenferro's contract:

- the op is ``effects=True``: dead-code elimination, CSE and constant folding never drop,
  merge or fold it, and it keeps program order among effects;
- write and gather are one op, so each read depends on its write through data flow: no
  pass or executor can run the read before the write, or reorder reads of one pool around
  writes to it (each layer's pools are touched by exactly one op per step);
- the pools are private to the cache: nothing but this op (and copy-on-write, through the
  same op) reads or writes them, so no other value observes the mutation.

The op is not differentiable (inference only). Its per-backend kernels (`KERNELS`: NumPy
fancy-index assignment, ``torch.index_copy_``) take buffers and return buffers, as a kernel
does; tenferro-infer registers no kernels today, so the op runs through its decomposition,
which calls the same kernel for its operands' backend (the pattern `debug.print` uses for
an effect). A plugin may register `KERNELS` with ``registry.add_kernel`` unchanged.

**One op a layer.** `paged_attention` binds `paged_attention_p`
(``tenferro_infer.paged_attention.v1``, effects as `kv_update_p`): the write and gather and
the attention over the gathered rows. On CPU devices it runs `attention_kernels`' NumPy or
torch kernel, the math below written straight in that library (one kernel call instead of a
dispatch of `kv_update_p` and a 20-step compiled plan: a decode step calls it 30 times);
elsewhere (a GPU, the triton executor) its decomposition binds `kv_update_p` and the
compiled `_attend_arrays`.

**The math** is tenferro ops: grouped-query heads (each KV head serves ``n_heads /
n_kv_heads`` consecutive query heads), ``softmax(q k^T / sqrt(d))`` under a causal mask over
cached and new positions, times v. A varlen batch is padded to (sequences, longest new run,
longest context) once per step by `plan_attention` (host-side index arrays shared by every
layer), so there is no Python loop over sequences, heads or tokens; a batch whose sequences
all add the same number of tokens (every decode step, a single prefill) needs no padding
gathers, and one whose mask allows everything (a batch-1 decode) needs no mask.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tenferro_core.avals import Aval
from tenferro_core.errors import DTypeError, MissingKernelError, ShapeError
from tenferro_core.extension import define_op
from tenferro_core.params import p_bool, p_nonneg_int
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile
from tenferro_runtime.tensor import Tensor

from .attention_kernels import KV_UPDATE, PAGED_ATTENTION

KERNELS = KV_UPDATE
"""Kernels of `kv_update_p` per backend name: buffers in, buffers out, pools written in place."""

# ---- the in-place write + gather op ----------------------------------------------------------


def _kv_update_rule(k_pool, v_pool, write, k_new, v_new, read):
    """Shapes: pools (num_blocks, block_size, h, d); write (W,) int; k/v new (W, h, d);
    read any int shape S; results S + (h, d) twice."""
    name = "tenferro_infer.kv_update"
    if k_pool.ndim != 4 or v_pool.shape != k_pool.shape or v_pool.dtype != k_pool.dtype:
        raise ShapeError(f"{name}: expected K and V pools of one shape (num_blocks, block_size, "
                         f"n_kv_heads, head_dim) and dtype, got {k_pool.dtype}{list(k_pool.shape)} "
                         f"and {v_pool.dtype}{list(v_pool.shape)}")
    h, d = k_pool.shape[2:]
    for what, idx in (("write slots", write), ("read slots", read)):
        if idx.dtype.kind not in "iu":
            raise DTypeError(f"{name}: {what} must be integers, got {idx.dtype}; pass int64 slots")
    if write.ndim != 1:
        raise ShapeError(f"{name}: write slots must be 1-d, got shape {list(write.shape)}")
    want = (write.shape[0], h, d)
    for what, x in (("new K", k_new), ("new V", v_new)):
        if x.shape != want or x.dtype != k_pool.dtype:
            raise ShapeError(f"{name}: {what} must be {k_pool.dtype}{list(want)} (one row per "
                             f"write slot), got {x.dtype}{list(x.shape)}")
    out = (read.shape + (h, d), k_pool.dtype)
    return out, out


def _kv_update_eval(k_pool, v_pool, write, k_new, v_new, read):
    """Evaluate on concrete tensors: the kernel of the operands' backend on their buffers."""
    device = k_pool.device
    kernel = KERNELS.get(device.backend.name)
    if kernel is None:
        raise MissingKernelError(f"tenferro_infer.kv_update has no kernel for backend "
                                 f"{device.backend.name!r}; it has {sorted(KERNELS)}; put the model "
                                 f"and its KV cache on one of those devices")
    k, v = kernel(k_pool._buf, v_pool._buf, write._buf, k_new._buf, v_new._buf, read._buf)
    aval = Aval(tuple(read.shape) + tuple(k_pool.shape[2:]), k_pool.dtype, device)
    return Tensor._new(k, aval), Tensor._new(v, aval)


kv_update_p = define_op(
    "tenferro_infer.kv_update.v1", _kv_update_rule, nin=6, multiple_results=True, effects=True,
    differentiable=False, decomposition=_kv_update_eval,
    doc="Write new K/V rows into their pool slots in place, then gather the slots a step reads.")


def _optional(extra: tuple, *flags: bool) -> list:
    """The operands after q as (q_index, out_index, mask), None for each one not flagged."""
    it = iter(extra)
    return [next(it) if flag else None for flag in flags]


def _paged_attention_rule(k_pool, v_pool, write, k_new, v_new, read, q, *extra, width,
                          has_q_index, has_out_index, has_mask):
    """(tokens, n_heads * head_dim): the attention of `q` (tokens, n_heads, head_dim) over the
    K/V rows `read` (batch, context) after the new rows are written."""
    name = "tenferro_infer.paged_attention"
    hkv, d = k_pool.shape[2:]
    _kv_update_rule(k_pool, v_pool, write, k_new, v_new, read)
    if len(extra) != has_q_index + has_out_index + has_mask:
        raise ShapeError(f"{name}: expected {has_q_index + has_out_index + has_mask} index/mask "
                         f"operands after q (q_index, out_index, mask as flagged), got {len(extra)}")
    if q.ndim != 3 or q.dtype != k_pool.dtype or q.shape[2] != d or q.shape[1] % hkv:
        raise ShapeError(f"{name}: q must be {k_pool.dtype} (tokens, n_heads, {d}) with n_heads a "
                         f"multiple of {hkv}, got {q.dtype}{list(q.shape)}")
    if read.ndim != 2:
        raise ShapeError(f"{name}: read slots must be (batch, context), got shape {list(read.shape)}; "
                         f"build them with plan_attention")
    b, c = read.shape
    q_index, out_index, mask = _optional(extra, has_q_index, has_out_index, has_mask)
    for what, idx in (("q_index", q_index), ("out_index", out_index)):
        if idx is not None and (idx.ndim != 1 or idx.dtype.kind not in "iu"):
            raise ShapeError(f"{name}: {what} must be 1-d integers, got {idx.dtype}{list(idx.shape)}")
    padded = q_index.shape[0] if q_index is not None else q.shape[0]
    if padded != b * width:
        raise ShapeError(f"{name}: {b} sequences of width {width} need {b * width} query rows, got "
                         f"{padded}{' from q_index' if q_index is not None else ''}")
    if mask is not None and (mask.dtype.kind != "b" or mask.shape != (b, 1, 1, width, c)):
        raise ShapeError(f"{name}: mask must be bool {[b, 1, 1, width, c]}, got "
                         f"{mask.dtype}{list(mask.shape)}")
    rows = out_index.shape[0] if out_index is not None else b * width
    return (rows, q.shape[1] * q.shape[2]), q.dtype


def _paged_attention_eval(k_pool, v_pool, write, k_new, v_new, read, q, *extra, width,
                          has_q_index, has_out_index, has_mask):
    """The kernel of the operands' backend on their buffers (CPU devices), else the same math
    as tenferro ops: `kv_update_p` and `_attend_arrays` compiled per shape."""
    q_index, out_index, mask = _optional(extra, has_q_index, has_out_index, has_mask)
    device = k_pool.device
    kernel = PAGED_ATTENTION.get(device.backend.name) if getattr(device, "id", None) == "cpu" else None
    if kernel is None:
        kc, vc = kv_update_p.bind(k_pool, v_pool, write, k_new, v_new, read)
        return _attend_compiled(q, kc, vc, q_index, out_index, mask, width)
    bufs = [None if a is None else a._buf for a in (q_index, out_index, mask)]
    out = kernel(k_pool._buf, v_pool._buf, write._buf, k_new._buf, v_new._buf, read._buf, q._buf, *bufs,
                 width)
    return Tensor._new(out, Aval(tuple(out.shape), q.dtype, device))  # the rule's shape: checked by bind


_FLAG = (p_bool, False)
paged_attention_p = define_op(
    "tenferro_infer.paged_attention.v1", _paged_attention_rule, nin=None, effects=True,
    differentiable=False, decomposition=_paged_attention_eval,
    payload={"width": (p_nonneg_int, 1), "has_q_index": _FLAG, "has_out_index": _FLAG, "has_mask": _FLAG},
    doc="kv_update's write and gather, then softmax(q k^T / sqrt(d) + mask) v over the gathered rows.")


def copy_slots(cache: Any, src: np.ndarray, dst: np.ndarray) -> None:
    """Copy slots `src` to slots `dst` in every layer's pools (copy-on-write of a block)."""
    dev = cache.device
    src_t = xp.asarray(np.asarray(src, np.int64), device=dev)
    dst_t = xp.asarray(np.asarray(dst, np.int64), device=dev)
    none = xp.asarray(np.zeros(0, np.int64), device=dev)
    h, d = cache.config.n_kv_heads, cache.config.head_dim
    empty = xp.zeros((0, h, d), dtype=cache.dtype, device=dev)
    for kp, vp in zip(cache.k_pools, cache.v_pools):
        k, v = kv_update_p.bind(kp, vp, none, empty, empty, src_t)
        kv_update_p.bind(kp, vp, dst_t, k, v, none)


# ---- one step's layout ------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionPlan:
    """Device index tensors one step's attention uses in every layer.

    The batch is padded to ``(batch, width, context)``: `width` the longest run of new tokens,
    `context` the longest context. ``read`` (batch, context) holds pool slots (paged) or rows
    of the step's new tokens (no cache); ``write`` the slots of the new tokens (paged only);
    ``q_index``/``out_index`` pad and unpad the (tokens, ...) rows (None: no padding needed);
    ``mask`` (batch, 1, 1, width, context) the allowed (query, key) pairs (None: all)."""

    batch: int
    width: int
    context: int
    read: Tensor
    write: Tensor | None
    q_index: Tensor | None
    out_index: Tensor | None
    mask: Tensor | None


def plan_attention(n_new: Sequence[int], starts: Sequence[int], slots: Sequence[np.ndarray] | None,
                   device: Any) -> AttentionPlan:
    """The plan for sequences adding ``n_new[i]`` tokens at positions ``starts[i]...``;
    ``slots[i]`` are the pool slots of positions [0, starts[i] + n_new[i]) (paged), or None
    for attention within the new tokens only (no cache: every start must be 0)."""
    n = np.asarray(n_new, np.int64)
    s = np.asarray(starts, np.int64)
    b, width = len(n), int(n.max())
    ctx = s + n
    context = int(ctx.max())
    if slots is not None:  # paged: padded (masked) slots keep the shapes for CONTEXT_STEP tokens
        context = -(-context // CONTEXT_STEP) * CONTEXT_STEP
    offsets = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
    j = np.arange(width)
    key = np.arange(context)
    valid_q = j[None, :] < n[:, None]  # (b, width)
    if slots is None:
        read = np.where(key[None, :] < ctx[:, None], offsets[:, None] + key[None, :], 0)
        write = None
    else:
        read = np.zeros((b, context), np.int64)
        for i, sl in enumerate(slots):
            read[i, :len(sl)] = sl
        write = np.concatenate([sl[st:st + k] for sl, st, k in zip(slots, s, n)])
    qpos = s[:, None] + j[None, :]  # (b, width)
    mask = (key[None, None, :] <= qpos[:, :, None]) | ~valid_q[:, :, None]  # padded rows: all
    dense = bool((n == width).all())
    q_index = out_index = None
    if not dense:
        q_index = np.where(valid_q, offsets[:, None] + j[None, :], 0).reshape(-1)
        out_index = (np.arange(b)[:, None] * width + j[None, :])[valid_q]

    def dev(a):
        return None if a is None else xp.asarray(np.ascontiguousarray(a), device=device)

    return AttentionPlan(b, width, context, dev(read.astype(np.int64)), dev(write), dev(q_index),
                         dev(out_index), None if mask.all() else dev(mask.reshape(b, 1, 1, width, context)))


# ---- attention --------------------------------------------------------------------------------


def paged_attention(q: Tensor, k: Tensor, v: Tensor, k_pool: Tensor, v_pool: Tensor,
                    plan: AttentionPlan) -> Tensor:
    """Attention of a step's new tokens: `q` (tokens, n_heads, d), `k`/`v` (tokens, n_kv_heads,
    d) are written into the pools, and every query attends to its sequence's cached and new
    positions up to its own. Returns (tokens, n_heads * d)."""
    if plan.write is None:
        raise ShapeError("paged_attention: the plan was built without cache slots; build it with "
                         "plan_attention(..., slots=[...]) or call dense_attention")
    extra = [a for a in (plan.q_index, plan.out_index, plan.mask) if a is not None]
    return paged_attention_p.bind(k_pool, v_pool, plan.write, k, v, plan.read, q, *extra,
                                  width=plan.width, has_q_index=plan.q_index is not None,
                                  has_out_index=plan.out_index is not None, has_mask=plan.mask is not None)


def dense_attention(q: Tensor, k: Tensor, v: Tensor, plan: AttentionPlan) -> Tensor:
    """`paged_attention` without a cache: each sequence attends within its new tokens."""
    flat = xp.reshape(plan.read, (plan.batch * plan.context,))
    kc = xp.reshape(xp.take(k, flat, axis=0), (plan.batch, plan.context) + tuple(k.shape[1:]))
    vc = xp.reshape(xp.take(v, flat, axis=0), (plan.batch, plan.context) + tuple(v.shape[1:]))
    return _attend(q, kc, vc, plan)


def _attend(q: Tensor, kc: Tensor, vc: Tensor, plan: AttentionPlan) -> Tensor:
    """softmax(q k^T / sqrt(d) + mask) v for padded K/V (batch, context, n_kv_heads, d)."""
    t, h, d = q.shape
    hkv = kc.shape[2]
    if h % hkv or kc.shape[3] != d:
        raise ShapeError(f"attention: {h} query heads of size {d} cannot share {hkv} KV heads of "
                         f"size {kc.shape[3]}; n_heads must be a multiple of n_kv_heads")
    return _attend_compiled(q, kc, vc, plan.q_index, plan.out_index, plan.mask, plan.width)


def _attend_arrays(q: Tensor, kc: Tensor, vc: Tensor, q_index: Tensor | None,
                   out_index: Tensor | None, mask: Tensor | None, w: int) -> Tensor:
    """`_attend` on the plan's arrays (sizes from their shapes): compiled once per shape."""
    t, h, d = q.shape
    b, c, hkv = kc.shape[0], kc.shape[1], kc.shape[2]
    g = h // hkv
    qs = q * (1.0 / math.sqrt(d))
    if q_index is not None:
        qs = xp.take(qs, q_index, axis=0)
    qs = xp.reshape(xp.permute_dims(xp.reshape(qs, (b, w, hkv, g, d)), (0, 2, 3, 1, 4)),
                    (b, hkv, g * w, d))
    scores = xp.matmul(qs, xp.permute_dims(kc, (0, 2, 3, 1)))  # (b, hkv, g*w, c)
    if mask is not None:
        scores = xp.where(mask, xp.reshape(scores, (b, hkv, g, w, c)), -math.inf)
        scores = xp.reshape(scores, (b, hkv, g * w, c))
    e = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
    p = e / xp.sum(e, axis=-1, keepdims=True)
    o = xp.matmul(p, xp.permute_dims(vc, (0, 2, 1, 3)))  # (b, hkv, g*w, d)
    o = xp.reshape(xp.permute_dims(xp.reshape(o, (b, hkv, g, w, d)), (0, 3, 1, 2, 4)), (b * w, h * d))
    return o if out_index is None else xp.take(o, out_index, axis=0)


# one plan per (shapes, padding) signature: the paged context is padded to CONTEXT_STEP
# slots, so a decoding sequence compiles anew once per CONTEXT_STEP tokens
_attend_compiled = compile(_attend_arrays, static_argnums=6, maxsize=4096, recompile_warning=1 << 20)
CONTEXT_STEP = 32


def reference_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Plain causal attention of one sequence, no cache and no padding: `q` (n, n_heads, d)
    are the last n of the L positions of `k`/`v` (L, n_kv_heads, d). Returns (n, n_heads, d)."""
    n, h, d = q.shape
    length, hkv = k.shape[0], k.shape[1]
    if length < n or h % hkv:
        raise ShapeError(f"reference_attention: expected q (n, heads, d) with n <= L of k/v (L, "
                         f"kv_heads, d) and heads a multiple of kv_heads, got q {list(q.shape)}, "
                         f"k {list(k.shape)}")
    g = h // hkv
    kr = xp.repeat(xp.permute_dims(k, (1, 0, 2)), g, axis=0)  # (h, L, d): kv head i -> heads i*g...
    vr = xp.repeat(xp.permute_dims(v, (1, 0, 2)), g, axis=0)
    s = xp.matmul(xp.permute_dims(q, (1, 0, 2)), xp.permute_dims(kr, (0, 2, 1))) / math.sqrt(d)
    allowed = np.arange(length)[None, :] <= (length - n + np.arange(n))[:, None]
    s = xp.where(xp.asarray(allowed, device=q.device), s, -math.inf)
    e = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
    return xp.permute_dims(xp.matmul(e / xp.sum(e, axis=-1, keepdims=True), vr), (1, 0, 2))


__all__ = ["KERNELS", "AttentionPlan", "copy_slots", "dense_attention", "kv_update_p",
           "paged_attention", "paged_attention_p", "plan_attention", "reference_attention"]
