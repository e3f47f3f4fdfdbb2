"""Speculative decoding, host side: drafters that propose tokens, and verification.

A `Drafter` proposes up to k tokens after a sequence (with its proposal distributions, or
None when it is deterministic: a one-hot proposal). The target model scores all of them in
one step; `verify` then keeps a prefix and adds one token of its own:

- greedy params: accept while the draft equals the target's argmax, then append the target's
  argmax, so the output is exactly plain greedy decoding's;
- sampling params: rejection sampling (Leviathan et al. 2023, Chen et al. 2023): accept draft
  x with probability min(1, p(x) / q(x)); on the first rejection draw from
  normalize(max(0, p - q)) and stop; if all are accepted draw a bonus token from the last
  target row. Every emitted token is then distributed exactly as the target's p.

The uniforms of one verification come from the request's `RequestRNG` at (seed, step) on a
stream of their own, so results do not depend on which other requests share the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from tenferro_core.errors import ArgumentValueError, ShapeError

from .sampling import IdsLike, RequestRNG, SamplingParams, inverse_cdf, inverse_cdf_rows, probabilities

VERIFY_STREAM = 1  # RequestRNG streams: 0 plain sampling, 1 verification, 2 drafting
DRAFT_STREAM = 2


@runtime_checkable
class Drafter(Protocol):
    """Proposes up to k tokens to follow ``token_ids`` (prompt + output so far)."""

    def propose(self, token_ids: Sequence[int], k: int) -> tuple[list[int], np.ndarray | None]:
        """(draft tokens, their proposal distributions (len(draft), vocab) or None when the
        drafter is deterministic, i.e. one-hot proposals)."""
        ...


# --------------------------------------------------------------------------- prompt lookup


def _last_occurrence(a: np.ndarray, n: int) -> int:
    """Start of the most recent occurrence of a's last n tokens that ends before a's last
    token (so at least one token follows it), or -1."""
    suffix = a[-n:]
    starts = np.flatnonzero(a[:a.size - n] == suffix[0])  # starts 0 .. len - n - 1
    for i in range(1, n):
        if not starts.size:
            break
        starts = starts[a[starts + i] == suffix[i]]
    return int(starts[-1]) if starts.size else -1


@dataclass(frozen=True)
class PromptLookupDrafter:
    """Prompt-lookup (n-gram) drafting: find the most recent earlier occurrence of the last n
    tokens (longest n first, ``ngram_max`` down to ``ngram_min``) and propose what followed.
    The copy runs on into its own proposals (as LZ77 does), so a repeating pattern near the end
    still yields k tokens. No second model; deterministic (returns None probabilities)."""

    ngram_max: int = 3
    ngram_min: int = 1

    def __post_init__(self) -> None:
        if not (isinstance(self.ngram_min, int) and isinstance(self.ngram_max, int)
                and 1 <= self.ngram_min <= self.ngram_max):
            raise ArgumentValueError(
                f"PromptLookupDrafter needs ints 1 <= ngram_min <= ngram_max, got ngram_min="
                f"{self.ngram_min!r}, ngram_max={self.ngram_max!r}; the default is 1 and 3")

    def propose(self, token_ids: Sequence[int], k: int) -> tuple[list[int], np.ndarray | None]:
        """Up to k tokens copied from after the matched n-gram; [] when nothing matches."""
        a = np.asarray(token_ids, dtype=np.int64).reshape(-1)
        if k <= 0 or a.size < 2:
            return [], None
        for n in range(min(self.ngram_max, a.size - 1), self.ngram_min - 1, -1):
            j = _last_occurrence(a, n)
            if j >= 0:
                ext = a.tolist()
                for i in range(k):
                    ext.append(ext[j + n + i])
                return ext[a.size:], None
        return [], None


# ----------------------------------------------------------------------------- draft model


class ModelDrafter:
    """Drafting with a small model: ``next_probs(token_ids) -> (vocab,)`` probabilities (a
    fewer-layer Llama, a tiny GPT) sampled through the sampling pipeline with ``params``
    (greedy by default, which makes it deterministic). Penalties in ``params`` see the context
    as prompt and the drafted tokens as output. Random drafts use the ``rng`` given to
    `propose`, else ``RequestRNG(seed)`` at step len(token_ids); any proposal is valid for
    exactness, it only changes the acceptance rate."""

    def __init__(self, next_probs: Callable[[list[int]], np.ndarray],
                 params: SamplingParams | None = None, seed: int = 0) -> None:
        self.next_probs = next_probs
        self.params = SamplingParams(temperature=0.0) if params is None else params
        self.seed = seed

    def propose(self, token_ids: Sequence[int], k: int, *,
                rng: np.random.Generator | None = None) -> tuple[list[int], np.ndarray | None]:
        """k tokens drawn one at a time from the draft model; their distributions when random."""
        ctx = list(token_ids)
        draft: list[int] = []
        rows: list[np.ndarray] = []
        if k > 0 and not self.params.greedy and rng is None:
            rng = RequestRNG(self.seed).generator(len(ctx), DRAFT_STREAM)
        for _ in range(max(k, 0)):
            with np.errstate(divide="ignore"):
                logits = np.log(np.asarray(self.next_probs(ctx + draft), dtype=np.float64))
            q = probabilities(logits, self.params, ctx, draft)
            tok = int(np.argmax(q)) if self.params.greedy else inverse_cdf(q, float(rng.random()))
            draft.append(tok)
            rows.append(q)
        if self.params.greedy or not draft:
            return draft, None
        return draft, np.stack(rows)


# ---------------------------------------------------------------------------- verification


def target_probabilities(logits: np.ndarray, params: SamplingParams, prompt_ids: IdsLike,
                         output_ids: IdsLike, draft_tokens: Sequence[int]) -> np.ndarray:
    """The target's sampling distributions at each draft position and the bonus position
    ((len(draft) + 1, vocab)): row i runs the sampling pipeline with the first i draft tokens
    appended to the output, so penalties see them as plain decoding would."""
    rows = np.asarray(logits)
    if rows.ndim != 2 or rows.shape[0] != len(draft_tokens) + 1:
        raise ShapeError(f"target logits must have shape (len(draft) + 1, vocab) = "
                         f"({len(draft_tokens) + 1}, vocab), got {rows.shape}")
    out = list(np.asarray(output_ids, dtype=np.int64).reshape(-1))
    return np.stack([probabilities(rows[i], params, prompt_ids, out + list(draft_tokens[:i]))
                     for i in range(rows.shape[0])])


def rejection_sample(draft: np.ndarray, q: np.ndarray | None, p: np.ndarray,
                     u_accept: np.ndarray, u_sample: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Speculative rejection sampling for S independent trials at once (vectorized; `verify`
    runs it with S = 1). draft (S, k) ints; q (S, k, V) or (k, V) proposals, None for one-hot;
    p (S, k+1, V) or (k+1, V) targets; u_accept (S, k) and u_sample (S,) uniforms in [0, 1).
    Returns (tokens (S, k+1) padded with -1, n_accepted (S,)): trial s emits
    tokens[s, :n_accepted[s] + 1]."""
    draft = np.asarray(draft, dtype=np.int64)
    S, k = draft.shape
    V = p.shape[-1]
    p = np.broadcast_to(p, (S, k + 1, V))
    rows, pos = np.arange(S)[:, None], np.arange(k)[None, :]
    px = p[rows, pos, draft]
    if q is not None:
        q = np.broadcast_to(q, (S, k, V))
    qx = 1.0 if q is None else q[rows, pos, draft]
    accept = u_accept * qx < px  # u < min(1, p/q), with q = 0 -> accept iff p > 0
    n_acc = (np.where(accept.all(axis=1), k, np.argmin(accept, axis=1)) if k
             else np.zeros(S, dtype=np.int64))
    w = p[np.arange(S), n_acc].copy()  # the row to draw from: residual or bonus
    rej = np.flatnonzero(n_acc < k)
    if rej.size:
        at = n_acc[rej]
        if q is None:
            resid = w[rej]
            resid[np.arange(rej.size), draft[rej, at]] = 0.0
        else:
            resid = np.maximum(w[rej] - q[rej, at], 0.0)
        ok = resid.sum(axis=1) > 0  # p == q up to rounding: fall back to p itself
        w[rej[ok]] = resid[ok]
    final = inverse_cdf_rows(w, np.asarray(u_sample, dtype=np.float64))
    tokens = np.where(pos < n_acc[:, None], draft, -1)
    tokens = np.concatenate([tokens, np.full((S, 1), -1, dtype=np.int64)], axis=1)
    tokens[np.arange(S), n_acc] = final
    return tokens, n_acc


def verify(draft_tokens: Sequence[int], draft_probs: np.ndarray | None, target_probs: np.ndarray,
           params: SamplingParams, rng: RequestRNG | np.random.Generator,
           step: int | None = None) -> list[int]:
    """The tokens to emit after one speculative step: the accepted prefix of the draft plus
    one target token (1 .. len(draft) + 1 tokens). ``target_probs`` ((len(draft) + 1, vocab))
    are the target's distributions after the sampling pipeline (`target_probabilities`). With
    a `RequestRNG`, ``step`` (tokens generated before this step) keys the uniforms."""
    d = np.asarray(draft_tokens, dtype=np.int64).reshape(-1)
    k = d.size
    p = np.asarray(target_probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != k + 1:
        raise ShapeError(f"target_probs must have shape (len(draft) + 1, vocab) = ({k + 1}, "
                         f"vocab), got {p.shape}")
    if draft_probs is not None and np.shape(draft_probs) != (k, p.shape[1]):
        raise ShapeError(f"draft_probs must have shape (len(draft), vocab) = ({k}, "
                         f"{p.shape[1]}) or be None, got {np.shape(draft_probs)}")
    if params.greedy:
        best = np.argmax(p, axis=1)  # ties -> lowest id, as greedy sampling
        miss = np.flatnonzero(d != best[:k])
        n = int(miss[0]) if miss.size else k
        return d[:n].tolist() + [int(best[n])]
    if isinstance(rng, RequestRNG):
        if step is None:
            raise ArgumentValueError("verify with a RequestRNG needs step= (the number of tokens"
                                     " the request generated before this step)")
        rng = rng.generator(step, VERIFY_STREAM)
    u = rng.random(k + 1)
    q = None if draft_probs is None else np.asarray(draft_probs, dtype=np.float64)[None]
    tokens, n_acc = rejection_sample(d[None], q, p[None], u[None, :k], u[k:])
    return tokens[0, :int(n_acc[0]) + 1].tolist()


# ------------------------------------------------------------------------------ statistics


@dataclass
class AcceptanceStats:
    """Running totals of speculative steps: drafts proposed and accepted, tokens emitted."""

    proposed: int = 0
    accepted: int = 0
    emitted: int = 0
    steps: int = 0

    def record(self, draft_tokens: Sequence[int], emitted: Sequence[int]) -> int:
        """Count one `verify` result; returns how many draft tokens it accepted."""
        n = len(emitted) - 1
        self.proposed += len(draft_tokens)
        self.accepted += n
        self.emitted += len(emitted)
        self.steps += 1
        return n

    def merge(self, other: AcceptanceStats) -> AcceptanceStats:
        return AcceptanceStats(self.proposed + other.proposed, self.accepted + other.accepted,
                               self.emitted + other.emitted, self.steps + other.steps)

    @property
    def rate(self) -> float:
        """Accepted / proposed draft tokens (0 before any proposal)."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Emitted tokens per target step (1 without speculation)."""
        return self.emitted / self.steps if self.steps else 0.0


__all__ = [
    "AcceptanceStats", "Drafter", "ModelDrafter", "PromptLookupDrafter", "rejection_sample",
    "target_probabilities", "verify",
]
