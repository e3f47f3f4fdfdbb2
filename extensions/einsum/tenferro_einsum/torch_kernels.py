"""The contract op's kernel for the torch backend (torch imported on the first call).

``torch.ops.aten.einsum(spec, operands, path=...)`` runs the whole contraction in one call
along the plan's cached opt_einsum path (the path torch.einsum itself would compute on
every call, 6x slower for a 4-operand chain). ATen takes the path as pairs; a plan's path
may hold single- or many-operand steps (an explicit ``optimize=[...]``), which
`pairwise_path` rewrites into pairs contracting the same operands in the same order.

Integer operands off the CPU (CUDA has no integer matmul, which ATen's einsum calls) are
contracted step by step as broadcast products and sums (`sum_product`), exactly.
"""

from __future__ import annotations

from typing import Any


def pairwise_path(path: tuple[tuple[int, ...], ...], n: int) -> list[int]:
    """`path` (opt_einsum's convention: each step removes the listed operands and appends its
    result) as ATen's flat list of pairs. A single-operand step only moves its operand to the
    end; a k-operand step becomes k - 1 pairs; operands a path leaves are folded left to right."""
    ops, fresh, flat = list(range(n)), n, []
    for step in path:
        group = [ops[i] for i in step]
        if len(group) == 1:
            ops.remove(group[0])
            ops.append(group[0])
            continue
        acc = group[0]
        for g in group[1:]:
            flat += [ops.index(acc), ops.index(g)]
            ops = [o for o in ops if o not in (acc, g)] + [fresh]
            acc, fresh = fresh, fresh + 1
    while len(ops) > 1:
        flat += [0, 1]
        ops = ops[2:] + [fresh]
        fresh += 1
    return flat


def _align(x: Any, term: str, letters: str, sizes: dict[str, int]) -> Any:
    """x (axes `term`) permuted to the order of `letters`, size 1 for letters it lacks."""
    order = [term.index(c) for c in letters if c in term]
    return x.permute(order).reshape([sizes[c] if c in term else 1 for c in letters])


def sum_product(spec: str, tensors: tuple, flat_path: list[int]) -> Any:
    """The contraction as one broadcast product and sum per path step (no matmul)."""
    ins, out = spec.split("->")
    ops = list(zip(tensors, ins.split(",")))
    sizes = {c: n for x, t in ops for c, n in zip(t, x.shape)}
    for i, j in zip(flat_path[::2], flat_path[1::2]):
        (a, ta), (b, tb) = ops[i], ops[j]
        ops = [o for k, o in enumerate(ops) if k not in (i, j)]
        keep = set(out).union(*(set(t) for _, t in ops))
        letters = ta + "".join(c for c in tb if c not in ta)
        prod = _align(a, ta, letters, sizes) * _align(b, tb, letters, sizes)
        summed = [k for k, c in enumerate(letters) if c not in keep]
        if summed:
            prod = prod.sum(dim=summed, dtype=a.dtype)
        ops.append((prod, "".join(c for c in letters if c in keep)))
    (x, t), = ops
    summed = [k for k, c in enumerate(t) if c not in out]
    if summed:
        x = x.sum(dim=summed, dtype=x.dtype)
        t = "".join(c for c in t if c in out)
    return x.permute([t.index(c) for c in out])


def torch_contract(*tensors: Any, spec: str, path: tuple = ()) -> Any:
    """The whole contraction `spec` along `path` (torch tensors in, one tensor out)."""
    import torch

    x, n = tensors[0], len(tensors)
    if x.device.type != "cpu" and not (x.is_floating_point() or x.is_complex()):
        return sum_product(spec, tensors, pairwise_path(path, n))
    if n <= 2:  # one contraction at most: nothing to choose
        return torch.ops.aten.einsum.default(spec, list(tensors))
    return torch.ops.aten.einsum.default(spec, list(tensors), path=pairwise_path(path, n))


__all__ = ["pairwise_path", "sum_product", "torch_contract"]
