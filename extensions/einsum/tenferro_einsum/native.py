"""einsum as one extension op, for backends with a native einsum.

A whole contraction (normalized ASCII spec plus its opt_einsum path) is one op,
``tenferro_einsum.contract.v1``: a backend runs it in one call (NumPy:
``numpy.einsum`` with the precomputed path) instead of one dispatch per pairwise
step. It is used only for *multilinear transposable* equations: every term has
distinct letters, no size-1 broadcasting, and every letter of a term appears in
another term or the output. Then the JVP is a sum of contractions with one operand
replaced by its tangent, and the transpose for operand i is the einsum
``out,others->term_i``, itself of the same kind. Other equations, and backends
without a kernel, use the core-primitive lowering (`lower.execute`, also the op's
decomposition).
"""

from __future__ import annotations

import string
from typing import Any

from tenferro_ad.ad_util import Zero, add_tangents, is_undefined, is_zero
from tenferro_core.errors import ArgumentError, ShapeError
from tenferro_core.extension import define_op
from tenferro_core.params import p_int_pairs
from tenferro_core.primitive import REQUIRED

from .lower import execute


def _p_spec(prim: str, name: str, v: Any) -> str:
    if isinstance(v, str) and "->" in v:
        return v if type(v) is str else str(v)
    raise ArgumentError(f"{prim}: parameter {name!r} expects a spec like 'ab,bc->ac', got {v!r}")


def _split(spec: str) -> tuple[list[str], str]:
    ins, out = spec.split("->")
    return ins.split(","), out


def _sizes(spec: str, shapes: list[tuple[int, ...]]) -> dict[str, int]:
    terms, out = _split(spec)
    if len(terms) != len(shapes):
        raise ShapeError(f"einsum contract {spec!r} expects {len(terms)} operands, got {len(shapes)}")
    sizes: dict[str, int] = {}
    for k, (t, s) in enumerate(zip(terms, shapes)):
        if len(t) != len(s):
            raise ShapeError(f"einsum contract {spec!r}: operand {k} has shape {s}, its term is {t!r}")
        for c, n in zip(t, s):
            if sizes.setdefault(c, n) != n:
                raise ShapeError(
                    f"einsum contract {spec!r}: index {c!r} has size {sizes[c]} and {n} (operand {k})"
                )
    return sizes


def _rule(*avals, spec, path):
    sizes = _sizes(spec, [a.shape for a in avals])
    return tuple(sizes[c] for c in _split(spec)[1]), avals[0].dtype


def _decomposition(*xs, spec, path):
    terms, out = _split(spec)
    return execute(list(xs), terms, out, _sizes(spec, [x.shape for x in xs]), [tuple(s) for s in path])


contract_p = define_op(
    "tenferro_einsum.contract.v1", _rule, nin=None, decomposition=_decomposition,  # multilinear
    payload={"spec": (_p_spec, REQUIRED), "path": (p_int_pairs, ())},
    doc="A whole multilinear einsum (ASCII spec, opt_einsum path) as one op.",
)


def native_spec(terms: list[str], output: str, sizes: dict[str, int], shapes: list[tuple]) -> str | None:
    """The op's ASCII spec when the equation is multilinear-transposable, else None."""
    letters = list(dict.fromkeys("".join(terms) + output))
    if len(letters) > len(string.ascii_letters):
        return None
    for k, (t, s) in enumerate(zip(terms, shapes)):
        if len(set(t)) != len(t) or tuple(sizes[c] for c in t) != tuple(s):
            return None
        elsewhere = set(output).union(*(set(u) for j, u in enumerate(terms) if j != k))
        if not set(t) <= elsewhere:
            return None
    rename = dict(zip(letters, string.ascii_letters))
    return ",".join("".join(rename[c] for c in t) for t in terms) + "->" + "".join(rename[c] for c in output)


def numpy_contract(*arrays, spec, path):
    import numpy as np

    if len(arrays) == 1:
        return np.asarray(np.einsum(spec, arrays[0]))
    return np.asarray(np.einsum(spec, *arrays, optimize=["einsum_path", *path]))


def contract_jvp(primals, tangents, *, spec, path):
    out = contract_p.bind(*primals, spec=spec, path=path)
    t_out = Zero(out.aval)
    for i, t in enumerate(tangents):
        if not is_zero(t):
            args = list(primals)
            args[i] = t
            t_out = add_tangents(t_out, contract_p.bind(*args, spec=spec, path=path))
    return out, t_out


def contract_transpose(ct, *operands, spec, path):
    from . import einsum

    undefined = [i for i, x in enumerate(operands) if is_undefined(x)]
    if len(undefined) != 1:
        raise ArgumentError(
            f"einsum contract {spec!r} is linear in one operand at a time; got {len(undefined)} "
            f"undefined operands in a transpose"
        )
    (i,) = undefined
    if is_zero(ct):
        res = Zero(operands[i].aval)
    else:
        terms, out = _split(spec)
        others = [x for j, x in enumerate(operands) if j != i]
        sub = ",".join([out, *(t for j, t in enumerate(terms) if j != i)]) + "->" + terms[i]
        res = einsum(sub, ct, *others)
    return tuple(res if j == i else None for j in range(len(operands)))


__all__ = ["contract_jvp", "contract_p", "contract_transpose", "native_spec", "numpy_contract"]
