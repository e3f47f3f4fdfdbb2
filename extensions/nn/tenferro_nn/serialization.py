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

Writing is atomic: everything is checked first, the file is written to a temporary file in
the target's folder (flushed to disk) and moved over the target with `os.replace`, so a
failure at any point leaves an existing file as it was; an overwritten file keeps its
permission bits (a new one gets the umask's). The operating system refusing the write (a
read-only folder, a full disk, a directory at the path) is a `TenferroIOError`, an `OSError`
with the original errno, naming the path.

Reading: a file that is not safetensors or whose header is damaged (truncated, not JSON,
wrong types, offsets that do not tile the data) and a damaged tenferro header (``tenferro.dtypes``
or ``tenferro.tree`` of the wrong shape or types, or not matching the tensors) are a
`SerializationError` (a ValueError) naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import struct
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, TenferroError, TenferroIOError
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
    """A file is not a readable safetensors file (truncated, a damaged header), its tenferro
    header is damaged, or it holds what tenferro cannot load. The message names the file."""


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


# safetensors' dtype tags, by NumPy dtype name (complex is stored as its real view)
_ST_DTYPE = {"bool": "BOOL", "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8",
             "uint16": "U16", "uint32": "U32", "uint64": "U64", "float16": "F16", "bfloat16": "BF16",
             "float32": "F32", "float64": "F64"}


def _write(path: str, arrays: dict[str, tuple[np.ndarray, str]], meta: dict[str, str]) -> None:
    """Write the safetensors file atomically: a temporary file in the target's folder (written,
    flushed to disk, given the old file's permission bits) replaces `path` with `os.replace`,
    so a failure at any point leaves an existing file as it was. An OS failure (read-only
    folder, full disk, a directory at `path`) is a `TenferroIOError` naming the path."""
    from . import __version__

    header = {"format": FORMAT, **meta, "tenferro_nn": __version__,
              _DTYPES_KEY: json.dumps({k: d for k, (_, d) in arrays.items()})}
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise MissingFileError(f"save: the folder {folder!r} of {path!r} does not exist; create it first")
    if os.path.isdir(path):
        raise TenferroIOError(f"save: {path!r} is a directory; give the path of a file to write",
                              errno.EISDIR, path)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.isfile(path) else None
    except OSError:
        mode = None
    head, blobs = _layout(arrays, header)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    fd = -1
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        if mode is not None:  # overwriting: keep the file's permission bits (umask applied otherwise)
            os.chmod(tmp, mode)
        _write_all(fd, head)
        for blob in blobs:
            _write_all(fd, blob)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except OSError as exc:
        raise TenferroIOError(
            f"save: could not write {path!r}: {exc.strerror or exc}"
            f"{' (in ' + repr(exc.filename) + ')' if exc.filename and exc.filename != tmp else ''}; "
            f"the existing file, if any, is unchanged", exc.errno, path) from exc
    finally:
        if fd >= 0:
            os.close(fd)
        if os.path.exists(tmp):
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _sync_folder(folder)


def _layout(arrays: dict[str, tuple[np.ndarray, str]], header: dict[str, str]) -> tuple[bytes, list]:
    """(the length-prefixed JSON header, the tensors' bytes in file order). Tensors are laid out
    by decreasing item size, so each is aligned to its item size (the header is padded to 8
    bytes with spaces, as the safetensors writer does)."""
    order = sorted(arrays, key=lambda k: -arrays[k][0].dtype.itemsize)  # stable: saved order within a size
    entries: dict[str, Any] = {"__metadata__": header}
    blobs = []
    offset = 0
    for k in order:
        a = arrays[k][0]
        le = a.dtype.newbyteorder("<")
        if a.dtype != le:
            a = a.astype(le)
        raw = a.reshape(-1).view(np.uint8)
        entries[k] = {"dtype": _ST_DTYPE[a.dtype.name], "shape": list(a.shape),
                      "data_offsets": [offset, offset + raw.nbytes]}
        offset += raw.nbytes
        if raw.nbytes:
            blobs.append(memoryview(raw))
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, blobs


def _write_all(fd: int, data: Any) -> None:
    """Write all of `data` (bytes or a byte memoryview) to `fd`, however many calls it takes."""
    view = memoryview(data)
    while view.nbytes:
        n = os.write(fd, view[:1 << 30])
        view = view[n:]


def _sync_folder(folder: str) -> None:
    """Make the rename durable (POSIX: fsync the folder); best effort."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


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
    nodes, rows = _tree("load_state", path, meta)
    leaves, td = tree_flatten(like)
    want, paths = _describe("load_state", td, leaves)
    diff = _first_difference(nodes, want)
    if diff is not None:
        raise StateDictError(f"load_state({path!r}): {diff}; the state was saved from another model or "
                             f"optimizer (or configuration)")
    if [r[0] for r in rows] != paths:
        raise _damaged("load_state", path, f"{_TREE_KEY!r} lists {len(rows)} leaves that do not match its "
                                           f"{len(paths)} leaf nodes")
    kinds = {p: k for p, k, _ in nodes}
    for p, name, value in rows:
        if name is not None and kinds.get(p) != "tensor":
            raise _damaged("load_state", path, f"{p!r} names tensor {name!r} but its node says "
                                               f"{kinds.get(p)}")
        if name is None and type(value).__name__ != kinds.get(p):
            raise _damaged("load_state", path, f"the value of {p!r} is a {type(value).__name__} but its "
                                               f"node says {kinds.get(p)}")
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
    if os.path.isdir(path):
        raise TenferroIOError(f"{fn}: {path!r} is a directory; give the path of a safetensors file",
                              errno.EISDIR, path)
    try:
        return safe_open(path, framework="numpy")
    except OSError as exc:  # the OS refused it (permissions, ...)
        raise TenferroIOError(f"{fn}: could not read {path!r}: {exc.strerror or exc}", exc.errno,
                              path) from exc
    except (SafetensorError, ValueError) as exc:
        raise SerializationError(
            f"{fn}: {path!r} is not a safetensors file or its header is damaged ({exc}); tenferro reads "
            f"safetensors only (convert a torch.save checkpoint with safetensors.torch.save_file)") from None


def _read(fn: str, path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(key -> host array of its true dtype, in saved order; metadata)."""
    with _open(fn, path) as f:
        meta = dict(f.metadata() or {})
        keys = list(f.keys())
        dtypes = _saved_dtypes(fn, path, meta, keys)
        if dtypes:
            keys = list(dtypes)
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


def _damaged(fn: str, path: str, what: str) -> SerializationError:
    return SerializationError(f"{fn}({path!r}): the tenferro header is damaged: {what}; the file was "
                              f"truncated or edited (save it again)")


def _saved_dtypes(fn: str, path: str, meta: dict[str, str], keys: list[str]) -> dict[str, str]:
    """The file's `tenferro.dtypes` (key -> tenferro dtype name, in saved order), checked against
    the tensors it holds; {} for a file that other software wrote (no such key)."""
    raw = meta.get(_DTYPES_KEY)
    if raw is None:
        return {}
    try:
        dtypes = json.loads(raw)
    except ValueError as exc:
        raise _damaged(fn, path, f"{_DTYPES_KEY!r} is not JSON ({exc})") from None
    if not isinstance(dtypes, dict):
        raise _damaged(fn, path, f"{_DTYPES_KEY!r} is a JSON {type(dtypes).__name__}, not an object of "
                                 f"tensor name -> dtype name")
    names = {d.name for d in D.ALL_DTYPES}
    for k, v in dtypes.items():
        if not isinstance(v, str) or v not in names:
            raise _damaged(fn, path, f"{_DTYPES_KEY!r} gives tensor {k!r} the dtype {v!r:.40}, which is no "
                                     f"tenferro dtype")
    if set(dtypes) != set(keys):
        missing = sorted(set(keys) - set(dtypes))[:5]
        extra = sorted(set(dtypes) - set(keys))[:5]
        raise _damaged(fn, path, f"{_DTYPES_KEY!r} does not list the file's tensors (tensors it lacks: "
                                 f"{missing}; names no tensor has: {extra})")
    return dtypes


def _tree(fn: str, path: str, meta: dict[str, str]) -> tuple[list[list[Any]], list[list[Any]]]:
    """`tenferro.tree` (nodes, leaves), checked for shape and types."""
    try:
        saved = json.loads(meta[_TREE_KEY])
    except ValueError as exc:
        raise _damaged(fn, path, f"{_TREE_KEY!r} is not JSON ({exc})") from None
    nodes = saved.get("nodes") if isinstance(saved, dict) else None
    rows = saved.get("leaves") if isinstance(saved, dict) else None
    if not isinstance(nodes, list) or not isinstance(rows, list):
        raise _damaged(fn, path, f"{_TREE_KEY!r} must be an object with 'nodes' and 'leaves' lists")
    for n in nodes:
        if (not isinstance(n, list) or len(n) != 3 or not isinstance(n[0], str) or not isinstance(n[1], str)
                or not (n[2] is None or (isinstance(n[2], list) and all(isinstance(c, str) for c in n[2])))):
            raise _damaged(fn, path, f"{_TREE_KEY!r} has the node {n!r:.60}; expected [path, kind, "
                                     f"child names or null]")
    for r in rows:
        if (not isinstance(r, list) or len(r) != 3 or not isinstance(r[0], str)
                or not (isinstance(r[1], str) and r[2] is None
                        or r[1] is None and type(r[2]) in (bool, int, float, str))):
            raise _damaged(fn, path, f"{_TREE_KEY!r} has the leaf {r!r:.60}; expected [path, tensor name, "
                                     f"null] or [path, null, a bool/int/float/str value]")
    return nodes, rows


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
    "FORMAT", "MissingFileError", "SerializationError", "TenferroIOError", "load", "load_metadata",
    "load_model", "load_state", "save", "save_model", "save_state",
]
