"""The numpy convolution kernel's paths against torch's conv2d (float64): one input channel
(windows copied per offset), more filters than windows (a weight's gradient: the kernel a
view, columns in its own order), groups, strides, dilations, zero and negative padding,
both layouts, the two layouts bitwise equal."""

from __future__ import annotations

import numpy as np
import pytest

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
