"""Parsing and validating einsum subscripts (string and interleaved forms)."""

from __future__ import annotations

import string
from typing import Any

from tenferro_core.errors import ArgumentError, ShapeError

LETTERS = string.ascii_letters
_ELLIPSIS_LETTERS = "".join(chr(c) for c in range(0x3B1, 0x3B1 + 40))  # greek: never user letters


def from_interleaved(args: tuple) -> tuple[str, list[Any]]:
    """``einsum(a, [0, 1], b, [1, 2], [0, 2])`` -> ("ab,bc->ac", [a, b])."""
    operands, terms = list(args[0::2]), list(args[1::2])
    out = None
    if len(operands) > len(terms):
        out, operands = operands[-1], operands[:-1]
    if len(operands) != len(terms):
        raise ArgumentError(
            "einsum: the interleaved form is operand, sublist, operand, sublist, ...[, output]"
        )

    def term(sub: Any) -> str:
        chars = []
        for s in sub:
            if s is Ellipsis:
                chars.append("...")
            elif isinstance(s, int) and 0 <= s < len(LETTERS):
                chars.append(LETTERS[s])
            else:
                raise ArgumentError(f"einsum: sublist entries must be ints in [0, 52) or Ellipsis, got {s!r}")
        return "".join(chars)

    spec = ",".join(term(t) for t in terms)
    if out is not None:
        spec += "->" + term(out)
    return spec, operands


def parse(subscripts: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str, dict[str, int]]:
    """Input terms and output term with ellipses expanded to private letters, and each
    letter's size. Raises typed errors naming what is wrong."""
    if not isinstance(subscripts, str):
        raise ArgumentError(f"einsum: subscripts must be a string, got {type(subscripts).__name__}")
    spec = subscripts.replace(" ", "")
    explicit = "->" in spec
    lhs, _, rhs = spec.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ArgumentError(
            f"einsum: subscripts {subscripts!r} name {len(terms)} operand(s), got {len(shapes)} operand(s)"
        )
    for t in terms + [rhs]:
        bad = set(t.replace("...", "")) - set(LETTERS)
        if bad or t.count("...") > 1 or ("." in t.replace("...", "")):
            raise ArgumentError(
                f"einsum: invalid subscript characters {sorted(bad) or ['.']} in {t!r}; use letters "
                f"a-z, A-Z and at most one '...' per term"
            )
    ell_rank = 0
    for t, shape in zip(terms, shapes):
        named = len(t.replace("...", ""))
        if "..." in t:
            if len(shape) < named:
                raise ShapeError(
                    f"einsum: term {t!r} needs at least {named} axes, operand has shape {shape}"
                )
            ell_rank = max(ell_rank, len(shape) - named)
        elif len(shape) != named:
            raise ShapeError(
                f"einsum: term {t!r} has {named} indices but its operand has {len(shape)} axes "
                f"(shape {shape})"
            )
    ell = _ELLIPSIS_LETTERS[:ell_rank]
    sizes: dict[str, int] = {}
    expanded = []
    for t, shape in zip(terms, shapes):
        if "..." in t:
            k = len(shape) - len(t.replace("...", ""))
            t = t.replace("...", ell[ell_rank - k:])
        expanded.append(t)
        for letter, n in zip(t, shape):
            prev = sizes.get(letter)
            if prev is None or prev == 1:
                sizes[letter] = n
            elif n not in (1, prev):  # size-1 axes broadcast, as in NumPy
                raise ShapeError(
                    f"einsum: index {letter!r} has inconsistent sizes {prev} and {n} in {subscripts!r}"
                )
    if explicit:
        if "..." in rhs:
            rhs = rhs.replace("...", ell)
        elif ell:
            raise ArgumentError(
                f"einsum: the inputs of {subscripts!r} have '...' axes but the output has no '...'; "
                f"add '...' to the output (or sum those axes explicitly)"
            )
        missing = set(rhs) - set("".join(expanded))
        if missing:
            raise ArgumentError(f"einsum: output indices {sorted(missing)} do not appear in any input")
        if len(set(rhs)) != len(rhs):
            raise ArgumentError(f"einsum: output {rhs!r} repeats an index")
    else:
        joined = "".join(expanded)
        rhs = ell + "".join(sorted(c for c in set(joined) if joined.count(c) == 1 and c not in ell))
    return expanded, rhs, sizes
