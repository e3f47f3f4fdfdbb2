"""The ``numba`` executor: compiled graphs on numpy:cpu and torch:cpu, large fused groups as
generated loops.

NumPy runs a fused elementwise group one ufunc at a time, each a pass over memory: an Adam
update of 670k parameters is 13 passes, 2.6 ms, where one loop takes 0.5 ms
(docs/performance.md, "Train steps vs JAX"). This executor generates one numba function per
group that computes at least `MIN_ELEMENTS` elements in `MIN_WORK` element-operations
(codegen.py) and builds the generic plan with those kernels; every other node, and every
group the generator declines (logged, logger ``tenferro_numba``), runs the device's kernel.
A graph without such a group is declined, so small functions keep the plain plan. An array
operand that is not C-contiguous (a transposed weight gradient) is copied first. On torch:cpu the
buffers are viewed as NumPy arrays (``Tensor.numpy()``, ``torch.from_numpy``: no copies) and
only groups of `TORCH_MIN_ELEMENTS` or more are generated (torch's own run on its threads).

Generated sources live in a cache folder (``TENFERRO_NUMBA_CACHE``, default
``~/.cache/tenferro/numba``) with numba's own compiled-code cache beside them, so a group
compiles once per machine (~0.5 s) and loads in milliseconds after.

Loops run on the calling thread, as NumPy's ufuncs do. numba's parallel loops were tried:
on the 2-core VM a second thread made every train step slower (it takes the core
OpenBLAS's next product wants), and numba's OpenMP layer shares torch's libgomp, whose idle
workers spin ~10 ms after each loop and whose thread count it resets (torch's own steps in
the same process ran 4x slower, docs/performance.md).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from .codegen import Unsupported, generate, in_place_candidates, input_aliases

log = logging.getLogger("tenferro_numba")

MIN_ELEMENTS = 1 << 15
"""Elements a group's results hold, at least, for generated code (fewer: NumPy's kernel)."""
MIN_WORK = 1 << 18
"""Elements times nodes of a group, at least: a short group over few elements gains little
and its first compile costs ~0.5 s."""

TORCH_MIN_ELEMENTS = 1 << 18
"""`MIN_ELEMENTS` on torch:cpu, whose fused groups already run on torch's threads: below it a
one-thread loop lost to them (65k-element groups of a transformer block, 0.04 against 0.02
ms), above it the loop wins (its Adam update, 0.45 against 0.92 ms)."""
TORCH_MIN_WORK = 1 << 22
"""`MIN_WORK` on torch:cpu: an SGD update (2 nodes over 400k elements) is faster as torch's
two-thread kernels (the MLP step 1.07x JAX instead of 0.99x)."""

_LOADED: dict[str, Any] = {}  # generated source -> its numba dispatcher
_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}  # "numba": the module, or None where it is not importable


TORCH_MANY_NODES = 64
"""On torch:cpu a group of this many nodes or more is generated from `TORCH_MANY_MIN_ELEMENTS`
up: each node is a torch call of ~10 us on small tensors, so a dropout mask's threefry
rounds (146 int32 nodes over 4096 counters) and the Adam update of a small model's
parameters (131 nodes over 159k elements) cost 1-1.5 ms a step each as torch calls."""
TORCH_MANY_MIN_ELEMENTS = 1 << 13
"""...counted over its results. Generating a group costs ~0.5-1 s the first time on a machine
(cached on disk after): below this size the groups are a small model's or a test's (the
compile and torch suites generated 8 more groups at 1024, 34 s more on two cores), whose
programs run too few steps to repay it."""


def worth_generating(node: Any, device: Any = None) -> bool:
    """Whether a `fused` node is large enough for a generated loop (on `device`), or a
    batched outer product on numpy:cpu (outer.py) of `MIN_ELEMENTS` or more."""
    if node.prim.name == "dot_general":
        from .outer import is_outer

        return (device is None or device.name == "numpy:cpu") and is_outer(node) and \
            node.outputs[0].aval.size >= MIN_ELEMENTS
    if node.prim.name != "fused":
        return False
    elements = sum(v.aval.size for v in node.outputs)
    torch = device is not None and device.name == "torch:cpu"
    least, work = (TORCH_MIN_ELEMENTS, TORCH_MIN_WORK) if torch else (MIN_ELEMENTS, MIN_WORK)
    if torch and elements >= TORCH_MANY_MIN_ELEMENTS and (
            len(node.params["graph"].nodes) >= TORCH_MANY_NODES or _short_rows(node)):
        return True
    return elements >= least and elements * len(node.params["graph"].nodes) >= work


TORCH_SHORT_ROW = 4
"""On torch:cpu a group computing in 3 or more axes, the last of at most this many elements,
is generated from `TORCH_MANY_MIN_ELEMENTS`: torch's elementwise loops run such rows a few
elements at a time (a 2x2 max pool's gradient on its (N, C, Ho, 2, Wo, 2) view: the window
test and the tie weights, 64x32x8x8 values, ~2 ms a step as torch calls; the step 5.4 -> 3.9 ms)."""


def _short_rows(node: Any) -> bool:
    return any(len(v.aval.shape) >= 3 and v.aval.shape[-1] <= TORCH_SHORT_ROW
               for n in node.params["graph"].nodes for v in n.outputs)


def compile_graph(graph: Any, device: Any) -> Any:
    """`run(input buffers) -> output buffers` for an optimized graph on numpy:cpu or
    torch:cpu, or None where this executor does not apply (the generic plan runs the graph)."""
    if device.name not in ("numpy:cpu", "torch:cpu") or not any(
            worth_generating(n, device) for n in graph.nodes):
        return None
    if _numba() is None:
        return None
    from tenferro_runtime.plan import build_plan

    chooser = _Chooser(device)
    plan = build_plan(graph, kernel_for=chooser.kernel_for)
    if plan is None or not chooser.generated:
        return None
    log.debug("numba executor: %d generated loop(s) in a graph of %d node(s)", chooser.generated,
              len(graph.nodes))
    return plan.run_buffers


def _numba() -> Any:
    """numba, imported once; None if absent."""
    with _LOCK:
        if "numba" not in _STATE:
            try:
                import numba
            except ImportError as exc:
                log.info("numba executor: declined (numba is not importable: %s)", exc)
                numba = None
            _STATE["numba"] = numba
        return _STATE["numba"]


class _Chooser:
    """`kernel_for` of build_plan: a generated kernel per large fused group or batched outer
    product."""

    def __init__(self, device: Any):
        self.device = device
        self.generated = 0

    def kernel_for(self, node: Any) -> Any:
        if not worth_generating(node, self.device):
            return None
        if node.prim.name == "dot_general":
            from .outer import outer_kernel

            self.generated += 1
            return outer_kernel(node, self.device)
        try:
            kernel = fused_kernel(node.params["graph"], self.device)
        except Unsupported as why:
            log.info("numba executor: a fused group at %s runs its own kernel: %s", node.site or "?", why)
            return None
        self.generated += 1
        return kernel


def _uniform(buf: np.ndarray) -> bool:
    """A constant whose elements are all one value as stored: 0-d, or a stride-0 view."""
    return buf.ndim == 0 or (buf.size > 0 and not any(buf.strides))


def fused_kernel(group: Any, device: Any) -> Any:
    """The kernel of a fused group: one generated loop (`group_kernel`), or, where the group
    holds transcendental functions, loops around NumPy's kernels for them (stages.py)."""
    from .stages import cuts, staged_kernel

    if not cuts(group):
        return group_kernel(group, device)
    return staged_kernel(group, device, group_kernel)


class _Bridge:
    """A device's buffers as NumPy arrays and back: the identity on numpy devices; on
    torch:cpu, ``Tensor.numpy()`` and ``torch.from_numpy`` (both share memory)."""

    def __init__(self, device: Any):
        self.numpy = device.backend.name == "numpy"
        if not self.numpy:
            import torch

            self.from_numpy = torch.from_numpy

    def host(self, buf: Any) -> Any:
        return buf.numpy() if not self.numpy else buf

    def array(self, buf: Any) -> Any:
        """`buf` as a C-contiguous array: itself (a view of it on torch:cpu), else a copy
        (a transposed weight gradient: one pass, where the group's NumPy kernel would make one
        per node)."""
        arr = buf if self.numpy else buf.numpy()
        return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)

    def back(self, arr: Any) -> Any:
        return arr if self.numpy else self.from_numpy(np.asarray(arr))


def group_kernel(group: Any, device: Any) -> Any:
    """`(*input buffers) -> [output buffers]` for fused `group` on a numpy or torch:cpu
    device: its generated loop (operands that are not C-contiguous copied first; on
    torch:cpu the array inputs passed by address, pointers.py). What a plan may do with
    its buffers (plan_reuse.py): `new_results` are the positions of outputs that are new
    arrays, `aliases` maps the others that are inputs as they are, `in_place` maps outputs
    to the inputs they may be written into, and `in_place_form(pairs)` is the same kernel
    writing those outputs into those inputs' buffers (a plan calls it where their values
    die: an optimizer's update in its donated state, no new arrays)."""
    kernel = _group_kernel(group, device, {})
    kernel.in_place = in_place_candidates(group)
    kernel.aliases = input_aliases(group)
    produced = {o for n in group.nodes for o in n.outputs}
    kernel.new_results = tuple(p for p, v in enumerate(group.outputs) if v in produced)
    kernel.in_place_form = functools.partial(_in_place_form, group, device)
    return kernel


def _in_place_form(group: Any, device: Any, pairs: tuple) -> Any:
    return _group_kernel(group, device, dict(pairs))


def _group_kernel(group: Any, device: Any, alias: dict) -> Any:
    bridge = _Bridge(device)
    consts = {v: bridge.host(c._buf) for v, c in group.consts.items()}
    uniform = {v: c.reshape(-1)[0] for v, c in consts.items() if _uniform(c)}
    src = generate(group, uniform, pointers=not bridge.numpy, alias=alias)
    fn = load(src.text, src.name)
    numba = _numba()
    types = []
    for k, (kind, what) in enumerate(src.args):
        aval = group.inputs[what].aval if kind == "input" else what.aval
        t = numba.from_dtype(aval.dtype.numpy)
        types.append(numba.types.int64 if k in src.pointer_args else t if k in src.scalar_args
                     else numba.types.Array(t, len(aval.shape), "C"))
    try:
        fn.compile(tuple(types))
    except Exception as exc:  # numba's typing or lowering refused the generated source
        raise Unsupported(f"numba could not compile the group ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''})") from exc
    fixed = {}
    for k, (kind, what) in enumerate(src.args):
        if kind == "const":
            c = consts[what]
            fixed[k] = uniform[what] if what in uniform else c[()] if c.ndim == 0 else np.ascontiguousarray(c)
    arrays = [k for k, (kind, _) in enumerate(src.args) if kind == "input" and k not in src.scalar_args]
    scalars = [k for k, (kind, _) in enumerate(src.args) if kind == "input" and k in src.scalar_args]
    dtypes = [a.dtype.numpy for a in src.result_avals]
    zero_d = [k for k, a in enumerate(src.result_avals) if a.shape == ()]
    outputs = [(kind, what if kind != "const" else group.consts[what]._buf) for kind, what in src.outputs]

    pointers = bool(src.pointer_args)
    written = dict(alias)  # output position -> the input it is written into

    def kernel(*bufs: Any) -> list:
        args = [None] * len(src.args)
        held = {}  # contiguous copies, alive until the call returns
        for k in arrays:
            if pointers:
                t = bufs[k]
                if not t.is_contiguous() or t.is_neg():  # a negative view shares the plain data
                    t = held[k] = t.resolve_neg().contiguous()
                args[k] = t.data_ptr()
            else:
                args[k] = bridge.array(bufs[k])
        for k in scalars:
            args[k] = bridge.host(bufs[k])[()]
        for k, value in fixed.items():
            args[k] = value
        res = list(fn(*args))
        for k in zero_d:
            res[k] = np.asarray(res[k], dtype=dtypes[k])
        # a written output is its input's buffer (or that one's contiguous copy)
        return [(held.get(written[p], bufs[written[p]]) if pointers else args[written[p]])
                if p in written else bridge.back(res[what]) if kind == "result"
                else bufs[what] if kind == "input" else what
                for p, (kind, what) in enumerate(outputs)]

    return kernel


def cache_dir() -> Path:
    """Where generated sources and numba's compiled code are kept (``TENFERRO_NUMBA_CACHE``
    as it is now; the folder is made and probed once per value)."""
    return _cache_dir(os.environ.get("TENFERRO_NUMBA_CACHE"))


@functools.cache
def _cache_dir(root: str | None) -> Path:
    if root:
        path = Path(root)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        path = base / "tenferro" / "numba"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".probe"
        probe.write_text("")
        probe.unlink()
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="tenferro-numba-"))
    return path


def load(text: str, name: str) -> Any:
    """The numba dispatcher of generated source `text` defining `name`, loaded once per
    process from a file of the cache folder (so numba caches its compiled code)."""
    with _LOCK:
        hit = _LOADED.get(text)
        if hit is not None:
            return hit
        import numba

        options = dict(error_model="numpy", cache=True, nogil=True)
        # the options and numba's version name the file, so numba's cache of it never holds
        # code compiled with others
        header = f"# generated by tenferro-numba: numba {numba.__version__}, njit({options})\n"
        imports = "import numba as nb\nimport numpy as np\n"
        if "voidptr(" in text:
            imports += "\nfrom tenferro_numba.pointers import voidptr\n"
        source = f"{header}{imports}\n\n{text}"
        digest = hashlib.sha256(source.encode()).hexdigest()[:24]
        path = cache_dir() / f"g_{digest}.py"
        if not path.exists():
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(source)
            tmp.replace(path)
        module_name = f"tenferro_numba_generated.g_{digest}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        fn = numba.njit(**options)(getattr(module, name))
        _LOADED[text] = fn
        return fn


__all__ = ["MIN_ELEMENTS", "MIN_WORK", "TORCH_MIN_ELEMENTS", "TORCH_MIN_WORK",
           "TORCH_MANY_MIN_ELEMENTS", "TORCH_MANY_NODES", "TORCH_SHORT_ROW", "cache_dir",
           "compile_graph", "group_kernel", "load", "worth_generating"]
