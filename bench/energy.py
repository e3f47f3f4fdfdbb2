"""Energy accounting overhead on the MLP train step, one run.

The MLP 784-512-512-10 batch 128 Adam step of bench/train.py, compiled and eager (tape +
`opt.step`) on numpy:cpu, timed in alternating rounds without accounting, inside one open
`measure()` window (accounting on: every op and compiled call is costed and counted), and
with a `measure(kind="step")` window per step (a meter read at each step's start and end).
Goal: under 1% of the step time with accounting on. Also prints which meter each device
uses here (`python -m tenferro_runtime energy` tells why the others cannot read).
"""

from __future__ import annotations

import os
import platform
import time

import numpy as np
from eager_overhead import cpu_name, threads_setting  # noqa: I001  (same folder)
from train import data, tf_compiled, tf_eager

from tenferro_runtime import default_runtime
from tenferro_runtime.energy import measure
from tenferro_runtime.energy.meters import meters_for


def rounds(variants: dict, n_rounds: int = 25, number: int = 20) -> dict[str, tuple[float, float]]:
    """(median, best) per-call time of each variant, measured in alternating rounds (the order
    of the variants rotating, so none always runs right after another)."""
    times: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(n_rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            variants[name](number)
            times[name].append((time.perf_counter() - t0) / number)
    return {k: (float(np.median(v)), min(v)) for k, v in times.items()}


def variants(step) -> dict:
    def plain(n):
        for _ in range(n):
            step()

    def monitored(n):
        with measure("bench"):
            for _ in range(n):
                step()

    def per_step(n):
        for _ in range(n):
            with measure("step", kind="step"):
                step()

    return {"no accounting": plain, "accounting on": monitored, "a window per step": per_step}


def main() -> None:
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, {threads_setting()}")
    rt = default_runtime()
    dev = rt.device("numpy:cpu")
    print(f"numpy:cpu meters, best first: {', '.join(m.name for m in meters_for(rt, dev))}")
    params, x, y = data(np.random.default_rng(0))
    for name, step in (("compiled", tf_compiled(params, x, y, "numpy:cpu")),
                       ("eager", tf_eager(params, x, y, "numpy:cpu"))):
        for fn in variants(step).values():
            fn(2)  # warm up (traces, caches)
        t = rounds(variants(step))
        (base, best) = t["no accounting"]
        print(f"\nMLP 784-512-512-10 b128 Adam step, {name}: {base * 1e3:.2f} ms without accounting "
              f"(median; best {best * 1e3:.2f} ms)")
        for k in ("accounting on", "a window per step"):
            med, low = t[k]
            print(f"  {k:<20}{med * 1e3:>8.2f} ms  overhead {100 * (med / base - 1):+.2f}% of the median, "
                  f"{100 * (low / best - 1):+.2f}% of the best (goal < 1%)")
    with measure("one step") as r:
        step()
    print(f"\none eager step: {r.joules:.3g} J ({r.sources}); {len(r.ops)} op kinds")


if __name__ == "__main__":
    main()
