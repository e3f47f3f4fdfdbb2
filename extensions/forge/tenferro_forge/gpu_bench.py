"""`bench` of a Triton candidate on its GPU (the child side; harness.bench hands tasks on
torch:cuda:N here). The baseline is what the Triton executor generates for the op: the task's
one-op function compiled with ``compile(..., backend="triton")``, lowered, and run through
`tenferro_triton.executor.compile_graph` on the same buffers. Each call: caches flushed (a
FLUSH_BYTES buffer larger than any L2 written just before), a CUDA event pair around the call,
then every stream of the device synchronized; the events time the GPU work from the flush's end
to the call's last kernel (the flush hides the host's launch cost, as triton.testing.do_bench
does; the host time of each call is reported beside it). The kernel eager dispatch runs now
(torch's) is timed in the same rounds and reported (`vs_dispatch`), not gated. Under Triton's
interpreter nothing is timed: a typed refusal comes back instead."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops

FLUSH_BYTES = 256 << 20
"""Written before every timed call: far larger than an H100's or H200's 50 MB L2."""


def refusal(why: str) -> dict:
    return {"ok": False, "refused": "gpu", "findings": [{"check": "gpu", "reason": why}]}


def device_bandwidth(torch: Any, device: str, flush: Any) -> float:
    """The device's best streaming rate in bytes/s over FLUSH_BYTES: a copy (read + write
    counted) or a read-only sum, whichever is faster (the roofline no kernel may beat)."""
    dst = torch.empty_like(flush)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = 0.0
    for moved, work in (
        (2 * flush.nbytes, lambda: dst.copy_(flush)),
        (flush.nbytes, lambda: flush.view(torch.float32).sum()),
    ):
        for _ in range(5):
            start.record()
            work()
            end.record()
            torch.cuda.synchronize(device)
            best = max(best, moved / max(start.elapsed_time(end) * 1e-3, 1e-12))
    return best


def baseline(rt: Any, op: str, canon: dict, arrays: list, device: str) -> Any:
    """The Triton executor's kernel for `op` with `canon` on operands like `arrays`:
    fn(*torch buffers, **params) -> result buffer; a RuntimeError when the executor declines."""
    import tenferro_runtime as tr
    from tenferro_core.catalog import BY_NAME
    from tenferro_runtime import array_api as xp
    from tenferro_runtime.runtime import use_runtime
    from tenferro_triton.executor import compile_graph

    prim = BY_NAME[op]
    with use_runtime(rt):
        args = [xp.asarray(a, device=device) for a in arrays]
        graph = tr.compile(lambda *xs: prim.bind(*xs, **canon), backend="triton").lower(*args)
        run = compile_graph(graph, args[0].device)
    if run is None:
        raise RuntimeError(f"the Triton executor declines {op} on {device} (logger tenferro_triton says why)")

    def generated(*bufs: Any, **params: Any) -> Any:
        return run(list(bufs))[0]

    return generated


def dispatch_kernel(rt: Any, op: str, avals: list, canon: dict, device: str) -> Any:
    """The kernel eager dispatch runs now for the signature on the GPU (torch's, or an earlier
    promoted one): what a promoted candidate would replace there."""
    from tenferro_core.avals import Aval
    from tenferro_core.catalog import BY_NAME
    from tenferro_runtime.eager import dispatch
    from tenferro_runtime.kernels import plain

    dev = rt.device(device)
    entry = dispatch(BY_NAME[op], tuple(Aval(a.shape, a.dtype, dev) for a in avals), canon, dev)
    return plain(entry[0])


def bench_gpu(args: dict) -> dict:
    from . import triton_io
    from .harness import (
        CLOCK,
        GATE,
        STARTED,
        _import_failed,
        _stats,
        deferred_work,
        load_kernel,
        timed_error,
        too_fast,
    )

    task = args["task"]
    device = triton_io.prepare(task)
    if device == "cpu":
        return refusal(
            "its kernels would run in Triton's interpreter in this process (torch.cuda.is_available() "
            "is False, or TRITON_INTERPRET is set)"
        )
    import torch

    from tenferro_runtime.runtime import Runtime

    from .torch_io import tensors

    op, dtype, params, nin = task["op"], task["dtype"], task["params"], task["nin"]
    calls, warmup, sets = int(args.get("calls", 30)), int(args.get("warmup", 3)), 3
    rt = Runtime.from_entry_points(check_kernels=False)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    bw = device_bandwidth(torch, device, flush)
    prepared = []
    for shape in [tuple(s) for s in task["shapes"]]:
        avals, canon, outs = ops.signature(op, dtype, shape, params)
        inputs = [
            [ops.draw(op, dtype, shape, "normal", 100 * s + i) for i in range(nin)] for s in range(sets)
        ]
        bufs = [tensors(arrays, device) for arrays in inputs]
        try:
            base = baseline(rt, op, canon, inputs[0], task["device"])
            current = dispatch_kernel(rt, op, avals, canon, task["device"])
            for fn in (base, current):  # compiled now, before any candidate code exists
                fn(*bufs[0], **canon)
        except Exception as exc:  # noqa: BLE001
            why = f"no baseline for shape {shape}: {type(exc).__name__}: {exc}"
            return {"ok": False, "findings": [{"check": "baseline", "reason": why}]}
        prepared.append((shape, canon, outs, base, current, inputs, bufs))
    torch.cuda.synchronize(device)
    try:  # imported only now: the inputs, the baseline and the timer exist before the candidate
        kernel = load_kernel(args["dir"])
    except BaseException as exc:  # noqa: BLE001
        return _import_failed(exc)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rng = np.random.default_rng(0)
    findings, results = [], []
    for shape, canon, outs, base, current, inputs, bufs in prepared:
        contestants = [("base", base), ("cand", kernel), ("dispatch", current)]
        times: dict[str, list[float]] = {name: [] for name, _ in contestants}
        host: dict[str, list[int]] = {name: [] for name, _ in contestants}
        last: dict[int, Any] = {}
        threads = len(STARTED)
        try:
            for i in range(warmup + calls):
                if i == warmup:  # threads Triton's first-call compile may start are not the candidate's
                    threads = len(STARTED)
                k = i % 3  # each round runs the three in a rotated order: drift hits all alike
                for name, fn in contestants[k:] + contestants[:k]:
                    flush.zero_()
                    start.record()
                    t0 = CLOCK()
                    out = fn(*bufs[i % sets], **canon)
                    t1 = CLOCK()
                    end.record()
                    torch.cuda.synchronize(device)
                    if i >= warmup:
                        times[name].append(start.elapsed_time(end) * 1e6)
                        host[name].append(t1 - t0)
                    if name == "cand":
                        last[i % sets] = out
        except BaseException as exc:  # noqa: BLE001
            findings.append(timed_error(shape, exc))
            continue
        if len(STARTED) > threads:
            findings.append(deferred_work(shape))
        for s, out in last.items():
            if type(out) is not torch.Tensor or out.device != flush.device:
                findings.append(
                    {
                        "check": "contract",
                        "reason": f"shape {shape}: timed calls returned "
                        f"{type(out).__name__} on {getattr(out, 'device', '?')}, not a tensor on {device}",
                    }
                )
                break
            got = out.detach().cpu().numpy()
            why = ops.mismatch(op, dtype, inputs[s], params, got, ops.reference(op, inputs[s], params))
            if why:
                findings.append({"check": "correctness", "reason": f"shape {shape}, timed calls: {why}"})
                break
        stats = _stats(np.array(times["base"]), np.array(times["cand"]), rng)
        versus = _stats(np.array(times["dispatch"]), np.array(times["cand"]), rng)
        stats["vs_dispatch"] = {  # reported, not gated: eager dispatch runs a promoted kernel instead of it
            "median_ns": versus["base_median_ns"],
            "iqr_ns": versus["base_iqr_ns"],
            "speedup": versus["speedup"],
            "ci_low": versus["ci_low"],
            "ci_high": versus["ci_high"],
            "host_ns": float(np.median(host["dispatch"])),
        }
        nbytes = sum(a.nbytes for a in inputs[0]) + int(np.prod(outs[0].shape)) * np.dtype(dtype).itemsize
        floor_ns = nbytes / bw * 1e9
        stats.update(
            shape=list(shape),
            bytes=nbytes,
            roofline_floor_ns=floor_ns,
            calls=len(times["cand"]),
            base_host_ns=float(np.median(host["base"])),
            cand_host_ns=float(np.median(host["cand"])),
        )
        if stats["cand_median_ns"] < floor_ns:
            findings.append(too_fast(shape, stats["cand_median_ns"], floor_ns,
                                     f"device's streaming rate ({bw / 1e9:.0f} GB/s)", nbytes))
        results.append(stats)
    gate = bool(results) and len(results) == len(prepared) and all(r["ci_low"] >= GATE for r in results)
    return {
        "ok": not findings,
        "findings": findings,
        "shapes": results,
        "gate": GATE,
        "gate_passed": gate and not findings,
        "bandwidth": None,
        "device_bandwidth": bw,
        "device_name": torch.cuda.get_device_name(device),
        "timer": "cuda events after an L2 flush, every stream synchronized after each call",
        "flush_bytes": FLUSH_BYTES,
        "threads": None,
    }


__all__ = ["FLUSH_BYTES", "baseline", "bench_gpu", "device_bandwidth", "dispatch_kernel", "refusal"]
