"""The sampling pipeline: SamplingParams validation, every processor against a direct NumPy
reference, HF/OpenAI penalties, greedy, per-request seeded draws, logprobs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.special import log_softmax
from scipy.stats import chisquare

from tenferro_core.errors import ArgumentValueError, ShapeError, TenferroIndexError
from tenferro_infer.errors import SamplingParamsError
from tenferro_infer.sampling import (
    PIPELINE,
    RequestRNG,
    SamplingParams,
    apply_min_p,
    apply_penalties,
    apply_temperature,
    apply_top_k,
    apply_top_p,
    inverse_cdf,
    inverse_cdf_rows,
    probabilities,
    sample,
    sample_batch,
    token_logprobs,
)

NEG = -np.inf
EPS = 1e-9  # bracket for boundary rounding: a threshold nudged by EPS either way


# ------------------------------------------------------------------------------ strategies

_elem = st.one_of(st.sampled_from([0.0, 1.0, -1.0, 2.5, NEG]),  # ties and -inf
                  st.floats(-30, 30, allow_nan=False))


@st.composite
def logits_st(draw, max_size: int = 40) -> np.ndarray:
    x = draw(arrays(np.float64, st.integers(1, max_size), elements=_elem))
    if not np.isfinite(x).any():
        x[draw(st.integers(0, x.size - 1))] = draw(st.floats(-5, 5))
    return x


# ------------------------------------------------------------------------------- references


def ref_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def ref_top_k(x: np.ndarray, k: int) -> np.ndarray:
    if k == 0 or k >= x.size:
        return x.copy()
    kth = sorted(x.tolist(), reverse=True)[k - 1]
    return np.array([v if v >= kth else NEG for v in x])


def ref_top_p_mask(x: np.ndarray, top_p: float) -> np.ndarray:
    """The shortest prefix (prob desc, id asc) of mass >= top_p, plus ties of its last; at
    top_p = 1 every token (the running sum below can reach 1.0 before the smallest ones)."""
    p = ref_softmax(x)
    if top_p >= 1.0:
        return np.ones(x.size, bool)
    order = sorted(range(x.size), key=lambda i: (-p[i], i))
    total, bound = 0.0, p[order[-1]]
    for i in order:
        total += p[i]
        if total >= top_p:
            bound = p[i]
            break
    return p >= bound


def ref_min_p_mask(x: np.ndarray, min_p: float) -> np.ndarray:
    p = ref_softmax(x)
    return p >= min_p * p.max()


def ref_penalties(x, prompt, output, rep, presence, freq) -> np.ndarray:
    out = x.copy()
    for t in set(prompt) | set(output):  # HF RepetitionPenaltyLogitsProcessor
        out[t] = out[t] * rep if out[t] < 0 else out[t] / rep
    for t in set(output):  # OpenAI: mu[j] - c[j] * alpha_freq - float(c[j] > 0) * alpha_presence
        c = output.count(t)
        out[t] = out[t] - c * freq - float(c > 0) * presence
    return out


def kept(x: np.ndarray) -> np.ndarray:
    return x > NEG


def assert_bracketed(got: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray) -> None:
    """lo (strict threshold) subset of got subset of hi (lenient threshold), over the tokens of
    nonzero probability (a zero-probability token is the same whether kept or not)."""
    lo = lo & (ref_softmax(x) > 0)
    assert np.all(kept(got)[lo]), "a token the reference keeps was dropped"
    assert not np.any(kept(got) & ~hi), "a token the reference drops was kept"


# ------------------------------------------------------------------------------ parameters

BAD = [
    ("temperature", -0.5), ("temperature", "hot"), ("temperature", math.inf),
    ("temperature", math.nan), ("temperature", None), ("temperature", True),
    ("top_k", -1), ("top_k", 2.5), ("top_k", "5"),
    ("top_p", 0), ("top_p", 0.0), ("top_p", 1.5), ("top_p", -0.1), ("top_p", "0.9"),
    ("min_p", 1.0), ("min_p", -0.01), ("min_p", [0.1]),
    ("repetition_penalty", 0), ("repetition_penalty", -1.0), ("repetition_penalty", math.inf),
    ("presence_penalty", 2.5), ("presence_penalty", -3), ("frequency_penalty", 2.01),
    ("frequency_penalty", "x"),
    ("seed", 1.5), ("seed", "42"), ("seed", True),
    ("max_tokens", 0), ("max_tokens", -3), ("max_tokens", 10.0), ("max_tokens", None),
    ("stop", [""]), ("stop", [1]), ("stop", 5), ("stop", None),
    ("stop_token_ids", [-1]), ("stop_token_ids", [1.5]), ("stop_token_ids", 3),
    ("logprobs", -1), ("logprobs", 21), ("logprobs", 2.0),
    ("ignore_eos", "yes"), ("ignore_eos", 1),
    ("max_joules", 0), ("max_joules", -5.0), ("max_joules", math.nan), ("max_joules", "1J"),
]


@pytest.mark.parametrize(("field", "value"), BAD, ids=[f"{f}={v!r}" for f, v in BAD])
def test_invalid_params_raise_helpful_error(field, value):
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams(**{field: value})
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert f"SamplingParams.{field}=" in msg
    assert repr(value) in msg or repr(float(value)) in msg
    assert "expected" in msg and ";" in msg  # the range, then what to do


STANDALONE_BAD = [
    (lambda v: apply_temperature(LOGITS, v), "temperature", [-0.5, math.nan, "hot"]),
    (lambda v: apply_top_k(LOGITS, v), "top_k", [-1, 2.5]),
    (lambda v: apply_top_p(LOGITS, v), "top_p", [0.0, 1.5, math.nan, -0.1]),
    (lambda v: apply_min_p(LOGITS, v), "min_p", [1.0, 2.0, -0.01]),
    (lambda v: apply_penalties(LOGITS, repetition_penalty=v), "repetition_penalty", [0.0, -1.0]),
    (lambda v: apply_penalties(LOGITS, presence_penalty=v), "presence_penalty", [2.5]),
    (lambda v: apply_penalties(LOGITS, frequency_penalty=v), "frequency_penalty", [-3.0]),
]
LOGITS = np.array([1.0, 0.5, -40.0])


@pytest.mark.parametrize(("call", "field", "values"), STANDALONE_BAD,
                         ids=[f for _, f, _ in STANDALONE_BAD])
def test_standalone_stages_check_their_parameter_as_sampling_params_does(call, field, values):
    """apply_min_p(x, 2.0) used to return every logit -inf, apply_top_k(x, -1) NumPy's
    partition error, apply_top_p(x, nan) and apply_temperature(x, -0.5) a silent result."""
    for v in values:
        with pytest.raises(SamplingParamsError) as info:
            call(v)
        assert isinstance(info.value, ValueError)
        msg = str(info.value)
        assert f": {field}=" in msg and "expected" in msg and ";" in msg


@pytest.mark.parametrize(("call", "error"), [
    (lambda: token_logprobs(LOGITS, -1, 2), TenferroIndexError),  # used to wrap to the last token
    (lambda: token_logprobs(LOGITS, 3, 2), TenferroIndexError),
    (lambda: token_logprobs(LOGITS, True, 2), TenferroIndexError),
    (lambda: token_logprobs(LOGITS, 0, -1), ArgumentValueError),
    (lambda: token_logprobs(LOGITS[None], 0, 1), ShapeError),
    (lambda: inverse_cdf(LOGITS, 1.5), ArgumentValueError),  # used to return the last token
    (lambda: inverse_cdf(LOGITS, math.nan), ArgumentValueError),
    (lambda: inverse_cdf(np.array([]), 0.5), ShapeError),
    (lambda: inverse_cdf_rows(np.ones((2, 3)), np.array([0.1])), ShapeError),
    (lambda: inverse_cdf_rows(np.ones((2, 3)), np.array([0.1, 2.0])), ArgumentValueError),
], ids=["token -1", "token = vocab", "token True", "n -1", "2-d logits", "u 1.5", "u nan",
        "empty weights", "one u for two rows", "u 2.0 in a row"])
def test_logprobs_and_inverse_cdf_check_their_arguments(call, error):
    with pytest.raises(error) as info:
        call()
    assert "; " in str(info.value)  # what was expected, then what to do


def test_valid_params_normalized_and_hashable():
    sp = SamplingParams(temperature=1, top_k=np.int64(5), top_p=1, min_p=0, seed=-7,
                        stop="\n", stop_token_ids=[2, 3], logprobs=20, max_joules=1)
    assert isinstance(sp.temperature, float) and type(sp.top_k) is int
    assert sp.stop == ("\n",) and sp.stop_token_ids == (2, 3)
    hash(sp)
    assert SamplingParams(temperature=0).greedy and not SamplingParams().greedy
    assert [name for name, _, _ in PIPELINE] == ["penalties", "temperature", "top_k", "top_p",
                                                 "min_p"]


# ------------------------------------------------------------------------------ processors


@given(logits_st(), st.integers(0, 50))
@example(np.array([1.0, 1.0, 1.0, 0.0]), 2)  # ties at the k-th value are kept
@example(np.array([3.0, NEG, NEG]), 2)  # fewer finite logits than k
@example(np.array([0.5]), 1)  # vocab size 1
@example(np.array([0.5, 0.1]), 50)  # k larger than the vocabulary
def test_top_k_matches_reference(x, k):
    np.testing.assert_array_equal(apply_top_k(x, k), ref_top_k(x, k))


@given(logits_st(), st.floats(1e-12, 1.0))
@example(np.array([0.0, 0.0, 0.0, 0.0]), 0.3)  # ties straddling the boundary: all kept
@example(np.array([2.0, 1.0, 0.0, NEG]), 1e-12)  # top_p tiny: only the top token
@example(np.array([1.0]), 0.5)  # vocab size 1
@example(np.array([1.0, 1.0, 0.0]), 1e-9)  # tiny top_p keeps ties of the top token
# top_p = 1 keeps every token, though the running sum reaches 1.0 before the -17 one (thorough run)
@example(np.array([0.0, -1.0, -17.0, 0.0] + [17.0] * 10), 1.0)
@example(np.array([1.0, -40.0]), 1.0)
def test_top_p_matches_reference(x, top_p):
    got = apply_top_p(x, top_p)
    assert_bracketed(got, ref_top_p_mask(x, top_p * (1 - EPS)),
                     ref_top_p_mask(x, min(top_p * (1 + EPS), 1.0)), x)
    assert np.array_equal(got[kept(got)], x[kept(got)])
    assert kept(got)[np.argmax(x)]  # never empty
    if top_p == 1.0:  # off, as in SamplingParams: every token, however unlikely
        assert np.array_equal(got, x)


@given(logits_st(), st.floats(0.0, 0.999))
@example(np.array([0.0, math.log(0.5), NEG]), 0.5)  # exactly at the threshold
@example(np.array([7.0]), 0.9)
@example(np.array([NEG, 0.0, 0.0]), 5e-324)  # min_p * p_max underflows to 0
def test_min_p_matches_reference(x, min_p):
    if min_p == 0.0:
        return
    got = apply_min_p(x, min_p)
    assert_bracketed(got, ref_min_p_mask(x, min_p * (1 + EPS)),
                     ref_min_p_mask(x, min_p * (1 - EPS)), x)


@given(logits_st(), st.floats(0.01, 10.0))
def test_temperature_matches_reference(x, t):
    np.testing.assert_allclose(ref_softmax(apply_temperature(x, t)), ref_softmax(x / t),
                               rtol=1e-9, atol=1e-12)


@given(logits_st())
@example(np.array([1.0, 3.0, 3.0, NEG]))  # tie: the lowest id wins
def test_temperature_zero_is_argmax(x):
    got = apply_temperature(x, 0.0)
    assert list(np.flatnonzero(kept(got))) == [int(np.argmax(x))]


@pytest.mark.parametrize("t", [1e-300, 5e-324])  # 1/t finite, and 1/t = inf
def test_tiny_temperature_does_not_overflow(t):
    p = probabilities(np.array([1.0, 1.0 - 1e-6, -5.0]), SamplingParams(temperature=t))
    np.testing.assert_array_equal(p, [1.0, 0.0, 0.0])


@given(logits_st(max_size=12), st.data())
def test_penalties_match_hf_and_openai(x, data):
    ids = st.lists(st.integers(0, x.size - 1), max_size=15)
    prompt, output = data.draw(ids), data.draw(ids)
    rep = data.draw(st.floats(0.1, 3.0))
    pres, freq = data.draw(st.floats(-2, 2)), data.draw(st.floats(-2, 2))
    got = apply_penalties(x, prompt, output, repetition_penalty=rep, presence_penalty=pres,
                          frequency_penalty=freq)
    np.testing.assert_allclose(got, ref_penalties(x, prompt, output, rep, pres, freq),
                               rtol=1e-12, atol=1e-12)


def test_penalty_formulas_by_hand():
    x = np.array([2.0, -2.0, 0.0, 1.0])
    got = apply_penalties(x, [0, 1], [1, 3, 3], repetition_penalty=2.0, presence_penalty=0.5,
                          frequency_penalty=0.25)
    # token 0: 2/2; token 1: -2*2 - 0.25 - 0.5; token 2: untouched; token 3: 1/2 - 2*0.25 - 0.5
    np.testing.assert_allclose(got, [1.0, -4.75, 0.0, -0.5])


@given(logits_st(max_size=30), st.data())
def test_pipeline_matches_composed_references(x, data):
    sp = SamplingParams(temperature=data.draw(st.sampled_from([0.0, 0.5, 1.0, 1.7])),
                        top_k=data.draw(st.integers(0, 35)),
                        top_p=data.draw(st.sampled_from([1.0, 0.95, 0.5, 0.1])),
                        min_p=data.draw(st.sampled_from([0.0, 0.05, 0.3])),
                        repetition_penalty=data.draw(st.sampled_from([1.0, 1.3])),
                        frequency_penalty=data.draw(st.sampled_from([0.0, 0.4])))
    output = data.draw(st.lists(st.integers(0, x.size - 1), max_size=6))
    got = probabilities(x, sp, [0], output)
    ref = ref_penalties(x, [0], output, sp.repetition_penalty, 0.0, sp.frequency_penalty)
    if sp.greedy:
        expect = np.zeros(x.size)
        expect[int(np.argmax(ref))] = 1.0
        np.testing.assert_array_equal(got, expect)
        return
    ref = ref_top_k(ref / sp.temperature, sp.top_k)
    ref = np.where(ref_top_p_mask(ref, sp.top_p), ref, NEG) if sp.top_p < 1 else ref
    ref = np.where(ref_min_p_mask(ref, sp.min_p), ref, NEG) if sp.min_p > 0 else ref
    np.testing.assert_allclose(got, ref_softmax(ref), rtol=1e-9, atol=1e-12)
    assert got.sum() == pytest.approx(1.0)


def test_probabilities_rows_and_shapes():
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    sp = SamplingParams(temperature=0.8, top_k=4)
    got = probabilities(x, sp)
    assert got.shape == (3, 7) and got.dtype == np.float64
    for i in range(3):
        np.testing.assert_array_equal(got[i], probabilities(x[i], sp))


# ----------------------------------------------------------------------------------- greedy


@given(logits_st())
@example(np.array([5.0, 5.0, 1.0]))
def test_greedy_is_argmax_lowest_id_every_call(x):
    sp = SamplingParams(temperature=0.0, top_p=0.5, top_k=3)
    picks = {sample(x, sp, RequestRNG(s), [], [0] * s)[0] for s in range(3)}
    assert picks == {int(np.argmax(x))}


def test_greedy_applies_penalties():
    x = np.array([3.0, 2.9, 0.0])
    assert sample(x, SamplingParams(temperature=0), RequestRNG(0), [], [])[0] == 0
    sp = SamplingParams(temperature=0, repetition_penalty=1.2)
    assert sample(x, sp, RequestRNG(0), [0], [])[0] == 1


# ---------------------------------------------------------------------------------- drawing


def test_inverse_cdf_never_picks_zero_weight_and_blocks_agree():
    rng = np.random.default_rng(1)
    w = rng.random(10_000) * (rng.random(10_000) < 0.3)
    w[:2000] = 0.0
    w[-1500:] = 0.0  # zero blocks at both ends exercise the clamps
    c = np.cumsum(w)
    for u in [0.0, 1 - 2**-53, *rng.random(300)]:
        i = inverse_cdf(w, u)
        assert w[i] > 0
        if 0 < u < 1 - 1e-12:
            assert i == min(int(np.searchsorted(c, u * c[-1], side="right")), w.size - 1)
    rows = np.array([[0.5, 0.0, 0.3, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]])
    assert list(inverse_cdf_rows(rows, np.array([1 - 2**-53, 0.0]))) == [2, 4]


def test_seeded_sampling_distribution_chi_square():
    """One draw per seed over 20k seeds follows the processed distribution."""
    x = np.random.default_rng(3).standard_normal(30) * 2
    sp = SamplingParams(temperature=0.7, top_k=12, top_p=0.95)
    p = probabilities(x, sp)
    n = 20_000
    counts = np.bincount([sample(x, sp, RequestRNG(s))[0] for s in range(n)], minlength=30)
    assert counts[p == 0].sum() == 0
    assert chisquare(counts[p > 0], n * p[p > 0]).pvalue > 1e-3


def _toy_logits(ctx: list[int], vocab: int = 50) -> np.ndarray:
    """A deterministic 'model': logits from the last two tokens."""
    key = (ctx[-1] if ctx else 0) * 1000 + (ctx[-2] if len(ctx) > 1 else 0)
    return (np.random.default_rng(key).standard_normal(vocab) * 2).astype(np.float32)


def test_seeded_request_is_independent_of_batch_composition():
    specs = {"a": SamplingParams(temperature=0.9, top_p=0.9, seed=11),
             "b": SamplingParams(temperature=1.2, top_k=5, seed=11),
             "c": SamplingParams(temperature=0.6, frequency_penalty=0.5, seed=99)}
    prompts = {"a": [1, 2, 3], "b": [4], "c": [5, 6]}

    def alone(name: str, steps: int) -> list[int]:
        out: list[int] = []
        rng = RequestRNG.for_params(specs[name])
        for _ in range(steps):
            out.append(sample(_toy_logits(prompts[name] + out), specs[name], rng,
                              prompts[name], out)[0])
            np.random.random()  # the global RNG is never used
        return out

    expected = {n: alone(n, 25) for n in specs}
    outs: dict[str, list[int]] = {n: [] for n in specs}
    rngs = {n: RequestRNG.for_params(specs[n]) for n in specs}
    chooser = np.random.default_rng(5)
    while any(len(o) < 25 for o in outs.values()):
        live = [n for n in specs if len(outs[n]) < 25]
        batch = list(chooser.permutation(live)[: chooser.integers(1, len(live) + 1)])
        logits = np.stack([_toy_logits(prompts[n] + outs[n]) for n in batch])
        res = sample_batch(logits, [specs[n] for n in batch], [rngs[n] for n in batch],
                           [prompts[n] for n in batch], [outs[n] for n in batch])
        for n, (tok, _) in zip(batch, res):
            outs[n].append(tok)
    assert outs == expected


def test_seed_none_draws_once_per_request():
    sp = SamplingParams(temperature=1.0)
    r1, r2 = RequestRNG.for_params(sp), RequestRNG.for_params(sp)
    assert r1.seed != r2.seed
    x = np.zeros(1000)
    assert sample(x, sp, r1, [], [7])[0] == sample(x, sp, r1, [], [7])[0]
    assert RequestRNG(5).uniform(3) == RequestRNG(5).uniform(3) != RequestRNG(5).uniform(4)
    assert RequestRNG(5).uniform(3, stream=1) != RequestRNG(5).uniform(3)


# --------------------------------------------------------------------------------- logprobs


@given(logits_st(), st.integers(0, 20))
@example(np.array([1.0, 1.0, 1.0, NEG]), 2)  # ties: lowest ids first
@example(np.array([0.0, 7.54439461e-208]), 1)  # logprobs round equal; the logits do not
def test_logprobs_of_raw_distribution(x, n):
    sp = SamplingParams(temperature=0.5, top_k=2, repetition_penalty=1.5, logprobs=n)
    tok, info = sample(x, sp, RequestRNG(0), [0], [0])
    ref = log_softmax(x)
    assert info.token == tok and info.logprob == pytest.approx(ref[tok], abs=1e-9)
    order = sorted(range(x.size), key=lambda i: (-x[i], i))[: min(n, x.size)]
    assert [t for t, _ in info.top] == order
    np.testing.assert_allclose([lp for _, lp in info.top], ref[order], atol=1e-9)


def test_logprobs_off_and_zero():
    x = np.array([0.0, 1.0, 2.0], dtype=np.float32)
    assert sample(x, SamplingParams(), RequestRNG(0))[1] is None
    info = sample(x, SamplingParams(temperature=0, logprobs=0), RequestRNG(0))[1]
    assert info.token == 2 and info.top == ()
    assert token_logprobs(x, 0, 5).top[0][0] == 2


# ----------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("bad", [np.array([0.0, np.nan]), np.array([NEG, NEG]),
                                 np.array([np.inf, 0.0])])
def test_bad_logits_raise(bad):
    with pytest.raises(ArgumentValueError, match="logits"):
        sample(bad, SamplingParams(), RequestRNG(0))


def test_bad_shapes_and_ids_raise():
    with pytest.raises(ShapeError):
        sample(np.zeros((2, 3)), SamplingParams(), RequestRNG(0))
    with pytest.raises(ShapeError):
        sample(np.zeros(0), SamplingParams(), RequestRNG(0))
    with pytest.raises(TenferroIndexError, match=r"\[0, 3\)"):
        sample(np.zeros(3), SamplingParams(repetition_penalty=1.1), RequestRNG(0), [5], [])
    with pytest.raises(ShapeError):
        sample_batch(np.zeros((2, 3)), [SamplingParams()], [RequestRNG(0)], [[]], [[]])


def test_inputs_are_not_modified():
    x = np.array([1.0, 2.0, 3.0])
    before = x.copy()
    sample(x, SamplingParams(temperature=0.5, top_k=2, repetition_penalty=2.0, logprobs=2),
           RequestRNG(0), [2], [2])
    probabilities(x, SamplingParams(top_p=0.5))
    np.testing.assert_array_equal(x, before)
