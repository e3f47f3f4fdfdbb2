"""Typed errors of tenferro-distributed, under the project's hierarchy (tenferro_core.errors)."""

from __future__ import annotations

from tenferro_core.errors import ArgumentValueError, TenferroError


class DistributedError(TenferroError, RuntimeError):
    """A collective or the process group failed."""


class NotInitializedError(DistributedError):
    """A collective (or rank()/world_size()) ran before `tenferro_distributed.init()`."""


class CollectiveError(DistributedError):
    """A collective failed on this rank. `collective` names it, `seq` is its sequence number in
    the group (every collective, sync or async, takes the next one, identically on all ranks),
    `ranks` the ranks found dead or missing (may be empty when none could be named)."""

    def __init__(self, message: str, collective: str = "", seq: int = -1, ranks: tuple[int, ...] = ()):
        super().__init__(message)
        self.collective, self.seq, self.ranks = collective, seq, tuple(ranks)

    def __reduce__(self):
        return type(self), (str(self), self.collective, self.seq, self.ranks)


class RankFailureError(CollectiveError):
    """A peer died (its heartbeat stopped): `ranks` names the dead ranks."""


class CollectiveTimeoutError(CollectiveError, TimeoutError):
    """A collective did not complete within its timeout; `ranks` names the ranks that had not
    reached it (alive but behind: hung or running other code)."""


class CollectiveMismatchError(DistributedError, ValueError):
    """Debug mode: ranks called one collective with different shapes, dtypes or arguments."""


class UnknownAlgorithmError(ArgumentValueError):
    """An algorithm name that is not one of the collective's algorithms."""


__all__ = ["DistributedError", "NotInitializedError", "CollectiveError", "RankFailureError",
           "CollectiveTimeoutError", "CollectiveMismatchError", "UnknownAlgorithmError"]
