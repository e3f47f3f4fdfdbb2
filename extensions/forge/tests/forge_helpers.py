"""Forge's test helpers: fixture paths, task shapes, and a task directory maker."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE = Path(__file__).parents[1] / "examples" / "reduce_max_rows"
SMALL = [(256, 32), (128, 64)]
"""Shapes of the verification-only tasks (cheap)."""
BENCH = [(8192, 32)]
"""Shapes of tasks that are benchmarked: big enough that the roofline sees a cache."""


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


def gated(task: Path, registry_dir: Path) -> tuple:
    """(task, verify report, bench report) for `task`, the bench's machine figures cached in
    `registry_dir` (not the user's registry)."""
    import pytest

    from tenferro_forge import gates

    mp = pytest.MonkeyPatch()
    mp.setenv("TENFERRO_FORGE_REGISTRY", str(registry_dir))
    try:
        return task, gates.verify(task), gates.bench(task, calls=30)
    finally:
        mp.undo()
