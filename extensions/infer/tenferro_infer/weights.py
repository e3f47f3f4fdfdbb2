"""Load a Llama-family decoder's weights from GGUF or safetensors into float32 NumPy arrays
under Hugging Face Llama names and layouts (see ``config.py``), with the model's config.

Every check runs before any tensor is dequantized or converted, so a bad file raises
``ModelFileError`` and costs nothing else. GGUF files are read and dequantized with the
``gguf`` package's own reader and routines; safetensors files with ``safetensors.numpy``.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .config import ModelConfig
from .errors import ModelFileError

__all__ = ["load_gguf", "load_safetensors", "read_gguf", "gguf_config", "gguf_weights",
           "gguf_name", "permute_qk", "unpermute_qk", "expected_shapes", "SUPPORTED_GGUF_TYPES"]

# The tensor types we dequantize (gguf.quants routines); anything else is refused up front.
SUPPORTED_GGUF_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0")

_GGUF_LAYER = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_GGUF_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight",
                "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
# Tensors a GGUF may carry that the model recomputes itself (RoPE tables).
_GGUF_IGNORED = re.compile(r"^(rope_freqs|rope_factors_(long|short))\.weight$|"
                           r"^blk\.\d+\.attn_rot_embd$")
_HF_IGNORED = re.compile(r"^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")


def permute_qk(w: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """llama.cpp's ``convert_hf_to_gguf.py`` permutation of q_proj/k_proj rows (HF's
    rotate-half RoPE order to GGML's interleaved order): rows reshaped into
    (n_head, 2, head_dim/2) and the last two axes swapped. For k_proj pass n_head_kv."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute_qk(w: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """The exact inverse of :func:`permute_qk`: rows read as (n_head, head_dim/2, 2) and the
    last two axes swapped back, restoring Hugging Face's q_proj/k_proj row order."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every weight a Llama model of this config needs, under its HF name and HF shape."""
    h, hd, ffn = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    q, kv = cfg.n_heads * hd, cfg.n_kv_heads * hd
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, h),
                                       "model.norm.weight": (h,)}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = (cfg.vocab_size, h)
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        out.update({p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                    p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                    p + "mlp.gate_proj.weight": (ffn, h), p + "mlp.up_proj.weight": (ffn, h),
                    p + "mlp.down_proj.weight": (h, ffn), p + "input_layernorm.weight": (h,),
                    p + "post_attention_layernorm.weight": (h,)})
    return out


def _check_shapes(cfg: ModelConfig, shapes: Mapping[str, tuple[int, ...]], where: str,
                  source_names: Callable[[str], str] | None = None) -> None:
    """Refuse missing weights and shape mismatches, naming what was expected and given
    (under the file's own tensor names when ``source_names`` maps HF names to them)."""
    want = expected_shapes(cfg)
    missing = [n for n in want if n not in shapes]
    if missing:
        shown = [source_names(n) if source_names else n for n in missing[:5]]
        raise ModelFileError(
            f"{where}: {len(missing)} tensor(s) missing for a {cfg.n_layers}-layer Llama model, "
            f"e.g. {shown}; the file is incomplete or of another layout: re-export it")
    for n, s in want.items():
        if tuple(shapes[n]) != s:
            src = source_names(n) if source_names else n
            raise ModelFileError(
                f"{where}: tensor {src!r} has shape {tuple(shapes[n])}, expected {s} from the "
                f"config (hidden {cfg.hidden_size}, heads {cfg.n_heads}/{cfg.n_kv_heads}, ffn "
                f"{cfg.intermediate_size}, vocab {cfg.vocab_size}); the file does not match "
                f"its own metadata: re-export it")


# ----------------------------------------------------------------------------- GGUF


@functools.cache
def _reader_class() -> type:
    """``gguf.GGUFReader`` parsing through a plain ndarray view of its mapped file: sliced as
    ``np.memmap``, each of the ~250,000 small reads of a 49,152-token vocabulary paid memmap's
    bookkeeping (SmolLM2's header: 3.3-3.9 s -> 1.0-1.2 s). Same fields and tensors."""
    import gguf

    class Reader(gguf.GGUFReader):
        def _get(self, offset: int, dtype: Any, count: int = 1,
                 override_order: Any = None) -> np.ndarray:
            plain = self.__dict__.get("_plain")
            if plain is None:
                plain = self._plain = self.data.view(np.ndarray)
            count, dt = int(count), np.dtype(dtype)
            arr = plain[offset:offset + dt.itemsize * count].view(dt)[:count]
            order = self.byte_order if override_order is None else override_order
            return arr.view(arr.dtype.newbyteorder(order))

    return Reader


def read_gguf(path: str | os.PathLike[str]) -> Any:
    """Open a GGUF file with ``gguf.GGUFReader``, turning a missing, non-GGUF or truncated
    file into ``ModelFileError``. Returns the reader (shared by config, weights, tokenizer)."""
    p = Path(path)
    if not p.is_file():
        raise ModelFileError(f"GGUF file {str(p)!r} does not exist: expected a path to a .gguf "
                             f"model file")
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelFileError(f"{str(p)!r} is not a GGUF file: expected the magic b'GGUF', got "
                             f"{magic!r}; pass a .gguf file (or use load_safetensors)")
    try:
        reader = _reader_class()(p)
    except Exception as e:  # the reader raises ValueError/IndexError/struct errors on bad bytes
        raise ModelFileError(f"GGUF file {str(p)!r} cannot be parsed ({type(e).__name__}: {e}); "
                             f"it is probably truncated or corrupt: download it again") from e
    size = p.stat().st_size
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size or t.data.nbytes != int(t.n_bytes):
            raise ModelFileError(
                f"GGUF file {str(p)!r} is truncated: tensor {t.name!r} needs bytes up to {end}, "
                f"the file has {size}; download it again")
    return reader


def _meta(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return default
    v = field.contents()
    return v


def gguf_config(reader: Any, where: str = "GGUF") -> ModelConfig:
    """The ModelConfig a GGUF's metadata (``llama.*`` keys, tokenizer ids) describes."""
    arch = _meta(reader, "general.architecture")
    if arch != "llama":
        raise ModelFileError(f"{where}: general.architecture is {arch!r}, expected 'llama' "
                             f"(a Llama-family decoder such as SmolLM2); convert another "
                             f"architecture's model some other way")

    def need(key: str) -> int:
        v = _meta(reader, f"llama.{key}")
        if v is None:
            raise ModelFileError(f"{where}: metadata key 'llama.{key}' is missing; the file "
                                 f"was not written by a llama.cpp converter: re-export it")
        return int(v)

    hidden, n_heads = need("embedding_length"), need("attention.head_count")
    n_kv = int(_meta(reader, "llama.attention.head_count_kv", n_heads))
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = _meta(reader, "llama.vocab_size")
    if vocab is None:
        emb = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
        vocab = (len(tokens.data) if tokens is not None
                 else int(emb.shape[-1]) if emb is not None else 0)
    rot = _meta(reader, "llama.rope.dimension_count")
    if rot is not None and n_heads and int(rot) != hidden // n_heads:
        raise ModelFileError(f"{where}: llama.rope.dimension_count is {rot}, expected the head "
                             f"dimension {hidden // n_heads}; partial rotary embeddings are "
                             f"not supported")
    scaling = _meta(reader, "llama.rope.scaling.type")
    if scaling not in (None, "none"):
        raise ModelFileError(f"{where}: llama.rope.scaling.type is {scaling!r}, expected none; "
                             f"scaled RoPE is not supported")
    eos = [_meta(reader, f"tokenizer.ggml.{k}") for k in
           ("eos_token_id", "eot_token_id", "eom_token_id")]
    eos_ids = tuple(dict.fromkeys(int(e) for e in eos if e is not None))
    bos = _meta(reader, "tokenizer.ggml.bos_token_id")
    tied = not any(t.name == "output.weight" for t in reader.tensors)
    return ModelConfig(
        arch="llama", vocab_size=int(vocab), hidden_size=hidden, n_layers=need("block_count"),
        n_heads=n_heads, n_kv_heads=n_kv, intermediate_size=need("feed_forward_length"),
        max_position=need("context_length"),
        rope_theta=float(_meta(reader, "llama.rope.freq_base", 10000.0)),
        norm_eps=float(_meta(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        tie_embeddings=tied, bos_token_id=None if bos is None else int(bos),
        eos_token_ids=eos_ids, name=str(_meta(reader, "general.name", "model")))


def _hf_name(gguf_name: str) -> str | None:
    if gguf_name in _GGUF_GLOBAL:
        return _GGUF_GLOBAL[gguf_name]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", gguf_name)
    if m and m.group(2) in _GGUF_LAYER:
        return f"model.layers.{m.group(1)}.{_GGUF_LAYER[m.group(2)]}.weight"
    return None


def gguf_name(hf_name: str) -> str:
    """The GGUF tensor name llama.cpp gives an HF Llama weight name."""
    for g, h in _GGUF_GLOBAL.items():
        if h == hf_name:
            return g
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", hf_name)
    inv = {v: k for k, v in _GGUF_LAYER.items()}
    if m is None or m.group(2) not in inv:
        raise KeyError(hf_name)
    return f"blk.{m.group(1)}.{inv[m.group(2)]}.weight"


def gguf_weights(reader: Any, cfg: ModelConfig, where: str = "GGUF") -> dict[str, np.ndarray]:
    """Check then dequantize a GGUF's tensors to float32 under HF names and layouts, with
    q_proj/k_proj rows restored from llama.cpp's permutation."""
    import gguf

    plan: dict[str, Any] = {}
    for t in reader.tensors:
        name = _hf_name(t.name)
        if name is None:
            if _GGUF_IGNORED.match(t.name):
                continue
            raise ModelFileError(f"{where}: unexpected tensor {t.name!r}; expected only Llama "
                                 f"tensors (token_embd, blk.N.attn_*/ffn_*, output_norm, "
                                 f"output): the file is of another architecture")
        if t.tensor_type.name not in SUPPORTED_GGUF_TYPES:
            raise ModelFileError(f"{where}: tensor {t.name!r} is quantized as "
                                 f"{t.tensor_type.name}, expected one of "
                                 f"{', '.join(SUPPORTED_GGUF_TYPES)}; re-quantize the model "
                                 f"(e.g. llama-quantize ... Q8_0) or use an F16 file")
        plan[name] = t
    shapes = {n: tuple(int(d) for d in reversed(t.shape)) for n, t in plan.items()}
    _check_shapes(cfg, shapes, where, gguf_name)
    out: dict[str, np.ndarray] = {}
    for name in expected_shapes(cfg):
        t = plan[name]
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        w = np.ascontiguousarray(w.reshape(shapes[name]), dtype=np.float32)
        if name.endswith("self_attn.q_proj.weight"):
            w = np.ascontiguousarray(unpermute_qk(w, cfg.n_heads, cfg.n_heads))
        elif name.endswith("self_attn.k_proj.weight"):
            w = np.ascontiguousarray(unpermute_qk(w, cfg.n_heads, cfg.n_kv_heads))
        out[name] = w
    return out


def load_gguf(path: str | os.PathLike[str]) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """Load a Llama-family GGUF (F32/F16/BF16/Q4_0/Q4_1/Q8_0 tensors) as its config and float32
    weights under HF Llama names; raises ModelFileError before any work on a bad file."""
    reader = read_gguf(path)
    where = f"GGUF {str(path)!r}"
    cfg = gguf_config(reader, where)
    return cfg, gguf_weights(reader, cfg, where)


# ----------------------------------------------------------------------------- safetensors


def _config_from_hf(d: Mapping[str, Any], where: str) -> ModelConfig:
    """A ModelConfig from a Hugging Face Llama ``config.json``."""
    mtype = d.get("model_type")
    if mtype not in ("llama", None):
        raise ModelFileError(f"{where}: config.json model_type is {mtype!r}, expected 'llama'; "
                             f"only Llama-family models load from safetensors")
    if d.get("attention_bias") or d.get("mlp_bias"):
        raise ModelFileError(f"{where}: config.json asks for attention/MLP biases, which the "
                             f"Llama model here does not have; expected attention_bias false")
    scaling = d.get("rope_scaling")
    rope = d.get("rope_parameters") or {}
    if scaling or rope.get("rope_type", "default") != "default":
        raise ModelFileError(f"{where}: config.json has RoPE scaling "
                             f"{scaling or rope!r}; expected none (plain RoPE)")
    try:
        n_heads = int(d["num_attention_heads"])
        hidden = int(d["hidden_size"])
        eos = d.get("eos_token_id")
        eos_ids = tuple(int(e) for e in (eos if isinstance(eos, list) else [eos])
                        if e is not None)
        head_dim = d.get("head_dim")
        if head_dim is not None and int(head_dim) != hidden // n_heads:
            raise ModelFileError(f"{where}: config.json head_dim {head_dim} differs from "
                                 f"hidden_size/num_attention_heads = {hidden // n_heads}; "
                                 f"not supported")
        return ModelConfig(
            arch="llama", vocab_size=int(d["vocab_size"]), hidden_size=hidden,
            n_layers=int(d["num_hidden_layers"]), n_heads=n_heads,
            n_kv_heads=int(d.get("num_key_value_heads") or n_heads),
            intermediate_size=int(d["intermediate_size"]),
            max_position=int(d.get("max_position_embeddings", 2048)),
            rope_theta=float(rope.get("rope_theta", d.get("rope_theta", 10000.0))),
            norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            tie_embeddings=bool(d.get("tie_word_embeddings", False)),
            bos_token_id=d.get("bos_token_id"), eos_token_ids=eos_ids,
            name=str(d.get("_name_or_path") or "model"))
    except KeyError as e:
        raise ModelFileError(f"{where}: config.json lacks {e.args[0]!r}; expected a Hugging "
                             f"Face LlamaConfig") from e


def _safetensors_files(p: Path) -> list[Path]:
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise ModelFileError(f"{str(p)!r} does not exist: expected a .safetensors file or a "
                             f"directory holding model.safetensors (or its shards) and "
                             f"config.json")
    index = p / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        files = [p / s for s in shards]
    else:
        files = sorted(p.glob("*.safetensors"))
    if not files or not all(f.is_file() for f in files):
        raise ModelFileError(f"{str(p)!r} holds no complete set of .safetensors files; "
                             f"expected model.safetensors or the shards its index names")
    return files


def load_safetensors(path_or_dir: str | os.PathLike[str], config: ModelConfig | None = None
                     ) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """Load a Hugging Face Llama checkpoint (a .safetensors file, or a directory with shards)
    as float32 arrays; the config comes from ``config.json`` beside it unless given."""
    from safetensors import SafetensorError, safe_open

    p = Path(path_or_dir)
    files = _safetensors_files(p)
    where = f"safetensors {str(p)!r}"
    if config is None:
        cj = (p if p.is_dir() else p.parent) / "config.json"
        if not cj.is_file():
            raise ModelFileError(f"{where}: no config.json beside the weights; pass "
                                 f"config=ModelConfig(...) or put the model's config.json there")
        try:
            config = _config_from_hf(json.loads(cj.read_text()), where)
        except json.JSONDecodeError as e:
            raise ModelFileError(f"{where}: config.json is not valid JSON ({e})") from e
    shapes: dict[str, tuple[int, ...]] = {}
    owner: dict[str, Path] = {}
    try:
        for f in files:
            with safe_open(str(f), framework="np") as h:
                for k in h.keys():
                    shapes[k], owner[k] = tuple(h.get_slice(k).get_shape()), f
    except (SafetensorError, OSError, ValueError) as e:
        raise ModelFileError(f"{where}: cannot read {e.__class__.__name__}: {e}; the file is "
                             f"truncated or not safetensors: download it again") from e
    want = expected_shapes(config)
    extra = [k for k in shapes if k not in want and not _HF_IGNORED.match(k)
             and not (k == "lm_head.weight" and config.tie_embeddings)]
    if extra:
        raise ModelFileError(f"{where}: unexpected tensors {extra[:5]}; expected only HF Llama "
                             f"weights for the config (biases and other layouts are not "
                             f"supported)")
    _check_shapes(config, shapes, where)
    out: dict[str, np.ndarray] = {}
    try:
        for f in files:
            with safe_open(str(f), framework="np") as h:
                for k in h.keys():
                    if k in want:
                        out[k] = np.ascontiguousarray(h.get_tensor(k), dtype=np.float32)
    except (SafetensorError, TypeError) as e:
        raise ModelFileError(f"{where}: cannot convert a tensor to float32 ({e}); a bfloat16 "
                             f"file needs the ml_dtypes package: pip install ml_dtypes") from e
    return config, {k: out[k] for k in want}
