"""Sampling: `SamplingParams`, a table of logit processors, and a per-request seeded sampler.

The pipeline turns one row of model logits into the distribution a token is drawn from:
penalties -> temperature -> top-k -> top-p -> min-p -> softmax (`PIPELINE`). Each stage is a
small function over a distribution held as ``(ids, logits)``: ``ids`` None means the whole
vocabulary; once a truncating stage has run only the surviving tokens are carried (ascending
ids), so later stages and the draw cost O(kept) instead of O(vocab).

Conventions (documented choices):

- Top-k and top-p keep ties: top-k keeps every token whose logit is >= the k-th largest (as
  Hugging Face's ``TopKLogitsWarper``); top-p sorts by (probability desc, id asc), finds the
  shortest prefix whose mass reaches ``top_p`` and keeps every token at least as likely as the
  last one of it. Min-p keeps tokens with probability >= ``min_p`` x the most likely one's.
- Temperature 0 is greedy: the argmax of the penalized logits, ties to the lowest id.
- Repetition penalty (Hugging Face) covers prompt and output tokens; presence and frequency
  penalties (OpenAI) cover output tokens only, as vLLM does.
- Logprobs are those of the raw model distribution (log-softmax of the logits before penalties
  and temperature), vLLM's default ``raw_logprobs`` mode: they describe the model, not the
  sampler's knobs.
- Randomness: the draw for a request's n-th generated token comes from
  ``Generator(Philox(key=seed, counter=(0, n, stream, 0)))`` (`RequestRNG`), so it depends on
  (seed, n) only, never on batch composition or a shared global RNG.
"""

from __future__ import annotations

import math
import numbers
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tenferro_core.errors import ArgumentValueError, ShapeError, TenferroIndexError

from .errors import SamplingParamsError

MAX_LOGPROBS = 20
SAMPLE_STREAM = 0  # RequestRNG stream of plain sampling draws; speculative.py uses others

IdsLike = Sequence[int] | np.ndarray
Dist = tuple["np.ndarray | None", np.ndarray]  # (ids or None for the whole vocab, logits)


# ----------------------------------------------------------------------------- parameters


def _is_real(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _is_int(v: object) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


# kind -> (type test, converter, words for the message)
_KINDS: dict[str, tuple[Callable[[object], bool], Callable, str]] = {
    "number": (_is_real, float, "a number"),
    "int": (_is_int, int, "an int"),
    "bool": (lambda v: isinstance(v, (bool, np.bool_)), bool, "a bool"),
}


class _Rule(NamedTuple):
    field: str
    kind: str  # a key of _KINDS, with "?" when None is allowed
    ok: Callable[[float], bool]
    allowed: str
    advice: str


_PENALTY = "in [-2, 2] (0 means no penalty)"
_RULES: tuple[_Rule, ...] = (
    _Rule("temperature", "number", lambda v: v >= 0, ">= 0 (0 means greedy decoding)",
          "pass 0 for greedy decoding or a positive value such as 0.7"),
    _Rule("top_k", "int", lambda v: v >= 0, ">= 0 (0 turns top-k off)",
          "pass 0 to keep every token or a count such as 50"),
    _Rule("top_p", "number", lambda v: 0 < v <= 1, "in (0, 1] (1 turns top-p off)",
          "pass 1.0 to keep every token or a probability mass such as 0.9"),
    _Rule("min_p", "number", lambda v: 0 <= v < 1, "in [0, 1) (0 turns min-p off)",
          "pass 0 to keep every token or a small ratio such as 0.05"),
    _Rule("repetition_penalty", "number", lambda v: v > 0, "> 0 (1 means no penalty)",
          "pass 1.0 for no penalty or a value such as 1.1 to discourage repeats"),
    _Rule("presence_penalty", "number", lambda v: -2 <= v <= 2, _PENALTY,
          "pass 0 for no penalty or a value such as 0.5 (OpenAI's range)"),
    _Rule("frequency_penalty", "number", lambda v: -2 <= v <= 2, _PENALTY,
          "pass 0 for no penalty or a value such as 0.5 (OpenAI's range)"),
    _Rule("seed", "int?", lambda v: True, "an int, or None for a fresh random seed",
          "pass an int for reproducible sampling or None"),
    _Rule("max_tokens", "int", lambda v: v >= 1, ">= 1",
          "ask for at least one token"),
    _Rule("logprobs", "int?", lambda v: 0 <= v <= MAX_LOGPROBS,
          f"None or in [0, {MAX_LOGPROBS}]",
          "pass None for no logprobs, 0 for the chosen token's only, or n top alternatives"),
    _Rule("ignore_eos", "bool", lambda v: True, "True or False",
          "pass True to keep generating past end-of-sequence tokens"),
    _Rule("max_joules", "number?", lambda v: v > 0, "None or > 0 joules",
          "pass None for no energy limit or a positive budget such as 50.0"),
)


_RULE = {rule.field: rule for rule in _RULES}


def _bad(field: str, value: object, allowed: str, advice: str, what: str = "",
         owner: str = "SamplingParams.") -> None:
    got = f"{type(value).__name__} {value!r}" if what else repr(value)
    raise SamplingParamsError(
        f"{owner}{field}={got} is {what or 'out of range'}: expected {allowed}; {advice}")


def _checked(field: str, v: object, owner: str = "SamplingParams.") -> object:
    """`v` as parameter `field` takes it (float, int, bool), or SamplingParamsError naming
    `owner` and the field, the value, what is allowed and a fix."""
    rule = _RULE[field]
    optional = rule.kind.endswith("?")
    if optional and v is None:
        return v
    is_kind, convert, words = _KINDS[rule.kind.rstrip("?")]
    if not is_kind(v):
        _bad(field, v, f"{words}{' or None' if optional else ''}, {rule.allowed}", rule.advice,
             what=f"not {words}", owner=owner)
    v = convert(v)
    if (rule.kind.startswith("number") and not math.isfinite(v)) or not rule.ok(v):
        _bad(field, v, rule.allowed, rule.advice, owner=owner)
    return v


@dataclass(frozen=True)
class SamplingParams:
    """How one request turns logits into tokens, checked on construction (`SamplingParamsError`
    names the field, the value, the allowed range and a fix). ``stop`` and ``stop_token_ids``
    are stored as tuples so the params stay hashable."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    max_tokens: int = 16
    stop: Sequence[str] = ()
    stop_token_ids: Sequence[int] = ()
    logprobs: int | None = None
    ignore_eos: bool = False
    max_joules: float | None = None

    def __post_init__(self) -> None:
        for rule in _RULES:
            object.__setattr__(self, rule.field, _checked(rule.field, getattr(self, rule.field)))
        object.__setattr__(self, "stop", _check_stop(self.stop))
        object.__setattr__(self, "stop_token_ids", _check_stop_ids(self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        """Temperature 0: the argmax, no randomness."""
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        return (self.repetition_penalty != 1.0 or self.presence_penalty != 0.0
                or self.frequency_penalty != 0.0)


def _check_stop(stop: object) -> tuple[str, ...]:
    advice = "pass a string or a list of non-empty strings, such as ['\\n\\n']"
    items = (stop,) if isinstance(stop, str) else stop
    if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) and s for s in items):
        _bad("stop", stop, "a string or a list of non-empty strings", advice, what="not valid")
    return tuple(items)


def _check_stop_ids(ids: object) -> tuple[int, ...]:
    advice = "pass a list of token ids such as [2]"
    if not isinstance(ids, (list, tuple)) or not all(_is_int(t) and t >= 0 for t in ids):
        _bad("stop_token_ids", ids, "a list of ints >= 0", advice, what="not valid")
    return tuple(int(t) for t in ids)


# ------------------------------------------------------------------------------ randomness


@dataclass(frozen=True)
class RequestRNG:
    """One request's random stream: the draw for generated token ``step`` depends only on
    (seed, step, stream). Make one per request with `RequestRNG.for_params`."""

    seed: int

    @classmethod
    def for_params(cls, params: SamplingParams) -> RequestRNG:
        """The params' seed, or (seed None) one drawn once from OS entropy."""
        return cls(secrets.randbits(64) if params.seed is None else params.seed)

    def generator(self, step: int, stream: int = SAMPLE_STREAM) -> np.random.Generator:
        """A fresh generator for (seed, step, stream): Philox keyed by the seed, the step and
        stream in the counter's high words, so streams never overlap."""
        counter = np.array([0, step, stream, 0], dtype=np.uint64)
        return np.random.Generator(np.random.Philox(key=self.seed % (1 << 128), counter=counter))

    def uniform(self, step: int, stream: int = SAMPLE_STREAM) -> float:
        return float(self.generator(step, stream).random())


# ---------------------------------------------------------------------------- processors


_LOCAL = threading.local()


def _scratch(slot: int, n: int) -> np.ndarray:
    """A per-thread float64 buffer of n elements, reused across calls (slot 0: the pipeline's
    logits, 1: a stage's temporary). Why: a fresh vocab-sized temporary per step is, under
    glibc's default trimming, returned to the OS and page-faulted back every call (5-10x
    slower than the arithmetic on it)."""
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None:
        bufs = _LOCAL.bufs = [np.empty(0), np.empty(0)]
    if bufs[slot].size < n:
        bufs[slot] = np.empty(max(n, 2 * bufs[slot].size))
    return bufs[slot][:n]


def _as_logits(logits: np.ndarray, ndim: tuple[int, ...] = (1,), scratch: bool = False
               ) -> np.ndarray:
    """A float64 copy (in scratch slot 0 if asked), checked: the right rank, not empty, no NaN
    or +inf, something finite in every row."""
    src = np.asarray(logits)
    if scratch and src.ndim == 1 and src.size:
        x = _scratch(0, src.size)
        np.copyto(x, src, casting="same_kind")
    else:
        x = np.array(src, dtype=np.float64)
    if x.ndim not in ndim or x.shape[-1] == 0:
        raise ShapeError(f"logits must have shape {' or '.join(['(vocab,)', '(n, vocab)'][:len(ndim)])}"
                         f" with vocab >= 1, got shape {x.shape}; pass one row per request")
    top = x.max(axis=-1)
    if not np.all(top < np.inf) or not np.all(top > -np.inf):
        raise ArgumentValueError(
            "logits contain NaN or +inf, or a row is entirely -inf: expected finite logits with "
            "at least one finite value per row; check the model's output for overflow")
    return x


def _unique_ids(ids: np.ndarray, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    toks, counts = np.unique(ids, return_counts=True)
    if toks.size and (toks[0] < 0 or toks[-1] >= vocab):
        raise TenferroIndexError(f"token ids must lie in [0, {vocab}), got {toks[0]}..{toks[-1]}:"
                                 f" pass the prompt and output ids of this model's vocabulary")
    return toks, counts


def _ids(a: IdsLike) -> np.ndarray:
    return np.asarray(a, dtype=np.int64).reshape(-1)


def _penalize(x: np.ndarray, prompt_ids: np.ndarray, output_ids: np.ndarray,
              repetition: float, presence: float, frequency: float) -> np.ndarray:
    """In place on dense logits: HF repetition penalty over prompt+output (divide positive,
    multiply negative), then OpenAI ``-= count * frequency + (count > 0) * presence`` over
    the output."""
    if repetition != 1.0:
        seen, _ = _unique_ids(np.concatenate([prompt_ids, output_ids]), x.size)
        v = x[seen]
        x[seen] = np.where(v > 0, v / repetition, v * repetition)
    if presence != 0.0 or frequency != 0.0:
        toks, counts = _unique_ids(output_ids, x.size)
        x[toks] -= counts * frequency + presence
    return x


def _temperature(ids: np.ndarray | None, x: np.ndarray, t: float) -> Dist:
    """Divide by t (after shifting the max to 0, so tiny t cannot overflow); t = 0 keeps only
    the argmax (lowest id among ties)."""
    if t == 0.0:
        i = int(np.argmax(x))
        return np.array([i if ids is None else ids[i]]), np.zeros(1)
    x -= x.max()
    inv = 1.0 / t
    if math.isfinite(inv):  # a multiply is several times cheaper than a divide per element
        x *= inv
    else:
        with np.errstate(over="ignore"):  # t subnormal: all but the max go to -inf, rightly
            x /= t
    return ids, x


def _keep(ids: np.ndarray | None, x: np.ndarray, mask: np.ndarray) -> Dist:
    kept = np.flatnonzero(mask)
    return (kept if ids is None else ids[kept]), x[kept]


def _top_k(ids: np.ndarray | None, x: np.ndarray, k: int) -> Dist:
    """Keep tokens whose logit is >= the k-th largest (ties kept)."""
    if k >= x.size:
        return ids, x
    buf = _scratch(1, x.size)
    np.copyto(buf, x)
    buf.partition(x.size - k)
    kth = buf[x.size - k]
    return _keep(ids, x, x >= kth if kth > -np.inf else x > -np.inf)


def _weights(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """exp(x - max x): unnormalized probabilities, the top one exactly 1, into ``out`` (may be
    x itself; a scratch buffer by default)."""
    out = _scratch(1, x.size) if out is None else out
    np.subtract(x, x.max(), out=out)
    return np.exp(out, out=out)


_NUCLEUS_PREFILTER = (1e-2, 1e-4, 1e-8, 0.0)  # candidate thresholds relative to the max prob


def _top_p(ids: np.ndarray | None, x: np.ndarray, top_p: float) -> Dist:
    """Keep the nucleus: sort by probability, take the shortest prefix of mass >= top_p and
    every token tied with its last. Only tokens above a prefilter threshold are sorted (the
    prefix lies inside them once their mass reaches top_p), so the cost stays O(vocab)."""
    if top_p >= 1.0:  # off: every token, even those whose mass the running sum rounds away
        return ids, x
    w = _weights(x)
    mass = top_p * w.sum()
    for rel in _NUCLEUS_PREFILTER:
        desc = np.sort(w[w >= rel])[::-1]  # tied tokens stay together, so no id order needed
        j = int(np.searchsorted(np.cumsum(desc), mass, side="left"))
        if j < desc.size or rel == 0.0:
            return _keep(ids, x, w >= desc[min(j, desc.size - 1)])
    raise AssertionError("unreachable: the last prefilter keeps every token")


def _min_p(ids: np.ndarray | None, x: np.ndarray, min_p: float) -> Dist:
    """Keep tokens with probability >= min_p x the most likely token's, i.e. with logit >=
    max logit + log(min_p) (no softmax needed)."""
    return _keep(ids, x, x >= x.max() + math.log(min_p))


class _Ctx(NamedTuple):
    prompt_ids: np.ndarray
    output_ids: np.ndarray


def _penalties_stage(d: Dist, sp: SamplingParams, ctx: _Ctx) -> Dist:
    return d[0], _penalize(d[1], ctx.prompt_ids, ctx.output_ids, sp.repetition_penalty,
                           sp.presence_penalty, sp.frequency_penalty)


Stage = Callable[[Dist, SamplingParams, _Ctx], Dist]

# (name, does it apply to these params?, stage) in order. Stages take and return (ids, logits).
PIPELINE: tuple[tuple[str, Callable[[SamplingParams], bool], Stage], ...] = (
    ("penalties", lambda sp: sp.has_penalties, _penalties_stage),
    ("temperature", lambda sp: sp.temperature != 1.0,
     lambda d, sp, ctx: _temperature(*d, sp.temperature)),
    ("top_k", lambda sp: sp.top_k > 0, lambda d, sp, ctx: _top_k(*d, sp.top_k)),
    ("top_p", lambda sp: sp.top_p < 1.0, lambda d, sp, ctx: _top_p(*d, sp.top_p)),
    ("min_p", lambda sp: sp.min_p > 0.0, lambda d, sp, ctx: _min_p(*d, sp.min_p)),
)


def _run_pipeline(x: np.ndarray, params: SamplingParams, prompt_ids: IdsLike,
                  output_ids: IdsLike) -> tuple[np.ndarray | None, np.ndarray]:
    """(ids or None, unnormalized probabilities over them) for one owned float64 row of
    logits, which the stages may overwrite; the weights may be that row."""
    ctx = _Ctx(_ids(prompt_ids), _ids(output_ids))
    d: Dist = (None, x)
    for _, applies, stage in PIPELINE:
        if applies(params):
            d = stage(d, params, ctx)
    return d[0], _weights(d[1], out=d[1])


def _dense(ids: np.ndarray | None, v: np.ndarray, vocab: int, fill: float) -> np.ndarray:
    if ids is None:
        return v
    out = np.full(vocab, fill)
    out[ids] = v
    return out


# Dense, stand-alone forms of the stages (the same code the pipeline runs), for callers and tests.

def apply_penalties(logits: np.ndarray, prompt_ids: IdsLike = (), output_ids: IdsLike = (), *,
                    repetition_penalty: float = 1.0, presence_penalty: float = 0.0,
                    frequency_penalty: float = 0.0) -> np.ndarray:
    """Penalized float64 logits (a copy)."""
    x = _as_logits(logits)
    return _penalize(x, _ids(prompt_ids), _ids(output_ids),
                     _checked("repetition_penalty", repetition_penalty, "apply_penalties: "),
                     _checked("presence_penalty", presence_penalty, "apply_penalties: "),
                     _checked("frequency_penalty", frequency_penalty, "apply_penalties: "))


def apply_temperature(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Logits scaled by 1/temperature, max shifted to 0; temperature 0 leaves only the argmax."""
    x = _as_logits(logits)
    temperature = _checked("temperature", temperature, "apply_temperature: ")
    return _dense(*_temperature(None, x, temperature), x.size, -np.inf)


def apply_top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """Logits with all but the top k (and ties) set to -inf; k = 0 or k >= vocab is a no-op."""
    x = _as_logits(logits)
    k = _checked("top_k", k, "apply_top_k: ")
    return x if k == 0 else _dense(*_top_k(None, x, k), x.size, -np.inf)


def apply_top_p(logits: np.ndarray, top_p: float) -> np.ndarray:
    """Logits outside the nucleus of mass top_p set to -inf; top_p = 1 is a no-op."""
    x = _as_logits(logits)
    top_p = _checked("top_p", top_p, "apply_top_p: ")
    return _dense(*_top_p(None, x, top_p), x.size, -np.inf)


def apply_min_p(logits: np.ndarray, min_p: float) -> np.ndarray:
    """Logits of tokens less likely than min_p x the top token's set to -inf."""
    x = _as_logits(logits)
    min_p = _checked("min_p", min_p, "apply_min_p: ")
    return _dense(*_min_p(None, x, min_p), x.size, -np.inf)


def probabilities(logits: np.ndarray, params: SamplingParams, prompt_ids: IdsLike = (),
                  output_ids: IdsLike = ()) -> np.ndarray:
    """The distribution the sampler draws from (float64, (vocab,) or (n, vocab) for rows that
    share the token history): the whole pipeline, dense. Greedy gives a one-hot row."""
    x = _as_logits(logits, ndim=(1, 2))
    if x.ndim == 2:
        return np.stack([probabilities(row, params, prompt_ids, output_ids) for row in x])
    ids, w = _run_pipeline(x, params, prompt_ids, output_ids)
    return _dense(ids, w / w.sum(), x.size, 0.0)


# ---------------------------------------------------------------------------------- drawing


def _last_positive(w: np.ndarray) -> int:
    return int(np.flatnonzero(w > 0)[-1])


_BLOCK = 1024


def inverse_cdf(w: np.ndarray, u: float) -> int:
    """Index drawn from nonnegative weights ``w`` (not necessarily normalized) by one uniform
    ``u`` in [0, 1): the first i with cumsum(w)[i] > u * sum(w). Large rows go through block
    sums (two short cumsums instead of one over the vocabulary); zero weights are never chosen."""
    if np.ndim(w) != 1 or not np.size(w):
        raise ShapeError(f"inverse_cdf needs weights of shape (vocab,), got shape {np.shape(w)}; "
                         f"pass one row of nonnegative weights")
    _check_uniform("inverse_cdf", u)
    return _inverse_cdf(w, u)


def _inverse_cdf(w: np.ndarray, u: float) -> int:
    """`inverse_cdf` on arguments already known good (this module's own draws)."""
    lo = 0
    if w.size > 4 * _BLOCK:
        nb = -(-w.size // _BLOCK)
        sums = np.add.reduceat(w, np.arange(0, w.size, _BLOCK))
        cb = np.cumsum(sums)
        target = u * cb[-1]
        b = int(np.searchsorted(cb, target, side="right"))
        if b >= nb:
            b = _last_positive(sums)
        target -= cb[b - 1] if b else 0.0
        lo = b * _BLOCK
        w = w[lo:lo + _BLOCK]
    else:
        target = u * w.sum()
    c = np.cumsum(w)
    i = int(np.searchsorted(c, target, side="right"))
    return lo + (i if i < w.size else _last_positive(w))


def _check_uniform(fn: str, u: object) -> None:
    if isinstance(u, float):
        ok = 0.0 <= u <= 1.0
    else:
        a = np.asarray(u)
        ok = bool(((a >= 0.0) & (a <= 1.0)).all())
    if not ok:  # NaN fails too
        raise ArgumentValueError(f"{fn}: the uniform draw must lie in [0, 1], got {u!r}; pass "
                                 f"rng.random() (or one per row)")


def inverse_cdf_rows(w: np.ndarray, u: np.ndarray) -> np.ndarray:
    """`inverse_cdf` for each row of ``w`` (S, V) with its own uniform ``u`` (S,), vectorized."""
    if np.ndim(w) != 2 or not np.size(w) or np.shape(u) != np.shape(w)[:1]:
        raise ShapeError(f"inverse_cdf_rows needs weights (S, vocab) and one uniform per row (S,), "
                         f"got shapes {np.shape(w)} and {np.shape(u)}; pass a non-empty 2-d array "
                         f"and u of its row count")
    _check_uniform("inverse_cdf_rows", u)
    if w.shape[0] == 1:
        return np.array([_inverse_cdf(w[0], float(u[0]))])
    c = np.cumsum(w, axis=1)
    idx = (c <= (u * c[:, -1])[:, None]).sum(axis=1)
    over = np.flatnonzero(idx >= w.shape[1])
    for s in over:  # u * total rounded up to total: take the last possible token
        idx[s] = _last_positive(w[s])
    return idx


@dataclass(frozen=True)
class LogprobInfo:
    """The chosen token's log-probability and the top-n tokens with theirs (desc, ties by id),
    under the raw model distribution (see the module docstring)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def token_logprobs(logits: np.ndarray, token: int, n: int) -> LogprobInfo:
    """`LogprobInfo` for ``token`` and the top ``n`` tokens of log_softmax(logits)."""
    x = np.asarray(logits)
    if x.ndim != 1 or not x.size:
        raise ShapeError(f"token_logprobs needs logits of shape (vocab,), got shape {x.shape}; "
                         f"pass one row")
    if not _is_int(token) or not 0 <= token < x.size:
        raise TenferroIndexError(f"token_logprobs: token {token!r} is not a token id in [0, "
                                 f"{x.size}); pass the id of the chosen token")
    if not _is_int(n) or n < 0:
        raise ArgumentValueError(f"token_logprobs: n={n!r} must be an int >= 0 (how many top "
                                 f"alternatives); pass 0 for the chosen token's only")
    buf = _scratch(1, x.size)
    m = float(x.max())
    np.subtract(x, m, out=buf)
    lse = m + math.log(float(np.exp(buf, out=buf).sum()))
    top: tuple[tuple[int, float], ...] = ()
    if n > 0:
        n = min(n, x.size)
        np.copyto(buf, x)
        buf.partition(x.size - n)
        cand = np.flatnonzero(x >= buf[x.size - n])
        best = cand[np.argsort(-x[cand], kind="stable")[:n]]
        top = tuple((int(i), float(x[i]) - lse) for i in best)
    return LogprobInfo(int(token), float(x[token]) - lse, top)


def sample(logits: np.ndarray, params: SamplingParams, rng_state: RequestRNG | np.random.Generator,
           prompt_ids: IdsLike = (), output_ids: IdsLike = ()) -> tuple[int, LogprobInfo | None]:
    """Draw the next token for one request: (token, logprob info or None when
    ``params.logprobs`` is None). The uniform comes from ``rng_state`` at step
    ``len(output_ids)``, so a request's tokens depend on its seed only; greedy draws nothing."""
    ids, w = _run_pipeline(_as_logits(logits, scratch=True), params, prompt_ids, output_ids)
    if w.size == 1:
        i = 0
    else:
        gen = (rng_state.generator(len(output_ids)) if isinstance(rng_state, RequestRNG)
               else rng_state)
        i = _inverse_cdf(w, float(gen.random()))
    token = int(i if ids is None else ids[i])
    info = None if params.logprobs is None else token_logprobs(logits, token, params.logprobs)
    return token, info


def sample_batch(logits: np.ndarray, params: Sequence[SamplingParams],
                 rng_states: Sequence[RequestRNG], prompt_ids: Sequence[IdsLike],
                 output_ids: Sequence[IdsLike]) -> list[tuple[int, LogprobInfo | None]]:
    """`sample` for each row of ``logits`` (n, vocab), row i with the i-th request's state."""
    rows = np.asarray(logits)
    if rows.ndim != 2 or not rows.shape[0] == len(params) == len(rng_states) == len(
            prompt_ids) == len(output_ids):
        raise ShapeError(f"sample_batch needs logits (n, vocab) and n params, rngs, prompts and "
                         f"outputs; got logits {rows.shape} and {len(params)} params")
    return [sample(rows[i], params[i], rng_states[i], prompt_ids[i], output_ids[i])
            for i in range(rows.shape[0])]


__all__ = [
    "MAX_LOGPROBS", "PIPELINE", "LogprobInfo", "RequestRNG", "SamplingParams", "apply_min_p",
    "apply_penalties", "apply_temperature", "apply_top_k", "apply_top_p", "inverse_cdf",
    "inverse_cdf_rows", "probabilities", "sample", "sample_batch", "token_logprobs",
]
