"""`check(model, *args, fn=None)`: the ONNX checker (full check), onnxruntime and onnx's
reference evaluator run the model on `args`, each compared with tenferro's eager result."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import CheckMismatchError, ModelFormatError, OnnxError

ENGINES = ("onnxruntime", "reference")


class EngineError(OnnxError, RuntimeError):
    """onnxruntime or the reference evaluator could not run a model (the engine's error is
    chained)."""


@dataclass(frozen=True)
class OutputCheck:
    """One output of one engine against tenferro: max abs and max relative error."""

    name: str
    engine: str
    max_abs: float
    max_rel: float
    ok: bool


@dataclass
class CheckResult:
    """Per output and engine, the largest errors (what `check` found)."""

    outputs: list[OutputCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    def max_abs(self, engine: str = "onnxruntime") -> float:
        return max((o.max_abs for o in self.outputs if o.engine == engine), default=0.0)

    def __str__(self) -> str:
        rows = [f"{o.name:<20} {o.engine:<12} max abs {o.max_abs:.3g}  max rel {o.max_rel:.3g}"
                f"{'' if o.ok else '  MISMATCH'}" for o in self.outputs]
        return "\n".join(rows)


def _new_session(data: bytes) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def session(model: Any, runtime: Any = None) -> Any:
    """An onnxruntime CPU session for `model`, reused for the same serialized bytes (a bounded
    cache of the runtime's, ``onnx_sessions`` in ``runtime.caches.stats()``). Serializing and
    hashing a large model costs time on every call: keep the session to run one many times."""
    from tenferro_runtime.runtime import default_runtime

    data = model.SerializeToString()
    cache = (runtime or default_runtime()).caches.get("onnx_sessions", 16)
    return cache.get_or_build(hashlib.sha256(data).digest(), _new_session, data)


def load(model: Any) -> Any:
    """A ModelProto from a ModelProto, a path or bytes; ModelFormatError for anything else."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        try:
            m = onnx.load_from_string(bytes(model))
        except Exception as err:
            raise ModelFormatError(f"these {len(model)} bytes are not an ONNX model ({err}); pass the "
                                   f"bytes of an .onnx file") from err
        return _nonempty(m, "the bytes")
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            from tenferro_core.errors import TenferroIOError

            raise TenferroIOError(f"no ONNX file at {path!r}; pass the path of an existing .onnx file",
                                  2, path)
        try:
            m = onnx.load(path)
        except Exception as err:
            raise ModelFormatError(f"{path!r} is not a valid ONNX model (corrupt or truncated: {err}); "
                                   f"export or download it again") from err
        return _nonempty(m, repr(path))
    raise ModelFormatError(f"expected an onnx.ModelProto, a path or bytes, got {type(model).__name__}")


def _nonempty(m: Any, what: str) -> Any:
    if not m.HasField("graph") or not m.opset_import:
        raise ModelFormatError(f"{what} parsed as an ONNX model without a graph or opset (corrupt or "
                               f"truncated); export or download it again")
    return m


def _leaves(args: tuple) -> list[np.ndarray]:
    from tenferro_runtime.pytree import tree_flatten

    from .exporter import _is_module

    out = []
    for a in args:
        if _is_module(a):
            continue
        for x in tree_flatten(a)[0]:
            if hasattr(x, "_aval") or isinstance(x, np.ndarray):
                out.append(np.asarray(x))
    return out


def _errors(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> tuple[float, float, bool]:
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf"), float("inf"), False
    if got.size == 0:
        return 0.0, 0.0, True
    if want.dtype.kind in "biu":
        diff = got != want
        return float(diff.any()), float(diff.any()), not diff.any()
    g, w = got.astype(np.float64), want.astype(np.float64)
    same_nan = np.array_equal(np.isnan(g), np.isnan(w))
    fin = np.isfinite(w) & np.isfinite(g)
    same_inf = np.array_equal(np.where(np.isinf(w), w, 0), np.where(np.isinf(g), g, 0))
    d = np.abs(g - w)[fin]
    mag = np.abs(w)[fin]
    max_abs = float(d.max()) if d.size else 0.0
    max_rel = float((d / np.maximum(mag, np.finfo(np.float64).tiny)).max()) if d.size else 0.0
    ok = same_nan and same_inf and bool(np.all(d <= atol + rtol * mag))
    return max_abs, max_rel, ok


def _is_bf16(x: np.ndarray) -> bool:
    return x.dtype.name == "bfloat16"


def _ort_run(sess: Any, feeds: dict) -> list[np.ndarray]:
    """`sess.run`, except that bfloat16 arrays (ml_dtypes, which onnxruntime's NumPy bridge cannot
    convert either way) travel as OrtValues holding their bits as uint16."""
    if not any(_is_bf16(x) for x in feeds.values()) and not any(
            o.type == "tensor(bfloat16)" for o in sess.get_outputs()):
        return sess.run(None, feeds)
    import onnxruntime as ort

    feeds = {k: np.require(x, requirements="C") for k, x in feeds.items()}  # 0-d stays 0-d
    vals = {k: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(x.view(np.uint16), 16) if _is_bf16(x)
            else ort.OrtValue.ortvalue_from_numpy(x) for k, x in feeds.items()}
    return [_bf16_of(o) if o.data_type() == "tensor(bfloat16)" else o.numpy()
            for o in sess.run_with_ort_values(None, vals)]


def _bf16_of(v: Any) -> np.ndarray:
    """A copy of a CPU OrtValue of bfloat16 as an ml_dtypes array (its `.numpy()` refuses)."""
    import ctypes

    import ml_dtypes

    shape = tuple(v.shape())
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return np.empty(shape, ml_dtypes.bfloat16)
    bits = np.ctypeslib.as_array((ctypes.c_uint16 * n).from_address(v.data_ptr())).copy()
    return bits.view(ml_dtypes.bfloat16).reshape(shape)


def run(model: Any, inputs: list[np.ndarray], engine: str) -> list[np.ndarray]:
    """The model's outputs on `inputs` (in graph input order) by one engine (bfloat16 inputs and
    outputs as ml_dtypes arrays)."""
    feeds = {i.name: x for i, x in zip(model.graph.input, inputs)}
    try:
        if engine == "onnxruntime":
            return _ort_run(session(model), feeds)
        if engine == "reference":
            from onnx.reference import ReferenceEvaluator

            from .reference_ops import conv_op, loop_op

            evaluator = ReferenceEvaluator(model, new_ops=[loop_op(), conv_op()])
            return [np.asarray(o) for o in evaluator.run(None, feeds)]
    except Exception as err:
        raise EngineError(f"{engine} could not run the model: {type(err).__name__}: {err}") from err
    raise OnnxError(f"check: unknown engine {engine!r}; use one of {ENGINES}")


def check(model: Any, *args: Any, fn: Any = None, rtol: float = 1e-5, atol: float = 1e-6,
          engines: tuple[str, ...] = ENGINES, raise_on_mismatch: bool = True) -> CheckResult:
    """Check `model` (a ModelProto or a path) on `args`: `onnx.checker.check_model(full_check=
    True)`, then each engine's outputs against tenferro's eager result (`fn(*args)`; without
    `fn`, the imported model run by tenferro). Floats: |got - want| <= atol + rtol*|want| with
    NaNs and infinities in the same places; ints and bools exactly. A mismatch raises
    `CheckMismatchError` (its `result` holds every error) unless `raise_on_mismatch=False`."""
    import onnx

    from tenferro_runtime.pytree import tree_flatten

    model = load(model)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as err:
        raise ModelFormatError(f"the ONNX checker rejects the model: {err}") from err
    inputs = _leaves(args)
    n_in = len(model.graph.input) - len({t.name for t in model.graph.initializer})
    if len(inputs) < n_in:
        raise ModelFormatError(f"check: the model takes {n_in} inputs, got {len(inputs)} tensor arguments")
    if fn is None:
        from .importer import import_model

        fn = import_model(model)
        want = [np.asarray(o) for o in tree_flatten(fn(*inputs))[0]]
    else:
        want = [np.asarray(o) for o in tree_flatten(fn(*args))[0]]
    result = CheckResult()
    names = [o.name for o in model.graph.output]
    for engine in engines:
        got = run(model, inputs, engine)
        for name, g, w in zip(names, got, want):
            result.outputs.append(OutputCheck(name, engine, *_errors(np.asarray(g), w, rtol, atol)))
    if raise_on_mismatch and not result.ok:
        raise CheckMismatchError(f"the exported model differs from tenferro beyond rtol={rtol}, "
                                 f"atol={atol}:\n{result}", result)
    return result


__all__ = ["CheckResult", "ENGINES", "EngineError", "OutputCheck", "check", "load", "run", "session"]
