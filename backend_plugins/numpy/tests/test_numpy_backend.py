"""numpy:cpu specifics the shared kit cannot assume: memory sharing through DLPack and
`__array__`, the energy meter it picks, and dtypes it does not have."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_core import dtypes as D
from tenferro_core.energy import EnergyTelemetry, EstimatedTelemetry, RaplTelemetry
from tenferro_core.errors import DTypeError
from tenferro_numpy.backend import SUPPORTED, NumpyBackend
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime, lax

DEVICE = "numpy:cpu"


@pytest.fixture
def matrix():
    return np.arange(12.0).reshape(3, 4)


def test_device_and_dtypes():
    dev = default_runtime().device(DEVICE)
    assert dev.backend.devices() == ("cpu",)
    assert dev.dtypes == SUPPORTED == frozenset(D.ALL_DTYPES) - {D.bfloat16}


def test_dlpack_export_shares_memory(matrix):
    t = xp.asarray(matrix, device=DEVICE)
    assert t.__dlpack_device__() == (1, 0)  # kDLCPU, device 0
    out = np.from_dlpack(t)
    assert np.shares_memory(out, t._buf)
    np.testing.assert_array_equal(out, matrix)


def test_dlpack_import_shares_memory(matrix):
    t = xp.from_dlpack(matrix, device=DEVICE)
    assert np.shares_memory(t._buf, matrix)
    assert (t.shape, t.dtype) == ((3, 4), D.float64)
    back = np.from_dlpack(t)
    assert np.shares_memory(back, matrix)


def test_dlpack_copy_does_not_share(matrix):
    t = xp.from_dlpack(matrix, device=DEVICE, copy=True)
    assert not np.shares_memory(t._buf, matrix)
    np.testing.assert_array_equal(np.from_dlpack(t), matrix)


def test_dlpack_of_non_contiguous_and_broadcast_results(matrix):
    t = lax.transpose(xp.asarray(matrix, device=DEVICE), permutation=(1, 0))
    np.testing.assert_array_equal(np.from_dlpack(t), matrix.T)
    row = xp.asarray(np.arange(4.0), device=DEVICE)
    b = lax.broadcast_in_dim(row, shape=(3, 4), broadcast_dimensions=(1,))
    np.testing.assert_array_equal(np.from_dlpack(b), np.broadcast_to(np.arange(4.0), (3, 4)))


def test_zero_d_results_are_arrays():
    x = xp.asarray(np.array(2.0), device=DEVICE)
    for out in (lax.add(x, x), lax.exp(x), lax.neg(x), lax.round(x), lax.maximum(x, x)):
        assert type(out._buf) is np.ndarray and out._buf.shape == ()
        assert np.from_dlpack(out) == float(out)


def test_array_protocol(matrix):
    t = xp.asarray(matrix, device=DEVICE)
    view = np.asarray(t)
    assert np.shares_memory(view, t._buf)
    as_f32 = np.asarray(t, dtype=np.float32)
    assert as_f32.dtype == np.float32
    np.testing.assert_array_equal(as_f32, matrix.astype(np.float32))
    copied = t.__array__(copy=True)
    assert not np.shares_memory(copied, t._buf)
    np.testing.assert_array_equal(copied, matrix)


def test_copy_is_a_fresh_buffer(matrix):
    t = xp.asarray(matrix, device=DEVICE)
    c = lax.copy(t)
    assert not np.shares_memory(c._buf, t._buf)
    np.testing.assert_array_equal(c._buf, matrix)
    tt = lax.copy(lax.transpose(t, permutation=(1, 0)))  # a transposed view copied row-major
    assert tt._buf.flags.c_contiguous and not np.shares_memory(tt._buf, t._buf)
    np.testing.assert_array_equal(tt._buf, matrix.T)


def test_telemetry_is_labelled():
    tel = NumpyBackend().telemetry("cpu")
    assert isinstance(tel, EnergyTelemetry)
    if isinstance(tel, RaplTelemetry):
        assert tel.measured is True and tel.source == "rapl"
    else:
        assert isinstance(tel, EstimatedTelemetry)
        assert tel.measured is False and tel.source == "cost-model"
        tel.reset_counters()
        joules = tel.record(flops=1e6, bytes_moved=1e3)
        assert joules > 0 and tel.energy_consumed_joules() == pytest.approx(joules)
        tel.reset_counters()
        assert tel.energy_consumed_joules() == 0.0
    assert tel.energy_consumed_joules() >= 0.0


def test_telemetry_is_one_meter_per_backend():
    backend = NumpyBackend()
    assert backend.telemetry("cpu") is backend.telemetry("cpu")


def test_estimated_telemetry_when_rapl_is_unreadable(monkeypatch):
    monkeypatch.setattr(RaplTelemetry, "find", staticmethod(lambda: None))
    tel = NumpyBackend().telemetry("cpu")
    assert isinstance(tel, EstimatedTelemetry) and tel.measured is False


@pytest.mark.parametrize("make", [
    lambda: xp.asarray([1.0, 2.0], dtype=D.bfloat16, device=DEVICE),
    lambda: xp.zeros((2,), dtype=D.bfloat16, device=DEVICE),
    lambda: lax.full(shape=(2,), fill_value=1.0, dtype=D.bfloat16, device=DEVICE),
    lambda: lax.iota(dtype=D.bfloat16, shape=(2,), dimension=0, device=DEVICE),
    lambda: lax.convert(xp.asarray([1.0], device=DEVICE), new_dtype=D.bfloat16),
], ids=["asarray", "zeros", "full", "iota", "convert"])
def test_bfloat16_is_a_dtype_error(make):
    with pytest.raises(DTypeError, match="bfloat16"):
        make()


@settings(max_examples=40)
@given(outer=st.lists(st.integers(1, 9), min_size=1, max_size=3),
       window=st.lists(st.integers(1, 4), min_size=1, max_size=2), strided=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64, np.int16, np.bool_]), seed=st.integers(0, 2**16))
def test_reductions_over_few_elements_per_output_match_numpy(outer, window, strided, dtype, seed):
    """Pooling-like reductions (a few elements per output of a large array) combine slices
    elementwise; the result is NumPy's (NaN included), on strided inputs too."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal([128 if strided else 64, *outer, *window]) * 3
    a = a > 0 if dtype == np.bool_ else a.astype(dtype)
    if a.dtype.kind == "f":
        a.flat[rng.integers(0, a.size, 5)] = np.nan
    if strided:
        a = a[::2]
    axes = tuple(range(a.ndim - len(window), a.ndim))
    ops = ({"all": lax.reduce_and, "any": lax.reduce_or} if dtype == np.bool_
           else {"max": lax.reduce_max, "min": lax.reduce_min})
    for name, reduce_ in ops.items():
        got = reduce_(xp.asarray(a), axes=axes).numpy()
        np.testing.assert_array_equal(got, getattr(np, name)(a, axis=axes))


@settings(max_examples=40)
@given(outer=st.lists(st.integers(1, 9), min_size=1, max_size=3),
       window=st.lists(st.integers(1, 4), min_size=1, max_size=2), strided=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64, np.float16, np.int16, np.complex64]),
       seed=st.integers(0, 2**16))
def test_sums_over_few_elements_per_output_match_numpy(outer, window, strided, dtype, seed):
    """reduce_sum over pooling windows (a maximum's tie counts in its gradient) adds slices:
    NumPy's sum to rounding (float16 keeps NumPy's float32 accumulation, integers wrap alike)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal([128 if strided else 64, *outer, *window]) * 3
    a = (a + 1j * a[::-1] if dtype == np.complex64 else a).astype(dtype)
    if strided:
        a = a[::2]
    axes = tuple(range(a.ndim - len(window), a.ndim))
    got = lax.reduce_sum(xp.asarray(a), axes=axes).numpy()
    want = np.sum(a, axis=axes, dtype=dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype == np.float16 or a.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5 if a.real.dtype == np.float32 else 1e-12, atol=1e-5)


def _select_operands(draw):
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64, np.int8, np.int32, np.uint64,
                                  np.complex64, np.complex128, np.bool_]))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=3)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0])

    def operand():
        raw = rng.standard_normal((2, *shape[::-1])) * 3
        if dtype().dtype.kind == "f":
            raw.flat[rng.integers(0, raw.size, raw.size // 3 + 1) if raw.size else []] = rng.choice(
                specials, raw.size // 3 + 1) if raw.size else []
        a = raw[0] + 1j * raw[1] if np.dtype(dtype).kind == "c" else raw[0]
        a = (a > 0) if dtype == np.bool_ else a.astype(dtype)
        return np.asarray(a).T  # a transposed (non-contiguous) buffer where rank >= 2

    pred = np.asarray(rng.standard_normal(shape) > 0)
    t, f = operand(), operand()
    which = draw(st.sampled_from(["arrays", "broadcast", "zero false", "zero true"]))
    if which == "broadcast" and f.size:  # a broadcast operand, as fused code passes them
        f = np.broadcast_to(f.reshape(-1)[:1].reshape((1,) * len(shape)), shape)
    elif which.startswith("zero"):  # ReLU's gradient and its mirror: a broadcast 0 (or -0.0)
        zero = np.asarray(-0.0 if draw(st.booleans()) else 0).astype(dtype)
        if which == "zero false":
            f = np.broadcast_to(zero, shape)
        else:
            t = np.broadcast_to(zero, shape)
    return pred, t, f


@settings(max_examples=80)
@given(st.data())
def test_select_is_numpys_where_bitwise(data):
    """The branchless select (large operands) gives np.where's bits: NaN payloads, signed
    zeros, every dtype, 0-size, 1-size, non-contiguous and broadcast operands."""
    from tenferro_numpy import kernels as K

    pred, t, f = _select_operands(data.draw)
    saved = K.SELECT_BITWISE_MIN
    for threshold in (0, saved):
        K.SELECT_BITWISE_MIN = threshold
        try:
            got = K._select(pred, t, f)
        finally:
            K.SELECT_BITWISE_MIN = saved
        want = np.where(pred, t, f)
        assert got.dtype == want.dtype and got.shape == want.shape and got.base is None
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


def test_large_select_through_the_runtime_is_bitwise():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 512)).astype(np.float32)
    x.flat[::97] = np.nan
    x.flat[1::89] = -0.0
    pred = rng.standard_normal((128, 512)) > 0
    got = lax.select(xp.asarray(pred), xp.asarray(x), xp.zeros((128, 512), dtype=xp.float32)).numpy()
    want = np.where(pred, x, np.float32(0))
    assert got.tobytes() == want.tobytes()


@settings(max_examples=40)
@given(dtype=st.sampled_from(["int8", "int32", "uint32", "int64", "uint64"]),
       shape=st.sampled_from([(), (0,), (1,), (3, 5), (2, 0, 3)]), transposed=st.booleans(),
       counts=st.lists(st.integers(-3, 70), min_size=2, max_size=2), seed=st.integers(0, 2**16))
def test_fused_shifts_by_constant_counts_are_the_shift_kernels(dtype, shape, transposed, counts, seed):
    """In a fused group a shift by constant counts in [0, bits) (random bits' rotations) is
    the ufunc itself; any other count goes through the kernel; values bitwise node by node."""
    from tenferro_numpy.fusion import fused_kernel, generated_source
    from tenferro_runtime import trace
    from tenferro_runtime.graph import eval_graph
    from tenferro_runtime.graph_prims import fused_p
    from tenferro_runtime.passes.fusion import fuse_elementwise

    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    raw = rng.integers(info.min, info.max, shape[::-1] if transposed else shape, dtype=dtype, endpoint=True)
    x = xp.asarray(np.asarray(raw).T if transposed else raw)
    bits = np.dtype(dtype).itemsize * 8

    def rotate(v):
        left = lax.shift_left(v, xp.full(shape, counts[0], dtype=v.dtype))
        right = lax.shift_right(v, xp.full(shape, counts[1], dtype=v.dtype))
        return lax.bitwise_xor(lax.bitwise_or(left, right), v)

    if info.min == 0 and min(counts) < 0:
        return  # negative counts do not fit an unsigned dtype
    graph = fuse_elementwise(trace(rotate, x))
    (node,) = [n for n in graph.nodes if n.prim is fused_p]
    sub = node.params["graph"]
    src = generated_source(sub)
    # the shift ufunc, or its operator on NumPy scalars where every value is one element (0-size:
    # no counts, so all in range)
    assert ("left_shift(" in src or " << " in src) == (0 <= counts[0] < bits or 0 in shape)
    assert ("right_shift(" in src or " >> " in src) == (0 <= counts[1] < bits or 0 in shape)
    want = eval_graph(trace(rotate, x), x)[0].numpy()
    got = fused_kernel(x.numpy(), graph=sub)[0]
    assert got.dtype == want.dtype
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


@settings(max_examples=60)
@given(sizes=st.lists(st.integers(0, 5), min_size=2, max_size=4), data=st.data(),
       layout=st.sampled_from(["c", "transposed", "strided"]), seed=st.integers(0, 2**16))
def test_unbatched_dot_general_takes_views_and_matches_einsum(sizes, data, layout, seed):
    """Unbatched products read their operands as matrix views where one exists (a contraction
    over leading axes as the transpose of a view) and copy otherwise: values as einsum's, on
    C-ordered, transposed and strided operands, 0-size and 1-size axes."""
    from tenferro_numpy import kernels as K

    rng = np.random.default_rng(seed)
    nl = len(sizes)
    lc = tuple(sorted(data.draw(st.sets(st.integers(0, nl - 1), min_size=1, max_size=nl))))
    lf = [i for i in range(nl) if i not in lc]
    nf = data.draw(st.integers(0, 2))
    rshape_free = [data.draw(st.integers(0, 4)) for _ in range(nf)]
    rc = tuple(data.draw(st.permutations(range(len(lc) + nf)))[:len(lc)])
    rf = [i for i in range(len(lc) + nf) if i not in rc]
    rshape = [0] * (len(lc) + nf)
    for a, b in zip(lc, rc):
        rshape[b] = sizes[a]
    for i, n in zip(rf, rshape_free):
        rshape[i] = n

    def make(shape):
        if layout == "transposed":
            return rng.standard_normal(shape[::-1]).astype(np.float32).T
        if layout == "strided":
            big = rng.standard_normal([2 * n for n in shape]).astype(np.float32)
            return big[(slice(None, None, 2),) * len(shape)]
        return rng.standard_normal(shape).astype(np.float32)

    lhs, rhs = make(sizes), make(rshape)
    got = K._dot_general(lhs, rhs, contracting_dims=(lc, rc), batch_dims=((), ()))
    letters = "abcdefgh"
    ls = [letters[i] for i in range(nl)]
    rs = ["?"] * len(rshape)
    for a, b in zip(lc, rc):
        rs[b] = ls[a]
    for j, i in enumerate(rf):
        rs[i] = letters[nl + j]
    spec = f"{''.join(ls)},{''.join(rs)}->{''.join(ls[i] for i in lf)}{''.join(rs[i] for i in rf)}"
    want = np.einsum(spec, lhs.astype(np.float64), rhs.astype(np.float64))
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1, int(np.prod([sizes[i] for i in lc]))))


@settings(max_examples=40, deadline=None)
@given(rows=st.sampled_from([0, 1, 3]), cols=st.sampled_from([1, 4]), transposed=st.booleans(),
       seed=st.integers(0, 2**16))
def test_fused_broadcasts_feeding_ufuncs_stay_reshapes(rows, cols, transposed, seed):
    """A broadcast whose users are ufuncs that broadcast to their result's shape is emitted
    as a reshape (no np.broadcast_to); one whose ufunc would then come out smaller (two
    broadcasts of one element), or that is a group output, is materialized. The group's
    results are bitwise the node-by-node evaluation's, for transposed operands too."""
    from tenferro_numpy.fusion import fused_kernel, generated_source
    from tenferro_runtime import trace
    from tenferro_runtime.graph import eval_graph
    from tenferro_runtime.graph_prims import fused_p
    from tenferro_runtime.passes.fusion import fuse_elementwise

    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((cols, rows) if transposed else (rows, cols)).astype(np.float32)
    x = xp.asarray(raw.T if transposed else raw)
    col = xp.asarray(rng.standard_normal((rows, 1)).astype(np.float32))
    one = xp.asarray(rng.standard_normal(()).astype(np.float32))

    def f(x, col, one):
        scaled = x * lax.rsqrt(col * col + 1.0)  # (rows, 1) -> (rows, cols): a reshape
        ones = xp.broadcast_to(one, (rows, cols))
        twos = xp.broadcast_to(one * 2.0, (rows, cols))
        out = xp.broadcast_to(one * 3.0, (rows, cols))  # a group output: materialized
        return scaled + ones * twos, out  # ones * twos: one of them materialized (but for 1 x 1)

    graph = fuse_elementwise(trace(f, x, col, one))
    env = dict(zip(graph.inputs, (x, col, one)))
    for node in graph.nodes:  # the fused groups, each bitwise its node-by-node evaluation
        assert node.prim is fused_p
        sub = node.params["graph"]
        args = [env[v] for v in node.inputs]
        want = eval_graph(sub, *args)
        got = fused_kernel(*(a.numpy() for a in args), graph=sub)
        assert len(got) == len(want) == len(node.outputs)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.numpy().dtype
            assert np.ascontiguousarray(g).tobytes() == np.ascontiguousarray(w.numpy()).tobytes()
        env.update(zip(node.outputs, want))
        src = generated_source(sub)
        bodies = 1 + ("or _ok(" in src)  # a strided-operand body beside the C-ordered one
        materialized = ((graph.outputs[0] in node.outputs and rows * cols != 1)
                        + (graph.outputs[1] in node.outputs))
        assert src.count("np.broadcast_to(") == bodies * materialized, src
