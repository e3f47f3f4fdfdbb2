"""ZeRO-1: optimizer state sharded over ranks.

`ZeroOptimizer(opt)` wraps a tenferro-nn optimizer's functional API. The trainable leaves of
one dtype are flattened into one vector, padded to a multiple of the world size and cut in
`world_size` equal shards; rank `r` keeps the optimizer state of shard `r` only (1/world of
the memory). An update reduce-scatters the gradients (mean: each rank receives its shard of
the averaged gradient), updates its shard of the parameters with the wrapped optimizer, and
all-gathers the shards back into whole parameters::

    zopt = ZeroOptimizer(nn.Adam(lr=1e-3))
    state = zopt.init(model)
    model, state = zopt.update(model, local_grads, state)    # eager or inside compile

The wrapped optimizer must be elementwise (SGD, Adam, AdamW are): a global-norm `clip_norm`
needs every shard and is refused. Parameters equal those of plain data parallel (the same
update on the same averaged gradient; the reduction order of reduce_scatter vs all_reduce may
differ in the last bit for more than two ranks).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from tenferro_core.errors import ArgumentError, ShapeError
from tenferro_distributed.group import current


class ZeroState(NamedTuple):
    """The wrapped optimizer's state over this rank's shards (one flat shard per dtype)."""

    inner: Any


def state_bytes(state: Any) -> int:
    """Bytes held by the tensors of an optimizer state (any pytree), for memory comparisons."""
    from tenferro_runtime.pytree import tree_flatten

    return sum(int(t.size) * t.dtype.itemsize for t in tree_flatten(state)[0] if hasattr(t, "dtype"))


class ZeroOptimizer:
    """ZeRO-1 around `opt` (an `Optimizer` made without parameters): see the module doc.
    `pad=False` refuses parameters whose flat length per dtype the world size does not divide
    (a ShapeError) instead of padding them."""

    def __init__(self, opt: Any, *, pad: bool = True, algorithm: str | None = None,
                 timeout: float | None = None):
        from tenferro_nn.optim import Optimizer

        if not isinstance(opt, Optimizer):
            raise ArgumentError(f"ZeroOptimizer: expected a tenferro_nn optimizer (SGD, Adam, AdamW), got "
                                f"{type(opt).__name__}")
        if getattr(opt, "clip_norm", None) is not None:
            raise ArgumentError("ZeroOptimizer: clip_norm needs the global gradient norm over every shard; "
                                "clip the gradients before the update (clip_grad_norm) and make the "
                                "optimizer without clip_norm")
        if not isinstance(pad, bool):
            raise ArgumentError(f"ZeroOptimizer: pad must be a bool, got {pad!r}")
        self.opt, self.pad, self.algorithm, self.timeout = opt, pad, algorithm, timeout

    # ---- layout ----------------------------------------------------------------------------------
    def _groups(self, params: Any) -> tuple[list, list, dict[str, list[int]], Any]:
        from tenferro_nn.module import trainable_mask
        from tenferro_runtime.pytree import tree_flatten

        leaves, td = tree_flatten(params)
        mask = trainable_mask(params)
        groups: dict[str, list[int]] = {}
        for i, (t, m) in enumerate(zip(leaves, mask)):
            if m:
                groups.setdefault(str(t.dtype), []).append(i)
        return leaves, mask, groups, td

    def _shard(self, flat: Any, n: int, what: str) -> tuple[Any, int]:
        """`flat` padded to a multiple of n (the padding length), or a ShapeError with pad=False."""
        from tenferro_runtime import array_api as xp

        length = flat.shape[0]
        extra = -length % n
        if extra and not self.pad:
            raise ShapeError(f"ZeroOptimizer: the {what} parameters have {length} elements, which the world "
                             f"size {n} does not divide; pass pad=True (the default) or resize them")
        if extra:
            flat = xp.concat([flat, xp.zeros((extra,), dtype=flat.dtype, device=flat.device)])
        return flat, extra

    def _local(self, leaves: list, groups: dict[str, list[int]]) -> list:
        from tenferro_distributed.data_parallel import _flat

        g = current()
        out = []
        for dt, idx in groups.items():
            flat, _ = self._shard(_flat([leaves[i] for i in idx]), g.world_size, dt)
            s = flat.shape[0] // g.world_size
            out.append(flat[g.rank * s:(g.rank + 1) * s])
        return out

    # ---- functional API ----------------------------------------------------------------------------
    def init(self, params: Any) -> ZeroState:
        """The sharded state: the wrapped optimizer's init on this rank's flat shards."""
        leaves, _, groups, _ = self._groups(params)
        return ZeroState(self.opt.init(self._local(leaves, groups)))

    def update(self, params: Any, grads: Any, state: ZeroState) -> tuple[Any, ZeroState]:
        """(new params, new state): the gradients averaged over ranks (reduce-scatter), this
        rank's shard updated, the shards all-gathered. `grads` are this rank's local ones."""
        from tenferro_distributed import api
        from tenferro_distributed.data_parallel import _flat, _unflat
        from tenferro_runtime.pytree import tree_flatten, tree_unflatten

        if not isinstance(state, ZeroState):
            raise ArgumentError(f"ZeroOptimizer.update: expected the ZeroState from init/update, got "
                                f"{type(state).__name__}")
        g = current()
        leaves, _, groups, td = self._groups(params)
        g_leaves, gtd = tree_flatten(grads)
        if gtd != td:
            raise ArgumentError("ZeroOptimizer.update: grads must have the structure of params "
                                "(differentiate with respect to the params themselves)")
        p_shards = self._local(leaves, groups)
        g_shards = []
        for dt, idx in groups.items():
            flat, _ = self._shard(_flat([g_leaves[i] for i in idx]), g.world_size, dt)
            g_shards.append(api.reduce_scatter(flat, "mean", algorithm=self.algorithm, timeout=self.timeout))
        new_shards, inner = self.opt.update(p_shards, g_shards, state.inner)
        out = list(leaves)
        for (_dt, idx), shard in zip(groups.items(), new_shards):
            full = api.all_gather(shard, algorithm=self.algorithm, timeout=self.timeout)
            for i, v in zip(idx, _unflat(full, [leaves[i] for i in idx])):
                out[i] = v
        return tree_unflatten(td, out), ZeroState(inner)


__all__ = ["ZeroOptimizer", "ZeroState", "state_bytes"]
