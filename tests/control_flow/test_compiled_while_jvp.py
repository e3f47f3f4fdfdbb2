"""Forward mode through a compiled function holding a while loop: the loop carries primals
and tangents together, so the callee's JVP runs as one joint callee (it could not be split
into primal and tangent parts; that raised a KeyError); reverse mode stays a typed error."""

from __future__ import annotations

import numpy as np
import pytest

from tenferro_ad import grad, jacfwd, jvp
from tenferro_core.errors import MissingRuleError
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax


def _doubling(x):
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0 + xp.sin(c[1])),
                          (0, x))[1]


@pytest.mark.parametrize("device", ["numpy:cpu", "torch:cpu"])
def test_jvp_of_a_compiled_while_loop(device):
    x = xp.asarray([0.3, -1.2], device=device)
    t = xp.asarray([1.0, 0.5], device=device)
    out, tan = jvp(compile(_doubling), (x,), (t,))
    want_out, want_tan = jvp(_doubling, (x,), (t,))
    np.testing.assert_allclose(out.numpy(), want_out.numpy(), rtol=1e-12)
    np.testing.assert_allclose(tan.numpy(), want_tan.numpy(), rtol=1e-12)
    eps = 1e-6
    fd = (_doubling(x + eps * t).numpy() - _doubling(x - eps * t).numpy()) / (2 * eps)
    np.testing.assert_allclose(tan.numpy(), fd, rtol=1e-6)
    np.testing.assert_allclose(jacfwd(compile(_doubling))(x).numpy(), jacfwd(_doubling)(x).numpy(),
                               rtol=1e-12)
    with pytest.raises(MissingRuleError, match="while_loop"):
        grad(lambda v: xp.sum(compile(_doubling)(v)))(x)
