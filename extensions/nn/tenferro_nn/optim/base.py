"""The `Optimizer` base: one update rule, used two ways.

Functional (optax-like, what a compiled train step uses)::

    opt = Adam(lr=1e-3)
    state = opt.init(model)                            # an OptState pytree of tensors
    model, state = opt.update(model, grads, state)     # new values; nothing is modified

PyTorch-style::

    opt = Adam(model.parameters(), lr=1e-3)            # or Adam(model, ...) or any pytree
    opt.step(grads)                                    # parameters updated in place (Tensor._assign)

`params` is any pytree (a Module, a dict, a list of tensors). Only the leaves `trainable_mask`
marks are updated and have state; the others pass through unchanged. The step count is a
tensor in the state, and a schedule as `lr` is evaluated on it with tensor ops, so a compiled
train step traces once. Hyper-parameters are static (closed over by the compiled function).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from tenferro_core.errors import ArgumentError, DTypeError, ShapeError, TenferroError
from tenferro_runtime import array_api as xp
from tenferro_runtime.energy import StepEnergy
from tenferro_runtime.pytree import tree_flatten, tree_unflatten
from tenferro_runtime.tensor import Tensor

from ..checks import HyperparameterError, flag, is_number, number
from ..module import Module, StateDictError, leaf_names, trainable_mask
from .clip import check_norm_args, clip_tensors


class NonFiniteError(TenferroError, ValueError):
    """A gradient or the loss holds NaN or inf (with `check_finite=True`); raised before anything
    is updated. `step` is the number of the refused update, `where` the gradient's parameter
    path (or "loss")."""

    def __init__(self, message: str, step: int, where: str):
        super().__init__(message)
        self.step = step
        self.where = where


class OptState(NamedTuple):
    """An optimizer's state, a pytree of tensors: `step` (0-d int64, the updates done) and
    `slots`, per slot name (e.g. "exp_avg") a tuple with one tensor per trainable leaf of the
    parameters, in `tree_flatten` order."""

    step: Tensor
    slots: dict[str, tuple[Tensor, ...]]


class StepRecord(NamedTuple):
    """What `Optimizer.step` did: the update's number (1 for the first), the learning rate it
    used, the total gradient norm before clipping (with `clip_norm`), the loss (if given) and,
    inside an energy monitor (`tenferro_runtime.energy.measure`), the update's joules and its
    accounting `region` (a child of the monitor's, of kind "step")."""

    step: int
    lr: float
    grad_norm: float | None = None
    loss: float | None = None
    energy: float | None = None
    region: Any = None


Hook = Callable[[Any, StepRecord], None]


def leaf_paths(tree: Any) -> list[str]:
    """A readable path for each leaf of `tree` in `tree_flatten` order ("blocks.0.weight" in a
    module, "3" in a list, "w" in a dict): error messages name parameters by it."""
    out: list[str] = []
    _paths(tree, "", out)
    n = len(tree_flatten(tree)[0])
    return out if len(out) == n else [str(i) for i in range(n)]


def _paths(x: Any, prefix: str, out: list[str]) -> None:
    if isinstance(x, Module):
        out.extend(prefix + (n or f"<leaf {i}>") for i, n in enumerate(leaf_names(x)))
    elif x is None:
        return
    elif isinstance(x, tuple) and hasattr(x, "_fields"):
        for f, c in zip(x._fields, x):
            _paths(c, f"{prefix}{f}.", out)
    elif type(x) in (list, tuple):
        for i, c in enumerate(x):
            _paths(c, f"{prefix}{i}.", out)
    elif type(x) is dict:
        for k in sorted(x):
            _paths(x[k], f"{prefix}{k}.", out)
    else:
        leaves, td = tree_flatten(x)
        if td.kind == "leaf":
            out.append(prefix[:-1] or "<root>")
        else:
            out.extend(f"{prefix}{i}" for i in range(len(leaves)))


def _describe(path: str) -> str:
    return f"parameter {path}" if path.isdigit() else f"parameter {path!r}"


def _is_lr(v: Any) -> bool:
    return is_number(v) or (callable(v) and not isinstance(v, (Module, Tensor)))


class Optimizer:
    """Base class: subclasses give `_slot_names`, `_check`, `_prepare` and `_update_leaf`.

    `hooks` is a per-optimizer list of callables `hook(optimizer, record)` that `step` calls
    after each update with its `StepRecord`: the place to attach accounting (the energy meter
    reports energy per step there) or logging. There is no global state.
    """

    _hyper_names: tuple[str, ...] = ("lr", "clip_norm")
    _default_lr = 1e-3
    _complex = True  # complex parameters supported

    def __init__(self, params: Any, lr: Any, hyper: dict[str, Any], *, clip_norm: float | None,
                 check_finite: bool, hooks: Sequence[Hook]):
        name = type(self).__name__
        if params is not None and _is_lr(params):
            if lr is not None:
                raise ArgumentError(f"{name}: got a learning rate both as the first argument ({params!r}) "
                                    f"and lr={lr!r}; the first argument is the parameters or the lr")
            params, lr = None, params
        hp = self._validated({"lr": self._default_lr if lr is None else lr, **hyper, "clip_norm": clip_norm})
        self.check_finite = flag(name, "check_finite", check_finite)
        self.hooks: list[Hook] = _hooks(name, hooks)
        self.__dict__.update(hp)
        self.params: Any = None
        self.state: OptState | None = None
        if params is not None:
            self._bind(params)

    # ---- hyper-parameters ---------------------------------------------------------------------
    def _validated(self, hp: dict[str, Any]) -> dict[str, Any]:
        name = type(self).__name__
        lr = hp["lr"]
        if not _is_lr(lr):
            raise ArgumentError(f"{name}: lr must be a float or a schedule (a callable of the step), got "
                                f"{type(lr).__name__}")
        if is_number(lr):
            hp["lr"] = number(name, "lr", lr)
        if hp["clip_norm"] is not None:
            hp["clip_norm"] = check_norm_args(f"{name}(clip_norm=...)", hp["clip_norm"], 2.0)[0]
        self._check(hp)
        return hp

    def _check(self, hp: dict[str, Any]) -> None:
        """Validate (and normalize in place) the algorithm's own hyper-parameters."""

    def _nonneg(self, hp: dict[str, Any], *keys: str) -> None:
        """Each of `keys` a finite number >= 0 (as a float)."""
        for k in keys:
            hp[k] = number(type(self).__name__, k, hp[k])

    def _flags(self, hp: dict[str, Any], *keys: str) -> None:
        """Each of `keys` a bool (``amsgrad="no"`` is refused, not truthy)."""
        for k in keys:
            hp[k] = flag(type(self).__name__, k, hp[k])

    def hyperparameters(self) -> dict[str, Any]:
        """The hyper-parameters as plain values (a schedule as lr is given as None)."""
        hp = {k: getattr(self, k) for k in self._hyper_names}
        if callable(hp["lr"]):
            hp["lr"] = None
        return hp

    def _slot_names(self, hp: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        return ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self._hyper_names)})"

    # ---- the functional API -------------------------------------------------------------------
    def init(self, params: Any) -> OptState:
        """The initial state for `params` (zeros; the step count 0)."""
        leaves = tree_flatten(params)[0]
        mask = trainable_mask(params)
        self._check_complex(leaves, [i for i, m in enumerate(mask) if m], _Paths(params))
        train = [t for t, m in zip(leaves, mask) if m]
        tensors = train or [t for t in leaves if isinstance(t, Tensor)]
        device = tensors[0].device if tensors else None
        slots = {n: tuple(xp.zeros_like(t) for t in train) for n in self._slot_names()}
        return OptState(xp.asarray(0, dtype=xp.int64, device=device), slots)

    def update(self, params: Any, grads: Any, state: OptState) -> tuple[Any, OptState]:
        """(new params, new state): one update of `params` by `grads` (a pytree of the params'
        structure, as `grad` returns). Pure: usable inside `compile`. With `check_finite` the
        gradients are checked when they are concrete (not under tracing)."""
        p_leaves, td = tree_flatten(params)
        g_leaves, gtd = tree_flatten(grads)
        if gtd != td:
            raise ArgumentError(
                f"{type(self).__name__}.update: grads must have the structure of params "
                f"({type(params).__name__} with {len(p_leaves)} leaves), got {type(grads).__name__} with "
                f"{len(g_leaves)} leaves; "
                f"differentiate with respect to the params themselves")
        mask = trainable_mask(params)
        paths = _Paths(params)
        idx = self._check_inputs(p_leaves, g_leaves, mask, state, paths)
        if self.check_finite and all(type(g_leaves[i]) is Tensor for i in idx):
            self._check_finite(g_leaves, idx, None, state, paths)
        new, new_state, _, _ = self._apply(p_leaves, g_leaves, idx, state)
        return tree_unflatten(td, new), new_state

    # ---- the PyTorch-style API ----------------------------------------------------------------
    def _bind(self, params: Any) -> None:
        leaves = tree_flatten(params)[0]
        for i, t in enumerate(leaves):
            if isinstance(t, Tensor) and type(t) is not Tensor:
                raise ArgumentError(f"{type(self).__name__}: leaf {i} of the parameters is a traced value; "
                                    f"the PyTorch-style API takes concrete tensors (use init/update "
                                    f"inside compiled or differentiated functions)")
        self.params = params
        self.state = self.init(params)

    def step(self, grads: Any, loss: Any = None) -> StepRecord:
        """Update the parameters given at construction in place by `grads` (their structure,
        or for a Module also the list order of `model.parameters()`), call the hooks and
        return the record. Every check (structure, shapes, dtypes and, with `check_finite`,
        finiteness of the gradients and of `loss`; an open `energy_budget`) runs before
        anything changes. Inside an energy monitor the update is accounted as a child region
        of kind "step", whose joules the record carries."""
        name = type(self).__name__
        if self.params is None:
            raise ArgumentError(f"{name}.step: this optimizer was made without parameters; pass them "
                                f"first ({name}(model.parameters(), lr=...)) or use init/update")
        p_leaves, _ = tree_flatten(self.params)
        g_leaves = self._step_grads(p_leaves, grads)
        mask = trainable_mask(self.params)
        paths = _Paths(self.params)
        idx = self._check_inputs(p_leaves, g_leaves, mask, self.state, paths)
        if self.check_finite:
            self._check_finite(g_leaves, idx, loss, self.state, paths)
        with StepEnergy(f"{name} step") as acct:  # a child region while an energy monitor is open
            new, new_state, lr, norm = self._apply(p_leaves, g_leaves, idx, self.state)
            n = int(new_state.step)
            acct.label = f"{name} step {n}"
            acct.check(acct.label)  # an energy budget refuses the step here, before any assignment
            for old, value in zip(p_leaves, new):
                if value is not old:
                    old._assign(value)
            self.state = new_state
        lv = float(loss) if isinstance(loss, (int, float, Tensor)) and getattr(loss, "size", 1) == 1 else None
        record = StepRecord(n, float(lr), None if norm is None else float(norm), lv, acct.joules, acct.region)
        for hook in self.hooks:
            hook(self, record)
        return record

    def _step_grads(self, p_leaves: list, grads: Any) -> list:
        g_leaves, gtd = tree_flatten(grads)
        if gtd == tree_flatten(self.params)[1]:
            return g_leaves
        if isinstance(self.params, Module) and type(grads) in (list, tuple):
            plist = self.params.parameters()
            if len(grads) == len(plist):
                pos = {id(t): k for k, t in enumerate(plist)}
                return [grads[pos[id(t)]] if id(t) in pos else None for t in p_leaves]
        raise ArgumentError(
            f"{type(self).__name__}.step: grads must have the structure of the parameters "
            f"({type(self.params).__name__} with {len(p_leaves)} leaves), got {type(grads).__name__} with "
            f"{len(g_leaves)} leaves")

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self, state: OptState | None = None) -> dict[str, Any]:
        """{"state": {"step": tensor, "<slot>.<i>": tensor, ...}, "hyperparameters": {...}}
        of this optimizer's state (or of `state`, for the functional API); i counts the
        trainable leaves in `tree_flatten` order."""
        st = self._state_or(state, "state_dict")
        flat: dict[str, Any] = {"step": st.step}
        for n in sorted(st.slots):
            flat.update((f"{n}.{i}", t) for i, t in enumerate(st.slots[n]))
        return {"state": flat, "hyperparameters": self.hyperparameters()}

    def load_state_dict(self, state_dict: Mapping[str, Any], params: Any = None) -> OptState:
        """Load a `state_dict`: into this optimizer, hyper-parameters included (PyTorch-style;
        a saved lr is loaded unless this optimizer's lr is a schedule), or, given the `params`
        it is for, as a new OptState laid out for this optimizer (functional: the saved
        hyper-parameters are ignored, this optimizer is the configuration). Everything is
        checked first; on an error nothing has changed."""
        name = type(self).__name__
        tree = self.params if params is None else params
        if tree is None:
            raise ArgumentError(f"{name}.load_state_dict: this optimizer was made without parameters; pass "
                                f"the params the state is for (load_state_dict(sd, params))")
        if not isinstance(state_dict, Mapping) or not isinstance(state_dict.get("state"), Mapping):
            raise ArgumentError(f"{name}.load_state_dict: expected a mapping with a 'state' mapping (from "
                                f"state_dict()), got {type(state_dict).__name__}")
        hp = dict(self.hyperparameters(), **(state_dict.get("hyperparameters", {}) if params is None else {}))
        unknown = sorted(set(hp) - set(self._hyper_names))
        if unknown:
            raise StateDictError(f"{name}.load_state_dict: unknown hyper-parameter(s) {unknown}; "
                                 f"expected {list(self._hyper_names)}")
        if callable(self.lr) or hp["lr"] is None:
            hp["lr"] = self.lr
        hp = self._validated(hp)
        leaves = tree_flatten(tree)[0]
        train = [t for t, m in zip(leaves, trainable_mask(tree)) if m]
        names = sorted(self._slot_names(hp))
        mine = {f"{n}.{i}": t for n in names for i, t in enumerate(train)}
        given = state_dict["state"]
        missing = [k for k in ["step", *mine] if k not in given]
        unexpected = [k for k in given if k != "step" and k not in mine]
        if missing or unexpected:
            raise StateDictError(f"{name}.load_state_dict: missing key(s) {missing}, unexpected key(s) "
                                 f"{unexpected}; the state dict is of other parameters or another "
                                 f"optimizer setting (expected ['step', {', '.join(map(repr, mine))}])")
        step = given["step"]
        if not hasattr(step, "shape") or step.shape != () or getattr(step.dtype, "kind", "") not in "iu":
            raise StateDictError(f"{name}.load_state_dict: 'step' must be a 0-d integer tensor, got {step!r}")
        new = {}
        for k, t in mine.items():
            v = given[k]
            if not hasattr(v, "shape") or tuple(v.shape) != t.shape or str(v.dtype) != str(t.dtype):
                got = f"{v.dtype}{list(v.shape)}" if hasattr(v, "shape") else type(v).__name__
                raise StateDictError(f"{name}.load_state_dict: {k!r} is {got} in the state dict but the "
                                     f"parameter it belongs to is {t.dtype}{list(t.shape)}")
            new[k] = xp.asarray(v, device=t.device, copy=True)
        device = train[0].device if train else None
        out = OptState(xp.asarray(int(step), dtype=xp.int64, device=device),
                       {n: tuple(new[f"{n}.{i}"] for i in range(len(train))) for n in names})
        if params is None:
            self.__dict__.update(hp)
            self.state = out
        return out

    def _state_or(self, state: OptState | None, what: str) -> OptState:
        st = self.state if state is None else state
        if not isinstance(st, OptState):
            raise ArgumentError(f"{type(self).__name__}.{what}: this optimizer was made without parameters, "
                                f"so pass the OptState (from init/update) explicitly")
        return st

    # ---- the update ---------------------------------------------------------------------------
    def _check_inputs(self, p_leaves: list, g_leaves: list, mask: list[bool], state: Any,
                      paths: _Paths) -> list[int]:
        """The indices of the trainable leaves, after checking the gradients and the state."""
        name = type(self).__name__
        idx = [i for i, m in enumerate(mask) if m]
        self._check_complex(p_leaves, idx, paths)
        for i in idx:
            p, g = p_leaves[i], g_leaves[i]
            if not isinstance(g, Tensor):
                raise ArgumentError(f"{name}: the gradient of {paths.of(i)} is a {type(g).__name__}; "
                                    f"expected a {p.dtype}{list(p.shape)} tensor like the parameter")
            if g.shape != p.shape:
                raise ShapeError(f"{name}: the gradient of {paths.of(i)} has shape {list(g.shape)}; "
                                 f"expected the parameter's shape {list(p.shape)}")
            if g.dtype is not p.dtype:
                raise DTypeError(f"{name}: the gradient of {paths.of(i)} is {g.dtype}; expected the "
                                 f"parameter's dtype {p.dtype}")
        if not isinstance(state, OptState):
            raise ArgumentError(f"{name}: expected the OptState from init/update, got {type(state).__name__}")
        step = state.step
        if not isinstance(step, Tensor) or step.shape != () or step.dtype.kind not in "iu":
            raise ArgumentError(f"{name}: the state's step must be a 0-d integer tensor, got {step!r}")
        names = self._slot_names()
        if tuple(sorted(state.slots)) != tuple(sorted(names)):
            raise ArgumentError(f"{name}: the state holds slots {sorted(state.slots)} but this optimizer "
                                f"uses {sorted(names)}; make the state with this optimizer's init")
        for n in names:
            slot = state.slots[n]
            if len(slot) != len(idx):
                raise ShapeError(f"{name}: the state has {len(slot)} {n!r} tensors for {len(idx)} trainable "
                                 f"parameters; it was made for other parameters")
            for k, i in enumerate(idx):
                p, s = p_leaves[i], slot[k]
                if s.shape != p.shape or s.dtype is not p.dtype:
                    raise ShapeError(f"{name}: the state's {n!r} of {paths.of(i)} is "
                                     f"{s.dtype}{list(s.shape)}, the parameter {p.dtype}{list(p.shape)}; it "
                                     f"was made for other parameters")
        return idx

    def _check_complex(self, p_leaves: list, idx: list[int], paths: _Paths) -> None:
        if not self._complex:
            for i in idx:
                if p_leaves[i].dtype.kind == "c":
                    raise DTypeError(f"{type(self).__name__}: {paths.of(i)} is {p_leaves[i].dtype}; this "
                                     f"optimizer supports real floating parameters only (optimize the "
                                     f"real and imaginary parts as two real parameters)")

    def _check_finite(self, g_leaves: list, idx: list[int], loss: Any, state: OptState,
                      paths: _Paths) -> None:
        name = type(self).__name__
        n = int(state.step) + 1
        if loss is not None:
            finite = bool(xp.all(xp.isfinite(loss))) if isinstance(loss, Tensor) else math.isfinite(loss)
            if not finite:
                raise NonFiniteError(f"{name} step {n}: the loss is not finite ({loss}); nothing was updated "
                                     f"(parameters and optimizer state are as before step {n})", n, "loss")
        for i in idx:
            bad = int(xp.count_nonzero(xp.logical_not(xp.isfinite(g_leaves[i]))))
            if bad:
                raise NonFiniteError(
                    f"{name} step {n}: the gradient of {paths.of(i)} has {bad} non-finite (nan/inf) "
                    f"entr{'y' if bad == 1 else 'ies'}; nothing was updated (parameters and optimizer state "
                    f"are as before step {n})", n, paths.path(i))

    def _apply(self, p_leaves: list, g_leaves: list, idx: list[int],
               state: OptState) -> tuple[list, OptState, Any, Any]:
        """(new leaves, new state, lr used, total grad norm or None), checks done."""
        t = state.step
        lr = self._lr_at(t) if callable(self.lr) else self.lr
        grads = [g_leaves[i] for i in idx]
        norm = None
        if self.clip_norm is not None:
            grads, norm = clip_tensors(grads, self.clip_norm)
        ctx = self._prepare(t, lr)
        new = list(p_leaves)
        slots: dict[str, list[Tensor]] = {n: [] for n in state.slots}
        for k, i in enumerate(idx):
            mine = {n: v[k] for n, v in state.slots.items()}
            new[i], s = self._update_leaf(p_leaves[i], grads[k], mine, ctx)
            for n in slots:
                slots[n].append(s[n])
        return new, OptState(t + 1, {n: tuple(v) for n, v in slots.items()}), lr, norm

    def _lr_at(self, t: Tensor) -> Any:
        """The schedule's learning rate for the update after `t` updates, checked before it is
        used: a number or a 0-d real tensor and, when its value is known (not under tracing),
        finite and >= 0; otherwise a typed error, raised before anything is updated."""
        name = type(self).__name__
        sched = self.lr
        lr = sched(t)
        if isinstance(lr, Tensor):
            if lr.ndim != 0 or lr.dtype.kind not in "fiu":
                raise ArgumentError(f"{name}: the learning-rate schedule {sched!r:.80} returned a "
                                    f"{lr.dtype}{list(lr.shape)} tensor; it must return a number or a "
                                    f"0-d real tensor")
            if type(lr) is not Tensor:
                return lr  # traced: its value is checked when a concrete step runs the schedule
            value = float(lr)
        elif is_number(lr):
            value = float(lr)
        else:
            raise ArgumentError(f"{name}: the learning-rate schedule {sched!r:.80} returned "
                                f"{type(lr).__name__} {lr!r:.40}; it must return a number (or a 0-d "
                                f"tensor when called with a tensor step)")
        if not (value >= 0 and math.isfinite(value)):
            if type(t) is Tensor:
                n = int(t) + 1
                at, before = f" step {n}", f" (parameters and optimizer state are as before step {n})"
            else:
                at = before = ""
            raise HyperparameterError(
                f"{name}{at}: the learning-rate schedule {sched!r:.80} gave lr={value!r}; a learning rate "
                f"must be a finite number >= 0, so nothing was updated{before}")
        return lr

    def _prepare(self, t: Tensor, lr: Any) -> dict[str, Any]:
        """Per-update values shared by every leaf (t: the updates done before this one)."""
        return {"lr": lr, "t": t}

    def _update_leaf(self, p: Tensor, g: Tensor, slots: dict[str, Tensor],
                     ctx: dict[str, Any]) -> tuple[Tensor, dict[str, Tensor]]:
        raise NotImplementedError


def _hooks(name: str, hooks: Any) -> list[Hook]:
    if isinstance(hooks, (str, bytes)) or not isinstance(hooks, (list, tuple)):
        raise ArgumentError(f"{name}: hooks must be a list or tuple of callables hook(optimizer, record), "
                            f"got {type(hooks).__name__}")
    for h in hooks:
        if not callable(h):
            raise ArgumentError(f"{name}: hooks must be callables hook(optimizer, record), got "
                                f"{type(h).__name__} {h!r:.40}")
    return list(hooks)


def cast(v: Any, like: Tensor) -> Any:
    """A tensor scalar `v` (float64, computed from the step) in `like`'s dtype; numbers as they are."""
    return xp.astype(v, like.dtype) if isinstance(v, Tensor) and v.dtype is not like.dtype else v


class _Paths:
    """Parameter paths for error messages, computed only when one is needed."""

    def __init__(self, tree: Any):
        self.tree = tree
        self._paths: list[str] | None = None

    def path(self, i: int) -> str:
        if self._paths is None:
            self._paths = leaf_paths(self.tree)
        return self._paths[i]

    def of(self, i: int) -> str:
        return _describe(self.path(i))


__all__ = ["Hook", "HyperparameterError", "NonFiniteError", "OptState", "Optimizer", "StepRecord",
           "leaf_paths"]
