"""The tokenizer: SmolLM2's GGUF tokenizer against transformers' ids, decodes and chat template
(reference/smollm2_reference.npz), lossless round-trips, streaming detokenization that never
emits a broken character, tiny GGUF tokenizers, tokenizer.json, and refused metadata."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2.exceptions import SecurityError, TemplateError
from tokenizers.pre_tokenizers import ByteLevel

from tenferro_infer.errors import ModelFileError
from tenferro_infer.smollm2 import smollm2_path
from tenferro_infer.tokenizer import Tokenizer

REF = np.load(Path(__file__).parent / "reference" / "smollm2_reference.npz")
INFO = json.loads(str(REF["tokenizer_json"]))
# Where SmolLM2's real tokenizer (and llama.cpp's 'smollm' pre-tokenizer, which this file
# names) isolates every numeric character but transformers' GGUF conversion, which ignores
# tokenizer.ggml.pre, does not: a whitespace run or a non-ASCII numeral before a digit.
DIVERGENT = {"x =  42", "\u00dcn\u00efc\u00f6d\u00e9 \u1e9e \u01c5 \ufb01 ligature \u00bd"}


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_gguf(smollm2_path())


# ------------------------------------------------------------------ SmolLM2 vs transformers


@pytest.mark.parametrize("case", [s for s in INFO["strings"] if s["text"] not in DIVERGENT],
                         ids=lambda s: repr(s["text"][:20]))
def test_matches_transformers_on_tricky_strings(tok: Tokenizer, case: dict) -> None:
    ids = tok.encode(case["text"], add_special_tokens=False)
    assert ids == case["ids"]
    assert tok.encode(case["text"]) == case["ids_special"]  # SmolLM2 adds no BOS
    assert tok.decode(ids) == case["decode"] == case["text"]
    assert tok.decode(ids, skip_special_tokens=True) == case["decode_skip"]


@pytest.mark.parametrize("case", [s for s in INFO["strings"] if s["text"] in DIVERGENT],
                         ids=lambda s: repr(s["text"][:20]))
def test_digits_isolated_like_smollm2_not_like_transformers_gguf(tok: Tokenizer,
                                                                 case: dict) -> None:
    """Each numeric character is pre-tokenized alone (llama.cpp's SMOLLM regex), so our ids
    are the ids of the text cut before and after every \\p{N} character."""
    text = case["text"]
    ids = tok.encode(text, add_special_tokens=False)
    pieces = [p for p in re.split(r"(\d|\u00bd)", text) if p]
    assert ids == [i for p in pieces for i in tok.encode(p, add_special_tokens=False)]
    assert ids != case["ids"]
    assert tok.decode(ids) == tok.decode(case["ids"]) == text


def test_prompts_match_transformers(tok: Tokenizer) -> None:
    for i in range(3):
        assert tok.encode(str(REF[f"prompt{i}_text"])) == REF[f"prompt{i}_ids"].tolist()
    for g in REF["prompt1_greedy"], REF["prompt2_greedy"]:
        assert tok.encode(tok.decode(g.tolist())) == g.tolist()


@pytest.mark.parametrize("i", range(len(INFO["chats"])))
def test_chat_template_matches_transformers(tok: Tokenizer, i: int) -> None:
    c = INFO["chats"][i]
    text = tok.apply_chat_template(c["messages"], add_generation_prompt=c["add_generation_prompt"])
    assert text == c["text"]
    assert tok.apply_chat_template(c["messages"], c["add_generation_prompt"],
                                   tokenize=True) == c["ids"]
    chat_prompt = tok.apply_chat_template(INFO["chats"][0]["messages"])
    assert chat_prompt == str(REF["prompt0_text"])


def test_special_ids(tok: Tokenizer) -> None:
    assert tok.vocab_size == len(tok) == INFO["vocab_size"] == 49152
    assert tok.eos_token_ids == (INFO["eos_token_id"],) == (2,)
    assert tok.bos_token_id == INFO["bos_token_id"] == 1
    for i in range(17):  # every control token is one id, whole, and skippable
        t = tok.id_to_token(i)
        assert tok.encode(f"a{t}b", add_special_tokens=False)[1] == i
        assert tok.decode([i], skip_special_tokens=True) == ""
    assert tok.encode("<|im_start|>", add_special_tokens=False) == [1]
    assert tok.token_to_id("<|im_end|>") == 2


# ------------------------------------------------------------------ properties

# SmolLM2's vocabulary has no token for the bytes 0x04 0x06 0x13 0x14 0x16 0x1d (nor for the
# UTF-8 lead bytes 0xf1/0xf2 of U+40000..U+BFFFF); byte-level BPE without an unknown token
# drops them, as transformers does. Text without them round-trips exactly.
UNCOVERED = "\x04\x06\x13\x14\x16\x1d"
TEXT = st.text(st.characters(codec="utf-8", exclude_characters=UNCOVERED, max_codepoint=0x3FFFF),
               max_size=60)


def test_uncovered_bytes_are_dropped(tok: Tokenizer) -> None:
    for c in UNCOVERED:
        assert tok.decode(tok.encode(f"a{c}b", add_special_tokens=False)) == "ab"
    # U+40000 is f1 80 80 80: the lead byte goes, the continuation bytes stay (U+FFFD each).
    ids = tok.encode("ab\U00040000cd", add_special_tokens=False)
    assert tok.decode(ids) == "ab\ufffd\ufffd\ufffdcd"


def test_lone_surrogate_encodes_as_replacement_char(tok: Tokenizer) -> None:
    assert tok.decode(tok.encode("a\ud800b")) == "a\ufffdb"
    with pytest.raises(TypeError, match="encode takes a str, got bytes"):
        tok.encode(b"abc")  # type: ignore[arg-type]


@settings(deadline=None)
@given(TEXT)
def test_round_trip_is_lossless(tok: Tokenizer, text: str) -> None:
    ids = tok.encode(text, add_special_tokens=False)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


@settings(deadline=None)
@given(TEXT)
def test_streaming_emits_only_complete_text(tok: Tokenizer, text: str) -> None:
    ids = tok.encode(text, add_special_tokens=False)
    d = tok.detokenizer(skip_special_tokens=False)
    chunks = [d.push(i) for i in ids]
    assert "".join(chunks) == d.text == text
    if "\ufffd" not in text:
        assert all("\ufffd" not in c for c in chunks)


def test_streaming_holds_a_split_character(tok: Tokenizer) -> None:
    ids = tok.encode("\U0001F600!", add_special_tokens=False)  # 4 UTF-8 bytes, byte tokens
    assert len(ids) >= 3
    d = tok.detokenizer()
    assert [d.push(i) for i in ids[:-1]][:-1] == [""] * (len(ids) - 2)
    assert d.push_many(ids[-1:]) in ("!", "\U0001F600!") and d.text == "\U0001F600!"
    s = tok.detokenizer(skip_special_tokens=True)
    assert s.push_many(tok.encode("hi<|im_end|>", add_special_tokens=False)) == "hi"


# ------------------------------------------------------------------ tiny tokenizers


def tiny_meta(**over: object) -> dict[str, object]:
    alphabet = sorted(ByteLevel.alphabet())
    merges = ["h e", "l l", "he ll", "hell o", "Ġ w"]
    tokens = ["<|end|>", "<think>", *alphabet, "he", "ll", "hell", "hello", "Ġw"]
    types = [3, 4] + [1] * (len(tokens) - 2)
    meta: dict[str, object] = {
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt2",
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 0, "tokenizer.ggml.add_bos_token": True,
        "tokenizer.chat_template": "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
                                   "{% endfor %}{% if add_generation_prompt %}[a]{% endif %}"}
    return {**meta, **over}


def test_tiny_gguf_tokenizer_file(tmp_path: Path) -> None:
    meta = tiny_meta()
    w = gguf.GGUFWriter(str(tmp_path / "t.gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(meta["tokenizer.ggml.tokens"])
    w.add_token_merges(meta["tokenizer.ggml.merges"])
    w.add_token_types(meta["tokenizer.ggml.token_type"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(True)
    w.add_chat_template(meta["tokenizer.chat_template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    t = Tokenizer.from_gguf(tmp_path / "t.gguf")
    n = len(meta["tokenizer.ggml.tokens"])
    assert t.vocab_size == n and t.eos_token_ids == (0,)
    assert t.encode("hello world") == [0, n - 2, n - 1, *t.encode("orld", False)]
    assert t.encode("hello<think><|end|>", add_special_tokens=False) == [n - 2, 1, 0]
    assert t.decode(t.encode("hello<think><|end|>"), skip_special_tokens=True) == "hello<think>"
    assert t.apply_chat_template([{"role": "u", "content": "x"}]) == "[u]x[a]"
    assert t.apply_chat_template([{"role": "u", "content": "x"}], False) == "[u]x"


def test_chat_template_is_sandboxed() -> None:
    t = Tokenizer.from_gguf_metadata(tiny_meta(**{
        "tokenizer.chat_template": "{{ messages.__class__.__mro__ }}"}))
    with pytest.raises(SecurityError):
        t.apply_chat_template([{"role": "u", "content": "x"}])
    t = Tokenizer.from_gguf_metadata(tiny_meta(**{
        "tokenizer.chat_template": "{{ raise_exception('roles must alternate') }}"}))
    with pytest.raises(TemplateError, match="roles must alternate"):
        t.apply_chat_template([{"role": "u", "content": "x"}])
    t = Tokenizer.from_gguf_metadata(tiny_meta(**{"tokenizer.chat_template": None}))
    with pytest.raises(ModelFileError, match="no chat template"):
        t.apply_chat_template([{"role": "u", "content": "x"}])


@pytest.mark.parametrize("over, match", [
    ({"tokenizer.ggml.model": "llama"}, "tokenizer.ggml.model is 'llama', expected 'gpt2'"),
    ({"tokenizer.ggml.pre": "qwen2"}, "tokenizer.ggml.pre 'qwen2' is not supported"),
    ({"tokenizer.ggml.merges": []}, "tokens/merges are missing"),
    ({"tokenizer.ggml.token_type": [1]}, "1 token types for"),
    ({"tokenizer.ggml.merges": ["hello"]}, "merge 'hello' is not 'left right'"),
])
def test_bad_tokenizer_metadata(over: dict[str, object], match: str) -> None:
    with pytest.raises(ModelFileError, match=match):
        Tokenizer.from_gguf_metadata(tiny_meta(**over))


def test_from_tokenizer_json(tok: Tokenizer, tmp_path: Path) -> None:
    tok._tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": tok.chat_template, "eos_token": "<|im_end|>",
         "bos_token": "<|im_start|>", "pad_token": "<|im_end|>"}))
    t = Tokenizer.from_file(tmp_path)
    assert t.eos_token_ids == (2,) and t.bos_token_id == 1 and t.vocab_size == 49152
    for case in INFO["strings"]:
        assert t.encode(case["text"]) == tok.encode(case["text"])
    c = INFO["chats"][1]
    assert t.apply_chat_template(c["messages"], c["add_generation_prompt"]) == c["text"]
    with pytest.raises(ModelFileError, match="does not exist"):
        Tokenizer.from_file(tmp_path / "absent.json")
