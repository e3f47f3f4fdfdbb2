"""`Module`: a registered pytree whose tensors are found by attribute path.

Every tensor reachable from a module's attributes (through nested modules, lists, tuples and
dicts) is a leaf; a tensor reachable twice (tied weights) is one leaf, so `grad` gives it one
gradient and an optimizer one update. Tensors named with `register_buffer` are buffers
(running statistics): leaves like parameters, so they flow through `compile`, but never
trained. Every other attribute is static and part of `compile`'s cache key (so `eval()`
compiles its own graph).

Modules work both ways: functionally (`grad(loss)(model, batch)` returns a model-shaped
gradient; `compile(step)(model, state, batch)` traces the model's tensors as inputs) and
PyTorch-style (`model.parameters()` for a tape, `load_state_dict` updates tensors in place).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any, NamedTuple

from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime.pytree import register_pytree_node, tree_flatten
from tenferro_runtime.tensor import Tensor

# the modules being called in this context, outermost first (for error messages)
_CALLS: ContextVar[tuple[Module, ...]] = ContextVar("tenferro_nn_calls", default=())


class Module:
    """Base class of layers and models: subclass it, set attributes in `__init__` (call
    `super().__init__()` first) and write `forward`."""

    training: bool = True
    _buffers: frozenset[str] = frozenset()
    # state-dict entries PyTorch's equivalent layer has and this one does not need (BatchNorm's
    # num_batches_tracked): accepted and ignored by load_state_dict
    _pytorch_only_state: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        register_pytree_node(cls, flatten_module, unflatten_module)

    def __init__(self) -> None:
        self.training = True

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        token = _CALLS.set((*_CALLS.get(), self))
        try:
            return self.forward(*args, **kwargs)
        finally:
            _CALLS.reset(token)

    # ---- tensors by name -----------------------------------------------------------------
    def register_buffer(self, name: str, value: Tensor) -> None:
        """Set attribute `name` to `value` as a buffer: state that is saved and compiled but
        not trained (BatchNorm's running statistics)."""
        if not isinstance(value, Tensor):
            raise ArgumentError(
                f"register_buffer({name!r}): expected a tenferro Tensor, got {type(value).__name__}; "
                f"convert it with array_api.asarray")
        setattr(self, name, value)
        self._buffers = self._buffers | {name}

    def named_parameters(self) -> list[tuple[str, Tensor]]:
        """(path, tensor) of each trainable tensor, each tied tensor once (first path)."""
        return [(n, t) for n, t, buf in _unique(self) if not buf]

    def parameters(self) -> list[Tensor]:
        return [t for _, t in self.named_parameters()]

    def named_buffers(self) -> list[tuple[str, Tensor]]:
        return [(n, t) for n, t, buf in _unique(self) if buf]

    def buffers(self) -> list[Tensor]:
        return [t for _, t in self.named_buffers()]

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """(path, module) of this module and every module below it, each once."""
        seen: set[int] = set()
        for path, m in _modules(self, prefix):
            if id(m) not in seen:
                seen.add(id(m))
                yield path, m

    def modules(self) -> list[Module]:
        return [m for _, m in self.named_modules()]

    def state_dict(self) -> dict[str, Tensor]:
        """Every parameter and buffer by path (a tied tensor under each of its paths, as
        PyTorch does), in definition order."""
        return {n: t for n, t, _ in _named_tensors(self, "")}

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> LoadResult:
        """Load tensors (tenferro tensors, NumPy arrays, DLPack objects) by path, in place.

        Everything is checked first: a missing or unexpected key (with `strict`), a shape or
        dtype that differs is an error naming the key, and then nothing has changed.
        """
        if not isinstance(state, Mapping):
            raise ArgumentError(f"load_state_dict: expected a mapping of path -> tensor, got "
                                f"{type(state).__name__}")
        mine = self.state_dict()
        ignored = {f"{p}.{k}" if p else k for p, m in self.named_modules() for k in m._pytorch_only_state}
        missing = [k for k in mine if k not in state]
        unexpected = [k for k in state if k not in mine and k not in ignored]
        if strict and (missing or unexpected):
            raise StateDictError(
                f"load_state_dict into {type(self).__name__}: "
                + "; ".join(p for p in (
                    missing and f"missing key(s) {missing}",
                    unexpected and f"unexpected key(s) {unexpected}") if p)
                + f". The model expects {list(mine)}; the state dict is of another architecture, "
                  f"or pass strict=False to load the keys both have")
        new = {}
        for k, t in mine.items():
            if k not in state:
                continue
            v = state[k]
            shape, dtype = _shape_dtype(v, k)
            if shape != t.shape:
                raise StateDictError(
                    f"load_state_dict: {k!r} has shape {list(shape)} in the state dict but "
                    f"{list(t.shape)} in {type(self).__name__}; the state dict is of another "
                    f"architecture (or configuration)")
            if str(dtype) != str(t.dtype):
                raise StateDictError(
                    f"load_state_dict: {k!r} is {dtype} in the state dict but {t.dtype} in the "
                    f"model; convert the model first (model.astype({dtype}))")
            new[k] = xp.asarray(v, device=t.device, copy=True)
        for k, v in new.items():
            mine[k]._assign(v)
        return LoadResult(missing, unexpected)

    # ---- modes and conversions --------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode here and below (in place); returns self."""
        for m in self.modules():
            m.training = bool(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def astype(self, dtype: Any) -> Module:
        """A copy whose floating tensors are converted to `dtype` (integer buffers stay)."""
        return map_tensors(lambda t: xp.astype(t, dtype) if t.dtype.kind in "fc" else t, self)

    def to_device(self, device: Any) -> Module:
        """A copy whose tensors are on `device`."""
        return map_tensors(lambda t: xp.asarray(t, device=device), self)

    def __repr__(self) -> str:
        kids = [(n, m) for n, m in _children(self)]
        if not kids:
            return f"{type(self).__name__}({self.extra_repr()})"
        body = "\n".join(f"  ({n}): " + repr(m).replace("\n", "\n  ") for n, m in kids)
        return f"{type(self).__name__}(\n{body}\n)"

    def extra_repr(self) -> str:
        return ""


class StateDictError(ShapeError):
    """A state dict does not fit the model: missing, unexpected or mis-shaped keys."""


class LoadResult(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


# ---- the pytree ---------------------------------------------------------------------------
class _Static:
    """An unhashable static attribute, compared by identity."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: Any) -> bool:
        return type(other) is _Static and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


def flatten_module(m: Module) -> tuple[list[Tensor], tuple]:
    """(unique tensors, hashable structure): the structure records where each leaf sits,
    so tied tensors come back tied.

    Structure nodes: a tensor is its leaf index (an int); a static value is (type, value) (the
    type too: 1, 1.0 and True are equal keys); a module is ("m", class, names, nodes); a list,
    tuple or dict is ("l" | "u", nodes) or ("d", keys, nodes). This runs on every compiled
    call that takes a module, so the common attributes are handled without a call each.
    """
    leaves: list[Tensor] = []
    return leaves, _walk(m, leaves, {})


_PLAIN = frozenset({int, float, str, bool, type(None)})


def _walk(x: Any, leaves: list, seen: dict[int, int]) -> Any:
    if isinstance(x, Module):
        d = x.__dict__
        values = d.values()
    elif isinstance(x, (list, tuple, dict)):
        values = x.values() if isinstance(x, dict) else x
    else:
        return _leaf(x, leaves, seen)
    kids = []
    for v in values:
        t = type(v)
        if t is Tensor:
            i = seen.get(id(v))
            if i is None:
                i = seen[id(v)] = len(leaves)
                leaves.append(v)
            kids.append(i)
        elif t in _PLAIN:
            kids.append((t, v))
        else:
            kids.append(_walk(v, leaves, seen))
    if isinstance(x, Module):
        return ("m", type(x), tuple(d), tuple(kids))
    if isinstance(x, dict):
        return ("d", tuple(x), tuple(kids))
    return ("l" if isinstance(x, list) else "u", tuple(kids))


def _leaf(x: Any, leaves: list, seen: dict[int, int]) -> Any:
    if isinstance(x, Tensor):  # a tracer
        i = seen.get(id(x))
        if i is None:
            i = seen[id(x)] = len(leaves)
            leaves.append(x)
        return i
    try:
        hash(x)
    except TypeError:
        return (type(x), _Static(x))
    return (type(x), x)


def unflatten_module(node: tuple, leaves: list) -> Module:
    """The module of structure `node` holding `leaves`: by a builder generated once per
    structure (cached by its value; it reads classes, names and static values from `node`
    itself, so equal structures with unequal statics, 0.0 and -0.0, build correctly)."""
    try:
        build = _BUILDERS.get(node)
    except TypeError:  # an unhashable static: build it by walking the structure
        return _build(node, leaves)
    if build is None:
        if len(_BUILDERS) >= 256:
            _BUILDERS.clear()
        build = _BUILDERS[node] = _builder(node)
    return build(node, leaves)


_BUILDERS: dict = {}


def _builder(node: tuple) -> Any:
    """`build(node, L)`: straight-line code making the structure's modules and containers."""
    lines: list[str] = []
    result = _emit(node, "n", lines)
    src = "def build(n, L):\n" + "".join(f"    {ln}\n" for ln in lines) + f"    return {result}\n"
    scope: dict = {"_new": object.__new__}
    exec(compile(src, "<tenferro_nn module builder>", "exec"), scope)
    return scope["build"]


def _emit(node: Any, path: str, lines: list) -> str:
    """Code for `node` (reached from the structure's root by `path`); module assignments go
    to `lines`, the expression of the value is returned."""
    if type(node) is int:
        return f"L[{node}]"
    kind = node[0]
    if kind == "m":
        name = f"m{len(lines)}"
        lines.append(f"{name} = _new({path}[1])")
        kids = [_emit(c, f"{path}[3][{i}]", lines) for i, c in enumerate(node[3])]
        lines.append(f"{name}.__dict__.update(zip({path}[2], ({''.join(k + ', ' for k in kids)})))")
        return name
    if kind in ("l", "u", "d"):
        at = 2 if kind == "d" else 1
        kids = "".join(_emit(c, f"{path}[{at}][{i}]", lines) + ", " for i, c in enumerate(node[at]))
        return {"l": f"[{kids}]", "u": f"({kids})", "d": f"dict(zip({path}[1], ({kids})))"}[kind]
    return f"{path}[1].value" if type(node[1]) is _Static else f"{path}[1]"


def _build(node: Any, leaves: list) -> Any:
    if type(node) is int:
        return leaves[node]
    kind = node[0]
    if kind == "m":
        m = object.__new__(node[1])
        m.__dict__.update(zip(node[2], [_build(n, leaves) for n in node[3]]))
        return m
    if kind == "l":
        return [_build(n, leaves) for n in node[1]]
    if kind == "u":
        return tuple([_build(n, leaves) for n in node[1]])
    if kind == "d":
        return dict(zip(node[1], [_build(n, leaves) for n in node[2]]))
    v = node[1]
    return v.value if type(v) is _Static else v


register_pytree_node(Module, flatten_module, unflatten_module)


def map_tensors(fn: Callable[[Tensor], Any], m: Module) -> Module:
    """A copy of `m` with `fn` applied to each unique tensor (ties kept)."""
    leaves, node = flatten_module(m)
    return unflatten_module(node, [fn(t) for t in leaves])


def leaf_names(m: Module) -> list[str | None]:
    """The state-dict path of each of `m`'s pytree leaves, in `tree_flatten` order (a tied
    tensor: its first path; a tensor under a private attribute has none: None)."""
    first: dict[int, str] = {}
    for name, t, _ in _named_tensors(m, ""):
        first.setdefault(id(t), name)
    return [first.get(id(t)) for t in flatten_module(m)[0]]


def trainable_mask(tree: Any) -> list[bool]:
    """For each leaf of `tree` (in `tree_flatten` order): is it trained? False for module
    buffers and non-floating tensors, True for every other tensor leaf."""
    leaves = tree_flatten(tree)[0]
    frozen = {id(t) for m in _modules_in(tree) for _, t in m.named_buffers()}
    return [isinstance(t, Tensor) and id(t) not in frozen and t.dtype.kind in "fc" for t in leaves]


def _modules_in(tree: Any) -> list[Module]:
    if isinstance(tree, Module):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [m for x in tree for m in _modules_in(x)]
    if isinstance(tree, dict):
        return [m for x in tree.values() for m in _modules_in(x)]
    return []


# ---- walks by path ------------------------------------------------------------------------
def _items(x: Any) -> list[tuple[str, Any]]:
    if isinstance(x, Module):
        return [(k, v) for k, v in x.__dict__.items() if not k.startswith("_")]
    if isinstance(x, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(x)]
    if isinstance(x, dict):
        return [(str(k), v) for k, v in x.items()]
    return []


def _named_tensors(x: Any, prefix: str) -> Iterator[tuple[str, Tensor, bool]]:
    """(path, tensor, is_buffer) of every tensor below `x`, ties under each path."""
    bufs = x._buffers if isinstance(x, Module) else ()
    for k, v in _items(x):
        if isinstance(v, Tensor):
            yield prefix + k, v, k in bufs
        else:
            yield from _named_tensors(v, f"{prefix}{k}.")


def _unique(m: Module) -> list[tuple[str, Tensor, bool]]:
    seen: set[int] = set()
    out = []
    for n, t, buf in _named_tensors(m, ""):
        if id(t) not in seen:
            seen.add(id(t))
            out.append((n, t, buf))
    return out


def _children(x: Any, prefix: str = "") -> Iterator[tuple[str, Module]]:
    """The modules directly below `x` (through containers), by path."""
    for k, v in _items(x):
        if isinstance(v, Module):
            yield prefix + k, v
        elif isinstance(v, (list, tuple, dict)):
            yield from _children(v, f"{prefix}{k}.")


def _modules(m: Module, prefix: str) -> Iterator[tuple[str, Module]]:
    yield prefix.rstrip("."), m
    for path, c in _children(m):
        yield from _modules(c, f"{prefix}{path}.")


def _shape_dtype(v: Any, key: str) -> tuple[tuple[int, ...], Any]:
    try:
        return tuple(v.shape), v.dtype
    except AttributeError:
        raise StateDictError(
            f"load_state_dict: {key!r} holds a {type(v).__name__}; expected a tensor or array "
            f"(tenferro Tensor, NumPy array, DLPack object)") from None


# ---- layer input checks ---------------------------------------------------------------------
def where(module: Module) -> str:
    """`module` described for an error message: its path from the outermost module being
    called in this context, e.g. "layer 'features.0' (Conv2d) of Sequential"."""
    calls = _CALLS.get()
    if module not in calls or calls[0] is module:
        return f"{type(module).__name__}"
    path = []
    for parent, child in zip(calls, calls[1:]):
        path.append(next((p for p, c in _children(parent) if c is child), "?"))
        if child is module:
            break
    return f"layer {'.'.join(path)!r} ({type(module).__name__}) of {type(calls[0]).__name__}"


def check_input(module: Module, x: Any, expected: str, *, ndim: tuple[int, ...] | None = None,
                sizes: Mapping[int, int] | None = None, like: Tensor | None = None) -> None:
    """Raise a typed error naming the layer when `x` is not a tensor of rank in `ndim` with
    `sizes[axis]` along each given axis (and the dtype of `like`, a parameter)."""
    if not isinstance(x, Tensor):
        raise ArgumentError(f"{where(module)}: expected a tenferro Tensor input {expected}, got "
                            f"{type(x).__name__}; convert it with array_api.asarray")
    bad = ndim is not None and x.ndim not in ndim
    bad = bad or any(x.ndim < (-a if a < 0 else a + 1) or x.shape[a] != n for a, n in (sizes or {}).items())
    if bad:
        raise ShapeError(f"{where(module)}: expected input of shape {expected}, got {list(x.shape)}")
    if like is not None and x.dtype is not like.dtype:
        raise DTypeError(
            f"{where(module)}: input is {x.dtype} but the layer's parameters are {like.dtype}; "
            f"convert the input (astype(x, {like.dtype})) or the model (model.astype({x.dtype}))")


__all__ = [
    "LoadResult", "Module", "StateDictError", "check_input", "flatten_module", "leaf_names", "map_tensors",
    "trainable_mask", "unflatten_module", "where",
]
