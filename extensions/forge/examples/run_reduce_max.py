"""End to end on numpy:cpu: a task for row maxima, the honest candidate in reduce_max_rows/
verified, benchmarked against the current dispatch kernel and promoted; then a fresh runtime
runs it eagerly and under `compile` (TENFERRO_FORGE_COUNT=1 counts its calls).

    python extensions/forge/examples/run_reduce_max.py [--shapes 65536x32 16384x64]

The registry is $TENFERRO_FORGE_REGISTRY when set, else a temporary directory (so running the
example leaves the user's registry alone)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="+", default=["65536x32", "16384x64"])
    args = p.parse_args(argv)
    os.environ.setdefault("TENFERRO_FORGE_REGISTRY", tempfile.mkdtemp(prefix="forge-registry-"))
    os.environ["TENFERRO_FORGE_COUNT"] = "1"
    sys.path.insert(0, str(HERE))  # forge_loop.py, beside this file
    from forge_loop import promote_candidate

    entry = promote_candidate(HERE / "reduce_max_rows", "reduce_max", device="numpy:cpu", shapes=args.shapes,
                              params={"axes": [1]})
    if entry is None:
        return 1
    return run(args.shapes[0])


def run(shape_text: str) -> int:
    import numpy as np

    import tenferro_runtime as tr
    from tenferro_forge import plugin
    from tenferro_forge.task import parse_shape
    from tenferro_runtime import array_api as xp
    from tenferro_runtime.runtime import Runtime, use_runtime

    shape = parse_shape(shape_text)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    timings = {}
    for label, disabled in (("default", "1"), ("promoted", "")):
        os.environ["TENFERRO_FORGE_DISABLE"] = disabled
        rt = Runtime.from_entry_points()
        with use_runtime(rt):
            t = xp.asarray(x)
            f = tr.compile(lambda a: xp.max(a, axis=1) * 2.0)
            before = sum(plugin.CALLS.values())
            eager, compiled = np.asarray(xp.max(t, axis=1)), np.asarray(f(t))
            calls = sum(plugin.CALLS.values()) - before
            assert np.array_equal(eager, x.max(axis=1)) and np.allclose(compiled, 2 * x.max(axis=1))
            t0 = time.perf_counter()
            for _ in range(20):
                xp.max(t, axis=1)
            timings[label] = (time.perf_counter() - t0) / 20
        print(
            f"{label}: promoted-kernel calls during one eager and one compiled call: {calls}; "
            f"eager xp.max {timings[label] * 1e6:.0f} us"
        )
    print(f"eager speedup through dispatch: {timings['default'] / timings['promoted']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
