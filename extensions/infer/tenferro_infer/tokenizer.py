"""Text <-> token ids for the served models, built on Hugging Face ``tokenizers``.

A GGUF carries its tokenizer in metadata (``tokenizer.ggml.*``); for ``model == 'gpt2'`` (the
byte-level BPE of GPT-2, Llama 3, SmolLM, Qwen...) this rebuilds it as a ``tokenizers.models.BPE``
with the ByteLevel pre-tokenizer and decoder, and registers control tokens (token_type 3) as
added special tokens so ``<|im_start|>`` stays one id. Chat templates render with a sandboxed
jinja2 environment configured as transformers configures it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import AddedToken, Regex, decoders, pre_tokenizers
from tokenizers.models import BPE

from .errors import ModelFileError

__all__ = ["Tokenizer", "IncrementalDetokenizer"]

# llama.cpp's pre-tokenizers that split every numeric character off before the GPT-2 regex
# (llama-vocab.cpp: STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA).
_DIGIT_SPLIT_PRE = {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                    "minerva-7b"}
_GPT2_PRE = {"default", "gpt2", "gpt-2", "mpt", "olmo", "jais", *_DIGIT_SPLIT_PRE}
_CONTROL, _USER_DEFINED = 3, 4
_SURROGATE = re.compile("[\ud800-\udfff]")


class IncrementalDetokenizer:
    """Streams text as ids arrive: :meth:`push` returns only complete UTF-8 text (``''`` while
    a multibyte character is split across tokens), never a broken character."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self._tok = tokenizer._tok
        self._stream = decoders.DecodeStream(skip_special_tokens=skip_special_tokens)
        self.text = ""

    def push(self, token_id: int) -> str:
        """Feed one generated id; the newly completed text (possibly empty)."""
        piece = self._stream.step(self._tok, int(token_id))
        if piece is None:
            return ""
        self.text += piece
        return piece

    def push_many(self, ids: Iterable[int]) -> str:
        """Feed several ids; the text they complete."""
        return "".join(self.push(i) for i in ids)


@lru_cache(maxsize=16)
def _compile_template(template: str) -> Any:
    """A chat template compiled as transformers compiles it: ImmutableSandboxedEnvironment,
    trim_blocks/lstrip_blocks, loopcontrols, a unicode ``tojson``, ``raise_exception`` and
    ``strftime_now``."""
    from jinja2.exceptions import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


class Tokenizer:
    """A model's tokenizer: ``encode``/``decode``, streaming detokenization, the chat template,
    and the special ids the engine stops on."""

    def __init__(self, tok: tokenizers.Tokenizer, *, bos_token_id: int | None = None,
                 eos_token_ids: Sequence[int] = (), pad_token_id: int | None = None,
                 unk_token_id: int | None = None, add_bos: bool = False, add_eos: bool = False,
                 chat_template: str | None = None, vocab_size: int | None = None) -> None:
        self._tok = tok
        self.bos_token_id = bos_token_id
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(int(e) for e in eos_token_ids))
        self.pad_token_id = pad_token_id
        self.unk_token_id = unk_token_id
        self.add_bos, self.add_eos = add_bos, add_eos
        self.chat_template = chat_template
        self.vocab_size: int = int(vocab_size if vocab_size is not None
                                   else tok.get_vocab_size(with_added_tokens=True))

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """The tokenizer a GGUF file's metadata describes."""
        from .weights import read_gguf

        return cls.from_gguf_reader(read_gguf(path), f"GGUF {str(path)!r}")

    @classmethod
    def from_gguf_reader(cls, reader: Any, where: str = "GGUF") -> Tokenizer:
        """The tokenizer in an open ``gguf.GGUFReader``'s metadata."""

        def meta(key: str, default: Any = None) -> Any:
            f = reader.fields.get(key)
            return default if f is None else f.contents()

        return cls.from_gguf_metadata({k: meta(k) for k in reader.fields
                                       if k.startswith("tokenizer.")}, where)

    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any], where: str = "GGUF") -> Tokenizer:
        """Build from GGUF ``tokenizer.*`` metadata values (``tokenizer.ggml.model`` 'gpt2')."""
        model = meta.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise ModelFileError(f"{where}: tokenizer.ggml.model is {model!r}, expected 'gpt2' "
                                 f"(byte-level BPE); use a tokenizer.json via "
                                 f"Tokenizer.from_file for other tokenizers")
        tokens: list[str] = list(meta.get("tokenizer.ggml.tokens") or [])
        merges_raw: list[str] = list(meta.get("tokenizer.ggml.merges") or [])
        if not tokens or not merges_raw:
            raise ModelFileError(f"{where}: tokenizer.ggml.tokens/merges are missing or empty; "
                                 f"expected a byte-level BPE vocabulary and its merges")
        pre = meta.get("tokenizer.ggml.pre") or "default"
        if pre not in _GPT2_PRE:
            raise ModelFileError(f"{where}: tokenizer.ggml.pre {pre!r} is not supported, "
                                 f"expected one of {sorted(_GPT2_PRE)}; use the model's "
                                 f"tokenizer.json via Tokenizer.from_file")
        types = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
        if len(types) != len(tokens):
            raise ModelFileError(f"{where}: {len(types)} token types for {len(tokens)} tokens")
        merges = []
        for m in merges_raw:
            a, sep, b = m.partition(" ")
            if not sep:
                raise ModelFileError(f"{where}: merge {m!r} is not 'left right'")
            merges.append((a, b))
        vocab = {t: i for i, t in enumerate(tokens)}
        tok = tokenizers.Tokenizer(BPE(vocab=vocab, merges=merges, dropout=None,
                                       continuing_subword_prefix="", end_of_word_suffix="",
                                       fuse_unk=False))
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.pre_tokenizer = (pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"), byte_level])
            if pre in _DIGIT_SPLIT_PRE else byte_level)
        tok.decoder = decoders.ByteLevel()
        alphabet = set(pre_tokenizers.ByteLevel.alphabet())
        # A control token written outside the byte alphabet is a mislabel (as transformers
        # treats it); registering it would add a new id.
        special = [AddedToken(t, special=True, normalized=False)
                   for t, ty in zip(tokens, types) if ty == _CONTROL and set(t) <= alphabet]
        user = [AddedToken(t, special=False, normalized=False)
                for t, ty in zip(tokens, types) if ty == _USER_DEFINED]
        tok.add_special_tokens(special)
        tok.add_tokens(user)

        def tid(key: str) -> int | None:
            v = meta.get(f"tokenizer.ggml.{key}")
            return None if v is None else int(v)

        eos = [tid(k) for k in ("eos_token_id", "eot_token_id", "eom_token_id")]
        return cls(tok, bos_token_id=tid("bos_token_id"),
                   eos_token_ids=[e for e in eos if e is not None],
                   pad_token_id=tid("padding_token_id"), unk_token_id=tid("unknown_token_id"),
                   add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
                   add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
                   chat_template=meta.get("tokenizer.chat_template"), vocab_size=len(tokens))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """From a Hugging Face ``tokenizer.json`` (or a directory holding it); special ids and
        the chat template come from ``tokenizer_config.json`` / ``config.json`` beside it."""
        p = Path(path)
        p = p / "tokenizer.json" if p.is_dir() else p
        if not p.is_file():
            raise ModelFileError(f"tokenizer file {str(p)!r} does not exist: expected a Hugging "
                                 f"Face tokenizer.json")
        try:
            tok = tokenizers.Tokenizer.from_file(str(p))
        except Exception as e:
            raise ModelFileError(f"{str(p)!r} is not a valid tokenizer.json ({e})") from e

        def read(name: str) -> dict[str, Any]:
            f = p.parent / name
            return json.loads(f.read_text()) if f.is_file() else {}

        tcfg, mcfg, gcfg = (read("tokenizer_config.json"), read("config.json"),
                            read("generation_config.json"))

        def tok_id(v: Any) -> int | None:
            if isinstance(v, dict):
                v = v.get("content")
            return None if v is None else tok.token_to_id(v)

        def ids(v: Any) -> list[int]:
            return [int(x) for x in (v if isinstance(v, list) else [v]) if x is not None]

        eos = ids(gcfg.get("eos_token_id")) or ids(mcfg.get("eos_token_id"))
        eos = eos or ids(tok_id(tcfg.get("eos_token")))
        bos = mcfg.get("bos_token_id", tok_id(tcfg.get("bos_token")))
        template = tcfg.get("chat_template")
        if isinstance(template, list):  # named templates: take the default one
            template = next((t["template"] for t in template if t.get("name") == "default"),
                            None)
        return cls(tok, bos_token_id=bos, eos_token_ids=eos,
                   pad_token_id=tok_id(tcfg.get("pad_token")),
                   unk_token_id=tok_id(tcfg.get("unk_token")), chat_template=template,
                   vocab_size=mcfg.get("vocab_size"))

    # ------------------------------------------------------------------ use

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; with ``add_special_tokens`` the BOS/EOS the model's file asks
        for (SmolLM2 asks for none). Special-token text such as ``<|im_end|>`` is one id; a
        lone surrogate, which UTF-8 cannot hold, encodes as U+FFFD."""
        try:
            ids = self._tok.encode(text, add_special_tokens=False).ids
        except TypeError:  # lone surrogates (e.g. from a JSON "\\ud800") are not UTF-8
            if not isinstance(text, str):
                raise TypeError(f"encode takes a str, got {type(text).__name__}") from None
            ids = self._tok.encode(_SURROGATE.sub("\ufffd", text), add_special_tokens=False).ids
        if add_special_tokens:
            if self.add_bos and self.bos_token_id is not None:
                ids = [self.bos_token_id, *ids]
            if self.add_eos and self.eos_token_ids:
                ids = [*ids, self.eos_token_ids[0]]
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids`` (invalid UTF-8 as U+FFFD), optionally without special tokens."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def detokenizer(self, skip_special_tokens: bool = True) -> IncrementalDetokenizer:
        """A fresh streaming detokenizer for one generated sequence."""
        return IncrementalDetokenizer(self, skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary string of an id (byte-level spelling), or None."""
        return self._tok.id_to_token(int(token_id))

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary string, or None."""
        return self._tok.token_to_id(token)

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]],
                            add_generation_prompt: bool = True, tokenize: bool = False,
                            **kwargs: Any) -> str | list[int]:
        """Render ``messages`` with the model's chat template (sandboxed jinja2, as
        transformers does); with ``tokenize`` the ids (no BOS added, as transformers)."""
        if not self.chat_template:
            raise ModelFileError("this model's tokenizer has no chat template "
                                 "(tokenizer.chat_template); format the prompt yourself")
        for m in messages:
            if not isinstance(m, Mapping) or "role" not in m:
                raise ValueError(f"chat messages must be mappings with 'role' and 'content', "
                                 f"got {m!r}")

        def text(i: int | None) -> str | None:
            return None if i is None else self._tok.id_to_token(i)

        rendered = _compile_template(self.chat_template).render(
            messages=[dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
            bos_token=text(self.bos_token_id) or "",
            eos_token=text(self.eos_token_ids[0] if self.eos_token_ids else None) or "",
            pad_token=text(self.pad_token_id), unk_token=text(self.unk_token_id), **kwargs)
        return self.encode(rendered, add_special_tokens=False) if tokenize else rendered

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={self.vocab_size}, bos={self.bos_token_id}, "
                f"eos={self.eos_token_ids})")
