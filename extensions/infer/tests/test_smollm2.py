"""SmolLM2-135M through tenferro-infer against Hugging Face transformers' own run of the same
GGUF (reference data made once by reference/make_reference.py with transformers 5.24.0):
the last prompt position's logits (float32) and 64 greedy tokens through the Engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tenferro_infer.engine import Engine
from tenferro_infer.models.common import StepBatch
from tenferro_infer.sampling import SamplingParams

REF = np.load(Path(__file__).parent / "reference" / "smollm2_reference.npz")
PROMPTS = [0, 1, 2]
LOGIT_ATOL = 2e-3  # float32 through 30 layers, two BLAS libraries: max |diff| seen 6e-5


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.from_smollm2("numpy:cpu", cache_tokens=1024, block_size=16)


def test_last_position_logits_match_transformers(engine: Engine) -> None:
    prompts = [REF[f"prompt{i}_ids"].tolist() for i in PROMPTS]
    logits = engine.model.forward(StepBatch.full(prompts, logits="last")).numpy()
    for i, row in zip(PROMPTS, logits):
        want = REF[f"prompt{i}_last_logits"]
        err = np.abs(row - want).max()
        assert err < LOGIT_ATOL, f"prompt {i}: max |logit diff| {err:.2e} vs transformers"
        assert row.argmax() == want.argmax()


def test_prompt_top20_logits_at_every_position_match(engine: Engine) -> None:
    ids = REF["prompt1_ids"].tolist()
    logits = engine.model.forward(StepBatch.full([ids], logits="all")).numpy()
    got = np.take_along_axis(logits, REF["prompt1_top20_idx"].astype(np.int64), axis=1)
    np.testing.assert_allclose(got, REF["prompt1_top20_val"], atol=LOGIT_ATOL, rtol=0)


def test_greedy_generation_matches_transformers_token_for_token(engine: Engine) -> None:
    """All three prompts batched together, through the paged cache and the scheduler."""
    prompts = [REF[f"prompt{i}_ids"].tolist() for i in PROMPTS]
    params = [SamplingParams(temperature=0.0, max_tokens=len(REF[f"prompt{i}_greedy"]),
                             ignore_eos=False) for i in PROMPTS]
    outs = engine.generate(prompts, params)
    for i, o in zip(PROMPTS, outs):
        assert o.output_ids == REF[f"prompt{i}_greedy"].tolist(), f"prompt {i}"
    assert engine.metrics()["kv_used_blocks"] == 0
    assert outs[0].text.strip() == "The capital of France is Paris."
