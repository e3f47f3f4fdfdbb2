"""The triton executor end to end: a whole train step (matmuls, row groups, an optimizer
update over parameters of several shapes) runs as generated kernels, with no fallback, and
matches the generic plan; graphs it does not take are declined with the reason."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import tenferro_nn as nn
import tenferro_runtime as tr
from tenferro_ad import value_and_grad
from tenferro_runtime import array_api as xp
from tenferro_runtime import random
from tenferro_runtime.graph import trace
from tenferro_triton import elementwise
from tenferro_triton.executor import compile_graph

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # masked lanes may divide 0 by 0

RNG = np.random.default_rng(0)
X = RNG.standard_normal((6, 9)).astype(np.float32)
Y = RNG.integers(0, 4, 6)
DEV = "torch:cuda:0" if os.environ.get("TENFERRO_TRITON_REAL") == "1" else "torch:cpu"  # see conftest.py


def _train(backend: str, steps: int = 3) -> list[float]:
    with tr.default_device(DEV):
        model = nn.Sequential(nn.Linear(9, 11, key=random.key(0)), nn.ReLU(),
                              nn.Linear(11, 4, key=random.key(1)))
        x, y = xp.asarray(X), xp.asarray(Y)
    opt = nn.Adam(lr=1e-2)
    state = [model, opt.init(model)]

    def step(m, s, x, y):
        loss, g = value_and_grad(lambda m: nn.cross_entropy(m(x), y))(m)
        m, s = opt.update(m, g, s)
        return m, s, loss

    c = tr.compile(step, backend=backend)
    losses = []
    for _ in range(steps):
        state[0], state[1], loss = c(state[0], state[1], x, y)
        losses.append(float(loss))
    assert c._cache[next(iter(c._cache))][0].executable().kind == backend
    return losses


def test_a_train_step_runs_as_generated_kernels_only_and_matches_the_plan(caplog):
    caplog.set_level(logging.DEBUG, logger="tenferro_triton")
    got = _train("triton")
    assert "runs the torch kernels" not in caplog.text
    assert " 0 fallback(s)" in caplog.text
    np.testing.assert_allclose(got, _train("plan"), rtol=1e-5)


def test_a_group_with_outputs_of_several_shapes_runs_one_kernel_per_shape():
    a = xp.asarray(RNG.standard_normal((3, 5)).astype(np.float32), device=DEV)
    b = xp.asarray(RNG.standard_normal((7,)).astype(np.float32), device=DEV)
    t = xp.asarray(np.float32(2.0), device=DEV)

    def update(a, b, t):  # shared scalar work, two independent updates (an optimizer's shape)
        scale = 1.0 - 0.9 ** t
        return a - 0.1 * xp.exp(a) / scale, b * 0.5 / scale, scale * 3.0

    graph = tr.compile(update).lower(a, b, t)
    (fused,) = [n for n in graph.nodes if n.prim.name == "fused"]
    group = fused.params["graph"]
    assert len({o.aval.shape for o in group.outputs}) == 3
    kernel = elementwise.group_kernel(group, a.device)
    assert kernel.__name__.count("+") == 1  # two kernels: (3, 5) with the 0-d output, and (7,)
    env = dict(zip(graph.inputs, (a, b, t)))
    got = kernel(*[env[v]._buf for v in fused.inputs])
    want = update(a, b, t)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.cpu().numpy(), w.numpy(), rtol=1e-6)


def test_graphs_off_torch_devices_are_declined_with_the_reason(caplog):
    caplog.set_level(logging.INFO, logger="tenferro_triton")
    x = xp.asarray(np.ones(3))  # numpy:cpu
    assert compile_graph(trace(lambda v: xp.exp(v) + 1.0, x), x.device) is None
    assert "generates kernels for torch devices only" in caplog.text


def test_without_the_interpreter_cpu_graphs_are_declined(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="tenferro_triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x = xp.asarray(np.ones(3), device="torch:cpu")
    assert compile_graph(trace(lambda v: xp.exp(v) + 1.0, x), x.device) is None
    assert "TRITON_INTERPRET=1" in caplog.text


@pytest.mark.parametrize("backend", ["triton", "inductor"])
def test_named_executors_are_registered_by_their_plugins(backend):
    assert backend in tr.default_runtime().executors
    assert tr.default_runtime().executors["triton"][1] == ("torch:cuda",)
