"""Hypothesis profiles shared with the root suite; Forge's fixtures: every test gets its own
registry directory (TENFERRO_FORGE_REGISTRY), never the user's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tenferro_runtime.testing.profiles import load_profiles

load_profiles()

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE = Path(__file__).parents[1] / "examples" / "reduce_max_rows"
SMALL = [(256, 32), (128, 64)]
"""Shapes of the verification-only tasks (cheap)."""
BENCH = [(8192, 32)]
"""Shapes of tasks that are benchmarked: big enough that the roofline sees a cache."""


@pytest.fixture(autouse=True)
def forge_registry(tmp_path_factory, monkeypatch):
    reg = tmp_path_factory.mktemp("registry")
    monkeypatch.setenv("TENFERRO_FORGE_REGISTRY", str(reg))
    monkeypatch.delenv("TENFERRO_FORGE_DISABLE", raising=False)
    return reg


def make_task(directory: Path, candidate: Path | None, shapes=SMALL, op="reduce_max", params=None) -> Path:
    """A reduce_max float32 task over `shapes` in `directory`, holding `candidate`'s files."""
    from tenferro_forge.task import new_task

    new_task(
        directory,
        op,
        device="numpy:cpu",
        dtype="float32",
        shapes=shapes,
        params={"axes": [1]} if params is None else params,
    )
    if candidate is not None:
        for f in candidate.iterdir():
            if f.is_file():
                shutil.copyfile(f, directory / f.name)
    return directory


@pytest.fixture(scope="session")
def example_gates(tmp_path_factory):
    """The honest example's task (BENCH shapes), verified and benchmarked once per session:
    (task dir, verify report, bench report)."""
    from tenferro_forge import gates

    d = make_task(tmp_path_factory.mktemp("example") / "task", EXAMPLE, shapes=BENCH)
    mp = pytest.MonkeyPatch()
    mp.setenv("TENFERRO_FORGE_REGISTRY", str(tmp_path_factory.mktemp("bench_registry")))
    try:
        return d, gates.verify(d), gates.bench(d, calls=30)
    finally:
        mp.undo()
