"""The child side of verify and bench (``python -m tenferro_forge.harness MODE``), run only
by `sandbox.run_child`. It reads its arguments and a nonce from stdin before anything of
the candidate exists, makes inputs, then imports the candidate from its file, and prints one
``<nonce> <json>`` line. The candidate never runs in Forge's own process."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import ops
from .task import is_gpu

POISON = {2: 0x7DA5, 4: 0x7FA5A5A5, 8: 0x7FF5A5A5A5A5A5A5}
"""A NaN with a payload per item size, written into free memory before each candidate call:
an output still holding it was never written (uninitialized or stale memory)."""
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
MAX_FINDINGS = 12


STARTED: list = []
"""Threads started in this process since the harness began (Thread.start is wrapped before
any candidate code runs)."""
CLOCK = time.perf_counter_ns
"""The benchmark's timer, bound before any candidate code runs (patching time cannot reach it)."""


def _watch_threads() -> None:
    start = threading.Thread.start

    def recorded_start(self: threading.Thread) -> None:
        STARTED.append(self.name)
        start(self)

    threading.Thread.start = recorded_start


def load_kernel(directory: str) -> Any:
    """The candidate's `kernel`, imported from its file (never from sys.path)."""
    path = Path(directory) / "kernel.py"
    spec = importlib.util.spec_from_file_location("forge_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, "kernel", None)
    if not callable(fn):
        raise TypeError("kernel.py defines no callable `kernel`")
    return fn


def poison(nbytes: int, itemsize: int) -> None:
    """Fill freed heap memory of about `nbytes` with the poison pattern (the child runs with
    glibc's mmap threshold raised, so freed blocks are handed out again by the next malloc)."""
    n = max(1, nbytes // itemsize)
    blocks = [np.full(n + k, POISON[itemsize], dtype=UINT[itemsize]) for k in (64, 16, 1, 0, 0)]
    while blocks:  # the exact size freed last: the allocator hands it out first
        blocks.pop(0)


class Stop(Exception):
    """A call failed outright: the rest of the cases would only repeat it."""


class Verifier:
    """Runs the candidate over every case and collects findings (check, reason)."""

    def __init__(self, task: dict, kernel: Any):
        self.task, self.kernel = task, kernel
        self.op, self.dtype, self.params = task["op"], task["dtype"], task["params"]
        self.findings: list[dict] = []
        self.kept: list[tuple[np.ndarray, np.ndarray]] = []  # earlier outputs and their copies
        self.calls = 0
        self.io = None  # torch candidates: operands as tensors, the tensor contract (torch_io)
        self.kept_tensors: list[Any] = []
        self.triton = None  # Triton candidates: triton_io (launch counts, the launcher's torch ops)
        self.kept_live: list[tuple[Any, np.ndarray]] = []  # GPU results and copies of them
        if task.get("backend") == "torch":
            from .torch_io import TorchIO

            device = "cpu"
            if is_gpu(task):
                from . import triton_io

                self.triton, device = triton_io, triton_io.DEVICE[0]
            self.io = TorchIO(self.dtype, device)

    def find(self, check: str, reason: str) -> None:
        if len(self.findings) < MAX_FINDINGS and not any(
            f["check"] == check and f["reason"] == reason for f in self.findings
        ):
            self.findings.append({"check": check, "reason": reason})

    def call(self, label: str, arrays: list[np.ndarray]) -> tuple[Any, np.ndarray | None]:
        """Run the candidate on `arrays`; (output or None, float64 reference)."""
        shape = arrays[0].shape
        _, canon, outs = ops.signature(self.op, self.dtype, shape, self.params)
        pristine = [a.copy() for a in arrays]
        bufs = self.io.inputs(arrays) if self.io else arrays
        views = self.io.views(bufs) if self.io else arrays
        state = self.io.state() if self.io else None
        ref = ops.reference(self.op, arrays, self.params)
        itemsize = np.dtype(self.dtype).itemsize
        size = int(np.prod(outs[0].shape))
        if self.io and self.io.gpu:
            self.triton.poison_device(size * itemsize, itemsize, self.io.device, POISON[itemsize])
        else:
            poison(size * itemsize, itemsize)
        self.calls += 1
        threads = len(STARTED)
        launches = self.triton.STATE.launches if self.triton else 0
        guard = self.triton.guard() if self.triton else contextlib.nullcontext()
        try:
            with guard:
                out = self.kernel(*bufs, **canon)
            if self.triton:
                self.triton.synchronize(str(self.io.device))
        except RecursionError:
            self.find("error", f"{label}: RecursionError (unbounded recursion)")
            raise Stop from None
        except MemoryError:
            self.find("memory", f"{label}: MemoryError: the candidate exceeded the memory cap")
            raise Stop from None
        except BaseException as exc:  # noqa: BLE001  (SystemExit, KeyboardInterrupt: rejected, not fatal)
            self.find("error", f"{label}: raised {type(exc).__name__}: {str(exc)[:200]}")
            raise Stop from None
        if len(STARTED) > threads:
            self.find(
                "deferred_work",
                f"{label}: the candidate started a thread during the call "
                f"(work deferred past the call's return)",
            )
        if self.triton:
            self.launcher(label, guard.ops, self.triton.STATE.launches - launches, size)
        if self.io and self.io.state() != state:
            self.find(
                "global_state",
                f"{label}: the candidate changed torch's global state (threads, default dtype, "
                f"deterministic mode, matmul precision): {state} -> {self.io.state()}",
            )
        if self.io and self.io.gpu:  # copies: read the inputs again after the call
            views = self.io.views(bufs)
        for a, p in zip(views, pristine):
            if not (np.array_equal(a, p, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(p))):
                self.find("input_mutation", f"{label}: the candidate changed its input")
        tensor = None
        if self.io:
            tensor, (out, check, why) = out, self.io.result(out)
            if out is None:
                self.find(check, f"{label}: {why}")
                return None, ref
        elif isinstance(out, np.generic):
            self.find(
                "contract",
                f"{label}: returned a NumPy scalar ({type(out).__name__}), not a 0-d "
                f"numpy.ndarray (call ufuncs with out=... or wrap with np.asarray)",
            )
            return None, ref
        elif type(out) is not np.ndarray:
            self.find(
                "lazy_output",
                f"{label}: returned {type(out).__module__}.{type(out).__name__}, "
                f"not a numpy.ndarray (a subclass, lazy or deferred object)",
            )
            return None, ref
        want = outs[0]
        if out.shape != want.shape or out.dtype != np.dtype(self.dtype):
            self.find(
                "contract",
                f"{label}: returned {out.dtype}{list(out.shape)}, the abstract eval "
                f"says {want.dtype}{list(want.shape)}",
            )
            return None, ref
        if out.size and np.any(np.ascontiguousarray(out).view(UINT[itemsize]) == POISON[itemsize]):
            self.find(
                "stale_memory",
                f"{label}: the output holds the poison Forge wrote into free "
                f"memory before the call: uninitialized or stale output memory",
            )
        for a in views:
            if np.shares_memory(out, a):
                self.find("fresh_output", f"{label}: the output aliases an input")
        if tensor is not None:
            if self.io.overlaps(tensor, bufs):
                self.find("fresh_output", f"{label}: the output shares storage with an input")
            if self.io.overlaps(tensor, self.kept_tensors):
                self.find(
                    "stale_memory",
                    f"{label}: the output shares storage with an earlier call's result "
                    f"(stale output memory)",
                )
            self.kept_tensors.append(tensor)
            if self.io.gpu:
                self.kept_live.append((tensor, out.copy()))
        if np.shares_memory(out, ref):
            self.find("fresh_output", f"{label}: the output is the reference's buffer")
        for old, _ in self.kept:
            if old is out or np.shares_memory(old, out):
                self.find(
                    "stale_memory",
                    f"{label}: the output reuses the buffer of an earlier "
                    f"call's result (stale output memory)",
                )
                break
        self.kept.append((out, out.copy()))
        why = ops.mismatch(self.op, self.dtype, arrays, self.params, out, ref)
        if why:
            self.find("correctness", f"{label}: {why}")
        return out, ref

    def launcher(self, label: str, ops: list, launches: int, size: int) -> None:
        """A Triton candidate's call: torch may only allocate and lay out, a Triton kernel must run."""
        if ops:
            self.find(
                "torch_compute",
                f"{label}: the launcher ran torch ops {ops[:6]} outside its Triton kernels: a Triton "
                f"candidate computes in its @triton.jit kernels (torch may only allocate and lay out)",
            )
        if size and not launches:
            self.find(
                "no_kernel",
                f"{label}: the call returned a result of {size} elements without launching a Triton kernel",
            )

    def run(self, seeds: list[int]) -> None:
        op, dtype, params = self.op, self.dtype, self.params
        nin = self.task["nin"]
        shapes = [tuple(s) for s in self.task["shapes"]]
        draw = ops.draw
        for shape in shapes:
            for dist in ops.DISTRIBUTIONS:
                for seed in seeds:
                    self.call(
                        f"{dist} seed {seed} shape {shape}",
                        [draw(op, dtype, shape, dist, seed * 7 + i) for i in range(nin)],
                    )
        for shape in ops.edge_shapes(op, dtype, shapes, params):
            self.call(f"edge shape {shape}", [draw(op, dtype, shape, "normal", 11 + i) for i in range(nin)])
        for shape in shapes:
            if shape:
                wide = shape[:-1] + (2 * shape[-1],)
                self.call(
                    f"non-contiguous (strided) shape {shape}",
                    [draw(op, dtype, wide, "normal", 21 + i)[..., ::2] for i in range(nin)],
                )
                self.call(
                    f"non-contiguous (transposed) shape {shape}",
                    [draw(op, dtype, shape[::-1], "normal", 23 + i).T for i in range(nin)],
                )
                row = [draw(op, dtype, shape[-1:], "normal", 25 + i) for i in range(nin)]
                self.call(f"stride-0 (broadcast) shape {shape}", [np.broadcast_to(r, shape) for r in row])
            self.specials(shape, nin)
            self.caching(shape, nin)
        live = [(t.detach().cpu().numpy(), c) for t, c in self.kept_live]
        for old, copy in self.kept + live:
            if not np.array_equal(old, copy, equal_nan=True):
                self.find(
                    "stale_memory",
                    "an earlier result changed after later calls: the candidate "
                    "writes into buffers it returned (stale output memory)",
                )
                break

    def specials(self, shape: tuple, nin: int) -> None:
        sp = ops.specials(self.dtype)
        rng = np.random.default_rng(31)
        for k in range(2):
            arrays = [ops.draw(self.op, self.dtype, shape, "normal", 33 + 2 * k + i) for i in range(nin)]
            for a in arrays:
                if a.size:
                    flat = a.reshape(-1)
                    pick = rng.choice(a.size, size=min(a.size, 3 * len(sp)), replace=False)
                    flat[pick] = np.resize(np.roll(sp, k), len(pick))
            self.call(f"IEEE specials #{k} shape {shape}", arrays)

    def caching(self, shape: tuple, nin: int) -> None:
        """The same object changed in place (caching by identity, or by a sample of the
        content), then fresh copies each differing from the last in one element at a seeded
        random position (caching by content): a result equal to an earlier one where the
        reference moved is a cache."""
        if not int(np.prod(shape)):
            return
        a = [ops.draw(self.op, self.dtype, shape, "normal", 41 + i) for i in range(nin)]
        self.call(f"cache probe shape {shape}", a)
        sign = -1.0 if self.op == "reduce_min" else 1.0
        rng = np.random.default_rng(43)
        probes = [("identity_cache", tuple(int(s) // 2 for s in shape))]
        probes += [("content_cache", tuple(int(i) for i in rng.integers(0, shape))) for _ in range(3)]
        for k, (check, idx) in enumerate(probes):
            if check == "content_cache":
                a = [x.copy() for x in a]
            for arr in a:
                arr[idx] = ops.domain(self.op, np.array((50.0 + 20 * k) * sign)).astype(self.dtype)
            before = len(self.findings)
            out, _ = self.call(f"{check.replace('_', ' ')} probe #{k} shape {shape}", a)
            if out is None or len(self.findings) == before or not _close_to_old(out, self.kept[:-1]):
                continue
            how = (
                (
                    "the same input object changed in place it returned an earlier call's result: "
                    "caching by identity (or by a sample of the content)"
                )
                if k == 0
                else (
                    "a fresh input differing from an earlier one in one element it returned an earlier "
                    "call's result: caching by content"
                )
            )
            self.find(check, f"shape {shape}: for {how}")


def _close_to_old(out: np.ndarray, kept: list) -> bool:
    return any(c.shape == out.shape and np.array_equal(c, out, equal_nan=True) for _, c in kept)


def _import_failed(exc: BaseException) -> dict:
    """The outcome of a candidate whose kernel.py raised on import."""
    reason = f"importing kernel.py raised {type(exc).__name__}: {str(exc)[:300]}"
    return {"ok": False, "findings": [{"check": "import", "reason": reason}]}


def verify(args: dict) -> dict:
    task = args["task"]
    if is_gpu(task):  # where the Triton kernels run, decided before triton is imported
        from . import triton_io

        triton_io.DEVICE[0] = triton_io.prepare(task)
    try:
        kernel = load_kernel(args["dir"])
    except BaseException as exc:  # noqa: BLE001
        return _import_failed(exc)
    v = Verifier(task, kernel)
    try:
        v.run(args.get("seeds", [0, 1]))
    except Stop:
        pass
    out = {"ok": not v.findings, "findings": v.findings, "calls": v.calls}
    if v.triton:
        out["ran_on"] = str(v.io.device) + (" (Triton interpreter)" if not v.io.gpu else "")
    return out


# ---- bench -----------------------------------------------------------------------------------


def bandwidth() -> float:
    """The machine's best streaming copy rate in bytes per second (read + write), over working
    sets from cache-resident to DRAM: the roofline's memory bound."""
    best = 0.0
    for n in (1 << 15, 1 << 18, 1 << 21, 1 << 23):
        src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
        np.copyto(dst, src)
        for _ in range(5):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            dt = time.perf_counter() - t0
            best = max(best, 2 * src.nbytes / max(dt, 1e-9))
    return best


def bench(args: dict) -> dict:
    from tenferro_core.avals import Aval
    from tenferro_core.catalog import BY_NAME
    from tenferro_runtime.eager import dispatch
    from tenferro_runtime.kernels import plain
    from tenferro_runtime.runtime import Runtime

    task = args["task"]
    if is_gpu(task):
        from .gpu_bench import bench_gpu

        return bench_gpu(args)
    op, dtype, params, nin = task["op"], task["dtype"], task["params"], task["nin"]
    calls, warmup, sets = int(args.get("calls", 30)), int(args.get("warmup", 3)), 3
    rt = Runtime.from_entry_points(check_kernels=False)
    dev = rt.device(task["device"])
    prim = BY_NAME[op]
    bw = float(args.get("bandwidth") or bandwidth())
    torch = None
    if task.get("backend") == "torch":  # both kernels under one pinned intra-op thread count
        import torch

        from .torch_io import tensors
    shapes = [tuple(s) for s in task["shapes"]]
    prepared = []
    for shape in shapes:
        avals, canon, outs = ops.signature(op, dtype, shape, params)
        entry = dispatch(prim, tuple(Aval(a.shape, a.dtype, dev) for a in avals), canon, dev)
        inputs = [
            [ops.draw(op, dtype, shape, "normal", 100 * s + i) for i in range(nin)] for s in range(sets)
        ]
        bufs = [tensors(arrays) for arrays in inputs] if torch else inputs
        prepared.append((shape, canon, outs, plain(entry[0]), inputs, bufs))
    pinned = None
    if torch is not None:  # pinned after the runtime applied its own setting (TENFERRO_THREADS)
        pinned = max(1, int(args.get("threads") or torch.get_num_threads()))
        torch.set_num_threads(pinned)
    try:  # imported only now: the inputs and the timer exist before any candidate code runs
        kernel = load_kernel(args["dir"])
    except BaseException as exc:  # noqa: BLE001
        return _import_failed(exc)
    rng = np.random.default_rng(0)
    findings, results = [], []
    for shape, canon, outs, base, inputs, bufs in prepared:
        threads = len(STARTED)
        try:
            times, last = _timed_rounds(base, kernel, bufs, canon, warmup, calls)
        except BaseException as exc:  # noqa: BLE001
            findings.append(timed_error(shape, exc))
            continue
        if len(STARTED) > threads:
            findings.append(deferred_work(shape))
        if torch and torch.get_num_threads() != pinned:
            findings.append(
                {
                    "check": "global_state",
                    "reason": f"shape {shape}: the candidate changed torch's thread count "
                    f"({pinned} -> {torch.get_num_threads()}) during timed calls",
                }
            )
            torch.set_num_threads(pinned)
        for s, out in last.items():
            if torch and type(out) is torch.Tensor and out.device.type == "cpu" and not out.requires_grad:
                out = out.numpy()
            if type(out) is not np.ndarray:
                findings.append(
                    {
                        "check": "lazy_output",
                        "reason": f"shape {shape}: timed calls returned "
                        f"{type(out).__name__}, not a numpy.ndarray",
                    }
                )
                break
            why = ops.mismatch(op, dtype, inputs[s], params, out, ops.reference(op, inputs[s], params))
            if why:
                findings.append({"check": "correctness", "reason": f"shape {shape}, timed calls: {why}"})
                break
        b, c = np.array(times["base"], float), np.array(times["cand"], float)
        stats = _stats(b, c, rng)
        nbytes = sum(a.nbytes for a in inputs[0]) + int(np.prod(outs[0].shape)) * np.dtype(dtype).itemsize
        floor_ns = nbytes / (bw * 2.0) * 1e9  # slack 2: read-only streams beat the copy rate
        stats.update(shape=list(shape), bytes=nbytes, roofline_floor_ns=floor_ns, calls=len(c))
        if stats["cand_median_ns"] < floor_ns:
            findings.append(too_fast(shape, stats["cand_median_ns"], floor_ns,
                                     f"machine's memory bandwidth ({bw / 1e9:.1f} GB/s)", nbytes))
        results.append(stats)
    gate = bool(results) and len(results) == len(shapes) and all(r["ci_low"] >= GATE for r in results)
    return {
        "ok": not findings,
        "findings": findings,
        "shapes": results,
        "gate": GATE,
        "gate_passed": gate and not findings,
        "bandwidth": bw,
        "threads": pinned,
    }


def _timed_rounds(base: Any, kernel: Any, bufs: list, canon: dict, warmup: int, calls: int) -> tuple:
    """Interleaved timed calls of the baseline and the candidate, the garbage collector off (as
    timeit has it: a collection inside a microsecond call would decide a median): the times per
    name, and the candidate's last output per input set."""
    times: dict[str, list[int]] = {"base": [], "cand": []}
    last: dict[int, Any] = {}
    clock, was_enabled = CLOCK, gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for i in range(warmup + calls):
            args_i = bufs[i % len(bufs)]
            pair = (("base", base), ("cand", kernel)) if i % 2 == 0 else (("cand", kernel), ("base", base))
            for name, fn in pair:
                t0 = clock()
                out = fn(*args_i, **canon)
                t1 = clock()
                if i >= warmup:
                    times[name].append(t1 - t0)
                if name == "cand":
                    last[i % len(bufs)] = out
    finally:
        if was_enabled:
            gc.enable()
    return times, last


GATE = 1.10
BOOTSTRAP = 2000


DRIFT_FLOOR = 0.04
"""The least relative run-to-run drift allowed for: eight processes benchmarking the same
candidate on the 2-core development machine gave medians with a 2% standard deviation, more
than one run's bootstrap interval shows (it sees only the variation inside its own process)."""


def too_fast(shape: Any, median_ns: float, floor_ns: float, rate: str, nbytes: int) -> dict:
    """The finding of a median below the roofline: moving `nbytes` at `rate` takes longer."""
    return {"check": "roofline", "reason": (
        f"shape {shape}: median {median_ns / 1e3:.2f} us is below the {floor_ns / 1e3:.2f} us the "
        f"{rate} allows for moving {nbytes} bytes: too fast to be true (work skipped or cached)")}


def timed_error(shape: Any, exc: BaseException) -> dict:
    """The finding of a timed call that raised."""
    return {"check": "error", "reason": f"shape {shape}: raised {type(exc).__name__}: {exc}"}


def deferred_work(shape: Any) -> dict:
    """The finding of a candidate that started threads while it was timed."""
    return {"check": "deferred_work", "reason": f"shape {shape}: the candidate started threads "
            f"during timed calls (work deferred past the timer)"}


def _stats(b: np.ndarray, c: np.ndarray, rng: Any) -> dict:
    """Medians and IQRs of each; the speedup as the median of paired ratios (each round's
    baseline and candidate calls ran next to each other, so load drift cancels in the pair);
    its bootstrap 95% interval over the rounds, widened by the drift allowance: the relative
    gap between the first and the second half of the run's speedups, at least DRIFT_FLOOR."""
    q = lambda x, p: float(np.percentile(x, p))  # noqa: E731
    paired = b / c
    boot = np.median(paired[rng.integers(0, len(paired), (BOOTSTRAP, len(paired)))], axis=1)
    speedup = q(paired, 50)
    half = len(paired) // 2
    drift = max(DRIFT_FLOOR, abs(q(paired[:half], 50) - q(paired[half:], 50)) / speedup)
    return {
        "base_median_ns": q(b, 50),
        "base_iqr_ns": q(b, 75) - q(b, 25),
        "cand_median_ns": q(c, 50),
        "cand_iqr_ns": q(c, 75) - q(c, 25),
        "speedup": speedup,
        "ci_low": q(boot, 2.5) * (1 - drift),
        "ci_high": q(boot, 97.5) * (1 + drift),
        "drift": drift,
    }


MODES = {"verify": verify, "bench": bench}


def main() -> None:
    request = json.loads(sys.stdin.readline())
    nonce = request.pop("nonce")
    _watch_threads()
    result = MODES[sys.argv[1]](request)
    sys.stdout.write(f"\n{nonce} {json.dumps(result)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
