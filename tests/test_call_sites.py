"""A traced node's call site is the user's line, never a frame of a loaded plugin's package."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap

import pytest

import tenferro_numpy.plugin as numpy_plugin
from tenferro_core.errors import ShapeError
from tenferro_runtime import Runtime, trace, use_runtime
from tenferro_runtime import array_api as xp

PLUGIN = '''
from tenferro_core.extension import define_op
from tenferro_core.errors import ShapeError
from tenferro_core.plugins import hookimpl


def _rule(x):
    if x.ndim != 1:
        raise ShapeError(f"thirdparty.twice: expected a vector, got rank {x.ndim}")
    return x.shape, x.dtype


twice_p = define_op("thirdparty_ops.twice.v1", _rule)


def twice(x):
    """The package's public function: the frames to skip live here."""
    return _inner(x)


def _inner(x):
    return twice_p.bind(x)


@hookimpl
def tenferro_register(registry):
    registry.add_op(twice_p)
    registry.add_kernel("numpy", twice_p, lambda x: x * 2)
'''


@pytest.fixture
def thirdparty(tmp_path, monkeypatch):
    pkg = tmp_path / "thirdparty_ops"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("thirdparty_ops")
    rt = Runtime([numpy_plugin, mod])
    with use_runtime(rt):
        yield rt, mod
    sys.modules.pop("thirdparty_ops", None)


def test_node_of_a_third_party_op_points_at_the_users_line(thirdparty):
    rt, mod = thirdparty
    assert "thirdparty_ops" in rt.plugin_packages

    def user_fn(x):
        return mod.twice(x) + 1.0  # the line the node must name

    graph = trace(user_fn, xp.asarray([1.0, 2.0]))
    here = os.path.basename(__file__)
    line = user_fn.__code__.co_firstlineno + 1
    sites = [n.site for n in graph.nodes]
    assert sites[0] == f"{here}:{line}", sites
    assert all(s.startswith(here) for s in sites)


def test_trace_time_error_of_a_third_party_op_names_the_users_line(thirdparty):
    _, mod = thirdparty

    def user_fn(x):
        return mod.twice(x)

    line = user_fn.__code__.co_firstlineno + 1
    with pytest.raises(ShapeError, match=rf"expected a vector.*\(at {os.path.basename(__file__)}:{line}\)"):
        trace(user_fn, xp.ones((2, 2)))
