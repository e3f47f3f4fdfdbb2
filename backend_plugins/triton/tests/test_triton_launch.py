"""`Launcher`: the direct launch of a compiled kernel, past `JITFunction.run`.

The direct path only runs on a CUDA device (here the kernels run in the interpreter), so
these tests drive it with a stand-in for the jit function, its compiled kernel and torch's
CUDA calls, and check what reaches the C launcher: the grid, the stream, the arguments
followed by the constexprs, and a new compile whenever Triton would specialize anew. On a
GPU, `make gpu-check` runs every Triton test through the real path.
"""

from __future__ import annotations

import types
from collections import namedtuple

import pytest
import torch

from tenferro_triton import launch
from tenferro_triton.launch import Launcher, specialization

Device = namedtuple("Device", "type index")


class FakeTensor:
    def __init__(self, ptr: int, dtype: object = torch.float32, index: int = 0):
        self.ptr, self.dtype = ptr, dtype
        self.device = Device("cuda", index)

    def data_ptr(self) -> int:
        return self.ptr


class FakeJit:
    """A jit function: `fn[grid](*args, **kw)` records a compile-and-launch and returns a
    compiled kernel whose `run` records direct launches."""

    def __init__(self, arg_names: list[str]):
        self.arg_names = arg_names
        self.slow: list[tuple] = []
        self.direct: list[tuple] = []

    def __getitem__(self, grid: tuple):
        def call(*args, **kw):
            self.slow.append((grid, args, kw))
            return types.SimpleNamespace(run=lambda *a: self.direct.append(a),
                                         function=("fn", len(self.slow)), packed_metadata="meta")
        return call


class FakeCuda:
    def __init__(self, current: int = 0):
        self.current = current
        self.cuda = types.SimpleNamespace(current_device=lambda: self.current,
                                          device=self._device)
        self._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda i: 1000 + i,
                                        _cuda_getDevice=lambda: self.current)
        self.Tensor = FakeTensor  # the launcher's written-out specialization of tensors

    def _device(self, dev):
        outer = self

        class Ctx:
            def __enter__(self):
                self.saved, outer.current = outer.current, dev.index

            def __exit__(self, *exc):
                outer.current = self.saved

        return Ctx()


@pytest.fixture
def cuda(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(launch, "_cuda", lambda: fake)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    return fake


def test_specialization_follows_what_triton_compiles_anew_for():
    assert specialization(32) == specialization(48) != specialization(40)
    assert specialization(1) != specialization(17)
    assert specialization(2**31 + 16) != specialization(32) != specialization(2**40)
    assert specialization(True) is True and specialization(None) is None
    assert specialization(0.5) is float
    base = torch.zeros(64)
    assert specialization(base) == (torch.float32, True)
    assert specialization(base[1:]) == (torch.float32, False)
    assert specialization(base[4:]) == (torch.float32, True)
    assert specialization(base.to(torch.float16)) != specialization(base)
    for t in (base, base[1:], base[4:], base.to(torch.float16)):  # the launcher's inline form
        assert (t.dtype, not t.data_ptr() & 15) == specialization(t)


def test_second_call_goes_straight_to_the_compiled_launcher(cuda):
    fn = FakeJit(["x", "y", "n", "BLOCK"])
    run = Launcher(fn, (7,), {"BLOCK": 128}, num_warps=4)
    x, y = FakeTensor(0x1000), FakeTensor(0x2000)
    run(x, y, 64)
    assert fn.slow == [((7, 1, 1), (x, y, 64), {"BLOCK": 128, "num_warps": 4})]
    run(x, y, 64)
    run(FakeTensor(0x3000), y, 32)  # same specialization: other pointers, n still /16
    assert len(fn.slow) == 1
    assert fn.direct[0] == (7, 1, 1, 1000, ("fn", 1), "meta", None, None, None, x, y, 64, 128)
    assert fn.direct[1][9:] == (fn.direct[1][9], y, 32, 128)


@pytest.mark.parametrize("other", [
    (FakeTensor(0x1004), FakeTensor(0x2000), 64),  # a pointer off 16-byte alignment
    (FakeTensor(0x1000, torch.float16), FakeTensor(0x2000), 64),  # another dtype
    (FakeTensor(0x1000), FakeTensor(0x2000), 65),  # n no longer divisible by 16
    (FakeTensor(0x1000), FakeTensor(0x2000), 1),  # n == 1
])
def test_a_new_specialization_compiles_through_jit_run(cuda, other):
    fn = FakeJit(["x", "y", "n"])
    run = Launcher(fn, (3,))
    run(FakeTensor(0x1000), FakeTensor(0x2000), 64)
    run(*other)
    assert len(fn.slow) == 2 and fn.direct == []
    run(*other)
    assert len(fn.slow) == 2 and len(fn.direct) == 1


def test_another_current_device_launches_on_the_arguments_device(cuda):
    fn = FakeJit(["x"])
    run = Launcher(fn, (1,))
    seen = []
    fn_getitem = fn.__getitem__
    fn.__class__ = type("Recording", (FakeJit,), {
        "__getitem__": lambda self, g: (seen.append(cuda.current), fn_getitem(g))[1]})
    x = FakeTensor(0x1000, index=1)
    run(x)
    run(x)
    assert seen == [1, 1] and fn.direct == [] and cuda.current == 0


def test_constexprs_in_the_middle_or_missing_arguments_keep_the_slow_path(cuda):
    middle = FakeJit(["x", "BLOCK", "n"])
    run = Launcher(middle, (1,), {"BLOCK": 8})
    for _ in range(3):
        run(FakeTensor(0x1000))
    assert len(middle.slow) == 3 and middle.direct == []
    short = FakeJit(["x", "n"])  # n left to its default
    run = Launcher(short, (1,))
    for _ in range(3):
        run(FakeTensor(0x1000))
    assert len(short.slow) == 3 and short.direct == []


def test_interpreter_and_launch_hooks_keep_the_slow_path(cuda, monkeypatch):
    from triton import knobs

    fn = FakeJit(["x"])
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    run = Launcher(fn, (1,))
    run(FakeTensor(0x1000))
    run(FakeTensor(0x1000))
    assert len(fn.slow) == 2 and fn.direct == []
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    hooked = FakeJit(["x"])
    run = Launcher(hooked, (1,))
    monkeypatch.setattr(knobs.runtime.launch_enter_hook, "calls", [lambda *a: None])
    run(FakeTensor(0x1000))
    run(FakeTensor(0x1000))
    assert len(hooked.slow) == 2 and hooked.direct == []


def test_a_launcher_that_refuses_the_arguments_falls_back_to_jit_run(cuda, caplog):
    fn = FakeJit(["x"])

    def refuse(*a):
        raise TypeError("function takes 11 positional arguments")

    run = Launcher(fn, (1,))
    run(FakeTensor(0x1000))
    key = next(iter(run._compiled))
    run._compiled[key] = (refuse, "fn", "meta")
    run(FakeTensor(0x1000))
    run(FakeTensor(0x1000))
    assert len(fn.slow) == 3 and "direct launch" in caplog.text


def test_the_matmul_kernel_launches_directly_on_a_gpu(monkeypatch):
    """Its constexprs (EVEN_K from its heuristic included) are the jit function's last
    parameters, so on a GPU every call after the first skips JITFunction.run."""
    from tenferro_triton import matmul

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    tuned = matmul._tuned()
    config = tuned.configs[0]
    meta = {"ACC_F64": False, "PRECISION": "ieee", "UPCAST": False}
    run = matmul._launcher(tuned.fn, config, meta, 64, (4, 1))
    assert run._direct and run.constexprs["EVEN_K"] == (64 % config.kwargs["BLOCK_K"] == 0)
    assert set(run.options) <= {"num_warps", "num_stages", "num_ctas", "maxnreg"}
