"""End to end on a GPU: a task for `reduce_max` over the rows of a few long rows on
torch:cuda:0, the Triton candidate in row_max_triton/ verified, benchmarked against the Triton
executor's generated kernel (L2 flushed and every stream synchronized per call, CUDA events)
and promoted; then a fresh runtime runs `xp.max(x, axis=1)` on torch:cuda:0 eagerly, under
`compile(..., backend="plan")` and under the default `compile` (the triton executor), with
TENFERRO_FORGE_COUNT=1 counting the promoted kernel's calls. A JSON summary goes to --out.

    PYTHONUNBUFFERED=1 python extensions/forge/examples/run_row_max_triton.py --out summary.json

Without a CUDA device (or with TRITON_INTERPRET set) it says so and exits 0: the interpreter
can verify the candidate (the tests do) but not time it. The registry is
$TENFERRO_FORGE_REGISTRY when set, else a temporary directory."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).parent
SHAPES = ["8x262144", "16x131072"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="+", default=SHAPES)
    p.add_argument("--out", default=None, help="where to write the JSON summary")
    args = p.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    from tenferro_forge.gates import gpu_here

    summary: dict = {"shapes": args.shapes, "stages": {}}
    if not gpu_here():
        print("run_row_max_triton: needs a CUDA GPU (torch sees none here, or TRITON_INTERPRET is set); "
              "the Triton candidate's verification under the interpreter is in the tests. Nothing to do.")
        summary["skipped"] = "no CUDA GPU"
        _write(args.out, summary)
        return 0
    os.environ.setdefault("TENFERRO_FORGE_REGISTRY", tempfile.mkdtemp(prefix="forge-registry-"))
    os.environ["TENFERRO_FORGE_COUNT"] = "1"
    sys.path.insert(0, str(HERE))  # forge_loop.py, beside this file
    from forge_loop import promote_candidate

    status, t0 = 1, time.perf_counter()
    try:
        reports: dict = {}
        print(f"task: reduce_max over axis 1, float32, torch:cuda:0, shapes {args.shapes}")
        entry = promote_candidate(HERE / "row_max_triton", "reduce_max", device="torch:cuda:0",
                                  shapes=args.shapes, params={"axes": [1]}, reports=reports)
        summary["stages"]["gates_s"] = round(time.perf_counter() - t0, 1)
        summary.update(_gates(reports, entry))
        if entry is not None:
            summary["dispatch"] = run(args.shapes[0])
            ok = summary["dispatch"]["eager_calls"] > 0 and summary["dispatch"]["plan_calls"] > 0
            status = 0 if ok else 1
    except Exception as exc:  # noqa: BLE001  (the summary says what failed)
        traceback.print_exc()
        summary["error"] = f"{type(exc).__name__}: {exc}"
    summary["stages"]["total_s"] = round(time.perf_counter() - t0, 1)
    print(f"done in {summary['stages']['total_s']} s")
    _write(args.out, summary)
    return status


def _gates(reports: dict, entry: dict | None) -> dict:
    v, b = reports.get("verify"), reports.get("bench")
    out: dict = {"verify": None if v is None else {"ok": v.ok, "findings": v.findings, **v.details}}
    if b is not None:
        shapes = [
            {
                "shape": s["shape"],
                "speedup": s["speedup"],
                "ci95": [s["ci_low"], s["ci_high"]],
                "executor_kernel_us": s["base_median_ns"] / 1e3,
                "executor_kernel_iqr_us": s["base_iqr_ns"] / 1e3,
                "candidate_us": s["cand_median_ns"] / 1e3,
                "candidate_iqr_us": s["cand_iqr_ns"] / 1e3,
                "host_launch_us": [s.get("base_host_ns", 0) / 1e3, s.get("cand_host_ns", 0) / 1e3],
                "roofline_floor_us": s["roofline_floor_ns"] / 1e3,
                "calls": s["calls"],
                "vs_eager_dispatch_kernel": s.get("vs_dispatch"),  # torch's: reported, not gated
            }
            for s in b.details.get("shapes", [])
        ]
        keep = ("device_name", "device_bandwidth", "timer", "flush_bytes", "gate")
        out["bench"] = {"ok": b.ok, "findings": b.findings, "shapes": shapes,
                        **{k: b.details.get(k) for k in keep}}
    if entry is not None:
        out["promoted"] = {"id": entry["id"], "fingerprint": entry["device_fingerprint"]}
    else:
        why = (b.findings if b is not None and b.findings else v.findings if v is not None else [])
        out["promoted"] = None
        out["not_promoted_because"] = [f["reason"] for f in why] or ["a gate did not pass"]
    return out


def run(shape_text: str, repeats: int = 50) -> dict:
    """The op through dispatch on torch:cuda:0: promoted-kernel calls eagerly, under the plan
    executor and under the default (triton) executor, and eager time per call without and with
    the promoted kernel (every call synchronized)."""
    import numpy as np
    import torch

    import tenferro_runtime as tr
    from tenferro_forge import plugin
    from tenferro_forge.task import parse_shape
    from tenferro_runtime import array_api as xp
    from tenferro_runtime.runtime import Runtime, use_runtime

    x = np.random.default_rng(0).standard_normal(parse_shape(shape_text)).astype(np.float32)
    x.reshape(-1)[[5, 7]] = [np.nan, np.inf]
    want = x.max(axis=1)
    result: dict = {"shape": shape_text}
    for label, disabled in (("default", "1"), ("promoted", "")):
        os.environ["TENFERRO_FORGE_DISABLE"] = disabled
        rt = Runtime.from_entry_points()
        with use_runtime(rt):
            t = xp.asarray(x, device="torch:cuda:0")
            counts = {}
            for name, fn in (("eager", lambda a: xp.max(a, axis=1)),
                             ("plan", tr.compile(lambda a: xp.max(a, axis=1), backend="plan")),
                             ("triton_executor", tr.compile(lambda a: xp.max(a, axis=1)))):
                before = sum(plugin.CALLS.values())
                got = fn(t).numpy()
                counts[name] = sum(plugin.CALLS.values()) - before
                np.testing.assert_array_equal(got, want)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(repeats):
                xp.max(t, axis=1)
                torch.cuda.synchronize()
            per_call = (time.perf_counter() - start) / repeats
        result[f"{label}_eager_us"] = per_call * 1e6
        if label == "promoted":
            result.update(eager_calls=counts["eager"], plan_calls=counts["plan"],
                          triton_executor_calls=counts["triton_executor"])
        print(f"{label}: promoted-kernel calls eager / plan / triton executor: {counts['eager']} / "
              f"{counts['plan']} / {counts['triton_executor']}; eager xp.max {per_call * 1e6:.1f} us per "
              f"synchronized call")
    os.environ.pop("TENFERRO_FORGE_DISABLE", None)
    result["eager_speedup"] = result["default_eager_us"] / result["promoted_eager_us"]
    print(f"eager speedup through dispatch: {result['eager_speedup']:.2f}x")
    if not result["triton_executor_calls"]:
        print("the triton executor (compile's default on torch:cuda) generated its own row kernel: the "
              "promoted kernel serves eager calls and compile(..., backend='plan')")
    return result


def _write(path: str | None, summary: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(summary, indent=2, default=str) + "\n")
        print(f"summary written to {path}")


if __name__ == "__main__":
    sys.exit(main())
