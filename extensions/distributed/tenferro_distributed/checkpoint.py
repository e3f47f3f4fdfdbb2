"""Checkpoints of a data-parallel job: rank 0 writes, every rank loads.

`save_checkpoint(path, tree, step=...)` has rank 0 write `tree` (parameters, optimizer state,
anything `tenferro_nn.save_state` takes) as one safetensors file, atomically (a temporary
file, then `os.replace`: a crash mid-write leaves the previous checkpoint whole), with the
step in its metadata; every rank then waits at a barrier, so after the call the file is
complete for all. Per-rank state (ZeRO-1's shards) goes in `sharded=`: every rank writes its
own file ``<path>.rank<r>-of-<n>`` first, and rank 0 writes the main file only after all
shards are on disk, so the main file's presence means a complete checkpoint.

`load_checkpoint(path, like, sharded_like=)` returns ``(tree, step, sharded)`` on every rank,
or None when there is no checkpoint yet (a fresh start). With ``torchrun --max-restarts=k``
a job that loads its last checkpoint at start resumes where it stopped and, when the data
order is a function of the step (DistributedSampler's epoch, a step-seeded key), gives the
uninterrupted run's parameters.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tenferro_core.errors import ArgumentError
from tenferro_distributed.group import barrier, current

_STEP = "tenferro_distributed.step"


def _shard_path(path: Path, rank: int, world: int) -> Path:
    return path.with_name(f"{path.name}.rank{rank}-of-{world}")


def _check_step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ArgumentError(f"save_checkpoint: step must be an int >= 0, got {step!r}")
    return step


def save_checkpoint(path: str | os.PathLike, tree: Any, *, step: int, sharded: Any = None,
                    metadata: dict[str, str] | None = None, timeout: float | None = None) -> None:
    """Rank 0 writes `tree` atomically to `path` (each rank writes its `sharded` part first);
    returns on every rank once the checkpoint is complete."""
    from tenferro_nn import save_state

    g = current()
    step = _check_step(step)
    path = Path(path)
    meta = {**(metadata or {}), _STEP: str(step), "world_size": str(g.world_size)}
    if sharded is not None:
        save_state(_shard_path(path, g.rank, g.world_size), sharded, metadata=meta)
        barrier(timeout)
    if g.rank == 0:
        save_state(path, tree, metadata=meta)
    barrier(timeout)


def load_checkpoint(path: str | os.PathLike, like: Any, *, sharded_like: Any = None,
                    timeout: float | None = None) -> tuple[Any, int, Any] | None:
    """(tree, step, sharded) from the checkpoint at `path` on every rank (shaped like `like`
    and `sharded_like`), or None if there is none. A shard from another step or world size
    is a SerializationError naming it."""
    from tenferro_nn import SerializationError, load_metadata, load_state

    g = current()
    path = Path(path)
    barrier(timeout)  # no rank reads while another may still be writing a previous save
    if not path.exists():
        return None
    meta = load_metadata(path)
    step = int(meta[_STEP]) if _STEP in meta else -1
    tree = load_state(path, like)
    shard = None
    if sharded_like is not None:
        sp = _shard_path(path, g.rank, g.world_size)
        if not sp.exists():
            raise SerializationError(f"load_checkpoint: {path} has no shard for rank {g.rank} of "
                                     f"{g.world_size} ({sp.name}); it was saved by "
                                     f"{meta.get('world_size', '?')} ranks; restart with that many")
        smeta = load_metadata(sp)
        if smeta.get(_STEP) != meta.get(_STEP):
            raise SerializationError(f"load_checkpoint: shard {sp} is of step {smeta.get(_STEP)}, the "
                                     f"checkpoint of step {meta.get(_STEP)}; the shards are out of date")
        shard = load_state(sp, sharded_like)
    return tree, step, shard


__all__ = ["load_checkpoint", "save_checkpoint"]
