"""The Triton matmul (`dot_general`) under TRITON_INTERPRET=1 (compiled for the GPU, on cuda:0,
with TENFERRO_TRITON_REAL=1: conftest.py), and its autotune cache.

Values are checked against NumPy float64 einsum on the same (rounded) inputs, with an error
bound scaled by |lhs|.|rhs| per dtype; signatures are generated with batch and contracting
axes anywhere, sizes around and below the block sizes (16, 32), 1 and 0, and strided inputs.
"""

from __future__ import annotations

import json
import logging
import os
import string
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_triton import autotune, matmul

FLOATS = (D.float16, D.bfloat16, D.float32, D.float64)
# error bound per dtype, relative to (|lhs| . |rhs|): output rounding plus accumulation
TOL = {D.float16: 2e-3, D.bfloat16: 1e-2, D.float32: 2e-6, D.float64: 1e-13}
TORCH = {d: getattr(torch, d.name) for d in FLOATS}
REAL = os.environ.get("TENFERRO_TRITON_REAL") == "1"  # compiled for the GPU (conftest.py)
DEVICE = "cuda:0" if REAL else "cpu"  # torch's device of the operands


class CountingTimer:
    """Times like the interpreter's default timer and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fn: Any) -> float:
        self.calls += 1
        return autotune.perf_counter_timer(fn)


def _kernel(lshape: tuple, rshape: tuple, dtype: D.DType, contracting: tuple, batch: tuple = ((), ())) -> Any:
    (lc, rc), (lb, rb) = contracting, batch
    lf = [lshape[i] for i in range(len(lshape)) if i not in lc and i not in lb]
    rf = [rshape[i] for i in range(len(rshape)) if i not in rc and i not in rb]
    out = Aval(tuple([lshape[i] for i in lb] + lf + rf), dtype)
    return matmul.dot_kernel((Aval(lshape, dtype), Aval(rshape, dtype)), out, contracting, batch)


def _einsum(lnd: int, rnd: int, contracting: tuple, batch: tuple) -> str:
    """The einsum spelling of a dot_general (batch, lhs free, rhs free)."""
    (lc, rc), (lb, rb) = contracting, batch
    letters = iter(string.ascii_letters)
    shared = {}
    for la, ra in ((lb, rb), (lc, rc)):
        for i, j in zip(la, ra):
            shared[("l", i)] = shared[("r", j)] = next(letters)
    lsub = "".join(shared.get(("l", i)) or next(letters) for i in range(lnd))
    rsub = "".join(shared.get(("r", j)) or next(letters) for j in range(rnd))
    free_l = "".join(lsub[i] for i in range(lnd) if i not in lc and i not in lb)
    free_r = "".join(rsub[j] for j in range(rnd) if j not in rc and j not in rb)
    return f"{lsub},{rsub}->{''.join(lsub[i] for i in lb)}{free_l}{free_r}"


def _check(x: Any, y: Any, got: Any, dtype: D.DType, contracting: tuple, batch: tuple = ((), ()),
           tol: float | None = None) -> None:
    spec = _einsum(x.ndim, y.ndim, contracting, batch)
    a, b = x.double().cpu().numpy(), y.double().cpu().numpy()
    ref = np.einsum(spec, a, b)
    bound = np.einsum(spec, np.abs(a), np.abs(b))
    assert got.dtype == TORCH[dtype] and tuple(got.shape) == ref.shape
    err = np.abs(got.double().cpu().numpy() - ref)
    tol = TOL[dtype] if tol is None else tol
    assert (err <= tol * bound + 1e-30).all(), f"max error {err.max()} ({spec}, {dtype})"


def _tensor(shape: tuple, dtype: D.DType, layout: str, seed: int) -> Any:
    """Random values of `shape` laid out contiguously, with axes reversed in memory, with a
    stride of 2 on the last axis, at a storage offset, or broadcast (stride 0) on axis 0."""
    g = torch.Generator().manual_seed(seed)
    t = TORCH[dtype]
    if layout == "reversed" and len(shape) > 1:
        base = torch.randn(shape[::-1], generator=g, dtype=torch.float64).to(DEVICE, t)
        return base.permute(*reversed(range(len(shape))))
    if layout == "strided" and shape:
        base = torch.randn((*shape[:-1], 2 * shape[-1]), generator=g, dtype=torch.float64).to(DEVICE, t)
        return base[..., ::2]
    if layout == "offset":
        n = int(np.prod(shape))
        return torch.randn(n + 3, generator=g, dtype=torch.float64).to(DEVICE, t)[3:].view(shape)
    if layout == "broadcast" and shape:
        return torch.randn((1, *shape[1:]), generator=g, dtype=torch.float64).to(DEVICE, t).expand(shape)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(DEVICE, t)


LAYOUTS = ("contiguous", "reversed", "strided", "offset", "broadcast")


EDGES = (1, 2, 15, 16, 17, 31, 32, 33, 40)  # around the 16 and 32 blocks


@st.composite
def signatures(draw: Any) -> tuple:
    """(lhs shape, rhs shape, contracting_dims, batch_dims): up to 1 batch, 2 contracting and
    2 free axes per side, in any order; one axis of a kind spans 1..40, several stay small
    (1..5); about one signature in six has a 0-size axis."""
    nb, nc, nl, nr = (draw(st.integers(0, 1)), *(draw(st.integers(0, 2)) for _ in range(3)))

    def sizes(n: int, top: int) -> list[int]:
        one = st.sampled_from([s for s in EDGES if s <= top]) | st.integers(1, top)
        return [draw(one if n == 1 else st.integers(1, 5)) for _ in range(n)]

    groups = {"b": sizes(nb, 3), "c": sizes(nc, 40), "l": sizes(nl, 40), "r": sizes(nr, 40)}
    axes_of = [(g, i) for g in groups for i in range(len(groups[g]))]
    if axes_of and draw(st.integers(0, 5)) == 0:
        g, i = draw(st.sampled_from(axes_of))
        groups[g][i] = 0
    shared = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)]
    lkinds = draw(st.permutations(shared + [("l", i) for i in range(nl)]))
    rkinds = draw(st.permutations(shared + [("r", i) for i in range(nr)]))
    lshape = tuple(groups[g][i] for g, i in lkinds)
    rshape = tuple(groups[g][i] for g, i in rkinds)

    def axes(kinds: list, kind: str, n: int) -> tuple:
        return tuple(kinds.index((kind, i)) for i in range(n))

    contracting = (axes(lkinds, "c", nc), axes(rkinds, "c", nc))
    batch = (axes(lkinds, "b", nb), axes(rkinds, "b", nb))
    return lshape, rshape, contracting, batch


@settings(max_examples=100)
@given(sig=signatures(), dtype=st.sampled_from(FLOATS), layouts=st.tuples(*[st.sampled_from(LAYOUTS)] * 2),
       seed=st.integers(0, 2**16))
def test_generated_signatures_match_numpy(sig: tuple, dtype: D.DType, layouts: tuple, seed: int) -> None:
    lshape, rshape, contracting, batch = sig
    kernel = _kernel(lshape, rshape, dtype, contracting, batch)
    x = _tensor(lshape, dtype, layouts[0], seed)
    y = _tensor(rshape, dtype, layouts[1], seed + 1)
    _check(x, y, kernel(x, y), dtype, contracting, batch)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (5, 3, 7), (16, 16, 16), (17, 33, 20), (40, 9, 35)])
def test_every_dtype_and_block_edge(dtype: D.DType, m: int, n: int, k: int) -> None:
    """Sizes below, at and just past the 16 and 32 blocks, in every supported dtype."""
    kernel = _kernel((m, k), (k, n), dtype, ((1,), (0,)))
    x, y = _tensor((m, k), dtype, "contiguous", 1), _tensor((k, n), dtype, "contiguous", 2)
    _check(x, y, kernel(x, y), dtype, ((1,), (0,)))


def test_transposed_lhs_and_rhs_read_in_place() -> None:
    """lhs (K, M) and rhs (N, K): the permuted views go to the kernel as strides."""
    x, y = _tensor((20, 18), D.float32, "contiguous", 3), _tensor((21, 20), D.float32, "contiguous", 4)
    kernel = _kernel((20, 18), (21, 20), D.float32, ((0,), (1,)))
    _check(x, y, kernel(x, y), D.float32, ((0,), (1,)))
    a = x.permute(1, 0).reshape(1, 18, 20)  # what the kernel receives: a view, no copy
    assert a.data_ptr() == x.data_ptr()
    # the same kernel again, on operands with other strides: strides are read per call
    x2, y2 = _tensor((20, 18), D.float32, "reversed", 11), _tensor((21, 20), D.float32, "strided", 12)
    _check(x2, y2, kernel(x2, y2), D.float32, ((0,), (1,)))


def test_batch_axes_last_and_vector_operands() -> None:
    """Batch axes after the others (lhs (M, K, B)), and vector . vector -> a scalar."""
    x, y = _tensor((7, 19, 3), D.float64, "contiguous", 5), _tensor((3, 19), D.float64, "reversed", 6)
    dims, batch = ((1,), (1,)), ((2,), (0,))
    _check(x, y, _kernel((7, 19, 3), (3, 19), D.float64, dims, batch)(x, y), D.float64, dims, batch)
    v, w = _tensor((23,), D.float32, "strided", 7), _tensor((23,), D.float32, "contiguous", 8)
    out = _kernel((23,), (23,), D.float32, ((0,), (0,)))(v, w)
    assert out.shape == ()
    _check(v, w, out, D.float32, ((0,), (0,)))


@pytest.mark.parametrize("dtype", [D.complex64, D.complex128, D.int32, D.int64, D.int8, D.bool_],
                         ids=lambda d: d.name)
def test_unsupported_dtypes_fall_back(dtype: D.DType) -> None:
    assert _kernel((4, 5), (5, 6), dtype, ((1,), (0,))) is None


@pytest.mark.parametrize("lshape, rshape, batch, shape", [
    ((0, 5), (5, 4), ((), ()), (0, 4)),
    ((3, 5), (5, 0), ((), ()), (3, 0)),
    ((0, 3, 5), (0, 5, 4), ((0,), (0,)), (0, 3, 4)),
])
def test_empty_results_launch_nothing(monkeypatch: Any, lshape: tuple, rshape: tuple, batch: tuple,
                                      shape: tuple) -> None:
    monkeypatch.setattr(matmul, "_tuned", lambda *a: pytest.fail("launched a kernel"))
    nd = len(lshape)
    dims = ((nd - 1,), (nd - 2,))
    x, y = torch.ones(lshape, device=DEVICE), torch.ones(rshape, device=DEVICE)
    out = _kernel(lshape, rshape, D.float32, dims, batch)(x, y)
    assert tuple(out.shape) == shape and out.dtype == torch.float32


def test_zero_contraction_gives_zeros(monkeypatch: Any) -> None:
    monkeypatch.setattr(matmul, "_tuned", lambda *a: pytest.fail("launched a kernel"))
    f16 = {"dtype": torch.float16, "device": DEVICE}
    out = _kernel((3, 0), (0, 4), D.float16, ((1,), (0,)))(torch.ones(3, 0, **f16), torch.ones(0, 4, **f16))
    assert out.dtype == torch.float16 and torch.equal(out.cpu(), torch.zeros(3, 4, dtype=torch.float16))


def test_bad_signatures_raise_typed_errors() -> None:
    f32, f64 = D.float32, D.float64
    with pytest.raises(ShapeError):
        _kernel((3, 4), (5, 6), f32, ((1,), (0,)))
    with pytest.raises(ShapeError):
        _kernel((3, 4), (4, 6), f32, ((2,), (0,)))
    with pytest.raises(DTypeError):
        matmul.dot_kernel((Aval((3, 4), f32), Aval((4, 6), f64)), Aval((3, 6), f32), ((1,), (0,)), ((), ()))
    with pytest.raises(ArgumentError):
        matmul.dot_kernel((Aval((3, 4), f32),), Aval((3,), f32), ((1,), (0,)), ((), ()))
    with pytest.raises(ShapeError):  # the node's result aval disagrees
        matmul.dot_kernel((Aval((3, 4), f32), Aval((4, 6), f32)), Aval((6, 3), f32), ((1,), (0,)), ((), ()))


@pytest.mark.parametrize("env, precision", [(None, "ieee"), ("1", "tf32")])
def test_float32_is_ieee_unless_tf32_is_asked_for(monkeypatch: Any, env: str | None, precision: str) -> None:
    if env is None:
        monkeypatch.delenv("TENFERRO_TRITON_TF32", raising=False)
    else:
        monkeypatch.setenv("TENFERRO_TRITON_TF32", env)
    seen = []
    launch = autotune.Tuned.launch

    def spy(self: Any, key: str, grid: Any, args: Any, kw: dict) -> Any:
        seen.append(kw)
        return launch(self, key, grid, args, kw)

    monkeypatch.setattr(autotune.Tuned, "launch", spy)
    x, y = _tensor((5, 6), D.float32, "contiguous", 9), _tensor((6, 7), D.float32, "contiguous", 10)
    tf32 = 2e-3 if precision == "tf32" else None  # TF32 keeps 10 mantissa bits of each operand
    _check(x, y, _kernel((5, 6), (6, 7), D.float32, ((1,), (0,)))(x, y), D.float32, ((1,), (0,)), tol=tf32)
    assert seen[0]["PRECISION"] == precision


# ----- autotune cache ---------------------------------------------------------------------

@pytest.fixture
def timer(tmp_path: Any, monkeypatch: Any, caplog: Any) -> Any:
    """A fresh cache folder and in-memory state, with a counting timer."""
    if REAL:  # the keys and candidate configs below are the interpreter's
        pytest.skip("checks the interpreter's autotune configs (TENFERRO_TRITON_REAL=1 compiles for the GPU)")
    monkeypatch.setenv("TENFERRO_TRITON_CACHE", str(tmp_path))
    caplog.set_level(logging.INFO, logger="tenferro_triton.autotune")
    counting = CountingTimer()
    autotune.reset(timer=counting)
    yield counting
    autotune.reset()


def _run(m: int, n: int, k: int, dtype: D.DType = D.float32) -> None:
    x, y = _tensor((m, k), dtype, "contiguous", m), _tensor((k, n), dtype, "contiguous", n)
    _check(x, y, _kernel((m, k), (k, n), dtype, ((1,), (0,)))(x, y), dtype, ((1,), (0,)))


KEY = "matmul.v2/float32/interpreter/B1/M32/N32/K32"


def test_bucket_rounds_up_to_powers_of_two() -> None:
    assert [autotune.bucket(n) for n in (0, 1, 2, 3, 17, 32, 33)] == [0, 1, 2, 4, 32, 32, 64]
    assert autotune.bucket(10**6) == autotune.SIZE_CAP
    key = autotune.tune_key("op", "float32", "t", {"B": 500, "M": 20})
    assert key == f"op/float32/t/B{autotune.BATCH_CAP}/M32"
    with pytest.raises(ArgumentError):
        autotune.bucket(-1)


def test_first_call_tunes_and_writes_the_file(timer: CountingTimer, tmp_path: Any, caplog: Any) -> None:
    _run(24, 20, 30)
    assert timer.calls == 2  # both interpreter configs fit a 32 bucket
    data = json.loads((tmp_path / autotune.FILE_NAME).read_text())
    assert data["format"] == autotune.FORMAT and set(data["entries"]) == {KEY}
    assert data["entries"][KEY]["config"]["kwargs"]["BLOCK_M"] in (16, 32)
    assert any("tuned " + KEY in r.getMessage() and "best" in r.getMessage() for r in caplog.records)
    assert [p.name for p in tmp_path.iterdir()] == [autotune.FILE_NAME]  # no temp file left


def test_a_fresh_state_reads_the_file_and_does_not_tune(timer: CountingTimer) -> None:
    _run(24, 20, 30)
    stored = autotune.entries()[KEY]
    fresh = CountingTimer()
    autotune.reset(timer=fresh)  # as a new process would start
    _run(24, 20, 30)
    assert fresh.calls == 0 and autotune.entries()[KEY] == stored


def test_nearby_shapes_share_a_bucket(timer: CountingTimer) -> None:
    _run(20, 20, 20)
    _run(30, 25, 17)
    assert timer.calls == 2
    _run(33, 20, 20)  # M bucket 64: tuned anew
    assert timer.calls == 4
    assert "matmul.v2/float32/interpreter/B1/M64/N32/K32" in autotune.entries()


def test_small_sizes_need_no_tuning(timer: CountingTimer) -> None:
    """At most 16 in every size: only the 16-block config is a candidate, nothing is timed."""
    _run(9, 16, 3)
    assert timer.calls == 0 and autotune.entries()["matmul.v2/float32/interpreter/B1/M16/N16/K4"]


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"format": 999, "entries": {}}',
                                  '{"format": 1, "entries": 3}'])
def test_a_corrupt_file_is_ignored_and_replaced(timer: CountingTimer, tmp_path: Any, caplog: Any,
                                                text: str) -> None:
    (tmp_path / autotune.FILE_NAME).write_text(text)
    _run(24, 20, 30)
    assert timer.calls == 2
    assert any(r.levelno == logging.WARNING and "corrupt" in r.getMessage() for r in caplog.records)
    assert KEY in json.loads((tmp_path / autotune.FILE_NAME).read_text())["entries"]


def test_an_entry_that_does_not_fit_is_tuned_again(timer: CountingTimer, tmp_path: Any) -> None:
    bad = {"config": {"kwargs": {"BLOCK": 16}, "num_warps": 1, "num_stages": 1}}
    (tmp_path / autotune.FILE_NAME).write_text(json.dumps({"format": 1, "entries": {KEY: bad}}))
    _run(24, 20, 30)
    assert timer.calls == 2 and autotune.entries()[KEY]["config"]["kwargs"]["GROUP_M"] == 8


def test_writes_keep_entries_of_other_processes(timer: CountingTimer, tmp_path: Any) -> None:
    _run(24, 20, 30)
    path = tmp_path / autotune.FILE_NAME
    data = json.loads(path.read_text())
    data["entries"]["other/float16/x/M8"] = {"config": data["entries"][KEY]["config"]}
    path.write_text(json.dumps(data))  # another process added an entry since we read the file
    _run(24, 20, 60)  # a K64 bucket: tuned and merged into the file
    stored = set(json.loads(path.read_text())["entries"])
    assert {KEY, "other/float16/x/M8", KEY.replace("K32", "K64")} <= stored


@pytest.mark.parametrize("block", [16, 32])
@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16], ids=lambda d: d.name)
def test_each_config_with_partial_program_groups(timer: CountingTimer, tmp_path: Any, block: int,
                                                 dtype: D.DType) -> None:
    """A stored config is used as is (no timing): with M = 300 the last group of GROUP_M rows
    of tiles is partial, for both interpreter block sizes."""
    config = {"kwargs": {"BLOCK_M": block, "BLOCK_N": block, "BLOCK_K": block, "GROUP_M": 8},
              "num_warps": 1, "num_stages": 1}
    key = f"matmul.v2/{dtype.name}/interpreter/B1/M512/N64/K64"
    data = {"format": 1, "entries": {key: {"config": config}}}
    (tmp_path / autotune.FILE_NAME).write_text(json.dumps(data))
    _run(300, 50, 40, dtype)
    assert timer.calls == 0


def test_clear_deletes_the_file(timer: CountingTimer, tmp_path: Any) -> None:
    _run(24, 20, 30)
    autotune.clear()
    assert not (tmp_path / autotune.FILE_NAME).exists() and autotune.entries() == {}
