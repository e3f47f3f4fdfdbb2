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

from .eager import dispatch
from .graph_prims import GraphPrimitive, foldable
from .kernels import call, check_result, plain
from .tensor import Tensor
from .tracing import eager_only

_new_tensor = object.__new__


class Plan:
    """Kernels of a graph in order over a flat list of buffer slots."""

    __slots__ = ("device", "in_avals", "template", "steps", "outputs", "reuse", "avals", "_run",
                 "_wrap", "_loops")

    def __init__(self, device: Any, in_avals: tuple, template: list, steps: list, outputs: list,
                 reuse: dict | None = None, avals: dict | None = None):
        self.device = device
        self.in_avals = in_avals
        self.template = template  # slot -> constant buffer, None for inputs and node results
        # (kernel, prim, input slots, output slots, params or None, multiple, slots to free after)
        self.steps = steps
        self.outputs = outputs  # (slot, aval) per graph output, or (None, value) for a non-Var
        # step index -> (dead slot its result is written into, the kernel's out form)
        self.reuse = reuse or {}
        self.avals = avals or {}  # result slot -> aval: what the first run checks
        self._run: Any = None  # the steps as one generated function (plan_codegen), after the first run
        self._wrap = [(aval, slot is None) for slot, aval in outputs]
        self._loops: dict = {}  # (n_consts, n_carry, reverse) -> the generated scan loop

    def source(self) -> str:
        """The generated Python the plan runs (for debugging)."""
        return self._generate()[1]

    def _generate(self, check: list | None = None) -> tuple[Any, str]:
        from .plan_codegen import generate

        return generate(self.steps, self.template, len(self.in_avals),
                        [slot for slot, _ in self.outputs], self.device, self.reuse, check)

    def accepts(self, args: tuple) -> bool:
        """True when `args` are concrete tensors of the plan's input avals (and device)."""
        for a, aval in zip(args, self.in_avals):
            if type(a) is not Tensor or a._aval is not aval:
                return False
        return True

    def run(self, args: tuple) -> list:
        """The graph's outputs from concrete input tensors (see `accepts`)."""
        run = self._run
        if run is None:
            return wrap_outputs(self._first_run([a._buf for a in args]), self._wrap)
        return wrap_outputs(run([a._buf for a in args]), self._wrap)

    def run_buffers(self, bufs: list) -> list:
        """The graph's output buffers from its input buffers (an executor's runner)."""
        run = self._run
        if run is None:
            return self._first_run(bufs)
        return run(bufs)

    def buffer_runner(self) -> Any:
        """`run_buffers`, or the generated code itself once its first run is done (a loop
        binds it once and calls it per iteration, one frame less)."""
        return self._run or self.run_buffers

    def scan_loop(self, n_consts: int, n_carry: int, reverse: bool) -> Any:
        """The generated loop of a scan whose body is this plan (plan_codegen.generate_scan),
        or None until the plan's first run has checked its kernels. Made once per shape of
        scan; with kernel checks on, every result of every iteration is checked."""
        if self._run is None:
            return None
        key = (n_consts, n_carry, reverse)
        loop = self._loops.get(key)
        if loop is None:
            from .plan_codegen import generate_scan

            n = len(self.in_avals)
            check = [tuple(self.avals[o] for o in step[3]) for step in self.steps] \
                if self.device.runtime.check_kernels else None
            reuse = {k: r for k, r in self.reuse.items() if not r[2]}  # donation: never in a loop
            fixed = {j: getattr(value, "_buf", value) for j, (slot, value) in enumerate(self.outputs)
                     if slot is None}
            loop = generate_scan(self.steps, self.template, n, [slot for slot, _ in self.outputs],
                                 self.device, n_consts, n_carry, reverse, fixed, check, reuse,
                                 self.avals)[0]
            self._loops[key] = loop
        return loop

    def _first_run(self, bufs: list) -> list:
        """Run the generated code with each result checked against its aval (kernels that
        never ran eagerly, an executor's own included, are checked here), then switch to the
        generated code without checks (with them, under kernel checks)."""
        checks = [tuple(self.avals[o] for o in step[3]) for step in self.steps]
        checked = self._generate(checks)[0]
        out = checked(bufs)
        self._run = checked if self.device.runtime.check_kernels else self._generate()[0]
        return out


def wrap_outputs(bufs: Any, wrap: list) -> list:
    """Output buffers as tensors: `wrap` holds (aval, False) per tensor output, (value, True)
    per output that is a fixed value (its buffer entry is ignored)."""
    results = []
    for buf, (aval, const) in zip(bufs, wrap):
        if const:
            results.append(aval)
        else:
            t = _new_tensor(Tensor)
            t._buf = buf
            t._aval = aval
            results.append(t)
    return results


def _execute(steps: list, env: list, device: Any, avals: dict | None = None) -> None:
    """Run `steps` in order, reading and writing buffer slots of `env` (and dropping the
    slots a step frees); with `avals` (result slot -> aval), each result is checked against
    the aval the graph promised (a plan's first run)."""
    for fn, prim, ins, outs, params, multiple, frees in steps:
        out = call(fn, prim, device, [env[i] for i in ins], params)
        if avals is not None:
            check_result(prim, device, tuple(avals[o] for o in outs), out)
        if multiple:
            for o, b in zip(outs, out):
                env[o] = b
        else:
            env[outs[0]] = out
        for i in frees:
            env[i] = None


def _decomposed(prim: Any, in_avals: tuple) -> Any:
    """A kernel running `prim`'s decomposition (an extension op without a kernel on this
    device) on buffers, evaluated eagerly below any observer as node-by-node evaluation does."""
    def kernel(*bufs: Any, **params: Any) -> Any:
        with eager_only():
            out = prim.decomposition(*[Tensor._new(b, a) for b, a in zip(bufs, in_avals)], **params)
        return [o._buf for o in out] if prim.multiple_results else out._buf

    kernel.__name__ = f"decomposition of {prim.name}"
    return kernel


class _Builder:
    """Accumulates a plan's slots and steps, inlining `fused` and `call` nodes without a kernel."""

    def __init__(self, device: Any, n_inputs: int, freeing: bool, kernel_for: Any = None):
        self.device = device
        self.freeing = freeing
        self.kernel_for = kernel_for
        self.own: set = set()  # indices of steps running kernel_for's kernels
        self.template: list = [None] * n_inputs  # slot -> constant buffer
        self.steps: list = []  # step tuples, without their frees
        self.frees: list = []  # per step: slots to drop after it
        self.known: set = set()  # slots whose buffers are fixed
        self.results: set = set()  # slots of node results (the only ones ever freed)
        self.avals: dict = {}  # result slot -> aval

    def slot(self, buf: Any = None) -> int:
        self.template.append(buf)
        return len(self.template) - 1

    def graph(self, graph: Any, slots: dict, free_after: Any) -> bool:
        """Emit `graph`'s nodes (`slots` holds its inputs' slots and gains every var's);
        False where some node has neither a kernel nor a graph to inline."""
        for v, t in graph.consts.items():
            if type(t) is not Tensor or t._aval.device is not self.device:
                return False
            slots[v] = self.slot(t._buf)
            self.known.add(slots[v])
        for i, node in enumerate(graph.nodes):
            if not self.node(node, slots):
                return False
            if free_after is not None and free_after[i] and self.steps:
                self.frees[-1].extend(slots[v] for v in free_after[i] if v in slots)
        return True

    def node(self, node: Any, slots: dict) -> bool:
        device, prim, params = self.device, node.prim, node.params
        in_avals = tuple(v.aval for v in node.inputs)
        if any(a.device is not device for a in in_avals):
            return False
        if not in_avals and params.get("device") is not device:
            return False
        fn = self.kernel_for(node) if self.kernel_for is not None else None
        own = fn is not None
        if own:  # an executor's own kernel: operand buffers in, result buffer(s) out
            params = None
        else:
            try:
                fn = dispatch(prim, in_avals, params, device)[0]
            except (TenferroError, TypeError):  # node-by-node evaluation raises it where it belongs
                fn = None
        decomposable = prim.decomposition is not None
        if fn is None and decomposable and not hasattr(prim, "graph_of"):  # graph prims are inlined
            fn = _decomposed(prim, in_avals)
        if fn is None:
            return self.inline(node, slots)
        outs = []
        for v in node.outputs:
            slots[v] = self.slot()
            outs.append(slots[v])
            self.avals[slots[v]] = v.aval
        self.results.update(outs)
        ins = tuple(slots[v] for v in node.inputs)
        step = (fn, prim, ins, tuple(outs), dict(params) if params else None, prim.multiple_results)
        if all(i in self.known for i in ins) and foldable(node):
            _execute([(*step, ())], self.template, device, self.avals)  # constant folding
            self.known.update(outs)
        else:
            if own:
                self.own.add(len(self.steps))
            self.steps.append(step)
            self.frees.append([])
        return True

    def inline(self, node: Any, slots: dict) -> bool:
        """The steps of a `fused` or `call` node's graph in place of the node."""
        from .graph import Var

        if not isinstance(node.prim, GraphPrimitive):
            return False
        inner = node.prim.graph_of(node.params)
        sub = dict(zip(inner.inputs, [slots[v] for v in node.inputs]))
        if not self.graph(inner, sub, _free_after(inner) if self.freeing else None):
            return False
        for v, o in zip(node.outputs, inner.outputs):
            if isinstance(o, Var):
                slots[v] = sub[o]
            elif type(o) is Tensor and o._aval.device is self.device:
                slots[v] = self.slot(o._buf)
                self.known.add(slots[v])
            else:
                return False
        return True

    def checked_frees(self, out_slots: set) -> list:
        """Per step, the frees that are safe at slot level: node results no later step reads
        and no graph output holds, each freed once (slots alias through inlined graphs)."""
        last_read: dict[int, int] = {}
        for k, step in enumerate(self.steps):
            for i in step[2]:
                last_read[i] = k
        done: set = set()
        result = []
        for k, fr in enumerate(self.frees):
            ok = tuple(i for i in dict.fromkeys(fr) if i in self.results and i not in out_slots
                       and i not in done and last_read.get(i, -1) <= k)
            done.update(ok)
            result.append(ok)
        return result


def _free_after(graph: Any) -> Any:
    """The graph's buffer plan's frees, or its liveness where it has no plan."""
    plan = graph.meta.get("memory")
    if plan is not None and len(plan.free_after) == len(graph.nodes):
        return plan.free_after
    from .passes.memory import free_after

    return free_after(graph)


def build_plan(graph: Any, kernel_for: Any = None) -> Plan | None:
    """A Plan for `graph`, or None where a node has no kernel (a decomposition runs instead)
    or the graph spans devices or has no inputs or constants to say which device it is on.
    A `fused` or `call` node without a kernel is replaced by its graph's steps. Where the
    graph has a buffer plan (``meta["memory"]``, passes/memory.py), each step drops the
    buffers whose last use it was. `kernel_for(node)` lets an executor run nodes with
    kernels of its own (generated code): a function of the node's operand buffers giving its
    result buffer (a sequence of them for a primitive of multiple results, such as `fused`),
    or None for the device's kernel (such steps never take the backend's out= forms)."""
    from .graph import Var

    avals = [v.aval for v in graph.inputs] + [v.aval for v in graph.consts]
    devices = {id(a.device): a.device for a in avals}
    if len(devices) != 1:
        return None
    (device,) = devices.values()
    memory = graph.meta.get("memory")
    b = _Builder(device, len(graph.inputs), memory is not None, kernel_for)
    slots: dict[Any, int] = {v: i for i, v in enumerate(graph.inputs)}
    if not b.graph(graph, slots, _free_after(graph) if memory is not None else None):
        return None
    outputs = [(slots[v], v.aval) if isinstance(v, Var) else (None, v) for v in graph.outputs]
    out_slots = {s for s, _ in outputs if s is not None}
    frees = b.checked_frees(out_slots)
    steps = [(*step, fr) for step, fr in zip(b.steps, frees)]
    reuse = _reuse(b, steps, out_slots, device, graph, memory) if memory is not None else None
    return Plan(device, tuple(v.aval for v in graph.inputs), b.template, steps, outputs, reuse,
                b.avals)


def _reuse(b: _Builder, steps: list, out_slots: set, device: Any, graph: Any, memory: Any) -> dict:
    """step -> (dead slot, out form, donated?): the planned buffers steps write into
    (plan_reuse.py); donated inputs only where the backend can tell they are free. For an
    executor's kernel writing results into its operands: (the operand slots, the kernel's
    in-place form, whether one of them is donated)."""
    out_kernel = getattr(device.backend, "out_kernel", None)
    if out_kernel is None:
        return {}
    from .plan_reuse import plan_reuse

    # one result: a kernel returning it alone, or in a tuple (a fused group's)
    forms = [out_kernel(step[1].name, device.kernels.get(step[1]))
             if len(step[3]) == 1 and k not in b.own else None
             for k, step in enumerate(steps)]
    donated: tuple = ()
    if getattr(device.backend, "donatable", None) is not None:
        donated = tuple(i for i in getattr(memory, "donated", ()) if i < len(graph.inputs)
                        and i not in out_slots)  # an input returned as it is stays the caller's
        b.avals.update((i, graph.inputs[i].aval) for i in donated)
    protected = out_slots | {i for i in range(len(b.template))
                             if i not in b.results and i not in donated}
    known = _known_results(b, steps, forms, device)
    reuse = {}
    for k, (slot, how) in plan_reuse(steps, b.avals, protected, forms, donated, known).items():
        if type(slot) is tuple:  # how: the (result, operand) pairs written in place
            try:
                form = plain(steps[k][0]).in_place_form(how)
            except Exception:  # noqa: BLE001  # no such variant after all: the plain kernel runs
                continue
            reuse[k] = (slot, form, any(s in donated for s in slot))
        else:  # how: whether only if the buffer is donatable
            reuse[k] = (slot, forms[k], how)
    return reuse


def _known_results(b: _Builder, steps: list, forms: list, device: Any) -> dict:
    """step -> (in-place candidates, aliases, new results) (plan_reuse's `known`): from an
    executor's kernel that says (`new_results`, `aliases`, `in_place`), and for the
    backend's kernels whose results are always new arrays (``Backend.fresh_results(name,
    kernel)``, optional: a product, never a view of its operands)."""
    fresh = getattr(device.backend, "fresh_results", None)
    known = {}
    for k, step in enumerate(steps):
        kernel = plain(step[0])
        if k in b.own:
            new = getattr(kernel, "new_results", None)
            if new is not None:
                known[k] = (getattr(kernel, "in_place", {}), getattr(kernel, "aliases", {}), new)
        elif forms[k] is None and fresh is not None and fresh(step[1].name, kernel):
            known[k] = ({}, {}, tuple(range(len(step[3]))))
    return known


__all__ = ["Plan", "build_plan", "wrap_outputs"]
