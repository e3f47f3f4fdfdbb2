"""`AsyncEngine` over the real tiny engine: results equal to the plain engine's, aborts that free
blocks, errors passed through, and thread safety with interleavings forced by Events."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from tenferro_infer.async_engine import AsyncEngine, EngineClosedError
from tenferro_infer.engine import Engine
from tenferro_infer.errors import QueueFullError, RequestError
from tenferro_infer.sampling import SamplingParams

TIMEOUT = 15.0
GREEDY = SamplingParams(temperature=0, ignore_eos=True, max_tokens=8)
LONG = SamplingParams(temperature=0, ignore_eos=True, max_tokens=900)
PROMPTS = ["Once upon a time", "The capital of France", "1 2 3 4", "Dear diary,"]


def run(coro: Coroutine[Any, Any, Any], timeout: float = TIMEOUT) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def wait_until(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def tiny(**kw: Any) -> Engine:
    return Engine.tiny(**kw)


@pytest.fixture(scope="module")
def reference() -> dict[str, str]:
    """Each prompt's greedy text from the plain engine, one request at a time."""
    e = tiny()
    return {p: e.generate(p, GREEDY)[0].text for p in PROMPTS}


@pytest.fixture
def ae() -> Iterator[AsyncEngine]:
    with AsyncEngine(tiny(max_queue=8)) as a:
        yield a


def idle(a: AsyncEngine) -> bool:
    m = a.metrics()
    return m["kv_used_blocks"] == 0 and m["running"] == 0 and m["waiting"] == 0


async def collect(a: AsyncEngine, prompt: Any, params: SamplingParams = GREEDY,
                  **kw: Any) -> list[Any]:
    _, stream = await a.submit(prompt, params, **kw)
    return [o async for o in stream]


# ---------------------------------------------------------------------------- results


def test_outputs_stream_and_match_the_plain_engine(ae: AsyncEngine,
                                                   reference: dict[str, str]) -> None:
    outs = run(collect(ae, PROMPTS[0]))
    assert outs[-1].finished and outs[-1].finish_reason == "length"
    assert not any(o.finished for o in outs[:-1])
    assert "".join(o.delta_text for o in outs) == outs[-1].text == reference[PROMPTS[0]]
    assert idle(ae)


def test_concurrent_requests_from_one_loop(ae: AsyncEngine, reference: dict[str, str]) -> None:
    async def main() -> list[list[Any]]:
        return await asyncio.gather(*(collect(ae, p) for p in PROMPTS))

    finals = [outs[-1] for outs in run(main())]
    assert [f.text for f in finals] == [reference[p] for p in PROMPTS]
    assert len({f.request_id for f in finals}) == len(PROMPTS)


def test_requests_from_many_threads_each_with_its_loop(ae: AsyncEngine,
                                                       reference: dict[str, str]) -> None:
    start = threading.Barrier(len(PROMPTS), timeout=TIMEOUT)
    results: dict[str, str] = {}

    def client(p: str) -> None:
        start.wait()  # all submit at once
        results[p] = run(collect(ae, p))[-1].text

    threads = [threading.Thread(target=client, args=(p,)) for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert results == reference


def test_chat_prompt(ae: AsyncEngine) -> None:
    outs = run(collect(ae, [{"role": "user", "content": "Hi"}], chat=True))
    rendered = ae.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=True)
    assert outs[-1].prompt_ids == rendered and outs[-1].completion_tokens == 8


# ---------------------------------------------------------------------------- aborts


def test_a_consumer_that_stops_aborts_its_request(ae: AsyncEngine) -> None:
    async def main() -> None:
        _, stream = await ae.submit("Tell me a story", LONG)
        async for o in stream:
            if len(o.output_ids) >= 2:
                break
        await stream.aclose()

    run(main())
    assert wait_until(lambda: idle(ae)), ae.metrics()
    assert ae.metrics()["generated_tokens"] < 900  # aborted, not finished


def test_a_cancelled_consumer_task_aborts_its_request(ae: AsyncEngine) -> None:
    async def main() -> None:
        got_one = asyncio.Event()

        async def consume() -> None:
            _, stream = await ae.submit("Tell me a story", LONG)
            async for _ in stream:
                got_one.set()

        task = asyncio.ensure_future(consume())
        await got_one.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert wait_until(lambda: idle(ae)), ae.metrics()
    assert ae.metrics()["generated_tokens"] < 900  # aborted, not finished


def test_an_abandoned_loop_frees_the_request(ae: AsyncEngine) -> None:
    async def submit_and_leave() -> str:
        rid, _ = await ae.submit("Tell me a story", LONG)
        return rid

    run(submit_and_leave())  # the loop closes with the request still running
    assert wait_until(lambda: idle(ae)), ae.metrics()
    assert ae.metrics()["generated_tokens"] < 900  # aborted, not finished


def test_explicit_abort_ends_the_stream_with_abort(ae: AsyncEngine) -> None:
    async def main() -> list[Any]:
        rid, stream = await ae.submit("Tell me a story", LONG)
        outs = [await stream.__anext__()]
        assert await asyncio.get_running_loop().run_in_executor(None, ae.abort, rid)
        outs += [o async for o in stream]
        return outs

    outs = run(main())
    assert outs[-1].finished and outs[-1].finish_reason == "abort"
    assert idle(ae)
    assert ae.abort("no-such-request") is False


# ---------------------------------------------------------------------------- errors


def test_engine_errors_pass_through_and_change_nothing() -> None:
    with AsyncEngine(tiny(max_queue=1)) as a:
        async def main() -> None:
            with pytest.raises(RequestError):
                await a.submit("", GREEDY)
            with pytest.raises(RequestError):
                await a.submit([5] * 5000, GREEDY)
            _, stream = await a.submit("Tell me a story", LONG)
            with pytest.raises(QueueFullError):
                await a.submit("x", GREEDY)
            await stream.aclose()

        run(main())
        assert wait_until(lambda: idle(a))
        assert run(collect(a, "x"))[-1].finished  # usable again


def test_a_failing_engine_fails_every_stream_and_refuses_more() -> None:
    e = tiny()
    stepping, fail = threading.Event(), threading.Event()
    inner = e.step

    def step() -> list[Any]:
        stepping.set()
        if fail.is_set():
            raise RuntimeError("device lost")
        return inner()

    e.step = step  # type: ignore[method-assign]
    with AsyncEngine(e) as a:
        async def main() -> None:
            _, stream = await a.submit("Tell me a story", LONG)
            await stream.__anext__()
            fail.set()
            with pytest.raises(EngineClosedError, match="device lost"):
                async for _ in stream:
                    pass
            with pytest.raises(EngineClosedError):
                await a.submit("x", GREEDY)

        run(main())
        assert not a.alive


def test_close_ends_live_streams_and_joins() -> None:
    a = AsyncEngine(tiny())

    async def main() -> None:
        _, stream = await a.submit("Tell me a story", LONG)
        await stream.__anext__()
        await asyncio.get_running_loop().run_in_executor(None, a.close)
        with pytest.raises(EngineClosedError):
            async for _ in stream:
                pass

    run(main())
    assert not a._thread.is_alive()
    a.close()  # idempotent


# ---------------------------------------------------------------------------- thread safety


def test_callers_get_in_between_two_steps() -> None:
    """A caller blocked while a step runs gets the lock before the next step starts (a plain
    lock would let the stepper re-take it at once), and never while a step runs."""
    e = tiny()
    in_step, go, hold = threading.Event(), threading.Event(), threading.Event()
    inside = [0]
    inner = e.step

    def step() -> list[Any]:
        inside[0] += 1
        try:
            if hold.is_set():
                hold.clear()
                in_step.set()
                assert go.wait(TIMEOUT)
            return inner()
        finally:
            inside[0] -= 1

    inner_metrics = e.metrics
    e.step = step  # type: ignore[method-assign]
    e.metrics = lambda: {**inner_metrics(), "inside_step": inside[0]}  # type: ignore[method-assign]
    with AsyncEngine(e) as a:
        async def main() -> None:
            _, stream = await a.submit("Tell me a story", LONG)
            await stream.__anext__()
            hold.set()
            assert await asyncio.get_running_loop().run_in_executor(None, in_step.wait, TIMEOUT)
            steps_now = e.stats["steps"]  # the held step has not counted itself yet
            box: dict[str, Any] = {}
            caller = threading.Thread(target=lambda: box.update(a.metrics()))
            caller.start()
            assert wait_until(lambda: a._callers == 1)  # blocked on the lock
            go.set()
            await asyncio.get_running_loop().run_in_executor(None, caller.join, TIMEOUT)
            assert box["inside_step"] == 0
            assert box["steps"] == steps_now + 1  # right after the held step, before another
            await stream.aclose()

        run(main())
        assert wait_until(lambda: idle(a))


def test_the_idle_stepper_waits_without_spinning(ae: AsyncEngine) -> None:
    calls = [0]
    inner = ae.engine.has_work

    def has_work() -> bool:
        calls[0] += 1
        return inner()

    run(collect(ae, "x"))
    ae.engine.has_work = has_work  # type: ignore[method-assign]
    threading.Event().wait(0.1)  # a measurement window, not synchronization
    assert calls[0] <= 2, f"the idle stepper polled has_work {calls[0]} times in 0.1 s"
    run(collect(ae, "x"))  # and it wakes for new work
