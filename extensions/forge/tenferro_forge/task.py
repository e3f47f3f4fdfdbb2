"""`forge new`: a task directory (task.json, PROMPT.md) generated from the catalog."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from . import ops
from .errors import ForgeArgumentError, ForgeFileError

LANGUAGES = {
    "numpy": ("numpy",),
    "numba": ("numpy", "numba"),
    "torch": ("torch",),
    "triton": ("torch", "triton"),
}
"""Candidate language -> the modules its kernel.py may import besides the standard allow list."""
BACKEND_LANGUAGES = {"numpy": ("numpy", "numba"), "torch": ("torch",), "torch:cuda": ("triton",)}
"""Backends (torch:cuda for the torch backend's GPUs) Forge makes tasks for -> candidate
languages: torch candidates on torch:cpu, Triton candidates on torch:cuda:N."""
DEVICES = {"numpy": None, "torch": ("cpu",)}
"""Backend -> the device ids Forge judges besides cuda:N (None: any)."""
OBJECTIVES = ("latency",)


def parse_shape(text: str) -> tuple[int, ...]:
    """``"64x32"`` -> (64, 32); ``"scalar"`` or ``""`` -> ()."""
    if text in ("", "scalar", "()"):
        return ()
    try:
        dims = tuple(int(p) for p in text.lower().split("x"))
    except ValueError:
        dims = (-1,)
    if any(d < 0 for d in dims):
        raise ForgeArgumentError(f"a shape is dimensions joined by 'x' such as 64x32, got {text!r}")
    return dims


def new_task(
    directory: str | os.PathLike,
    op: str,
    *,
    device: str,
    dtype: str,
    shapes: list,
    params: dict | None = None,
    objective: str = "latency",
) -> Path:
    """Write task.json and PROMPT.md for a kernel of `op` on `device` in `dtype` over `shapes`
    into `directory` (created; an existing task.json is replaced)."""
    prim = ops.primitive(op)
    ops.dtype_of(dtype)
    params = dict(params or {})
    backend, languages = device_languages(device)
    if objective not in OBJECTIVES:
        raise ForgeArgumentError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    shapes = [tuple(parse_shape(s) if isinstance(s, str) else s) for s in shapes]
    if not shapes:
        raise ForgeArgumentError("a task needs at least one shape (--shapes 4096x32 ...)")
    canon = None
    for s in shapes:
        try:
            _, canon, _ = ops.signature(op, dtype, s, params)
        except Exception as exc:
            raise ForgeArgumentError(f"{op} refuses shape {s} with params {params}: {exc}") from exc
    task = {
        "forge_task": 1,
        "op": op,
        "params": {k: list(v) if isinstance(v, tuple) else v for k, v in (canon or {}).items()},
        "device": device,
        "backend": backend,
        "dtype": dtype,
        "shapes": [list(s) for s in shapes],
        "objective": objective,
        "languages": list(languages),
        "reference": {
            "kind": "float64-numpy",
            "kernel": f"tenferro_numpy.kernels.KERNELS[{op!r}]",
            "on": "float64 copies of the operands",
        },
        "baseline": f"the current dispatch kernel for {op} on {device}",
        "tolerance": ops.tolerance(op, dtype),
        "nin": prim.nin,
    }
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    _write(path / "task.json", json.dumps(task, indent=2) + "\n")
    _write(path / "PROMPT.md", prompt(task, prim))
    return path


def device_languages(device: str) -> tuple[str, tuple[str, ...]]:
    """(backend, candidate languages) of a device Forge judges, or a ForgeArgumentError."""
    backend, _, dev_id = device.partition(":")
    if backend == "torch" and re.fullmatch(r"cuda:\d+", dev_id):
        return backend, BACKEND_LANGUAGES["torch:cuda"]
    if backend not in DEVICES or not dev_id or dev_id not in (DEVICES[backend] or (dev_id,)):
        raise ForgeArgumentError(
            f"forge makes tasks for the devices numpy:* (NumPy or numba candidates), torch:cpu "
            f"(torch candidates) and torch:cuda:N (Triton candidates), named like 'numpy:cpu' or "
            f"'torch:cuda:0'; got {device!r}: pick one of those"
        )
    return backend, BACKEND_LANGUAGES[backend]


def is_gpu(task: dict) -> bool:
    """Whether the task's device is a GPU (torch:cuda:N: Triton candidates)."""
    return task.get("backend") == "torch" and str(task.get("device", "")).startswith("torch:cuda")


def load_task(directory: str | os.PathLike) -> dict[str, Any]:
    """task.json of a task directory (a ForgeFileError when it is missing or malformed)."""
    path = Path(directory) / "task.json"
    try:
        task = json.loads(path.read_text())
    except FileNotFoundError:
        raise ForgeFileError(
            f"{path} does not exist; make the task with `tenferro-forge new OP "
            f"--device D --dtype T --shapes ... {directory}` first"
        ) from None
    except (OSError, ValueError) as exc:
        raise ForgeFileError(
            f"{path} is not readable JSON ({exc}); re-create it with `tenferro-forge new`"
        ) from exc
    need = ("op", "params", "device", "backend", "dtype", "shapes")
    if not isinstance(task, dict) or any(k not in task for k in need):
        raise ForgeFileError(f"{path} lacks some of {need}; re-create it with `tenferro-forge new`")
    task["shapes"] = [tuple(s) for s in task["shapes"]]
    return task


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


TORCH_FORBIDDEN = """
- torch: torch.compile, torch.jit, torch.utils.cpp_extension and torch.ops / torch.library
  (compilers and registered kernels: caches across calls, subprocesses, or tenferro's own
  baseline kernel), torch.cuda, torch.distributed, torch.multiprocessing, torch.futures,
  torch.save/load, torch._C and other private names, changing torch's global state
  (set_num_threads, set_default_dtype, set_flush_denormal, backends flags,
  set_float32_matmul_precision), `out=` into an input, in-place ops (`x.add_(...)`) on an
  input, `.half()`, `.bfloat16()`, `.to(torch.float16)` and any dtype narrower than the task's;
  plain torch ops on the inputs and on tensors you allocate are allowed"""

TRITON_FORBIDDEN = """
- Triton candidates compute in their `@triton.jit` kernels: the launcher `kernel` may only
  allocate (torch.empty, empty_like, zeros, full), lay out (contiguous, reshape, view, permute,
  expand) and launch; any other torch op during the call (x.amax, x + 1, x.to(...)) is a
  finding, and so is a call that returns a non-empty result without launching a Triton kernel
- triton.autotune (it times configs inside the first call and caches by argument), triton.testing
  (timers), triton.compile / triton.compiler / triton.runtime / triton.knobs / triton.backends
  (compilers, drivers, global switches such as the interpreter), tl.inline_asm_elementwise
- inside a `@triton.jit` kernel, any module but triton / triton.language (torch, numpy: only the
  interpreter would run them)
- everything forbidden to torch candidates below (torch.cuda included: streams and events belong to
  the harness; launch on the current stream), except that torch computing on the inputs is not
  allowed here"""

FORBIDDEN = """\
- starting processes or threads (subprocess, os, multiprocessing, threading, asyncio,
  concurrent): all work happens inside the call, before it returns
- eval, exec, compile, __import__, importlib, runpy, dynamic attribute access (getattr,
  setattr, dunder attributes), gc, inspect, sys
- network (socket, http, urllib), files (open, np.save/np.load/tofile/memmap), ctypes/cffi
- touching timers (time, timeit) or patching any module's attributes
- calling tenferro (its reference or baseline kernels): write the computation yourself
- returning anything but a fresh buffer of the backend's type (numpy.ndarray, torch.Tensor):
  no NumPy scalars, subclasses, lazy objects, views of the
  inputs, buffers kept from an earlier call, uninitialized memory
- mutating the inputs; caching results across calls (by identity or by content)
- computing in a narrower dtype than the task's, sampling part of a reduction, returning
  constants, special-casing the task's exact shapes or value ranges"""


def prompt(task: dict, prim: Any) -> str:
    """PROMPT.md: everything a kernel author (person or agent) needs, from the catalog."""
    op, dtype, params = task["op"], task["dtype"], task["params"]
    rule = f"the catalog's {op!r}, a {prim.category} op"
    row = _doc_row(op)
    shapes = ", ".join("x".join(map(str, s)) or "scalar" for s in task["shapes"])
    sig = ", ".join(f"x{i}" for i in range(prim.nin)) + "".join(f", *, {k}" for k in params)
    avals, canon, outs = ops.signature(op, dtype, tuple(task["shapes"][0]), params)
    return f"""# Forge task: `{op}` on {task["device"]} in {dtype}

Write a faster kernel for tenferro's `{op}` ({rule}) on `{task["device"]}`, dtype `{dtype}`,
for operand shapes {shapes} (objective: {task["objective"]}).

## Semantics

- Operands: {prim.nin}, each of the same shape, dtype `{dtype}`.
- docs/primitives.md: {row}
- Params (canonical, exact types): `{canon}`.
- Shape and dtype rule: for operands {", ".join(a.str_short() for a in avals)} the result is
  {", ".join(a.str_short() for a in outs)} (the catalog's abstract eval; other shapes follow the same rule).
- Reference: {task["reference"]["kernel"]} run on {task["reference"]["on"]}; your result is
  compared with it over the whole output.
- Tolerance: {task["tolerance"]}. NaN and infinities must sit where the reference has them.

## Kernel contract (docs/backends.md)

{_contract(task, dtype)}
A kernel takes backend buffers positionally and the canonical params as keywords, and returns
a new buffer with exactly the shape and dtype of the abstract eval. It never mutates its
inputs. Inputs may be non-contiguous views, broadcast (stride-0, read-only) arrays, 0-size or
1-size, and hold NaN, +-inf, -0.0 and subnormals. It is chosen once per call signature
(op, operand shapes and dtypes, params) by dispatch; correctness is required for every shape
the op allows, not only the task's.

## Files to produce (in this directory)

- `kernel.py` defining `def kernel({sig})` returning the result{_launcher(task)}.
- `metadata.json`: `{{"author": "...", "language": one of {task["languages"]}, "op": "{op}",
  "signature": {{"dtype": "{dtype}", "device": "{task["device"]}"}}, "claims": "what is faster and why"}}`.
- optional `tests/`.

## Forbidden (the static scan rejects these with a reason per finding)

{FORBIDDEN}{TRITON_FORBIDDEN if is_gpu(task) else ""}{TORCH_FORBIDDEN if task["backend"] == "torch" else ""}

## How it is judged

`tenferro-forge verify DIR` (files, scan, correctness on several seeds and distributions,
edge shapes, strides, IEEE specials, input immutability, fresh outputs, poisoned memory,
caching probes), then `tenferro-forge bench DIR` (a separate process times {_baseline(task)}
and yours interleaved, at least 30 calls per shape; the bootstrap 95%
interval of the speedup must have its lower bound at or above 1.10x on every shape, below the
machine's roofline), then `tenferro-forge promote DIR`.
"""


def _baseline(task: dict) -> str:
    if is_gpu(task):
        return (
            "the Triton executor's generated kernel\nfor the op (compile(..., backend=\"triton\")) on the "
            "GPU, an L2 flush before every call, CUDA events\naround it and every stream synchronized after "
            "it,"
        )
    return "the current\ndispatch kernel"


def _launcher(task: dict) -> str:
    if not is_gpu(task):
        return ""
    return (
        " (for Triton: one or more\n  `@triton.jit` kernels, and `kernel` the plain Python launcher that "
        "allocates the result and\n  launches them, `import triton` and `import triton.language as tl`)"
    )


def _contract(task: dict, dtype: str) -> str:
    """What the backend's kernels receive and return."""
    if is_gpu(task):
        dev = task["device"].partition(":")[2]
        return (
            f"Backend torch (tenferro_torch), device {dev}, Triton candidates: the operands are\n"
            f"`torch.Tensor`s on `{dev}` of dtype `torch.{dtype}` (possibly non-contiguous or expanded,\n"
            f"stride-0 views: call `.contiguous()` in the launcher where the kernel wants rows), and\n"
            f"the result must be a fresh, plain `torch.Tensor` on the same device of dtype\n"
            f"`torch.{dtype}` (no storage shared with an input, no requires_grad). Launch on the current\n"
            f"stream; the harness synchronizes every stream after each call. Without a GPU, verify\n"
            f"runs the kernels in Triton's interpreter (TRITON_INTERPRET=1) on torch:cpu tensors, so\n"
            f"use nothing the interpreter lacks; `bench` needs the GPU.\n"
        )
    if task["backend"] == "torch":
        return (
            f"Backend torch (tenferro_torch), device cpu: the operands are `torch.Tensor`s on the CPU of\n"
            f"dtype `torch.{dtype}` (possibly non-contiguous or expanded, stride-0 views), and the result\n"
            f"must be a fresh, plain `torch.Tensor` on the CPU of dtype `torch.{dtype}` (not a subclass,\n"
            f"not a view of an input: no storage shared with an input, no lazy neg/conj bit, no\n"
            f"requires_grad). Params are Python ints and tuples. The benchmark pins torch's intra-op\n"
            f"threads to the same count for your kernel and the baseline; leave them as they are.\n"
        )
    return (
        f"Backend numpy, device cpu: the operands are `numpy.ndarray`s of dtype `{dtype}`, and the\n"
        f"result must be a fresh, exact `numpy.ndarray` of dtype `{dtype}` (not a NumPy scalar).\n"
    )


def _doc_row(op: str) -> str:
    """The op's row of docs/primitives.md (operand kinds, params, semantics), when the docs
    sit beside the installed tenferro_core (a source checkout)."""
    import tenferro_core

    path = Path(tenferro_core.__file__).resolve().parents[1] / "docs" / "primitives.md"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return "(not found: see the catalog's shape rule below)"
    row = next((ln for ln in lines if ln.startswith("|") and f"`{op}`" in ln or f"`{op}(" in ln), None)
    return row.strip() if row else "(no row: see the catalog's shape rule below)"


__all__ = [
    "BACKEND_LANGUAGES",
    "DEVICES",
    "LANGUAGES",
    "device_languages",
    "is_gpu",
    "load_task",
    "new_task",
    "parse_shape",
    "prompt",
]
