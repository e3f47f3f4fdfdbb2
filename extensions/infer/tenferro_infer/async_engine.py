"""`AsyncEngine`: an `Engine` driven by one background thread, consumed from asyncio.

One thread (the stepper) runs ``engine.step()`` while the engine has work and otherwise waits
on a `threading.Condition` (no polling). Every engine call, from the stepper or from callers
(``submit``, ``abort``, ``metrics``), runs under that condition's lock. Callers announce
themselves before taking the lock and the stepper lets them in between two steps, so a busy
engine cannot starve them (a plain lock would: the stepper re-takes it at once).

Each request's outputs go to its own `asyncio.Queue`, filled from the stepper through
``loop.call_soon_threadsafe``. The consumer iterates a `RequestStream`; when it stops before
the request finished (a ``break``, a cancelled task, a closed HTTP connection), the stream
aborts the request, so its KV blocks are freed at the stepper's next turn.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from tenferro_core.errors import TenferroError

if TYPE_CHECKING:
    from .engine import Engine, RequestOutput
    from .sampling import SamplingParams

__all__ = ["AsyncEngine", "EngineClosedError", "RequestStream"]

T = TypeVar("T")
log = logging.getLogger("tenferro_infer.async_engine")


class EngineClosedError(TenferroError, RuntimeError):
    """The `AsyncEngine` was closed (or its stepper thread died): it takes no more requests."""


@dataclass
class _Sink:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue


class RequestStream:
    """The outputs of one request, as an async iterator of `RequestOutput` (each carries the
    text so far and the new delta). It ends after the output with ``finished`` set. Closing it
    (``aclose()``, ``close()``, or dropping it) before then aborts the request."""

    def __init__(self, owner: AsyncEngine, request_id: str, queue: asyncio.Queue) -> None:
        self._owner = owner
        self.request_id = request_id
        self._queue = queue
        self._done = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self._done:
            raise StopAsyncIteration
        try:
            item = await self._queue.get()
        except BaseException:  # cancelled (client gone): free the request's blocks
            self.close()
            raise
        if isinstance(item, BaseException):
            self._done = True
            raise item
        if item.finished:
            self._done = True
        return item

    @property
    def finished(self) -> bool:
        """Whether the final output was delivered (or the stream was closed)."""
        return self._done

    def close(self) -> None:
        """Stop consuming; abort the request unless it already finished. Never blocks."""
        if not self._done:
            self._done = True
            self._owner._abort_soon(self.request_id)

    async def aclose(self) -> None:
        """`close`, for ``contextlib.aclosing`` and async-generator-like use."""
        self.close()

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to free
            pass


class AsyncEngine:
    """Serve an `Engine` to asyncio code. ``await submit(...)`` returns ``(request_id,
    stream)``; ``abort``, ``metrics`` and ``close`` may be called from any thread."""

    def __init__(self, engine: Engine, *, join_timeout: float = 10.0) -> None:
        self.engine = engine
        self.join_timeout = join_timeout
        self._cond = threading.Condition()  # guards the engine, _sinks and _closed
        self._sinks: dict[str, _Sink] = {}
        self._to_abort: collections.deque[str] = collections.deque()  # appended lock-free
        self._callers = 0  # threads waiting for the lock (the stepper yields to them)
        self._callers_lock = threading.Lock()
        self._closed = False
        self._error: BaseException | None = None  # why the stepper died, if it did
        self._thread = threading.Thread(target=self._run, name="tenferro-infer-stepper",
                                        daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ properties

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def alive(self) -> bool:
        """Whether the stepper thread runs and the engine takes requests."""
        return self._thread.is_alive() and not self._closed

    # ------------------------------------------------------------------ locked calls

    def _call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` under the engine lock, let in between two steps; wake the stepper after."""
        with self._callers_lock:
            self._callers += 1
        try:
            self._cond.acquire()
        finally:
            with self._callers_lock:
                self._callers -= 1
        try:
            return fn()
        finally:
            self._cond.notify_all()
            self._cond.release()

    def _check_open(self) -> None:
        if self._closed or not self._thread.is_alive():
            why = f" (the engine failed: {self._error!r})" if self._error else ""
            raise EngineClosedError(f"the AsyncEngine is closed{why}; create a new one")

    def add_request(self, prompt: str | Sequence[int] | Sequence[dict[str, Any]],
                    params: SamplingParams, *, chat: bool = False, request_id: str | None = None,
                    loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> str:
        """Blocking: add a request whose outputs go to ``queue`` on ``loop``. The engine's own
        errors (`RequestError`, `SamplingParamsError`, `QueueFullError`) pass through."""

        def add() -> str:
            self._check_open()
            rid = self.engine.add_request(prompt, params, request_id=request_id, chat=chat)
            self._sinks[rid] = _Sink(loop, queue)
            return rid

        return self._call(add)

    async def submit(self, prompt: str | Sequence[int] | Sequence[dict[str, Any]],
                     params: SamplingParams, chat: bool = False,
                     request_id: str | None = None) -> tuple[str, RequestStream]:
        """Add a request without blocking the event loop: ``(request_id, stream)``. Raises the
        engine's errors before anything was added; if the caller is cancelled meanwhile the
        request is aborted as soon as it exists."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        fut = loop.run_in_executor(None, lambda: self.add_request(
            prompt, params, chat=chat, request_id=request_id, loop=loop, queue=queue))
        try:
            rid = await asyncio.shield(fut)
        except asyncio.CancelledError:
            fut.add_done_callback(
                lambda f: None if f.cancelled() or f.exception() else self._abort_soon(f.result()))
            raise
        return rid, RequestStream(self, rid, queue)

    def abort(self, request_id: str) -> bool:
        """Abort a request now (blocking for at most one step): its blocks are freed, and its
        stream ends with the engine's finish_reason "abort" output at the next step. False if
        the request is unknown or already finished."""
        return self._call(lambda: request_id in self._sinks and self.engine.abort(request_id))

    def _abort_soon(self, request_id: str) -> None:
        """Ask the stepper to abort ``request_id`` at its next turn; never blocks (safe from
        the event loop and from ``__del__``)."""
        self._to_abort.append(request_id)  # deque.append is atomic
        if self._cond.acquire(blocking=False):  # idle stepper: wake it; busy: it will look
            try:
                self._cond.notify_all()
            finally:
                self._cond.release()

    def metrics(self) -> dict[str, Any]:
        """``engine.metrics()`` (taken between two steps)."""
        return self._call(self.engine.metrics)

    def has_work(self) -> bool:
        return self._call(self.engine.has_work)

    # ------------------------------------------------------------------ the stepper

    def _deliver(self, sink: _Sink, item: Any) -> bool:
        try:
            sink.loop.call_soon_threadsafe(sink.queue.put_nowait, item)
            return True
        except RuntimeError:  # the consumer's loop is closed: nobody listens
            return False

    def _drain_aborts(self) -> None:
        while self._to_abort:
            rid = self._to_abort.popleft()
            if self._sinks.pop(rid, None) is not None:  # nobody listens: drop its outputs
                self.engine.abort(rid)

    def _idle(self) -> bool:
        return not self._to_abort and not self.engine.has_work()

    def _run(self) -> None:
        with self._cond:
            try:
                while not self._closed:
                    if self._callers:  # let waiting callers in first
                        self._cond.wait_for(lambda: not self._callers or self._closed)
                        continue
                    self._drain_aborts()
                    if self._idle():
                        self._cond.wait_for(lambda: self._closed or self._callers
                                            or not self._idle())
                        continue
                    self._step()
            except Exception as e:  # a broken engine: fail every stream, take no more
                log.exception("the engine failed; the AsyncEngine stops")
                self._error = e
                self._fail_all(EngineClosedError(f"the engine failed: {e!r}"))

    def _step(self) -> None:
        outputs = self.engine.step()
        for out in outputs:
            sink = self._sinks.get(out.request_id)
            if sink is None:
                continue
            if out.finished:
                del self._sinks[out.request_id]
            if not self._deliver(sink, out) and not out.finished:
                self._sinks.pop(out.request_id, None)
                self.engine.abort(out.request_id)

    def _fail_all(self, err: BaseException) -> None:
        sinks, self._sinks = self._sinks, {}
        for sink in sinks.values():
            self._deliver(sink, err)

    # ------------------------------------------------------------------ shutdown

    def close(self) -> None:
        """Abort every live request (their streams end with EngineClosedError), stop the
        stepper and join it (``join_timeout`` seconds). Idempotent."""
        def stop() -> None:
            if self._closed:
                return
            self._closed = True
            for rid in list(self._sinks):
                try:
                    self.engine.abort(rid)
                except Exception:  # a broken engine: the streams still end below
                    pass
            self._fail_all(EngineClosedError("the AsyncEngine was closed"))

        self._call(stop)  # between two steps, like any caller
        if threading.current_thread() is not self._thread:
            self._thread.join(self.join_timeout)

    def __enter__(self) -> AsyncEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
