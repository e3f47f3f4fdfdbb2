"""Tasks from the catalog (task.json, PROMPT.md, typed errors), the static scan's findings
one family at a time, and the tolerance tied to the declared dtype."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from forge_helpers import make_task
from tenferro_forge import gates, ops
from tenferro_forge.errors import ForgeArgumentError, ForgeFileError
from tenferro_forge.registry import shape_bucket
from tenferro_forge.scan import scan
from tenferro_forge.task import load_task, new_task, parse_shape


def test_new_task_writes_task_json_and_prompt(tmp_path):
    d = new_task(
        tmp_path / "t",
        "reduce_max",
        device="numpy:cpu",
        dtype="float32",
        shapes=["4096x32", (64, 64)],
        params={"axes": [1]},
    )
    task = json.loads((d / "task.json").read_text())
    assert task["op"] == "reduce_max" and task["params"] == {"axes": [1]}
    assert task["shapes"] == [[4096, 32], [64, 64]] and task["objective"] == "latency"
    assert task["reference"]["kind"] == "float64-numpy" and task["languages"] == ["numpy", "numba"]
    text = (d / "PROMPT.md").read_text()
    for words in (
        "NaN propagates",
        "float32[4096,32] the result is",
        "float32[4096]",
        "Kernel contract",
        "def kernel(x0, *, axes)",
        "metadata.json",
        "exact: the result must equal",
        "caching results across calls",
        "1.10x",
    ):
        assert words in text, words
    assert load_task(d)["shapes"] == [(4096, 32), (64, 64)]
    sum_prompt = (
        new_task(
            tmp_path / "s",
            "reduce_sum",
            device="numpy:cpu",
            dtype="float64",
            shapes=[(8, 8)],
            params={"axes": [0, 1]},
        )
        / "PROMPT.md"
    ).read_text()
    assert "log2 n + 1" in sum_prompt and "float64[]" in sum_prompt
    add = (
        new_task(tmp_path / "a", "add", device="numpy:cpu", dtype="float16", shapes=[()]) / "PROMPT.md"
    ).read_text()
    assert "def kernel(x0, x1)" in add and "8 eps" in add


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"op": "dot_general"}, "cannot make a task for op 'dot_general'"),
        ({"op": "nope"}, "cannot make a task"),
        ({"dtype": "int32"}, "float dtypes"),
        ({"device": "cuda"}, "named like 'numpy:cpu'"),
        ({"shapes": ["4x0"]}, "refuses shape (4, 0)"),
        ({"shapes": ["4xq"]}, "dimensions joined by 'x'"),
        ({"shapes": []}, "at least one shape"),
        ({"params": {"axes": [5]}}, "refuses shape"),
        ({"objective": "energy"}, "objective must be one of"),
    ],
)
def test_new_task_bad_arguments_are_typed_errors(tmp_path, kwargs, words):
    args = {
        "op": "reduce_max",
        "device": "numpy:cpu",
        "dtype": "float32",
        "shapes": ["8x8"],
        "params": {"axes": [1]},
        **kwargs,
    }
    op = args.pop("op")
    with pytest.raises(ForgeArgumentError, match=words.replace("(", r"\(").replace(")", r"\)")) as info:
        new_task(tmp_path / "t", op, **args)
    assert isinstance(info.value, (ValueError, TypeError))
    assert not (tmp_path / "t" / "task.json").exists()


def test_missing_or_malformed_task_is_a_file_error(tmp_path):
    with pytest.raises(ForgeFileError, match="tenferro-forge new") as info:
        gates.verify(tmp_path)
    assert isinstance(info.value, OSError)
    (tmp_path / "task.json").write_text("{")
    with pytest.raises(ForgeFileError, match="not readable JSON"):
        load_task(tmp_path)
    (tmp_path / "task.json").write_text("{}")
    with pytest.raises(ForgeFileError, match="lacks"):
        load_task(tmp_path)


@given(st.lists(st.integers(0, 10**6), max_size=4))
@example([])
@example([0, 1])
def test_shapes_parse_and_bucket(dims):
    text = "x".join(map(str, dims))
    assert parse_shape(text) == tuple(dims)
    bucket = shape_bucket(tuple(dims))
    if dims:
        b = [int(p) for p in bucket.split("x")]
        assert all(d <= c < max(2 * d, 1) or d == c for d, c in zip(dims, b))
        assert all(c & (c - 1) == 0 for c in b)
    else:
        assert bucket == "scalar"


HONEST = "import numpy as np\n\n\ndef kernel(x, *, axes):\n    return np.max(x, axis=axes)\n"
SCAN_CASES = {
    "import subprocess": "starts processes",
    "import os": "process and file calls",
    "from os import system": "process and file calls",
    "x = eval('1')": "call of eval",
    "exec('pass')": "call of exec",
    "c = compile('1', 'f', 'eval')": "call of compile",
    "import importlib": "importlib tricks",
    "m = __import__('os')": "importlib tricks",
    "import socket": "network",
    "import urllib.request": "network",
    "import ctypes": "raw memory",
    "import threading": "threads",
    "from concurrent.futures import ThreadPoolExecutor": "threads or processes",
    "import multiprocessing": "processes",
    "f = open('/tmp/x', 'w')": "file access",
    "np.save('/tmp/x', np.ones(1))": "file writes",
    "import time": "touches timers",
    "import timeit": "touches timers",
    "np.max = len": "monkey-patching",
    "setattr(np, 'max', len)": "monkey-patching",
    "import tenferro_numpy": "reference or the baseline",
    "from tenferro_runtime import array_api": "reference or the baseline",
    "class T(np.ndarray):\n    pass": "tensor subclass",
    "class L:\n    def __array__(self):\n        return 1": "lazy or array-like",
    "y = np.float16": "dtype downcast",
    "y = np.ones(3).astype('e')": "dtype downcast",
    "g = np.__dict__": "dunder attribute",
    "import gc": "reaches the harness",
    "import sys": "interpreter internals",
    "def gen():\n    yield 1": "deferred past the call",
    "from numpy.lib.stride_tricks import as_strided": "raw strided views",
    "import json": "not on the allow list",
}


@pytest.mark.parametrize("snippet", sorted(SCAN_CASES))
def test_scan_names_each_family(snippet):
    findings = scan(HONEST + snippet + "\n", dtype="float32")
    assert any(SCAN_CASES[snippet] in f["reason"] for f in findings), findings
    assert all(f["check"] == "scan" and f["line"] >= 1 for f in findings)


def test_scan_accepts_honest_code_and_reports_structure():
    assert scan(HONEST) == []
    assert scan(HONEST.replace("np.max", "np.max") + "y = np.float32\n", dtype="float64")[0][
        "reason"
    ].startswith("dtype downcast")
    assert scan(HONEST + "y = np.float32\n", dtype="float32") == []  # float32 is the task's own
    assert scan("import numpy as np\n", dtype="float32")[0]["reason"].endswith("function `kernel`")
    assert "syntax error" in scan("def kernel(:\n")[0]["reason"]
    assert scan(HONEST + "import numba\n", allowed_extra=("numba",)) == []


@given(st.integers(1, 64), st.integers(0, 2**31 - 1))
@example(1, 0)
def test_tolerance_accepts_float32_sums_and_rejects_half_precision(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, n)).astype(np.float32)
    ref = ops.reference("reduce_sum", [x], {"axes": [1]})
    params = {"axes": [1]}
    assert (
        ops.mismatch("reduce_sum", "float32", [x], params, np.sum(x, axis=1, dtype=np.float32), ref) is None
    )
    naive = np.zeros(3, np.float32)
    for j in range(n):
        naive += x[:, j]
    assert ops.mismatch("reduce_sum", "float32", [x], params, naive, ref) is None or n > 16
    half = np.sum(x.astype(np.float16), axis=1, dtype=np.float16).astype(np.float32)
    if not np.allclose(half, ref, rtol=1e-5, atol=1e-5):
        assert ops.mismatch("reduce_sum", "float32", [x], params, half, ref) is not None
    e = rng.standard_normal(8).astype(np.float32)
    exp_ref = ops.reference("exp", [e], {})
    assert ops.mismatch("exp", "float32", [e], {}, np.exp(e), exp_ref) is None
    assert (
        ops.mismatch("exp", "float32", [e], {}, np.exp(e.astype(np.float16)).astype(np.float32), exp_ref)
        is not None
    )


def test_numpy_scalar_result_is_a_contract_finding(tmp_path):
    d = make_task(tmp_path / "exp", None, shapes=[(4, 4)], op="exp", params={})
    (d / "kernel.py").write_text("import numpy as np\n\n\ndef kernel(x):\n    return np.exp(x)\n")
    (d / "metadata.json").write_text(
        json.dumps(
            {
                "author": "t",
                "language": "numpy",
                "op": "exp",
                "signature": {"dtype": "float32", "device": "numpy:cpu"},
                "claims": "none",
            }
        )
    )
    report = gates.verify(d, seeds=(0,))
    assert [f["check"] for f in report.findings] == ["contract"]
    assert "edge shape (): returned a NumPy scalar" in report.findings[0]["reason"]


def test_special_values_must_sit_where_the_reference_has_them():
    x = np.array([[1.0, np.nan], [np.inf, 2.0]], np.float32)
    ref = ops.reference("reduce_max", [x], {"axes": [1]})
    assert (
        ops.mismatch("reduce_max", "float32", [x], {"axes": [1]}, np.array([np.nan, np.inf], np.float32), ref)
        is None
    )
    assert "NaN pattern" in ops.mismatch(
        "reduce_max", "float32", [x], {"axes": [1]}, np.array([1.0, np.inf], np.float32), ref
    )
    assert "infinity" in ops.mismatch(
        "reduce_max", "float32", [x], {"axes": [1]}, np.array([np.nan, 3.0], np.float32), ref
    )


@pytest.mark.parametrize(
    "op, params, source",
    [
        ("exp", {}, "import numpy as np\n\n\ndef kernel(x):\n    return np.exp(x, out=...)\n"),
        ("add", {}, "import numpy as np\n\n\ndef kernel(x, y):\n    return np.add(x, y, out=...)\n"),
        (
            "reduce_sum",
            {"axes": [0]},
            "import numpy as np\n\n\ndef kernel(x, *, axes):\n"
            "    return np.asarray(np.sum(x, axis=axes, dtype=x.dtype))\n",
        ),
        (
            "rsqrt",
            {},
            "import numpy as np\n\n\ndef kernel(x):\n    out = np.sqrt(x, out=...)\n"
            "    np.reciprocal(out, out=out)\n    return out\n",
        ),
    ],
)
def test_other_ops_verify_honest_numpy_candidates(tmp_path, op, params, source):
    d = make_task(tmp_path / op, None, shapes=[(64, 48)], op=op, params=params)
    (d / "kernel.py").write_text(source)
    (d / "metadata.json").write_text(
        json.dumps(
            {
                "author": "t",
                "language": "numpy",
                "op": op,
                "signature": {"dtype": "float32", "device": "numpy:cpu"},
                "claims": "none",
            }
        )
    )
    report = gates.verify(d, seeds=(0,))
    assert report.ok, report.findings


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_every_float_dtype_verifies_and_a_narrower_computation_fails(tmp_path, dtype):
    narrower = {"float16": None, "float32": "float16", "float64": "float32"}[dtype]
    honest = "import numpy as np\n\n\ndef kernel(x):\n    return np.exp(x, out=...)\n"
    d = make_task(tmp_path / "ok", None, shapes=[(33, 17)], op="exp", params={})
    meta = {
        "author": "t",
        "language": "numpy",
        "op": "exp",
        "claims": "none",
        "signature": {"dtype": dtype, "device": "numpy:cpu"},
    }
    json.dump({**json.loads((d / "task.json").read_text()), "dtype": dtype}, (d / "task.json").open("w"))
    (d / "kernel.py").write_text(honest)
    (d / "metadata.json").write_text(json.dumps(meta))
    assert gates.verify(d, seeds=(0,)).ok
    if narrower is None:
        return
    (d / "kernel.py").write_text(
        "import numpy as np\n\n\ndef kernel(x):\n"
        f"    return np.exp(x.astype(np.{narrower})).astype(x.dtype)\n"
    )
    assert gates.verify(d, seeds=(0,)).checks() == {"scan"}
    report = gates.verify(d, seeds=(0,), skip_scan=True)
    assert "correctness" in report.checks() and f"{dtype} tolerance" in report.findings[0]["reason"]
