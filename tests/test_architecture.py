"""One owner per mechanism, checked on the source: the interpreter stack's private names stay
in tracing.py, observers are told only through its helpers, kernel failures are mapped by
kernels.py alone, the runtime's modules import without cycles, and no layer patches another
on import."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["tenferro_core", "tenferro_runtime", "tenferro_ad", "extensions", "backend_plugins"]


def _sources(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py")
                  if "/tests/" not in str(p) and ".venv" not in p.parts)


def _uses(pattern: str, *dirs: str) -> set[str]:
    rx = re.compile(pattern)
    return {str(p.relative_to(ROOT)) for p in _sources(*dirs) if rx.search(p.read_text())}


def test_the_interpreter_stack_is_private_to_tracing():
    assert _uses(r"\b_STACK\b", *PACKAGES) == {"tenferro_runtime/tracing.py"}


def test_observers_are_asked_and_told_in_one_place():
    told = _uses(r"(?<!tracing)\.(observe|observe_graph|before)\(", *PACKAGES)
    assert told == {"tenferro_runtime/tracing.py"}


def test_kernel_failures_are_mapped_in_one_place():
    """Only kernels.py builds the KernelError of a kernel (or an executor's runner) that
    raised; everyone else hands what they caught to kernels.failed."""
    assert _uses(r"\bkernel_error\(|\b_out_of_memory\(", *PACKAGES) == {"tenferro_runtime/kernels.py"}
    mapped_here = _uses(r"except TenferroError:\s*\n\s*raise\s*\n\s*except Exception", *PACKAGES)
    # Inductor's first call compiles lazily: a failure there is a compile fallback, not a kernel's
    assert mapped_here <= {"backend_plugins/torch/tenferro_torch/inductor.py"}


def test_no_layer_is_patched_on_import():
    patched = _uses(r"Primitive\.bind\s*=|setattr\(Primitive|install_operators", *PACKAGES)
    assert patched == set()
    tensor = (ROOT / "tenferro_runtime/tensor.py").read_text()
    assert "from . import array_api" not in tensor and "import array_api" not in tensor


def _module_imports(root: Path) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        mod = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        is_init = mod.endswith(".__init__")
        mod = mod.removesuffix(".__init__")
        deps: set[str] = set()
        for node in ast.parse(path.read_text()).body:  # module level: what runs on import
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_init else mod.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                deps.add(target)
                deps.update(f"{target}.{a.name}" for a in node.names)
        graph[mod] = deps
    return {m: {d for d in ds if d in graph and d != m} for m, ds in graph.items()}


def test_the_runtime_imports_without_cycles():
    """Module-level imports of tenferro_runtime form no cycle (a package's __init__ may import
    its own modules)."""
    graph = _module_imports(ROOT / "tenferro_runtime")
    inits = {m for m in graph if (ROOT / m.replace(".", "/") / "__init__.py").exists()}
    graph = {m: ds - inits for m, ds in graph.items() if m not in inits}
    seen: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        seen[m] = 1
        for d in graph.get(m, ()):
            if seen.get(d) == 1:
                pytest.fail(f"import cycle: {' -> '.join(path[path.index(d):] + [d])}")
            if d not in seen:
                visit(d, path + [d])
        seen[m] = 2

    for m in sorted(graph):
        if m not in seen:
            visit(m, [m])


def test_the_core_imports_nothing_above_it():
    code = ("import sys, tenferro_core, tenferro_core.catalog, tenferro_core.plugins; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tenferro_runtime', 'tenferro_ad', 'torch', 'scipy', 'triton')); print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
