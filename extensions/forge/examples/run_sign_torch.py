"""End to end on torch:cpu: a task for float `sign`, the honest torch candidate in sign_torch/
verified, benchmarked against tenferro's torch kernel and promoted; then a fresh runtime runs
it eagerly and under `compile` on torch:cpu (TENFERRO_FORGE_COUNT=1 counts its calls).

    python extensions/forge/examples/run_sign_torch.py [--shapes 512x1024]

The registry is $TENFERRO_FORGE_REGISTRY when set, else a temporary directory."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="+", default=["512x1024"])
    args = p.parse_args(argv)
    os.environ.setdefault("TENFERRO_FORGE_REGISTRY", tempfile.mkdtemp(prefix="forge-registry-"))
    os.environ["TENFERRO_FORGE_COUNT"] = "1"
    from tenferro_forge import gates, registry
    from tenferro_forge.task import new_task

    task = Path(tempfile.mkdtemp(prefix="forge-task-")) / "sign_torch"
    new_task(task, "sign", device="torch:cpu", dtype="float32", shapes=args.shapes)
    for name in ("kernel.py", "metadata.json"):
        shutil.copyfile(HERE / "sign_torch" / name, task / name)
    verified = gates.verify(task)
    print(f"verify: {'passed' if verified.ok else verified.findings} ({verified.details['calls']} calls)")
    benched = gates.bench(task, calls=30)
    for s in benched.details.get("shapes", []):
        print(
            f"bench {tuple(s['shape'])} ({benched.details.get('threads')} torch threads): default "
            f"{s['base_median_ns'] / 1e3:.0f} us, candidate {s['cand_median_ns'] / 1e3:.0f} us, "
            f"speedup {s['speedup']:.2f}x (95% CI {s['ci_low']:.2f}-{s['ci_high']:.2f})"
        )
    if not (verified.ok and benched.ok):
        print(f"not promoted: {benched.findings or verified.findings}")
        return 1
    entry = registry.promote(task, verify_report=verified, bench_report=benched)
    print(f"promoted {entry['id']} into {registry.root()}")
    return run(args.shapes[0])


def run(shape_text: str) -> int:
    import numpy as np

    import tenferro_runtime as tr
    from tenferro_forge import plugin
    from tenferro_forge.task import parse_shape
    from tenferro_runtime import array_api as xp
    from tenferro_runtime.runtime import Runtime, use_runtime

    x = np.random.default_rng(0).standard_normal(parse_shape(shape_text)).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, np.inf, -0.0]
    timings = {}
    for label, disabled in (("default", "1"), ("promoted", "")):
        os.environ["TENFERRO_FORGE_DISABLE"] = disabled
        rt = Runtime.from_entry_points()
        with use_runtime(rt):
            t = xp.asarray(x, device="torch:cpu")
            f = tr.compile(lambda a: xp.sign(a))
            before = sum(plugin.CALLS.values())
            eager, compiled = np.asarray(xp.sign(t)), np.asarray(f(t))
            calls = sum(plugin.CALLS.values()) - before
            assert np.array_equal(eager, np.sign(x), equal_nan=True)
            assert np.array_equal(compiled, np.sign(x), equal_nan=True)
            t0 = time.perf_counter()
            for _ in range(50):
                xp.sign(t)
            timings[label] = (time.perf_counter() - t0) / 50
        print(
            f"{label}: promoted-kernel calls during one eager and one compiled call: {calls}; "
            f"eager xp.sign {timings[label] * 1e6:.0f} us"
        )
    print(f"eager speedup through dispatch: {timings['default'] / timings['promoted']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
