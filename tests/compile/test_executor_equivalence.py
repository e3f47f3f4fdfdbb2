"""What `compile` runs gives what the traced program gives: a random graph after the whole
pass pipeline, run by the device's default executor and by the generic plan, with and without
its first input donated, is bitwise the unoptimized graph node by node (graphgen.graphs).

The default executor on the CPUs is tenferro-numba's, which generates loops only for large
groups; `generated_everywhere` lowers its thresholds so that every group it can take is
generated, so the loops, the plan's buffer reuse and donation meet the same random programs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import warnings

import numpy as np
from graphgen import graphs
from hypothesis import given, note, settings
from hypothesis import strategies as st
from test_pass_equivalence import _host, assert_same

from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime, eval_graph
from tenferro_runtime.executor import build_executable
from tenferro_runtime.pipeline import PassWarning, optimize

DEVICES = ("numpy:cpu", "torch:cpu")  # read by conftest.py (on_backends): backend_device
HAS_NUMBA = importlib.util.find_spec("tenferro_numba") is not None


@contextlib.contextmanager
def generated_everywhere():
    """tenferro-numba's size thresholds at their least (restored after)."""
    if not HAS_NUMBA:
        yield
        return
    from tenferro_numba import executor

    names = ("MIN_ELEMENTS", "MIN_WORK", "TORCH_MIN_ELEMENTS", "TORCH_MIN_WORK", "TORCH_MANY_MIN_ELEMENTS")
    saved = {n: getattr(executor, n) for n in names}
    try:
        for n in names:
            setattr(executor, n, 1)
        yield
    finally:
        for n, v in saved.items():
            setattr(executor, n, v)


def _fresh_copy(t, device: str):
    """A tensor of `t`'s value in memory of its own (a donated input is consumed)."""
    return xp.asarray(np.array(_host(t)), device=device)


@settings(deadline=None, max_examples=20)
@given(data=st.data(), executor=st.sampled_from([None, "plan"]), donate=st.booleans(),
       generate=st.booleans())
def test_executors_give_the_unoptimized_values(backend_device, data, executor, donate, generate):
    graph, args = data.draw(graphs(backend_device), label="graph")
    want = eval_graph(graph, *args)
    donated = (0,) if donate and args else ()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PassWarning)
        optimized = optimize(graph.replace(meta={**graph.meta, "donated": donated}), default_runtime())
    note(f"optimized:\n{optimized}")
    before = [_host(a).copy() for a in args]
    inputs = [_fresh_copy(a, backend_device) if i in donated else a for i, a in enumerate(args)]
    with generated_everywhere() if generate else contextlib.nullcontext():
        exe = build_executable(optimized, executor)
        note(f"executable: {getattr(exe, 'kind', type(exe).__name__)}")
        got = exe.run(tuple(inputs))
    assert_same(got, want, f"executor {executor or 'default'}")
    for i, (a, h) in enumerate(zip(args, before)):  # only the donated copy may be written
        np.testing.assert_array_equal(_host(a), h, err_msg=f"input {i} was overwritten")
