"""Speculative decoding: prompt-lookup proposals, greedy verification equals plain greedy
decoding, rejection sampling reproduces the target distribution (chi-square), statistics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from scipy.stats import chisquare

from tenferro_core.errors import ArgumentValueError, ShapeError
from tenferro_infer.sampling import RequestRNG, SamplingParams, probabilities, sample
from tenferro_infer.speculative import (
    AcceptanceStats,
    Drafter,
    ModelDrafter,
    PromptLookupDrafter,
    rejection_sample,
    target_probabilities,
    verify,
)

V = 40


def _toy_logits(ctx: list[int], salt: int = 0, vocab: int = V) -> np.ndarray:
    """A deterministic 'model': logits from the last two tokens (coarse values make ties)."""
    key = salt * 10**7 + (ctx[-1] if ctx else 0) * 1000 + (ctx[-2] if len(ctx) > 1 else 0)
    return np.round(np.random.default_rng(key).standard_normal(vocab) * 2, 1).astype(np.float32)


def _toy_probs(ctx: list[int], salt: int = 1) -> np.ndarray:
    x = _toy_logits(ctx, salt).astype(np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


# ---------------------------------------------------------------------------- prompt lookup


def test_prompt_lookup_examples():
    d = PromptLookupDrafter()
    assert d.propose([1, 2, 3, 4, 1, 2, 3], 3) == ([4, 1, 2], None)
    assert d.propose([5, 6, 5, 6, 5], 4) == ([6, 5, 6, 5], None)  # copy runs into itself
    assert d.propose([7, 7, 7], 5) == ([7, 7, 7, 7, 7], None)
    assert d.propose([1, 2, 3], 3) == ([], None)  # nothing repeats
    assert d.propose([1], 3) == ([], None) and d.propose([1, 1], 0) == ([], None)
    # the most recent occurrence wins; the longest n-gram first
    assert d.propose([9, 1, 2, 8, 1, 2, 7, 1, 2], 1) == ([7], None)
    assert d.propose([3, 2, 5, 1, 2, 6, 3, 2], 1) == ([5], None)  # "3 2" beats the later "2"
    assert PromptLookupDrafter(ngram_max=1).propose([3, 2, 5, 1, 2, 6, 3, 2], 1) == ([6], None)
    assert PromptLookupDrafter(ngram_min=2).propose([4, 2, 5, 1, 2], 2) == ([], None)
    assert isinstance(d, Drafter) and isinstance(ModelDrafter(_toy_probs), Drafter)


def _ref_propose(seq: list[int], k: int, nmax: int, nmin: int) -> list[int]:
    for n in range(min(nmax, len(seq) - 1), nmin - 1, -1):
        for j in range(len(seq) - n - 1, -1, -1):
            if seq[j:j + n] == seq[-n:]:
                ext = list(seq)
                for i in range(k):
                    ext.append(ext[j + n + i])
                return ext[len(seq):]
    return []


@given(st.lists(st.integers(0, 3), max_size=40), st.integers(0, 6), st.integers(1, 4),
       st.integers(0, 2))
@example([0, 1, 0, 1, 0, 1], 6, 3, 0)
def test_prompt_lookup_matches_reference(seq, k, nmin, extra):
    d = PromptLookupDrafter(ngram_max=nmin + extra, ngram_min=nmin)
    got, probs = d.propose(seq, k)
    assert probs is None and got == _ref_propose(seq, k, nmin + extra, nmin)


def test_prompt_lookup_bad_config():
    with pytest.raises(ArgumentValueError, match="ngram_min"):
        PromptLookupDrafter(ngram_max=1, ngram_min=2)
    with pytest.raises(ArgumentValueError):
        PromptLookupDrafter(ngram_min=0)


# ---------------------------------------------------------------------- greedy verification


def _greedy_plain(prompt: list[int], n: int, sp: SamplingParams) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(sample(_toy_logits(prompt + out), sp, RequestRNG(0), prompt, out)[0])
    return out


def _speculative(prompt: list[int], n: int, sp: SamplingParams, drafter, k: int,
                 seed: int = 0) -> tuple[list[int], AcceptanceStats]:
    out: list[int] = []
    stats = AcceptanceStats()
    rng = RequestRNG(seed)
    while len(out) < n:
        draft, q = drafter.propose(prompt + out, k)
        ctx = prompt + out
        logits = np.stack([_toy_logits(ctx + draft[:i]) for i in range(len(draft) + 1)])
        p = target_probabilities(logits, sp, prompt, out, draft)
        emitted = verify(draft, q, p, sp, rng, step=len(out))
        stats.record(draft, emitted)
        out.extend(emitted)
    return out[:n], stats


class _RandomDrafter:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def propose(self, token_ids, k):
        return self.rng.integers(0, V, k).tolist(), None


class _OracleDrafter:  # drafts the target's own greedy continuation
    def __init__(self, sp: SamplingParams, prompt_len: int) -> None:
        self.sp, self.prompt_len = sp, prompt_len

    def propose(self, token_ids, k):
        prompt = list(token_ids[:self.prompt_len])
        out = list(token_ids[self.prompt_len:])
        draft: list[int] = []
        for _ in range(k):
            draft.append(sample(_toy_logits(prompt + out + draft), self.sp, RequestRNG(0), prompt,
                                out + draft)[0])
        return draft, None


@pytest.mark.parametrize("penalty", [1.0, 1.3])
@pytest.mark.parametrize("drafter", ["lookup", "model", "model-sampled", "random", "oracle"])
def test_greedy_verification_equals_greedy_decoding(drafter, penalty):
    sp = SamplingParams(temperature=0.0, repetition_penalty=penalty, frequency_penalty=0.2)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 3, 1, 4]
    d = {"lookup": PromptLookupDrafter(),
         "model": ModelDrafter(_toy_probs),
         "model-sampled": ModelDrafter(_toy_probs, SamplingParams(temperature=0.8), seed=3),
         "random": _RandomDrafter(1),
         "oracle": _OracleDrafter(sp, len(prompt))}[drafter]
    want = _greedy_plain(prompt, 40, sp)
    got, stats = _speculative(prompt, 40, sp, d, k=4)
    assert got == want
    assert stats.emitted >= 40 and stats.proposed >= stats.accepted
    if drafter == "oracle":
        assert stats.rate == 1.0 and stats.tokens_per_step == 5.0


@given(st.lists(st.integers(0, V - 1), max_size=5), st.integers(0, 10**6))
def test_greedy_verify_accepts_matching_prefix(draft, seed):
    p = np.random.default_rng(seed).random((len(draft) + 1, V))
    best = np.argmax(p, axis=1)
    n = next((i for i, t in enumerate(draft) if t != best[i]), len(draft))
    got = verify(draft, None, p, SamplingParams(temperature=0), RequestRNG(seed), step=0)
    assert got == list(draft[:n]) + [int(best[n])]


# ----------------------------------------------------------------- rejection sampling (exact)

K = 3
N = 100_000


def _target() -> np.ndarray:
    """(K+1, V) targets with temperature, top-k and top-p applied (zeros outside)."""
    sp = SamplingParams(temperature=0.8, top_k=25, top_p=0.9)
    logits = np.random.default_rng(7).standard_normal((K + 1, V)) * 1.5
    return probabilities(logits, sp)


def _proposal(p: np.ndarray, kind: str) -> np.ndarray:
    rng = np.random.default_rng(8)
    q = rng.random((K, V)) ** 2
    if kind == "disjoint-ish":  # zeros where p > 0 and mass where p == 0
        pos = p[:K] > 0
        q[pos & (rng.random((K, V)) < 0.5)] = 0.0
        q[~pos] *= 3.0
    return q / q.sum(axis=1, keepdims=True)


def _chi2(tokens: np.ndarray, p: np.ndarray) -> float:
    counts = np.bincount(tokens, minlength=p.size)
    assert counts[p == 0].sum() == 0, "a token outside the target's support was emitted"
    exp = p * tokens.size
    big = exp >= 5  # pool the rare bins so the test's assumptions hold
    obs = np.r_[counts[big], counts[~big].sum()]
    exp = np.r_[exp[big], exp[~big].sum()]
    keep = exp > 0
    return float(chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue)


def _run_trials(p: np.ndarray, q: np.ndarray | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if q is None:  # a deterministic drafter: always the same (sometimes wrong) guess
        draft = np.tile(np.argsort(-p[:K], axis=1)[:, 1], (N, 1))
    else:
        c = np.cumsum(q, axis=1)
        draft = np.stack([np.minimum((c[i] <= rng.random(N)[:, None]).sum(axis=1), V - 1)
                          for i in range(K)], axis=1)
    return rejection_sample(draft, q, p, rng.random((N, K)), rng.random(N))


PVALUES: dict[str, list[float]] = {}


@pytest.mark.parametrize("kind", ["different", "disjoint-ish", "one-hot"])
def test_rejection_sampling_matches_target_chi_square(kind):
    p = _target()
    q = None if kind == "one-hot" else _proposal(p, kind)
    tokens, n_acc = _run_trials(p, q, seed={"different": 1, "disjoint-ish": 2, "one-hot": 3}[kind])
    pvals = [_chi2(tokens[:, 0], p[0])]  # every trial emits position 0
    for j in (1, K):  # position j, over the trials that got that far, follows p[j]
        reach = n_acc >= j
        pvals.append(_chi2(tokens[reach, j], p[j]))
    PVALUES[kind] = pvals
    assert min(pvals) > 1e-3, pvals
    # acceptance at position 0 happens with probability sum(min(p, q))
    q0 = np.eye(V)[np.argsort(-p[0])[1]] if q is None else q[0]
    rate, expect = (n_acc >= 1).mean(), np.minimum(p[0], q0).sum()
    assert abs(rate - expect) < 5 * np.sqrt(expect * (1 - expect) / N) + 1e-12


def test_verify_matches_vectorized_kernel_and_is_reproducible():
    p = _target()
    q = _proposal(p, "different")
    sp = SamplingParams(temperature=0.8, seed=5)
    rng = RequestRNG(5)
    draft = [int(np.argmax(q[i])) for i in range(K)]
    for step in range(30):
        got = verify(draft, q, p, sp, rng, step=step)
        assert got == verify(draft, q, p, sp, RequestRNG(5), step=step)
        u = rng.generator(step, stream=1).random(K + 1)
        tokens, n = rejection_sample(np.array([draft]), q, p, u[None, :K], u[K:])
        assert got == tokens[0, :n[0] + 1].tolist()
        assert 1 <= len(got) <= K + 1 and got[:-1] == draft[:len(got) - 1]
    with pytest.raises(ArgumentValueError, match="step"):
        verify(draft, q, p, sp, rng)
    assert len(verify(draft, q, p, sp, np.random.default_rng(0))) >= 1


def test_verify_empty_draft_samples_from_target():
    p = np.array([[0.0, 0.25, 0.75]])
    toks = [verify([], None, p, SamplingParams(), RequestRNG(s), step=0)[0] for s in range(400)]
    assert set(toks) == {1, 2} and 200 < toks.count(2) < 400


def test_verify_shape_errors():
    p = np.full((3, 4), 0.25)
    with pytest.raises(ShapeError, match=r"\(2, vocab\), got \(3, 4\)"):
        verify([1], None, p, SamplingParams(), RequestRNG(0), step=0)
    with pytest.raises(ShapeError, match="draft_probs"):
        verify([1, 2], np.ones((2, 5)), p, SamplingParams(), RequestRNG(0), step=0)
    with pytest.raises(ShapeError):
        target_probabilities(np.zeros((2, 4)), SamplingParams(), [], [], [1, 2])


# ------------------------------------------------------------------------- drafters, stats


def test_model_drafter_proposals():
    greedy = ModelDrafter(_toy_probs)
    draft, q = greedy.propose([1, 2, 3], 4)
    assert q is None and len(draft) == 4
    assert draft[0] == int(np.argmax(_toy_probs([1, 2, 3])))
    sp = SamplingParams(temperature=0.7, top_k=10)
    sampled = ModelDrafter(_toy_probs, sp, seed=9)
    d1, q1 = sampled.propose([1, 2, 3], 5)
    assert sampled.propose([1, 2, 3], 5)[0] == d1  # reproducible from (seed, position)
    assert q1.shape == (5, V)
    for i, t in enumerate(d1):
        ctx = [1, 2, 3] + d1[:i]
        np.testing.assert_allclose(q1[i], probabilities(np.log(_toy_probs(ctx)), sp, ctx,
                                                        d1[:i]))
        assert q1[i, t] > 0
    assert sampled.propose([1], 0) == ([], None)


def test_speculative_sampling_end_to_end_stays_in_support():
    sp = SamplingParams(temperature=0.9, top_k=8, seed=4)
    prompt = [1, 2, 1, 2, 1]
    drafter = ModelDrafter(_toy_probs, SamplingParams(temperature=1.0), seed=2)
    out, stats = _speculative(prompt, 30, sp, drafter, k=3, seed=4)
    again, _ = _speculative(prompt, 30, sp, ModelDrafter(_toy_probs, SamplingParams(), seed=2),
                            k=3, seed=4)
    assert out == again  # reproducible
    for i, t in enumerate(out):
        assert probabilities(_toy_logits(prompt + out[:i]), sp)[t] > 0
    assert 0.0 <= stats.rate <= 1.0 and stats.steps >= 1


def test_acceptance_stats():
    s = AcceptanceStats()
    assert s.rate == 0.0 and s.tokens_per_step == 0.0
    assert s.record([1, 2, 3], [1, 2, 9]) == 2
    assert s.record([4], [5]) == 0
    assert (s.proposed, s.accepted, s.emitted, s.steps) == (4, 2, 4, 2)
    assert s.rate == 0.5 and s.tokens_per_step == 2.0
    m = s.merge(AcceptanceStats(4, 4, 5, 1))
    assert (m.proposed, m.accepted, m.rate) == (8, 6, 0.75)
