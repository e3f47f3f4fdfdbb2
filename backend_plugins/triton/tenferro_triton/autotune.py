"""Block-config autotuning for the generated kernels, persisted on disk.

Each (op, dtype, target, shape bucket) is tuned once with ``triton.autotune`` over a handful
of configs; the winner is written to ``cache_dir()/autotune.json`` so that a later process
launches the kernel with it directly and never benchmarks again. A shape bucket rounds each
size up to a power of two (capped), so nearby shapes share one entry. ``triton.testing.do_bench``
needs CUDA: under ``TRITON_INTERPRET=1`` a `time.perf_counter` timer is used instead, and
tests inject their own with `set_timer` / `reset`.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tenferro_core.errors import ArgumentError

from .cache import cache_dir, interpreted

log = logging.getLogger("tenferro_triton.autotune")

FILE_NAME = "autotune.json"
FORMAT = 1  # bumped when the file's layout changes; other versions are ignored
SIZE_CAP = 4096  # M, N, K buckets stop growing here
BATCH_CAP = 64  # B buckets stop growing here

Timer = Callable[[Callable[[], Any]], float]  # runs the call, returns milliseconds


def bucket(n: int, cap: int = SIZE_CAP) -> int:
    """`n` rounded up to a power of two, at most `cap` (0 stays 0)."""
    if n < 0:
        raise ArgumentError(f"bucket: a size is >= 0, got {n}")
    if n == 0:
        return 0
    return min(1 << (n - 1).bit_length(), cap)


def tune_key(op: str, dtype: str, target: str, sizes: dict[str, int]) -> str:
    """The cache entry of a launch: op, dtype name, target and each size's bucket
    (``B`` capped at `BATCH_CAP`, the others at `SIZE_CAP`)."""
    parts = [op, dtype, target]
    for name, n in sizes.items():
        parts.append(f"{name}{bucket(n, BATCH_CAP if name == 'B' else SIZE_CAP)}")
    return "/".join(parts)


def target_name(device: Any) -> str:
    """What tuned configs are valid for: ``interpreter`` or the CUDA device's model name."""
    if interpreted():
        return "interpreter"
    import torch

    return f"cuda:{torch.cuda.get_device_name(device)}"


def perf_counter_timer(fn: Callable[[], Any]) -> float:
    """Milliseconds of one call of `fn` (the interpreter runs on the host: no sync needed)."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _cuda_timer(fn: Callable[[], Any]) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn))


class _State:
    """Winning configs by key (loaded lazily from the file) and the timer in use."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.entries: dict[str, dict] | None = None
        self.timer: Timer | None = None

    def path(self) -> Path:
        return cache_dir() / FILE_NAME

    def load(self) -> dict[str, dict]:
        if self.entries is None:
            self.entries = _read(self.path())
        return self.entries


_state = _State()


def _read(path: Path, warn: bool = True) -> dict[str, dict]:
    """The entries of the cache file; an absent file is empty, a corrupt one is ignored
    (with a logged warning unless `warn` is False)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as e:
        if warn:
            log.warning("autotune cache %s is unreadable (%s); tuning again", path, e)
        return {}
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a format-{FORMAT} autotune cache")
        entries = data["entries"]
        if not isinstance(entries, dict):
            raise ValueError("'entries' is not an object")
    except (ValueError, KeyError) as e:
        if warn:
            log.warning("autotune cache %s is corrupt (%s); ignoring it", path, e)
        return {}
    return {k: v for k, v in entries.items() if isinstance(v, dict)}


def _write(path: Path, new: dict[str, dict]) -> None:
    """Merges `new` into the file (entries other processes wrote are kept), atomically:
    a temp file in the same folder, then `os.replace`."""
    entries = _read(path, warn=False)
    entries.update(new)
    fd, tmp = tempfile.mkstemp(prefix=".autotune-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"format": FORMAT, "entries": entries}, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def set_timer(timer: Timer | None) -> None:
    """The benchmark timer (milliseconds of one call); None: do_bench on CUDA, perf_counter
    under the interpreter."""
    _state.timer = timer


def reset(timer: Timer | None = None) -> None:
    """Forgets what this process tuned or read (the next launch re-reads the file), as a fresh
    process would, and sets the timer."""
    with _state.lock:
        _state.entries = None
        _state.timer = timer


def clear() -> None:
    """Deletes the cache file and forgets every tuned config."""
    with _state.lock:
        try:
            _state.path().unlink()
        except FileNotFoundError:
            pass
        _state.entries = None


def _config_to_json(config: Any) -> dict:
    return {"kwargs": dict(config.kwargs), "num_warps": config.num_warps,
            "num_stages": config.num_stages}


def _config_from_json(data: Any, meta_names: frozenset[str]) -> Any:
    """The stored config, or None when it does not fit this kernel's meta-parameters."""
    import triton

    try:
        kwargs, warps, stages = data["kwargs"], data["num_warps"], data["num_stages"]
        values = [*kwargs.values(), warps, stages]
        if set(kwargs) != meta_names or not all(type(v) is int and v > 0 for v in values):
            return None
    except (KeyError, TypeError, AttributeError):
        return None
    return triton.Config(dict(kwargs), num_warps=warps, num_stages=stages)


class Tuned:
    """A jit kernel with its candidate configs: `lookup` finds the stored best one for a
    key, `launch` runs the kernel with it (tuning first where no process has)."""

    def __init__(self, op: str, fn: Any, configs: Sequence[Any],
                 prune: Callable[[list, dict[str, Any]], list] | None = None) -> None:
        if not configs:
            raise ArgumentError(f"autotune {op}: at least one config is needed")
        self.op = op
        self.fn = fn
        self.configs = list(configs)
        self.prune = prune
        self.meta_names = frozenset(configs[0].kwargs)
        self._known: dict[str, Any] = {}  # key -> Config, decoded from the shared entries
        self._generation: object = None

    def lookup(self, key: str) -> Any:
        """The stored best config for `key`, or None."""
        with _state.lock:
            entries = _state.load()
            if self._generation is not entries:  # reset() since: decode again
                self._known, self._generation = {}, entries
            if key in self._known:
                return self._known[key]
            entry = entries.get(key)
            config = None if entry is None else _config_from_json(entry.get("config"), self.meta_names)
            if entry is not None and config is None:
                log.warning("autotune entry %s does not fit %s's configs; tuning again", key, self.op)
            if config is not None:
                self._known[key] = config
            return config

    def launch(self, key: str, grid: Callable[[dict], tuple], args: Sequence[Any],
               kwargs: dict[str, Any]) -> Any:
        """Runs the kernel with the best config for `key` (tuning it first when no process has)
        and returns that config. `grid` maps the meta-parameters to the launch grid."""
        config = self.lookup(key)
        if config is None:
            return self._tune(key, grid, args, kwargs)
        self.fn[grid(config.kwargs)](*args, **kwargs, **config.all_kwargs())
        return config

    def _tune(self, key: str, grid: Callable[[dict], tuple], args: Sequence[Any],
              kwargs: dict[str, Any]) -> Any:
        import triton

        with _state.lock:  # one tuning at a time; a waiting thread may find it done
            config = self.lookup(key)
            if config is not None:
                self.fn[grid(config.kwargs)](*args, **kwargs, **config.all_kwargs())
                return config
            named = dict(zip(self.fn.arg_names, args), **kwargs)
            candidates = self.prune(self.configs, named) if self.prune else self.configs
            candidates = candidates or self.configs[:1]
            timer = _state.timer or (perf_counter_timer if interpreted() else _cuda_timer)

            def bench(call: Callable[[], Any], quantiles: Iterable[float] | None = None) -> Any:
                ms = float(timer(call))
                return [ms] * len(tuple(quantiles)) if quantiles is not None else ms

            start = time.perf_counter()
            if len(candidates) == 1:  # nothing to compare
                config, timings = candidates[0], {}
                self.fn[grid(config.kwargs)](*args, **kwargs, **config.all_kwargs())
            else:  # a fresh Autotuner per key: no state shared with other keys
                tuner = triton.autotune(configs=candidates, key=[], do_bench=bench)(self.fn)
                tuner[grid](*args, **kwargs)
                config = tuner.best_config
                timings = {str(c): _first(t) for c, t in getattr(tuner, "configs_timings", {}).items()}
            entry = {"config": _config_to_json(config), "timings_ms": timings}
            log.info("autotune %s: tuned %s in %.2f s over %d configs; best: %s",
                     self.op, key, time.perf_counter() - start, len(candidates), config)
            entries = _state.load()
            entries[key] = entry
            self._known[key] = config
            try:
                _write(_state.path(), {key: entry})
            except OSError as e:
                log.warning("autotune cache %s not written (%s); kept in memory", _state.path(), e)
            return config


def _first(t: Any) -> float:
    """The median timing of a do_bench result (a float or [median, p20, p80])."""
    return float(t[0] if isinstance(t, (list, tuple)) else t)


def entries() -> dict[str, dict]:
    """A copy of the tuned entries known to this process (read from the file if needed)."""
    with _state.lock:
        return {k: dict(v) for k, v in _state.load().items()}
