"""A Plan's steps as one generated Python function: the replay loop unrolled.

Each buffer slot is a local variable, each kernel and param value a global of the
function, frees are `del`s; what a kernel raises goes to `kernels.failed` with its
primitive (the step index is kept in a local). A kernel still wrapped in its first-call
check runs plain here: the plan's first run checked every result (`Plan._first_run`).
Same kernels, same order, same buffers as `plan._execute`, with no per-step tuple
unpacking, list building or `**params` merging: the per-call overhead of a compiled
function is a few microseconds.
"""

from __future__ import annotations

import sys
from typing import Any

from .kernels import check_result, failed, plain


def _holders() -> int:
    """How many references a run of generated code holds on an input buffer when it counts
    them before asking `donatable` (the input tensor's slot, the `bufs` list and the local):
    measured on this interpreter with the same code shape, not assumed."""
    glb: dict[str, Any] = {"_count": sys.getrefcount}
    exec("def run(bufs):\n    s0 = bufs[0]\n    return _count(s0)\n", glb)

    class Holder:
        __slots__ = ("_buf",)

    h = Holder()
    h._buf = object()
    return glb["run"]([t._buf for t in (h,)]) - 1  # minus getrefcount's own argument


_HOLDERS = _holders()


def _emit(steps: list, template: list, n_inputs: int, device: Any, reuse: dict | None,
          check: list | None, pad: str, keep: frozenset = frozenset(),
          into: dict | None = None, quiet: dict | None = None,
          renamed: dict | None = None) -> tuple[dict, dict, list]:
    """(the code's globals, slot -> name, the steps' lines at indent `pad`); the slots in
    `keep` are never deleted (a loop's inputs, read again next iteration); `into` maps a
    step to the expressions of the arrays its kernel's `into` form writes its results into
    ("None": allocated as usual); with `quiet` (a dict), kernels with an `in_quiet` form
    (a NumPy product without its own IEEE-warning scope) use it, and quiet["scope"] is the
    (enter, exit) the caller must run the code inside; `renamed` maps (step, operand
    position) to the name that step reads that operand from instead of its slot's."""
    into = into or {}
    renamed = renamed or {}
    reuse = reuse or {}
    kept = {s for entry in reuse.values() for s in (entry[0] if type(entry[0]) is tuple else (entry[0],))}
    kept |= set(keep)  # freed by the step that writes into them
    # __name__: kernels' IEEE warnings (log(0), inf - inf) are as silent here as in eager
    # evaluation (the warnings filter tenferro_numpy.kernels installs names this module)
    glb: dict[str, Any] = {"__name__": "tenferro_runtime.plan", "_failed": failed, "_device": device,
                           "_prims": [s[1] for s in steps], "_check": check_result, "_avals": check}
    names: dict[int, str] = {}
    for i in range(n_inputs):
        names[i] = f"s{i}"
    for i, buf in enumerate(template):
        if buf is not None and i >= n_inputs:
            glb[f"c{i}"] = buf
            names[i] = f"c{i}"
    body: list[str] = []
    for k, (fn, _prim, ins, outs, params, multiple, frees) in enumerate(steps):
        kernel = fn = plain(fn)
        form_params = params  # an out form takes the step's params (a fused group's graph)
        bare = getattr(kernel, "without_params", None)  # the same kernel, called on buffers only
        if bare is not None:
            fn, params = bare, None
        glb[f"f{k}"] = fn
        args = [renamed.get((k, p)) or names.get(i, f"s{i}") for p, i in enumerate(ins)]
        if k in reuse and type(reuse[k][0]) is tuple:  # results written into operands
            body += _in_place_lines(glb, k, args, reuse[k], outs, multiple, frees, kept, names,
                                    n_inputs, device, check, pad)
            continue
        if k in reuse:
            dead, form, donated = reuse[k]
            glb[f"o{k}"] = form
            body.append(f"{pad}k = {k}")
            extra = []
            if form_params:
                glb[f"q{k}"] = form_params
                extra = [f"**q{k}"]
            plain_args = args + _keywords(glb, k, params)
            call = f"o{k}({', '.join(args + [f's{dead}'] + extra)})"
            if donated:  # the caller's buffer, if nothing but this run holds it
                count, cond = _donation_check(glb, device, dead, pad)
                body.append(count)
                call = f"{call} if {cond} else f{k}({', '.join(plain_args)})"
            target = f"s{outs[0]}," if multiple else f"s{outs[0]}"
            body.append(f"{pad}{target} = {call}")
            if check is not None:
                result = f"(s{outs[0]},)" if multiple else f"s{outs[0]}"
                body.append(f"{pad}_check(_prims[k], _device, _avals[k], {result})")
            names[outs[0]] = f"s{outs[0]}"
            dead_names = [f"s{dead}"] + [f"s{i}" for i in frees
                                         if i not in kept and names.get(i, "").startswith("s")]
            body.append(f"{pad}del {', '.join(dead_names)}")
            continue
        if k in into:  # the results written into given arrays (a scan's stacked outputs)
            glb[f"f{k}"], params = kernel.into(), None
            args += into[k]
        elif quiet is not None and getattr(kernel, "in_quiet", None) is not None:
            glb[f"f{k}"], params = kernel.in_quiet, None  # the scope is the loop's
            quiet.setdefault("scope", kernel.quiet_scope)
        args += _keywords(glb, k, params)
        for o in outs:
            names[o] = f"s{o}"
        target = ", ".join(f"s{o}" for o in outs) + ("," if multiple and len(outs) == 1 else "") or "_"
        body.append(f"{pad}k = {k}")
        if check is not None:
            body.append(f"{pad}r = f{k}({', '.join(args)})")
            body.append(f"{pad}_check(_prims[k], _device, _avals[k], r)")
            body.append(f"{pad}{target} = r")
        else:
            body.append(f"{pad}{target} = f{k}({', '.join(args)})")
        dead = [f"s{i}" for i in frees if i not in kept and names.get(i, "").startswith("s")]
        if dead:
            body.append(f"{pad}del {', '.join(dead)}")
    return glb, names, body


def _in_place_lines(glb: dict, k: int, args: list, entry: tuple, outs: tuple, multiple: bool,
                    frees: tuple, kept: set, names: dict, n_inputs: int, device: Any,
                    check: list | None, pad: str) -> list[str]:
    """Step k as its kernel's in-place form (`entry`: the operand slots it writes, the form,
    whether one is donated): a donated operand only if nothing but this run holds it, else
    the plain kernel (all or none)."""
    dead, form, _donated = entry
    glb[f"o{k}"] = form
    lines = [f"{pad}k = {k}"]
    call = f"o{k}({', '.join(args)})"
    conds = []
    for s in dead:
        if s < n_inputs:  # a donated input (the plan's own buffers are results)
            count, cond = _donation_check(glb, device, s, pad)
            lines.append(count)
            conds.append(cond)
    if conds:
        call = f"{call} if {' and '.join(conds)} else f{k}({', '.join(args)})"
    target = ", ".join(f"s{o}" for o in outs) + ("," if multiple and len(outs) == 1 else "")
    lines.append(f"{pad}{target} = {call}")
    if check is not None:
        lines.append(f"{pad}_check(_prims[k], _device, _avals[k], ({', '.join(f's{o}' for o in outs)},))")
    for o in outs:
        names[o] = f"s{o}"
    gone = [f"s{s}" for s in dead] + [f"s{i}" for i in frees
                                       if i not in kept and names.get(i, "").startswith("s")]
    lines.append(f"{pad}del {', '.join(gone)}")
    return lines


def _donation_check(glb: dict, device: Any, slot: int, pad: str) -> tuple[str, str]:
    """(the line counting the references on donated input `slot` beyond the run's own, the
    condition that it may be written): the caller's buffer, if nothing but this run holds
    it. Counted by a C call in a statement of its own: inside a Python callee the count also
    depends on whether the interpreter inlined the call (it does not once a PEP 523 frame
    hook, such as torch.compile's, is set)."""
    glb["_donatable"], glb["_count"] = device.backend.donatable, sys.getrefcount
    return f"{pad}n{slot} = _count(s{slot}) - {_HOLDERS + 1}", f"_donatable(s{slot}, n{slot})"


def _keywords(glb: dict, k: int, params: dict | None) -> list[str]:
    """Step `k`'s params as keyword arguments of its call, each value a global of the code."""
    words = []
    for key, value in (params or {}).items():
        glb[f"p{k}_{key}"] = value
        words.append(f"{key}=p{k}_{key}")
    return words


def generate(steps: list, template: list, n_inputs: int, out_slots: list, device: Any,
             reuse: dict | None = None, check: list | None = None) -> tuple[Any, str]:
    """(run(bufs) -> [output buffers], its source) for a plan's steps; `reuse` maps a step to
    (the dead slot whose buffer its result is written into, the kernel's out form). With
    `check` (each step's result avals), every result is compared with them as it is made."""
    glb, names, steps_src = _emit(steps, template, n_inputs, device, reuse, check, " " * 8)
    head = [f"    s{i} = bufs[{i}]" for i in range(n_inputs)]
    result = ", ".join(names.get(s, f"s{s}") if s is not None else "None" for s in out_slots)
    src = "\n".join([
        "def run(bufs):", *head, "    k = -1", "    try:", *(steps_src or ["        pass"]),
        "    except Exception as exc:",
        "        raise _failed(_prims[k], _device, exc)",
        f"    return [{result}]", ""])
    exec(compile(src, "<tenferro plan>", "exec"), glb)
    return glb["run"], src


def generate_scan(steps: list, template: list, n_inputs: int, out_slots: list, device: Any,
                  n_consts: int, n_carry: int, reverse: bool, fixed: dict,
                  check: list | None = None, reuse: dict | None = None,
                  avals: dict | None = None) -> tuple[Any, str]:
    """(loop(consts, carry, slices, length) -> (carry, ys), its source): a scan whose body is
    these plan steps, the body inlined in one generated loop (no call, argument list or
    result list per iteration). `slices` holds each xs operand's per-iteration buffers;
    `fixed` maps an output position to the fixed value the body returns there (its slot is
    None). Each ys is a list of per-iteration buffers in index order (a reverse scan's are
    reversed at the end) or, where a step's kernel has an `into` form (`_stacked_in_place`),
    the stacked buffer itself, written in place each iteration."""
    n_y = len(out_slots) - n_carry
    into, stacked = _stacked_in_place(steps, out_slots[n_carry:], avals or {}, reuse or {})
    quiet: dict = {}
    renamed, prepare = _loop_operands(steps, template, n_inputs, n_consts)
    glb, names, steps_src = _emit(steps, template, n_inputs, device, reuse, check, " " * 12,
                                  frozenset(range(n_inputs)), into, quiet, renamed)
    n_x = n_inputs - n_consts - n_carry
    for j, value in fixed.items():
        glb[f"fx{j}"] = value
    outs = [f"fx{j}" if s is None else names.get(s, f"s{s}") for j, s in enumerate(out_slots)]
    head = [f"    s{i} = consts[{i}]" for i in range(n_consts)]
    for name, (form, p, slot) in prepare.items():
        glb[f"_lo_{name}"] = form
        head.append(f"    {name} = _lo_{name}({p}, {names[slot]}, length)")
    head += [f"    s{n_consts + i} = carry[{i}]" for i in range(n_carry)]
    head += [f"    x{i} = slices[{i}]" for i in range(n_x)]
    # a ys that is a carry input whose carry output is stacked in place: one array of
    # length + 1 rows holds both (the initial carry in its first row, or last when reversed),
    # each a view of it: no list, no stacking
    shared: dict[int, tuple] = {}  # stacked ys -> (the ys of its carry inputs, the carry)
    for j in range(n_y):
        slot = out_slots[n_carry + j]
        if j in stacked or slot is None or not n_consts <= slot < n_consts + n_carry:
            continue
        c = slot - n_consts
        src = next((s for s in stacked if out_slots[n_carry + s] == out_slots[c]), None)
        if src is not None and src not in shared:
            shared[src] = (j, c)
    for j, (empty, aval) in stacked.items():
        glb[f"_empty{j}"], glb[f"_t{j}"] = empty, aval.dtype.numpy
        if j not in shared:
            head.append(f"    y{j} = _empty{j}((length, *{tuple(aval.shape)}), _t{j})")
            continue
        j_in, c = shared[j]
        first, outs_rows, ins_rows = ("length", "[:-1]", "[1:]") if reverse else ("0", "[1:]", "[:-1]")
        head += [f"    b{j} = _empty{j}((length + 1, *{tuple(aval.shape)}), _t{j})",
                 f"    b{j}[{first}] = carry[{c}]", f"    y{j} = b{j}{outs_rows}",
                 f"    y{j_in} = b{j}{ins_rows}"]
    arrays = set(stacked) | {j_in for j_in, _ in shared.values()}
    head += [f"    y{j} = []" for j in range(n_y) if j not in arrays]
    head += [f"    a{j} = y{j}.append" for j in range(n_y) if j not in arrays]
    order = "range(length - 1, -1, -1)" if reverse else "range(length)"
    loop = [f"        for i in {order}:"]
    loop += [f"            s{n_consts + n_carry + i} = x{i}[i]" for i in range(n_x)]
    loop += steps_src
    loop += [f"            a{j}({outs[n_carry + j]})" for j in range(n_y) if j not in arrays]
    if n_carry:
        loop.append(f"            {', '.join(f's{n_consts + i}' for i in range(n_carry))}, = "
                    f"{', '.join(outs[:n_carry])},")
    carry_out = ", ".join(f"s{n_consts + i}" for i in range(n_carry))
    ys = ", ".join(f"y{j}[::-1]" if reverse and j not in arrays else f"y{j}" for j in range(n_y))
    scope = []
    if "scope" in quiet:  # one IEEE-warning scope around the loop, not one per product
        glb["_qon"], glb["_qoff"] = quiet["scope"]
        head.append("    _q = _qon()")
        scope = ["    finally:", "        _qoff(_q)"]
    src = "\n".join([
        "def loop(consts, carry, slices, length):", *head, "    k = -1", "    try:", *loop,
        "    except Exception as exc:",
        "        raise _failed(_prims[k], _device, exc)", *scope,
        f"    return [{carry_out}], [{ys}]", ""])
    exec(compile(src, "<tenferro scan loop>", "exec"), glb)
    return glb["loop"], src


def _loop_operands(steps: list, template: list, n_inputs: int, n_consts: int) -> tuple[dict, dict]:
    """({(step, position): the name it reads}, {name: (the kernel's `loop_operand`, position,
    slot)}) for the operands a loop reads unchanged (its consts and constants) at the steps
    whose kernel prepares such operands once before the loop (`loop_operand(position, buffer,
    length)`: a NumPy product's padded weight rows); one preparation per operand, position and
    form, however many steps read it."""
    renamed: dict = {}
    prepare: dict = {}
    made: dict = {}  # (form, position, slot) -> name
    for k, step in enumerate(steps):
        form = getattr(plain(step[0]), "loop_operand", None)
        if form is None:
            continue
        for p, slot in enumerate(step[2]):
            if slot < n_consts or (slot >= n_inputs and template[slot] is not None):
                name = made.setdefault((form, p, slot), f"v{k}_{p}")
                renamed[k, p] = name
                prepare[name] = (form, p, slot)
    return renamed, prepare


def _stacked_in_place(steps: list, y_slots: list, avals: dict, reuse: dict) -> tuple[dict, dict]:
    """({step: its `into` arguments}, {ys position: (the allocation, its per-step aval)}) for
    the ys a step's kernel can write into a given array (its `into` and `empty`): each ys of
    at least one axis whose slot is a step's result, once per slot (a ys repeated, or read
    from an input, stays a list)."""
    producer = {o: (k, p) for k, step in enumerate(steps) for p, o in enumerate(step[3])}
    into: dict[int, list] = {}
    stacked: dict[int, tuple] = {}
    used: set = set()
    for j, slot in enumerate(y_slots):
        if slot is None or slot in used or slot not in producer or slot not in avals:
            continue
        k, p = producer[slot]
        fn = plain(steps[k][0])
        if k in reuse or getattr(fn, "into", None) is None or not avals[slot].shape:
            continue
        used.add(slot)
        into.setdefault(k, ["None"] * len(steps[k][3]))[p] = f"y{j}[i]"
        stacked[j] = (fn.empty, avals[slot])
    return into, stacked


__all__ = ["generate", "generate_scan"]
