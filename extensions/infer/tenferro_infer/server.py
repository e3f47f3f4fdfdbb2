"""An OpenAI-compatible HTTP server for an `Engine`, on Starlette + uvicorn.

Routes:

- ``POST /v1/completions`` and ``POST /v1/chat/completions``: OpenAI's request and response
  JSON. Sampling fields: ``max_tokens`` (chat also ``max_completion_tokens``; default 16 for
  completions, the rest of the context window for chat), ``temperature``, ``top_p``,
  ``top_k`` (-1 or 0: off), ``min_p``, ``presence_penalty``, ``frequency_penalty``,
  ``repetition_penalty``, ``seed``, ``stop``, ``stop_token_ids``, ``ignore_eos``,
  ``logprobs`` (completions: an int, the number of alternatives; chat: a bool with
  ``top_logprobs``), ``stream`` (with ``stream_options.include_usage``), ``n`` (1 only), and
  tenferro's ``max_joules`` (a per-request energy budget; a request stopped by it finishes with
  ``finish_reason`` "energy_budget"). A completions ``prompt`` may be a string, a list of token
  ids, or a list of either (one choice each). Responses carry ``usage`` and ``energy``
  (``{"joules", "source"}``), per choice and for the whole response. Streaming sends
  server-sent events (``data: {chunk}\\n\\n``, OpenAI's chunk objects, the finishing chunk of a
  choice carrying its ``energy``, then ``data: [DONE]``); a client that disconnects aborts its
  requests, freeing their KV blocks.
- ``GET /health``: ``{"status": "ok"}`` (503 once the engine stopped).
- ``GET /metrics``: Prometheus text exposition format (version 0.0.4), gauges and counters
  named ``tenferro_infer_*``: requests waiting and running, KV blocks used and total, KV
  utilization, tokens per second, generated tokens, joules (labelled with the energy source).
- ``GET /v1/models``: the served model.

Errors are OpenAI-shaped JSON, ``{"error": {"message", "type", "param", "code"}}``: 400 for
malformed JSON or invalid parameters, 404 for an unknown model or route, 405 for a wrong
method, 429 when the engine's queue is full, 503 when the engine stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .async_engine import AsyncEngine, EngineClosedError, RequestStream
from .errors import QueueFullError, RequestError, SamplingParamsError
from .sampling import MAX_LOGPROBS, SamplingParams

__all__ = ["APIError", "build_app", "serve"]

log = logging.getLogger("tenferro_infer.server")


class APIError(Exception):
    """An error answered as OpenAI's error JSON with an HTTP status."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.type,
                                       "param": self.param, "code": self.code}}, self.status)


def _bad(message: str, param: str | None = None, code: str = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


# ----------------------------------------------------------------------------- parsing

_FIELD = re.compile(r"SamplingParams\.(\w+)=")
_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "presence_penalty",
                    "frequency_penalty", "repetition_penalty", "seed", "stop", "stop_token_ids",
                    "ignore_eos", "max_joules")


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad(f"the request body is not valid JSON ({e}); send a JSON object",
                   code="invalid_json") from None
    if not isinstance(body, dict):
        raise _bad(f"the request body must be a JSON object, got {type(body).__name__}",
                   code="invalid_json")
    return body


def _typed(body: dict[str, Any], key: str, kind: type | tuple[type, ...], words: str,
           default: Any = None) -> Any:
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, kind) or (isinstance(v, bool) and bool not in (
            kind if isinstance(kind, tuple) else (kind,))):
        raise _bad(f"'{key}' must be {words}, got {json.dumps(v)[:100]}", param=key,
                   code="invalid_type")
    return v


def _check_common(body: dict[str, Any], model_name: str) -> None:
    model = _typed(body, "model", str, "a string")
    if model is not None and model != model_name:
        raise APIError(404, f"the model '{model}' does not exist: this server serves "
                       f"'{model_name}' (see GET /v1/models)", param="model", code="model_not_found")
    if _typed(body, "n", int, "an integer", 1) != 1:
        raise _bad("only n=1 is supported; send several requests for several samples", "n")
    if _typed(body, "best_of", int, "an integer", 1) != 1:
        raise _bad("best_of is not supported; leave it out or pass 1", "best_of")
    if _typed(body, "echo", bool, "a boolean", False):
        raise _bad("echo is not supported; leave it out or pass false", "echo")
    if body.get("suffix") is not None:
        raise _bad("suffix is not supported; leave it out", "suffix")


def _params(body: dict[str, Any], max_tokens: Any, logprobs: int | None) -> SamplingParams:
    kw = {k: body[k] for k in _SAMPLING_FIELDS if body.get(k) is not None}
    if kw.get("top_k") == -1:  # vLLM's spelling of "off"
        kw["top_k"] = 0
    try:
        return SamplingParams(max_tokens=max_tokens, logprobs=logprobs, **kw)
    except SamplingParamsError as e:
        m = _FIELD.search(str(e))
        raise _bad(str(e), m.group(1) if m else None) from None


def _stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    stream = _typed(body, "stream", bool, "a boolean", False)
    opts = _typed(body, "stream_options", dict, "an object", {})
    usage = opts.get("include_usage", False)
    if not isinstance(usage, bool):
        raise _bad("'stream_options.include_usage' must be a boolean", "stream_options")
    return stream, usage


def _ints(x: Any) -> bool:
    return isinstance(x, list) and bool(x) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in x)


def _prompts(body: dict[str, Any]) -> list[str | list[int]]:
    p = body.get("prompt")
    if isinstance(p, str) or _ints(p):
        return [p]
    if isinstance(p, list) and p and all(isinstance(x, str) or _ints(x) for x in p):
        return list(p)
    raise _bad("'prompt' must be a string, a list of token ids, or a non-empty list of those; "
               f"got {json.dumps(p)[:100]}", "prompt", "invalid_type" if p is not None else "missing")


_ROLES = ("system", "user", "assistant", "tool", "developer")


def _messages(body: dict[str, Any]) -> list[dict[str, str]]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise _bad("'messages' must be a non-empty list of {\"role\", \"content\"} objects",
                   "messages", "missing" if msgs is None else "invalid_type")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise _bad(f"messages[{i}] must be an object with a 'role' among {list(_ROLES)}",
                       "messages")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: text only
            if not all(isinstance(c, dict) and c.get("type") == "text"
                       and isinstance(c.get("text"), str) for c in content):
                raise _bad(f"messages[{i}].content parts must be {{\"type\": \"text\", "
                           f"\"text\": ...}} (only text is supported)", "messages")
            content = "".join(c["text"] for c in content)
        if not isinstance(content, str):
            raise _bad(f"messages[{i}].content must be a string", "messages")
        out.append({"role": m["role"], "content": content})
    return out


# ----------------------------------------------------------------------------- serving


class _Server:
    """The route handlers over one `AsyncEngine`."""

    def __init__(self, aengine: AsyncEngine) -> None:
        self.aengine = aengine
        self.model = aengine.model_name
        self.created = int(time.time())

    def _token(self, tid: int) -> str:
        return self.aengine.tokenizer.decode([tid])

    # ---- requests -----------------------------------------------------------------------

    async def _submit(self, prompts: Sequence[Any], params: SamplingParams, chat: bool,
                      base_id: str) -> list[RequestStream]:
        streams: list[RequestStream] = []
        try:
            for i, p in enumerate(prompts):
                rid = base_id if len(prompts) == 1 else f"{base_id}-{i}"
                streams.append((await self.aengine.submit(p, params, chat=chat, request_id=rid))[1])
        except BaseException as e:
            for s in streams:  # all or nothing
                s.close()
            if isinstance(e, QueueFullError):
                raise APIError(429, str(e), "rate_limit_error", code="queue_full") from None
            if isinstance(e, RequestError):
                raise _bad(str(e), "messages" if chat else "prompt",
                           "context_length_exceeded" if "context window" in str(e)
                           else "invalid_value") from None
            raise
        return streams

    async def completions(self, request: Request) -> Response:
        body = await _json_body(request)
        _check_common(body, self.model)
        prompts = _prompts(body)
        lp = _typed(body, "logprobs", int, "an integer or null")
        if lp is not None and not 0 <= lp <= MAX_LOGPROBS:
            raise _bad(f"'logprobs' must be in [0, {MAX_LOGPROBS}], got {lp}", "logprobs")
        params = _params(body, _typed(body, "max_tokens", int, "an integer", 16), lp)
        stream, usage = _stream_flags(body)
        return await self._run(request, prompts, params, False, stream, usage)

    async def chat(self, request: Request) -> Response:
        body = await _json_body(request)
        _check_common(body, self.model)
        msgs = _messages(body)
        want = _typed(body, "logprobs", bool, "a boolean", False)
        top = _typed(body, "top_logprobs", int, "an integer", 0)
        if not 0 <= top <= MAX_LOGPROBS or (top and not want):
            raise _bad(f"'top_logprobs' must be in [0, {MAX_LOGPROBS}] and needs logprobs=true",
                       "top_logprobs")
        max_tokens = _typed(body, "max_completion_tokens", int, "an integer")
        if max_tokens is None:
            max_tokens = _typed(body, "max_tokens", int, "an integer",
                                self.aengine.engine.config.max_position)
        params = _params(body, max_tokens, top if want else None)
        stream, usage = _stream_flags(body)
        return await self._run(request, [msgs], params, True, stream, usage)

    async def _run(self, request: Request, prompts: Sequence[Any], params: SamplingParams,
                   chat: bool, stream: bool, usage: bool) -> Response:
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        streams = await self._submit(prompts, params, chat, rid)
        if stream:
            return StreamingResponse(self._sse(streams, rid, chat, usage),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        collect = asyncio.ensure_future(_collect(streams))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (collect, gone):
                t.cancel()
            for s in streams:
                s.close()
        if not collect.done() or collect.cancelled():  # the client left: nobody to answer
            return Response(status_code=499)
        finals = collect.result()
        choices = [self._choice(i, o, chat) for i, o in enumerate(finals)]
        return JSONResponse({"id": rid, "object": "chat.completion" if chat else "text_completion",
                             "created": int(time.time()), "model": self.model, "choices": choices,
                             "usage": _usage(finals), "energy": _energy(finals)})

    # ---- response pieces ----------------------------------------------------------------

    def _choice(self, i: int, o: Any, chat: bool) -> dict[str, Any]:
        lp = None if o.logprobs is None else self._logprobs(o.logprobs, chat)
        text = {"message": {"role": "assistant", "content": o.text}} if chat else {"text": o.text}
        return {"index": i, **text, "logprobs": lp, "finish_reason": o.finish_reason,
                "energy": {"joules": o.joules, "source": o.energy_source}}

    def _logprobs(self, infos: Sequence[Any], chat: bool, offset: int = 0) -> dict[str, Any]:
        if chat:
            def entry(tid: int, lp: float) -> dict[str, Any]:
                s = self._token(tid)
                return {"token": s, "logprob": lp, "bytes": list(s.encode("utf-8", "replace"))}
            return {"content": [{**entry(x.token, x.logprob),
                                 "top_logprobs": [entry(t, lp) for t, lp in x.top]}
                                for x in infos]}
        tokens = [self._token(x.token) for x in infos]
        offsets = []
        for t in tokens:
            offsets.append(offset)
            offset += len(t)
        return {"tokens": tokens, "token_logprobs": [x.logprob for x in infos],
                "top_logprobs": [{self._token(t): lp for t, lp in x.top} for x in infos],
                "text_offset": offsets}

    async def _sse(self, streams: list[RequestStream], rid: str, chat: bool,
                   usage: bool) -> AsyncIterator[str]:
        obj = "chat.completion.chunk" if chat else "text_completion"
        created = int(time.time())
        sent_lp = [0] * len(streams)
        text_len = [0] * len(streams)
        finals: dict[int, Any] = {}

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
            return "data: " + json.dumps({"id": rid, "object": obj, "created": created,
                                          "model": self.model, "choices": choices, **extra}) + "\n\n"

        try:
            if chat:
                yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
                              "logprobs": None, "finish_reason": None}
                             for i in range(len(streams))])
            async for i, o in _merge(streams):
                lp = None
                if o.logprobs is not None and len(o.logprobs) > sent_lp[i]:
                    lp = self._logprobs(o.logprobs[sent_lp[i]:], chat, text_len[i])
                    sent_lp[i] = len(o.logprobs)
                text_len[i] += len(o.delta_text)
                if not (o.delta_text or lp or o.finished):
                    continue
                c: dict[str, Any] = {"index": i, "logprobs": lp, "finish_reason": o.finish_reason}
                if chat:
                    c["delta"] = {"content": o.delta_text} if o.delta_text else {}
                else:
                    c["text"] = o.delta_text
                if o.finished:
                    finals[i] = o
                    c["energy"] = {"joules": o.joules, "source": o.energy_source}
                yield chunk([c])
            if usage:
                outs = [finals[i] for i in sorted(finals)]
                yield chunk([], usage=_usage(outs), energy=_energy(outs))
        except EngineClosedError as e:  # the engine stopped mid-stream: say so, then end
            yield "data: " + json.dumps({"error": {"message": str(e), "type": "server_error",
                                                   "param": None, "code": "engine_closed"}}) + "\n\n"
        finally:
            for s in streams:  # a disconnect cancels us here: abort what is still running
                s.close()
        yield "data: [DONE]\n\n"

    # ---- the other routes ---------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        if not self.aengine.alive:
            return APIError(503, "the engine stopped", "server_error", code="engine_closed").response()
        return JSONResponse({"status": "ok", "model": self.model})

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": self.model, "object": "model", "created": self.created, "owned_by": "tenferro",
             "max_model_len": self.aengine.engine.config.max_position}]})

    async def metrics(self, request: Request) -> Response:
        m = await asyncio.get_running_loop().run_in_executor(None, self.aengine.metrics)
        return PlainTextResponse(prometheus_text(m),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")


_METRICS = (  # (name, type, help, metrics() key)
    ("requests_waiting", "gauge", "Requests waiting to be scheduled.", "waiting"),
    ("requests_running", "gauge", "Requests in the running batch.", "running"),
    ("kv_used_blocks", "gauge", "KV cache blocks in use.", "kv_used_blocks"),
    ("kv_total_blocks", "gauge", "KV cache blocks in the pool.", "kv_total_blocks"),
    ("kv_utilization", "gauge", "Fraction of KV cache blocks in use.", "kv_utilization"),
    ("tokens_per_second", "gauge", "Generated tokens per second of model time.",
     "tokens_per_second"),
    ("generated_tokens_total", "counter", "Tokens generated since start.", "generated_tokens"),
)


def prometheus_text(m: dict[str, Any]) -> str:
    """`Engine.metrics()` in Prometheus text exposition format."""
    lines = []
    for name, kind, help_, key in _METRICS:
        lines += [f"# HELP tenferro_infer_{name} {help_}", f"# TYPE tenferro_infer_{name} {kind}",
                  f"tenferro_infer_{name} {float(m.get(key, 0))!r}"]
    source = str(m.get("energy_source") or "none").replace("\\", "\\\\").replace('"', '\\"')
    lines += ["# HELP tenferro_infer_joules_total Energy used by model steps since start.",
              "# TYPE tenferro_infer_joules_total counter",
              f'tenferro_infer_joules_total{{source="{source}"}} {float(m.get("joules", 0))!r}']
    return "\n".join(lines) + "\n"


def _usage(outs: Sequence[Any]) -> dict[str, int]:
    p = sum(o.prompt_tokens for o in outs)
    c = sum(o.completion_tokens for o in outs)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _energy(outs: Sequence[Any]) -> dict[str, Any]:
    sources = sorted({o.energy_source for o in outs if o.energy_source})
    return {"joules": sum(o.joules for o in outs), "source": ",".join(sources)}


async def _collect(streams: Sequence[RequestStream]) -> list[Any]:
    finals: list[Any] = [None] * len(streams)
    async for i, o in _merge(streams):
        if o.finished:
            finals[i] = o
    return finals


async def _merge(streams: Sequence[RequestStream]) -> AsyncIterator[tuple[int, Any]]:
    """(index, output) from several streams as they come; one stream is iterated directly."""
    if len(streams) == 1:
        async for o in streams[0]:
            yield 0, o
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, s: RequestStream) -> None:
        try:
            async for o in s:
                queue.put_nowait((i, o, None))
        except Exception as e:
            queue.put_nowait((i, None, e))
        queue.put_nowait((i, None, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(streams)
        while left:
            i, o, err = await queue.get()
            if err is not None:
                raise err
            if o is None:
                left -= 1
            else:
                yield i, o
    finally:
        for t in tasks:
            t.cancel()


async def _disconnected(request: Request) -> None:
    """Return when the client closes the connection (the body was read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


# ----------------------------------------------------------------------------- the app


def _handler(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)
        except APIError as e:
            return e.response()
        except EngineClosedError as e:
            return APIError(503, str(e), "server_error", code="engine_closed").response()
        except Exception:  # a bug of ours: log it, answer JSON without the traceback
            log.exception("error serving %s %s", request.method, request.url.path)
            return APIError(500, "internal server error; see the server's log", "server_error",
                            code="internal_error").response()
    return endpoint


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return APIError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}",
                    "invalid_request_error", code="not_found" if exc.status_code == 404
                    else "method_not_allowed").response()


def build_app(engine: Any) -> Starlette:
    """The Starlette app serving ``engine`` (an `Engine`, wrapped in an `AsyncEngine` that the
    app closes at shutdown, or an `AsyncEngine` the caller keeps and closes)."""
    owned = not isinstance(engine, AsyncEngine)
    aengine = AsyncEngine(engine) if owned else engine
    s = _Server(aengine)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if owned:
            aengine.close()

    app = Starlette(routes=[
        Route("/v1/completions", _handler(s.completions), methods=["POST"]),
        Route("/v1/chat/completions", _handler(s.chat), methods=["POST"]),
        Route("/v1/models", _handler(s.models), methods=["GET"]),
        Route("/health", _handler(s.health), methods=["GET"]),
        Route("/metrics", _handler(s.metrics), methods=["GET"]),
    ], exception_handlers={HTTPException: _http_error}, lifespan=lifespan)
    app.state.async_engine = aengine
    return app


def serve(engine: Any, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Serve ``engine`` with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(build_app(engine), host=host, port=port, log_level=log_level)
