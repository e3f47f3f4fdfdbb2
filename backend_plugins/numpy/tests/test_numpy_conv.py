"""The numpy convolution kernel's paths against torch's conv2d (float64): one input channel
(windows copied per offset), more filters than windows (a weight's gradient: the kernel a
view, columns in its own order), groups, strides, dilations, zero and negative padding,
both layouts, the two layouts bitwise equal."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenferro_numpy.kernels import _conv_general

torch = pytest.importorskip("torch")

CASES = [  # lhs (N, C, H, W), rhs (O, C/G, kh, kw), strides, padding, lhs/rhs dilation, groups
    ((64, 1, 8, 8), (32, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1),
    ((1, 64, 8, 8), (32, 64, 8, 8), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1),
    ((2, 3, 5, 4), (7, 3, 2, 2), (2, 1), ((0, 1), (2, 0)), (1, 1), (1, 2), 1),
    ((2, 4, 6, 6), (6, 2, 3, 3), (1, 2), ((1, 1), (1, 1)), (1, 1), (1, 1), 2),
    ((1, 2, 4, 4), (5, 2, 3, 3), (1, 1), ((-1, 1), (1, 0)), (2, 1), (1, 1), 1),
    ((3, 1, 6, 5), (4, 1, 2, 3), (2, 2), ((0, 0), (1, 1)), (1, 1), (2, 1), 1),
]


def _reference(x, w, strides, padding, lhs_dilation, rhs_dilation, groups):
    """torch's conv2d on the explicitly dilated and padded input (negative padding cropped)."""
    n, c, h, wd = x.shape
    dh, dw = lhs_dilation
    xd = np.zeros((n, c, (h - 1) * dh + 1, (wd - 1) * dw + 1))
    xd[:, :, ::dh, ::dw] = x
    (t, b), (lft, r) = padding
    xd = np.pad(xd, ((0, 0), (0, 0), (max(t, 0), max(b, 0)), (max(lft, 0), max(r, 0))))
    xd = xd[:, :, -min(t, 0):xd.shape[2] + min(b, 0), -min(lft, 0):xd.shape[3] + min(r, 0)]
    out = torch.nn.functional.conv2d(torch.from_numpy(xd), torch.from_numpy(w), stride=strides,
                                     dilation=rhs_dilation, groups=groups)
    return out.numpy()


@pytest.mark.parametrize("case", CASES)
def test_conv_paths_match_torch_and_the_layouts_agree(case):
    ls, rs, strides, padding, ld, rd, g = case
    r = np.random.default_rng(0)
    x, w = r.standard_normal(ls), r.standard_normal(rs)
    params = dict(window_strides=strides, padding=padding, lhs_dilation=ld, rhs_dilation=rd,
                  feature_group_count=g)
    first = _conv_general(x, w, **params)
    last = _conv_general(np.ascontiguousarray(np.moveaxis(x, 1, -1)), w, layout="channels_last", **params)
    np.testing.assert_allclose(first, _reference(x, w, strides, padding, ld, rd, g), rtol=1e-12, atol=1e-12)
    assert np.moveaxis(last, -1, 1).tobytes() == np.ascontiguousarray(first).tobytes()
    assert first.flags.c_contiguous and first.dtype == x.dtype


def _params(strides, padding, ld, rd, g, layout):
    return dict(window_strides=strides, padding=padding, lhs_dilation=ld, rhs_dilation=rd,
                feature_group_count=g, layout=layout)


@st.composite
def conv_problems(draw):
    """A 1-D, 2-D or 3-D convolution: sizes from 0, strides, dilations, padding (negative
    too), groups, a dtype and a layout."""
    nsp = draw(st.integers(1, 3))
    g = draw(st.sampled_from([1, 1, 2]))
    n, cg, og = draw(st.integers(0, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    k = [draw(st.integers(1, 3)) for _ in range(nsp)]
    sp = [draw(st.integers(0, 6)) for _ in range(nsp)]
    strides = tuple(draw(st.integers(1, 2)) for _ in range(nsp))
    rd = tuple(draw(st.integers(1, 2)) for _ in range(nsp))
    ld = tuple(draw(st.sampled_from([1, 1, 1, 2])) for _ in range(nsp))
    padding = []
    for i in range(nsp):  # the window fits the dilated, padded input (as the shape rule asks)
        lo, hi = draw(st.integers(-1, 2)), draw(st.integers(-1, 2))
        size = (sp[i] - 1) * ld[i] + 1 if sp[i] else 0
        padding.append((lo, max(hi, (k[i] - 1) * rd[i] + 1 - size - lo)))
    padding = tuple(padding)
    dtype = draw(st.sampled_from(["float32", "float64", "float16", "complex64"]))
    layout = draw(st.sampled_from(["channels_first", "channels_last"]))
    return (n, g * cg, *sp), (g * og, cg, *k), strides, padding, ld, rd, g, dtype, layout


@settings(deadline=None, max_examples=60)
@given(conv_problems(), st.integers(0, 2**16))
@example(((32, 64, 4, 4), (32, 64, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, "float32",
          "channels_last"), 0).via("the digits CNN's input gradient of its second convolution")
@example(((64, 1, 8, 8), (32, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, "float32",
          "channels_first"), 1).via("one input channel: windows copied per offset")
@example(((1, 64, 8, 8), (32, 64, 8, 8), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, "float64",
          "channels_last"), 2).via("more filters than windows")
@example(((2, 3, 5, 4), (2, 3, 3, 3), (1, 1), ((2, 2), (1, 1)), (1, 1), (2, 1), 1, "float64",
          "channels_first"), 3).via("fewer outputs than channels: products added shifted, dilated")
@example(((2, 5, 6), (2, 5, 3), (1,), ((0, 0),), (1,), (1,), 1, "float32",
          "channels_last"), 4).via("no padding: more input than output, the windows' path")
@example(((1, 4, 1), (2, 2, 2), (1,), ((0, 1),), (1,), (1,), 2, "float32",
          "channels_first"), 0).via("groups, a column-major weight: its matrices made row-major")
def test_the_kernel_of_one_signature_is_bitwise_the_generic_one(problem, seed):
    """`conv_kernel` (shapes, path and window strides worked out once per signature) gives the
    bytes of `conv_general` on every path, dtype and layout, and non-contiguous operands;
    both match torch's convolution in float64."""
    from tenferro_core import dtypes as D
    from tenferro_core.avals import Aval
    from tenferro_numpy.conv import conv_general, conv_kernel

    ls, rs, strides, padding, ld, rd, g, dtype, layout = problem
    r = np.random.default_rng(seed)
    x = (r.standard_normal(ls) * 2).astype(dtype)
    w = (r.standard_normal(rs) * 2).astype(dtype)
    if layout == "channels_last":
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    params = _params(strides, padding, ld, rd, g, layout)
    dt = getattr(D, dtype)
    kernel = conv_kernel((Aval(x.shape, dt), Aval(w.shape, dt)), params)
    want = conv_general(x, w, **params)
    for a, b in ((x, w), (x[::-1].copy()[::-1], np.asfortranarray(w))):  # views, other layouts
        got = kernel(a, b, **params)
        assert got.shape == want.shape and got.dtype == want.dtype and got.flags.c_contiguous
        assert got.tobytes() == want.tobytes()
    x64 = x.astype(np.complex128 if dtype.startswith("complex") else np.float64)
    ref = _reference_nd(x64 if layout == "channels_first" else np.moveaxis(x64, -1, 1),
                        w.astype(x64.dtype), strides, padding, ld, rd, g)
    ref = ref if layout == "channels_first" else np.moveaxis(ref, 1, -1)
    tol = {"float16": 2e-2, "float32": 1e-4, "complex64": 1e-4}.get(dtype, 1e-12)
    np.testing.assert_allclose(want.astype(x64.dtype), ref, rtol=tol, atol=tol * 8 * max(1, w[0].size))


def _reference_nd(x, w, strides, padding, ld, rd, g):
    """torch's conv1d/2d/3d (float64, or its complex product as four real ones) on the
    explicitly dilated, padded and cropped input."""
    if np.iscomplexobj(x):
        rr = _reference_nd(x.real, w.real, strides, padding, ld, rd, g)
        ii = _reference_nd(x.imag, w.imag, strides, padding, ld, rd, g)
        ri = _reference_nd(x.real, w.imag, strides, padding, ld, rd, g)
        ir = _reference_nd(x.imag, w.real, strides, padding, ld, rd, g)
        return (rr - ii) + 1j * (ri + ir)
    nsp = x.ndim - 2
    xd = np.zeros(x.shape[:2] + tuple((s - 1) * d + 1 if s else 0 for s, d in zip(x.shape[2:], ld)))
    xd[(slice(None), slice(None), *(slice(None, None, d) for d in ld))] = x
    xd = np.pad(xd, ((0, 0), (0, 0), *((max(lo, 0), max(hi, 0)) for lo, hi in padding)))
    xd = xd[(slice(None), slice(None), *(slice(-min(lo, 0), n + min(hi, 0))
                                          for (lo, hi), n in zip(padding, xd.shape[2:])))]
    conv = getattr(torch.nn.functional, f"conv{nsp}d")
    if 0 in xd.shape or 0 in w.shape:  # torch refuses empty batches and channels: zeros
        return _empty_ref(xd, w, strides, rd)
    return conv(torch.from_numpy(xd), torch.from_numpy(w), stride=strides, dilation=rd, groups=g).numpy()


def _empty_ref(xd, w, strides, rd):
    sp = tuple((s - ((k - 1) * d + 1)) // st + 1
               for s, k, d, st in zip(xd.shape[2:], w.shape[2:], rd, strides))
    return np.zeros((xd.shape[0], w.shape[0], *sp))
