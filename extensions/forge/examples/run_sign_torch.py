"""End to end on torch:cpu: a task for float `sign`, the honest torch candidate in sign_torch/
verified, benchmarked against tenferro's torch kernel and promoted; then a fresh runtime runs
it eagerly and under `compile` on torch:cpu (TENFERRO_FORGE_COUNT=1 counts its calls).

    python extensions/forge/examples/run_sign_torch.py [--shapes 512x1024]

The registry is $TENFERRO_FORGE_REGISTRY when set, else a temporary directory."""

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
    p.add_argument("--shapes", nargs="+", default=["512x1024"])
    args = p.parse_args(argv)
    os.environ.setdefault("TENFERRO_FORGE_REGISTRY", tempfile.mkdtemp(prefix="forge-registry-"))
    os.environ["TENFERRO_FORGE_COUNT"] = "1"
    sys.path.insert(0, str(HERE))  # forge_loop.py, beside this file
    from forge_loop import promote_candidate

    if promote_candidate(HERE / "sign_torch", "sign", device="torch:cpu", shapes=args.shapes) is None:
        return 1
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
