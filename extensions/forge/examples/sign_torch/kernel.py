"""sign of a float tensor on torch:cpu in two passes instead of three.

tenferro's torch kernel is ``torch.where(torch.isnan(x), x, torch.sign(x))`` (sign(NaN) is
NaN in tenferro, 0 in torch): a sign pass, a NaN-mask pass and a select pass, with two
temporaries. Here the NaNs come along arithmetically: ``clamp(x, -1, 1) * 0`` is NaN where x
is NaN and (+-)0 everywhere else (inf clamps to 1 first), so adding it to torch.sign(x) in
place restores NaN and leaves every other sign unchanged (-0.0 + -0.0 stays -0.0).
"""

import torch


def kernel(x):
    out = torch.sign(x)
    return out.add_(torch.clamp(x, -1, 1).mul_(0))
