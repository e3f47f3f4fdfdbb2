"""The OpenAI-compatible server, end to end: a real uvicorn server on 127.0.0.1 (a free port)
in a background thread, serving the real tiny engine, driven by httpx."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from tenferro_infer.async_engine import AsyncEngine  # noqa: E402
from tenferro_infer.engine import Engine  # noqa: E402
from tenferro_infer.server import build_app  # noqa: E402

TIMEOUT = 20.0  # seconds, for any one HTTP exchange


class ServerThread:
    """uvicorn serving ``app`` on 127.0.0.1, port chosen by the OS, in a daemon thread."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                lifespan="on", timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        wait_until(lambda: self.server.started or not self.thread.is_alive(), 15)
        assert self.server.started, "uvicorn did not start"
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        assert not self.thread.is_alive(), "uvicorn did not stop"


def wait_until(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``cond`` until it holds or ``timeout`` seconds pass (bounded)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.tiny(max_queue=8)


@pytest.fixture(scope="module")
def aengine(engine: Engine) -> Iterator[AsyncEngine]:
    with AsyncEngine(engine) as ae:
        yield ae


@pytest.fixture(scope="module")
def base(aengine: AsyncEngine) -> Iterator[str]:
    with ServerThread(build_app(aengine)) as url:
        yield url


@pytest.fixture
def client(base: str) -> Iterator[Any]:
    with httpx.Client(base_url=base, timeout=TIMEOUT) as c:
        yield c


def idle(aengine: AsyncEngine) -> bool:
    m = aengine.metrics()
    return m["kv_used_blocks"] == 0 and m["running"] == 0 and m["waiting"] == 0


def sse(lines: Iterator[str]) -> list[Any]:
    """The data payloads of a server-sent event stream (JSON decoded, "[DONE]" kept as is)."""
    out = []
    for line in lines:
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
        else:
            assert line == "", f"unexpected SSE line {line!r}"
    return out


GREEDY = {"temperature": 0, "ignore_eos": True}


# ---------------------------------------------------------------------------- plain routes


def test_health_models_metrics(client: Any, engine: Engine) -> None:
    r = client.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    r = client.get("/v1/models")
    assert r.status_code == 200
    data = r.json()["data"]
    assert [m["id"] for m in data] == ["tiny-llama"] and data[0]["object"] == "model"
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    values = {line.split()[0]: float(line.split()[1]) for line in r.text.splitlines()
              if line and not line.startswith("#")}
    assert values["tenferro_infer_kv_total_blocks"] == engine.cache.num_blocks
    for key in ("requests_waiting", "requests_running", "kv_used_blocks", "kv_utilization",
                "tokens_per_second", "generated_tokens_total"):
        assert f"tenferro_infer_{key}" in values
    assert any(k.startswith("tenferro_infer_joules_total{source=") for k in values)


# ---------------------------------------------------------------------------- completions


def test_completion(client: Any, engine: Engine) -> None:
    r = client.post("/v1/completions", json={"model": "tiny-llama", "prompt": "Hello there",
                                             "max_tokens": 6, **GREEDY})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == "tiny-llama"
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length" and isinstance(choice["text"], str)
    assert choice["energy"]["joules"] > 0 and choice["energy"]["source"]
    prompt_ids = engine.tokenizer.encode("Hello there")
    assert body["usage"] == {"prompt_tokens": len(prompt_ids), "completion_tokens": 6,
                             "total_tokens": len(prompt_ids) + 6}
    assert body["energy"]["joules"] == pytest.approx(choice["energy"]["joules"])
    # the same request by token ids gives the same greedy text
    r2 = client.post("/v1/completions", json={"prompt": prompt_ids, "max_tokens": 6, **GREEDY})
    assert r2.json()["choices"][0]["text"] == choice["text"]


def test_completion_many_prompts_and_logprobs(client: Any) -> None:
    r = client.post("/v1/completions", json={"prompt": ["One", "Two three"], "max_tokens": 3,
                                             "logprobs": 2, **GREEDY})
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    for c in choices:
        lp = c["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 3
        assert all(x <= 0 for x in lp["token_logprobs"])
        assert all(1 <= len(t) <= 2 for t in lp["top_logprobs"])  # two alternatives (may merge)
        assert lp["text_offset"][0] == 0
    assert r.json()["usage"]["completion_tokens"] == 6


def test_streaming_completion_matches_plain(client: Any) -> None:
    req = {"prompt": "The sky is", "max_tokens": 8, **GREEDY}
    plain = client.post("/v1/completions", json=req).json()["choices"][0]["text"]
    with client.stream("POST", "/v1/completions",
                       json={**req, "stream": True, "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse(r.iter_lines())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "text_completion" for c in chunks)
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert text == plain
    last = [c for c in chunks if c["choices"]][-1]["choices"][0]
    assert last["finish_reason"] == "length" and last["energy"]["joules"] > 0
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 8


def test_max_joules_stops_with_energy_budget(client: Any) -> None:
    r = client.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 50, "max_joules": 1e-12,
                                             **GREEDY})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["finish_reason"] == "energy_budget" and r.json()["usage"]["completion_tokens"] < 50


# ---------------------------------------------------------------------------- chat


def test_chat_plain_and_streaming(client: Any, engine: Engine) -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    req = {"model": "tiny-llama", "messages": msgs, "max_tokens": 6, **GREEDY}
    r = client.post("/v1/chat/completions", json=req)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "length"
    rendered = engine.tokenizer.apply_chat_template(msgs, tokenize=True)
    assert body["usage"]["prompt_tokens"] == len(rendered)
    assert body["energy"]["joules"] > 0
    with client.stream("POST", "/v1/chat/completions", json={**req, "stream": True}) as s:
        events = sse(s.iter_lines())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == choice["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    # content parts and chat logprobs
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi!"}]}]
    r = client.post("/v1/chat/completions", json={"messages": parts, "max_tokens": 2,
                                                  "logprobs": True, "top_logprobs": 3, **GREEDY})
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert len(content) == 2 and len(content[0]["top_logprobs"]) == 3
    assert content[0]["logprob"] == pytest.approx(content[0]["top_logprobs"][0]["logprob"])


# ---------------------------------------------------------------------------- concurrency


def test_concurrent_streams_each_get_their_own_answer(client: Any, base: str) -> None:
    prompts = ["Once upon a time", "The capital of France", "1 2 3 4", "Dear diary,"]
    alone = [client.post("/v1/completions", json={"prompt": p, "max_tokens": 10, **GREEDY})
             .json()["choices"][0]["text"] for p in prompts]

    async def one(c: Any, p: str) -> str:
        async with c.stream("POST", "/v1/completions",
                            json={"prompt": p, "max_tokens": 10, "stream": True, **GREEDY}) as r:
            assert r.status_code == 200
            events = sse([line async for line in r.aiter_lines()])
        assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"
        return "".join(e["choices"][0]["text"] for e in events[:-1])

    async def main() -> list[str]:
        async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as c:
            return await asyncio.wait_for(asyncio.gather(*(one(c, p) for p in prompts)), TIMEOUT)

    assert asyncio.run(main()) == alone


def test_client_disconnect_mid_stream_frees_blocks(client: Any, aengine: AsyncEngine) -> None:
    req = {"prompt": "Tell me a long story", "max_tokens": 900, "stream": True, **GREEDY}
    before = aengine.metrics()["generated_tokens"]
    with client.stream("POST", "/v1/completions", json=req) as r:
        got = 0
        for line in r.iter_lines():
            got += line.startswith("data: ")
            if got == 3:
                break
        assert not idle(aengine)  # still generating
    # the response is closed: the server sees the disconnect and aborts the request
    assert wait_until(lambda: idle(aengine), 10), aengine.metrics()
    assert aengine.metrics()["generated_tokens"] - before < 900  # aborted, not finished


def test_client_disconnect_before_a_plain_answer_frees_blocks(base: str,
                                                             aengine: AsyncEngine) -> None:
    req = {"prompt": "Tell me a long story", "max_tokens": 900, **GREEDY}
    before = aengine.metrics()["generated_tokens"]
    with httpx.Client(base_url=base, timeout=httpx.Timeout(TIMEOUT, read=0.3)) as c:
        with pytest.raises(httpx.ReadTimeout):  # httpx drops the connection
            c.post("/v1/completions", json=req)
    assert wait_until(lambda: idle(aengine), 10), aengine.metrics()
    assert aengine.metrics()["generated_tokens"] - before < 900  # aborted, not finished


# ---------------------------------------------------------------------------- errors


BAD = [  # (path, body, status, param)
    ("/v1/completions", b"{not json", 400, None),
    ("/v1/completions", b"[1, 2]", 400, None),
    ("/v1/completions", {"max_tokens": 4}, 400, "prompt"),
    ("/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("/v1/completions", {"prompt": [1.5]}, 400, "prompt"),
    ("/v1/completions", {"prompt": "x", "temperature": -1}, 400, "temperature"),
    ("/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
    ("/v1/completions", {"prompt": "x", "top_p": 2}, 400, "top_p"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "stop": [""]}, 400, "stop"),
    ("/v1/completions", {"prompt": "x", "seed": 1.5}, 400, "seed"),
    ("/v1/completions", {"prompt": "x", "logprobs": 99}, 400, "logprobs"),
    ("/v1/completions", {"prompt": "x", "max_joules": -1}, 400, "max_joules"),
    ("/v1/completions", {"prompt": "x", "stream": "yes"}, 400, "stream"),
    ("/v1/completions", {"prompt": "x", "n": 2}, 400, "n"),
    ("/v1/completions", {"prompt": [5] * 2000}, 400, "prompt"),
    ("/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404, "model"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"prompt": "x"}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "top_logprobs": 2}, 400, "top_logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "model": "nope"}, 404, "model"),
]


@pytest.mark.parametrize("path, body, status, param", BAD,
                         ids=[f"{i}-{b if isinstance(b, bytes) else sorted(b)}"[:40]
                              for i, (_, b, _, _) in enumerate(BAD)])
def test_bad_input(client: Any, aengine: AsyncEngine, path: str, body: Any, status: int,
                   param: str | None) -> None:
    r = (client.post(path, content=body, headers={"content-type": "application/json"})
         if isinstance(body, bytes) else client.post(path, json=body))
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param
    assert idle(aengine)  # nothing was added


def test_unknown_route_and_method(client: Any) -> None:
    r = client.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.get("/v1/completions")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_queue_full_is_429(engine: Engine) -> None:
    small = Engine(engine.model, engine.tokenizer, max_queue=1, cache_tokens=1024,
                   model_name="tiny-llama")
    with AsyncEngine(small) as ae, ServerThread(build_app(ae)) as url, \
            httpx.Client(base_url=url, timeout=TIMEOUT) as c:
        req = {"prompt": "Keep going", "max_tokens": 900, "stream": True, **GREEDY}
        with c.stream("POST", "/v1/completions", json=req) as r:
            assert r.status_code == 200
            lines = r.iter_lines()  # keep the iterator: dropping it closes the response
            next(lines)  # the request is in the engine
            full = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
            assert full.status_code == 429, full.text
            assert full.json()["error"]["code"] == "queue_full"
            assert next(x for x in lines if x).startswith("data: ")  # the first one goes on
        assert wait_until(lambda: idle(ae), 10)
        ok = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
        assert ok.status_code == 200


def test_build_app_owns_a_plain_engine(engine: Engine) -> None:
    small = Engine(engine.model, engine.tokenizer, cache_tokens=256, model_name="small")
    app = build_app(small)
    ae = app.state.async_engine
    with ServerThread(app) as url, httpx.Client(base_url=url, timeout=TIMEOUT) as c:
        assert c.get("/v1/models").json()["data"][0]["id"] == "small"
        assert c.post("/v1/completions", json={"model": "small", "prompt": "a",
                                               "max_tokens": 2}).status_code == 200
    assert not ae.alive  # the app closed the AsyncEngine it made at shutdown
