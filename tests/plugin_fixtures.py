"""Fake plugins and distributions for the plugin-system tests."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from tenferro_core.plugins import hookimpl
from tenferro_numpy.backend import NumpyBackend


class TwinBackend(NumpyBackend):
    """A second CPU backend (NumPy underneath) with an optional subset of kernels."""

    def __init__(self, name: str = "twin", only: set[str] | None = None, priority: int = 0):
        super().__init__()
        self.name = name
        self.priority = priority
        self._only = only

    def kernels(self):
        table = super().kernels()
        return table if self._only is None else {k: v for k, v in table.items() if k in self._only}


class Broken(TwinBackend):
    """A NumPy backend "broken" whose kernels for a few primitives misbehave on purpose."""

    def __init__(self, bad: dict):
        super().__init__("broken")
        self._bad = bad

    def kernels(self):
        return {**super().kernels(), **self._bad}


class BackendPlugin:
    """A plugin object registering one backend."""

    def __init__(self, backend):
        self.backend = backend
        self.__name__ = f"plugin_{backend.name}"

    @hookimpl
    def tenferro_register(self, registry):
        registry.add_backend(self.backend)


def hook_plugin(name: str, register):
    """A plugin object named `name` whose tenferro_register hook calls `register(registry)`."""

    class P:
        __name__ = name

        @hookimpl
        def tenferro_register(self, registry):
            register(registry)

    return P()


def make_dist(root: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    """Write an importable fake distribution (dist-info + modules) under `root`."""
    info = root / f"{dist.replace('-', '_')}-0.3.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.3.1\n")
    eps = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[tenferro]\n{eps}\n")
    for mod, src in modules.items():
        (root / f"{mod}.py").write_text(textwrap.dedent(src))


FAKE_PLUGINS = {
    "tf_fake_broken_import": "import no_such_module_anywhere\n",
    "tf_fake_hook_raises": """
        from tenferro_core.plugins import hookimpl

        @hookimpl
        def tenferro_register(registry):
            raise RuntimeError("boom inside the hook")
    """,
    "tf_fake_invalid": """
        from tenferro_core.plugins import hookimpl

        @hookimpl
        def tenferro_register(registry):
            registry.add_backend(object())
    """,
    "tf_fake_good": """
        from tenferro_core.plugins import hookimpl
        from tenferro_core.extension import define_op

        def _rule(x):
            return x.shape, x.dtype

        def _decomp(x):
            from tenferro_runtime import lax
            return lax.add(x, x)

        double = define_op("tf_fake_good.double.v1", _rule, decomposition=_decomp)

        @hookimpl
        def tenferro_register(registry):
            registry.add_op(double)
    """,
}


def install_fake_dists(root: Path) -> None:
    """Four fake distributions, one plugin each: three broken ways and one good one."""
    for mod in FAKE_PLUGINS:
        name = mod.removeprefix("tf_fake_")
        make_dist(root, f"fake-{name.replace('_', '-')}", {f"fake_{name}": mod}, {mod: FAKE_PLUGINS[mod]})
    sys.path.insert(0, str(root))


def node_by_node(graph, *args):
    """eval_graph with an observer on the stack: no plan applies, every node binds."""
    from tenferro_runtime import tracing
    from tenferro_runtime.graph import eval_graph

    token = tracing.push_observer(tracing.Observer())
    try:
        return eval_graph(graph, *args)
    finally:
        tracing.pop(token)
