"""safetensors files: state dicts, models and optimizer state.

File format: a standard safetensors file that `safetensors.torch.load_file` (or any reader)
opens. Each tensor is stored under its key with its own dtype (BOOL, I8..I64, U8..U64, F16,
BF16, F32, F64), bit for bit (NaN payloads and -0.0 kept), C-contiguous. The header's
metadata (str -> str) holds the caller's `metadata` and these keys:

- ``format``: ``"tenferro"`` (a caller's own ``format`` wins, e.g. ``"pt"`` for readers that
  demand it, such as transformers);
- ``tenferro_nn``: the version of tenferro-nn that wrote the file;
- ``tenferro.dtypes``: JSON object key -> tenferro dtype name, in the order of the dict saved
  (`load` returns that order);
- ``tenferro.tree`` (`save_state` only): JSON ``{"nodes": [[path, kind, child names], ...],
  "leaves": [[path, tensor key or null, JSON value], ...]}``: the structure `load_state`
  checks (every container and leaf in flattening order) and the plain values.

safetensors has no complex128 (and older readers no complex64), so a complex tensor of shape
``s`` is stored as its real/imaginary float view (F32 for complex64, F64 for complex128) of
shape ``s + (2,)``, as `torch.view_as_real` gives, with the complex dtype in
``tenferro.dtypes``; `load` turns it back (and reads a file's native C64 tensors as complex64).
bfloat16 host buffers use `ml_dtypes` (as the torch backend's), stored as BF16.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, TenferroError
from tenferro_runtime import array_api as xp
from tenferro_runtime.pytree import TreeDef, tree_flatten, tree_unflatten
from tenferro_runtime.runtime import default_runtime
from tenferro_runtime.tensor import Tensor

from .module import LoadResult, Module, StateDictError, leaf_names

FORMAT = "tenferro"
_DTYPES_KEY = "tenferro.dtypes"
_TREE_KEY = "tenferro.tree"
_RESERVED = ("tenferro_nn", _DTYPES_KEY, _TREE_KEY)
_REAL_OF = {"complex64": np.float32, "complex128": np.float64}
PathLike = str | os.PathLike


class SerializationError(TenferroError, ValueError):
    """A file is not a readable safetensors file, or holds what tenferro cannot load."""


class MissingFileError(SerializationError, FileNotFoundError):
    """The file to load does not exist."""


# ---- writing ------------------------------------------------------------------------------
def save(path: PathLike, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> None:
    """Write a flat dict of tensors (tenferro tensors or NumPy arrays) to a safetensors file.

    Everything is checked before the file is touched, and the file is replaced atomically,
    so a failed save leaves an existing file as it was."""
    _write(_check_path("save", path), _arrays("save", tensors), _metadata("save", metadata))


def save_model(model: Module, path: PathLike, metadata: Mapping[str, str] | None = None) -> None:
    """Write `model.state_dict()` (parameters and buffers by path)."""
    if not isinstance(model, Module):
        raise ArgumentError(f"save_model: expected a tenferro_nn Module, got {type(model).__name__}; "
                            f"save a dict of tensors with save(path, tensors)")
    save(path, model.state_dict(), metadata)


def save_state(path: PathLike, tree: Any, metadata: Mapping[str, str] | None = None) -> None:
    """Write any pytree of tensors and plain values (an optimizer's state).

    Tensors are stored under their pytree paths ("state.0.m"); bool/int/float/str leaves and
    the tree's structure go to the metadata as JSON, for `load_state` to check."""
    path = _check_path("save_state", path)
    meta = _metadata("save_state", metadata)
    leaves, td = tree_flatten(tree)
    nodes, paths = _describe("save_state", td, leaves)
    tensors: dict[str, Any] = {}
    rows = []
    for p, leaf in zip(paths, leaves):
        if isinstance(leaf, Tensor):
            name = p
            while name in tensors or name == "__metadata__":
                name += "'"
            tensors[name] = leaf
            rows.append([p, name, None])
        else:
            rows.append([p, None, leaf])
    meta[_TREE_KEY] = json.dumps({"nodes": nodes, "leaves": rows})
    _write(path, _arrays("save_state", tensors), meta)


def _check_path(fn: str, path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"{fn}: the path must be a str or os.PathLike, got {type(path).__name__}")
    return os.fspath(path)


def _metadata(fn: str, metadata: Any) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ArgumentError(f"{fn}: metadata must be a dict of str -> str, got {type(metadata).__name__}")
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ArgumentError(
                f"{fn}: metadata must map str -> str, got {k!r}: {type(v).__name__}; safetensors "
                f"headers hold text only, so convert values with str() or json.dumps()")
        if k in _RESERVED:
            raise ArgumentError(f"{fn}: metadata key {k!r} is reserved for tenferro; rename it")
    return dict(metadata)


def _arrays(fn: str, tensors: Any) -> dict[str, tuple[np.ndarray, str]]:
    """key -> (C-contiguous host array as stored, tenferro dtype name)."""
    if not isinstance(tensors, Mapping):
        raise ArgumentError(f"{fn}: expected a dict of name -> tensor, got {type(tensors).__name__}; "
                            f"for a model use save_model, for nested state save_state")
    out = {}
    for k, v in tensors.items():
        if not isinstance(k, str) or k == "__metadata__":
            raise ArgumentError(f"{fn}: tensor names must be str other than '__metadata__', got {k!r}")
        if isinstance(v, Tensor):
            host, dtype = v.numpy(), v.dtype
        elif isinstance(v, np.ndarray):
            try:
                host, dtype = v, D.from_numpy(v.dtype)
            except DTypeError as exc:
                raise DTypeError(f"{fn}: {k!r}: {exc}") from None
        else:
            raise ArgumentError(
                f"{fn}: {k!r} holds a {type(v).__name__}; expected a tenferro Tensor or a NumPy array "
                f"(convert it with array_api.asarray, or use save_state for plain values)")
        host = host if host.flags.c_contiguous else host.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
        if dtype.kind == "c":
            host = host.reshape(-1).view(_REAL_OF[dtype.name]).reshape(host.shape + (2,))
        out[k] = (host, dtype.name)
    return out


def _write(path: str, arrays: dict[str, tuple[np.ndarray, str]], meta: dict[str, str]) -> None:
    from safetensors.numpy import save_file

    from . import __version__

    header = {"format": FORMAT, **meta, "tenferro_nn": __version__,
              _DTYPES_KEY: json.dumps({k: d for k, (_, d) in arrays.items()})}
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise MissingFileError(f"save: the folder {folder!r} of {path!r} does not exist; create it first")
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    try:
        save_file({k: a for k, (a, _) in arrays.items()}, tmp, metadata=header)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---- reading ------------------------------------------------------------------------------
def load(path: PathLike, device: Any = None) -> dict[str, Tensor]:
    """The tensors of a safetensors file (written by `save`, PyTorch or any other writer) as
    tenferro tensors on `device` (the default device), in the order they were saved."""
    path = _check_path("load", path)
    arrays, _ = _read("load", path)
    dev = default_runtime().device(device)
    out = {}
    for k, a in arrays.items():
        dtype = D.from_numpy(a.dtype)
        if not dev.supports(dtype):
            raise DTypeError(
                f"load({path!r}): tensor {k!r} is {dtype}, which device {dev} does not support; pass "
                f"a device that does (device=...), or convert it before saving")
        out[k] = xp.asarray(a, device=dev)
    return out


def load_metadata(path: PathLike) -> dict[str, str]:
    """The header metadata of a safetensors file (the caller's keys and tenferro's own)."""
    path = _check_path("load_metadata", path)
    with _open("load_metadata", path) as f:
        return dict(f.metadata() or {})


def load_model(model: Module, path: PathLike, strict: bool = True) -> LoadResult:
    """Load a file's tensors into `model` in place (`Module.load_state_dict`): missing,
    unexpected or mis-shaped keys are a `StateDictError` naming the key, and then nothing
    has changed."""
    if not isinstance(model, Module):
        raise ArgumentError(f"load_model: expected a tenferro_nn Module, got {type(model).__name__}; "
                            f"load a dict of tensors with load(path)")
    path = _check_path("load_model", path)
    arrays, _ = _read("load_model", path)
    return model.load_state_dict(arrays, strict=strict)


def load_state(path: PathLike, like: Any) -> Any:
    """A pytree written by `save_state`, with the structure of `like` (its tensors on the
    devices of `like`'s). The structure, the leaf kinds and each tensor's shape and dtype
    must match `like`: otherwise a `StateDictError` names the first path that differs."""
    path = _check_path("load_state", path)
    arrays, meta = _read("load_state", path)
    if _TREE_KEY not in meta:
        raise SerializationError(f"load_state({path!r}): the file was not written by save_state (no "
                                 f"{_TREE_KEY!r} in its metadata); read its tensors with load()")
    try:
        saved = json.loads(meta[_TREE_KEY])
        nodes = [list(n) for n in saved["nodes"]]
        rows = saved["leaves"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SerializationError(f"load_state({path!r}): {_TREE_KEY!r} in the metadata is damaged "
                                 f"({exc})") from None
    leaves, td = tree_flatten(like)
    want, _ = _describe("load_state", td, leaves)
    diff = _first_difference(nodes, want)
    if diff is not None:
        raise StateDictError(f"load_state({path!r}): {diff}; the state was saved from another model or "
                             f"optimizer (or configuration)")
    out = []
    for (p, name, value), leaf in zip(rows, leaves):
        if name is None:
            out.append(value)
            continue
        a = arrays.get(name)
        if a is None:
            raise SerializationError(f"load_state({path!r}): tensor {name!r} of {p!r} is missing "
                                     f"from the file; it is damaged")
        if a.shape != leaf.shape or str(a.dtype) != str(leaf.dtype):
            raise StateDictError(
                f"load_state({path!r}): {p!r} is {a.dtype}{list(a.shape)} in the file but "
                f"{leaf.dtype}{list(leaf.shape)} in `like`; the state was saved from another model "
                f"(or configuration)")
        out.append(xp.asarray(a, device=leaf.device, copy=True))
    return tree_unflatten(td, out)


def _open(fn: str, path: str) -> Any:
    from safetensors import SafetensorError, safe_open

    if not os.path.exists(path):
        raise MissingFileError(f"{fn}: no file {path!r}; check the path (save writes one)")
    try:
        return safe_open(path, framework="numpy")
    except (SafetensorError, OSError, ValueError) as exc:
        raise SerializationError(
            f"{fn}: {path!r} is not a safetensors file ({exc}); tenferro reads safetensors only "
            f"(convert a torch.save checkpoint with safetensors.torch.save_file)") from None


def _read(fn: str, path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(key -> host array of its true dtype, in saved order; metadata)."""
    with _open(fn, path) as f:
        meta = dict(f.metadata() or {})
        try:
            dtypes = json.loads(meta.get(_DTYPES_KEY, "{}"))
        except ValueError:
            raise SerializationError(f"{fn}({path!r}): {_DTYPES_KEY!r} in the metadata is not JSON; "
                                     f"the file is damaged") from None
        keys = list(f.keys())
        if isinstance(dtypes, dict) and set(dtypes) == set(keys):
            keys = list(dtypes)
        else:
            dtypes = {}
        out = {}
        for k in keys:
            if f.get_slice(k).get_dtype() == "BF16":
                D.bfloat16.numpy  # noqa: B018  (registers ml_dtypes' bfloat16 with NumPy, or says to install it)
            try:
                a = f.get_tensor(k)
            except (TypeError, ValueError) as exc:
                raise DTypeError(f"{fn}({path!r}): tensor {k!r} has dtype {f.get_slice(k).get_dtype()}, "
                                 f"which tenferro cannot read ({exc}); convert it before saving") from None
            out[k] = _true_dtype(fn, path, k, a, dtypes.get(k))
    return out, meta


def _true_dtype(fn: str, path: str, key: str, a: np.ndarray, name: Any) -> np.ndarray:
    if name in _REAL_OF:
        real = np.dtype(_REAL_OF[name])
        if a.dtype != real or a.shape[-1:] != (2,):
            raise SerializationError(f"{fn}({path!r}): {key!r} is marked {name} but stored as {a.dtype}"
                                     f"{list(a.shape)}; the file is damaged")
        return a.copy(order="C").view(np.dtype(name)).reshape(a.shape[:-1])
    try:
        dtype = D.from_numpy(a.dtype)
    except DTypeError:
        raise DTypeError(f"{fn}({path!r}): tensor {key!r} is {a.dtype}, which tenferro has no dtype "
                         f"for; convert it (e.g. to float32) before saving") from None
    if name is not None and name != dtype.name:
        raise SerializationError(f"{fn}({path!r}): {key!r} is marked {name} but stored as {dtype}; the "
                                 f"file is damaged")
    return a


# ---- pytree paths -------------------------------------------------------------------------
def _join(p: str, k: Any) -> str:
    return f"{p}.{k}" if p else str(k)


def _describe(fn: str, td: TreeDef, leaves: list[Any]) -> tuple[list[list[Any]], list[str]]:
    """([path, kind, child names or None] of every node and leaf in order; each leaf's path).
    A leaf's kind is "tensor" or its Python type; plain leaves must be bool, int, float or str.
    A module's tensors are named by attribute path (as in its state dict)."""
    nodes: list[list[Any]] = []
    paths: list[str] = []

    def walk(t: TreeDef, p: str) -> None:
        if t.kind == "leaf":
            leaf = leaves[len(paths)]
            if isinstance(leaf, Tensor):
                kind = "tensor"
            elif type(leaf) in (bool, int, float, str):
                kind = type(leaf).__name__
            else:
                raise ArgumentError(
                    f"{fn}: {p or '<root>'!r} holds a {type(leaf).__name__}; expected tensors "
                    f"and bool/int/float/str values (convert it with array_api.asarray)")
            nodes.append([p, kind, None])
            paths.append(p)
            return
        if t.kind == "none":
            nodes.append([p, "None", None])
            return
        names: list[str] = [str(i) for i in range(len(t.children))]
        kind = t.kind
        if t.kind == "dict":
            names = [str(k) for k in t.meta]
        elif t.kind == "namedtuple":
            names, kind = list(t.meta._fields), t.meta.__qualname__
        elif t.kind == "custom":
            cls = t.meta[0]
            kind = f"{cls.__module__}.{cls.__qualname__}"
            if issubclass(cls, Module) and all(c.kind == "leaf" for c in t.children):
                names = _module_names(t, leaves[len(paths):len(paths) + len(t.children)])
        nodes.append([p, kind, names])
        for name, c in zip(names, t.children):
            walk(c, _join(p, name))

    walk(td, "")
    return nodes, paths


def _module_names(td: TreeDef, tensors: list[Any]) -> list[str]:
    """The state-dict path of each of a module node's tensors (its index where it has none)."""
    return [n or str(i) for i, n in enumerate(leaf_names(tree_unflatten(td, tensors)))]


def _first_difference(saved: list[list[Any]], want: list[list[Any]]) -> str | None:
    """Where a saved structure first differs from `like`'s, in words; None when they match."""
    for (pa, ka, na), (pb, kb, nb) in zip(saved, want):
        if pa != pb:
            return f"at {pb or '<root>'!r} `like` has an entry the file lacks (the file has {pa!r})"
        if ka != kb:
            return f"at {pa or '<root>'!r} the file holds {ka} but `like` holds {kb}"
        if na != nb:
            extra = [n for n in na if n not in nb]
            if extra:
                return f"at {_join(pa, extra[0])!r} the file holds an entry that `like` lacks"
            lacking = [n for n in nb if n not in na]
            if lacking:
                return f"at {_join(pa, lacking[0])!r} `like` holds an entry that the file lacks"
            return f"at {pa or '<root>'!r} the entries are in another order ({na} vs {nb})"
    if len(saved) != len(want):
        p = (saved if len(saved) > len(want) else want)[min(len(saved), len(want))][0]
        who = "the file holds an entry that `like` lacks" if len(saved) > len(want) else \
            "`like` holds an entry that the file lacks"
        return f"at {p or '<root>'!r} {who}"
    return None


__all__ = [
    "FORMAT", "MissingFileError", "SerializationError", "load", "load_metadata", "load_model",
    "load_state", "save", "save_model", "save_state",
]
