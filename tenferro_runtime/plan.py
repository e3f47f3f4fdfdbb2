"""Plans: a Graph resolved once against one device's kernels, then replayed on buffers.

`build_plan(graph)` looks every node's kernel up in the device's dispatch memo (the one
eager evaluation uses, so backend specialization and kernel checks apply) and records
(kernel, input slots, output slots, params). Nodes whose inputs are all fixed (graph
constants, or nodes without operands such as `full`) run once at build time and their
results become constants of the plan, up to a size bound. Replaying calls the kernels in order on
buffers, with no per-op dispatch and no Tensor wrappers in between. A plan replays only
where eager evaluation would run every node: in a context whose stack is the eager
interpreter alone, on concrete tensors of the plan's device. Everywhere else `eval_graph`
binds node by node, so transformations and observers still see every primitive.
"""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import TenferroError

from .eager import kernel_error, params_key
from .tensor import Tensor

_new_tensor = object.__new__
_FOLD_MAX = 1 << 16  # elements: larger constant results are recomputed rather than kept


class Plan:
    """Kernels of a graph in order over a flat list of buffer slots."""

    __slots__ = ("device", "in_avals", "template", "steps", "outputs")

    def __init__(self, device: Any, in_avals: tuple, template: list, steps: list, outputs: list):
        self.device = device
        self.in_avals = in_avals
        self.template = template  # slot -> constant buffer, None for inputs and node results
        self.steps = steps  # (kernel, prim, input slots, output slots, params or None, multiple)
        self.outputs = outputs  # (slot, aval) per graph output, or (None, value) for a non-Var

    def accepts(self, args: tuple) -> bool:
        """True when `args` are concrete tensors of the plan's input avals (and device)."""
        for a, aval in zip(args, self.in_avals):
            if type(a) is not Tensor or a._aval is not aval:
                return False
        return True

    def run(self, args: tuple) -> list:
        """The graph's outputs from concrete input tensors (see `accepts`)."""
        env = self.template.copy()
        for i, a in enumerate(args):
            env[i] = a._buf
        _execute(self.steps, env, self.device)
        results = []
        for slot, aval in self.outputs:
            if slot is None:
                results.append(aval)
            else:
                t = _new_tensor(Tensor)
                t._buf = env[slot]
                t._aval = aval
                results.append(t)
        return results


def _execute(steps: list, env: list, device: Any) -> None:
    """Run `steps` in order, reading and writing buffer slots of `env`."""
    for fn, prim, ins, outs, params, multiple in steps:
        try:
            if params is None:
                out = fn(*[env[i] for i in ins])
            else:
                out = fn(*[env[i] for i in ins], **params)
        except TenferroError:
            raise
        except Exception as exc:
            raise kernel_error(prim, device, exc) from exc
        if multiple:
            for o, b in zip(outs, out):
                env[o] = b
        else:
            env[outs[0]] = out


def build_plan(graph: Any) -> Plan | None:
    """A Plan for `graph`, or None where a node has no kernel (a decomposition runs instead)
    or the graph spans devices or has no inputs or constants to say which device it is on."""
    from .graph import Var

    avals = [v.aval for v in graph.inputs] + [v.aval for v in graph.consts]
    devices = {id(a.device): a.device for a in avals}
    if len(devices) != 1:
        return None
    (device,) = devices.values()
    slots: dict[Any, int] = {v: i for i, v in enumerate(graph.inputs)}
    template: list = [None] * len(graph.inputs)
    for v, t in graph.consts.items():
        if type(t) is not Tensor or t._aval.device is not device:
            return None
        slots[v] = len(template)
        template.append(t._buf)
    steps = []
    known = set(range(len(graph.inputs), len(template)))  # slots whose buffers are fixed
    for node in graph.nodes:
        in_avals = tuple(v.aval for v in node.inputs)
        prim, params = node.prim, node.params
        if any(a.device is not device for a in in_avals):
            return None
        if not in_avals and params.get("device") is not device:
            return None
        try:
            if prim.params:
                fn = device.dispatch(prim, in_avals, *params_key(prim, params))[0]
            else:
                fn = device.dispatch(prim, *in_avals)[0]
        except (TenferroError, TypeError):  # node-by-node evaluation raises it where it belongs
            return None
        if fn is None:
            return None
        outs = []
        for v in node.outputs:
            slots[v] = len(template)
            outs.append(len(template))
            template.append(None)
        ins = tuple(slots[v] for v in node.inputs)
        step = (fn, prim, ins, tuple(outs), dict(params) if params else None, prim.multiple_results)
        if (not prim.effects and all(i in known for i in ins)
                and sum(v.aval.size for v in node.outputs) <= _FOLD_MAX):
            _execute([step], template, device)  # constant folding: inputs fixed, so is the result
            known.update(outs)
        else:
            steps.append(step)
    outputs = [(slots[v], v.aval) if isinstance(v, Var) else (None, v) for v in graph.outputs]
    return Plan(device, tuple(v.aval for v in graph.inputs), template, steps, outputs)


__all__ = ["Plan", "build_plan"]
