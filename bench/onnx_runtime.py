"""Inference of the digits CNN (examples/demo.py) and an MLP 784-512-512-10 under onnxruntime,
exported by tenferro-onnx and by torch.onnx (the same weights), against tenferro compiled, in
one run; prints medians and ratios (measured side by side, so only the ratios mean much on a
shared machine).

Run: `python bench/onnx_runtime.py [--batch 1 64] [--repeat 50] [--threads 1]`
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np


def _median_ms(fn: Any, repeat: int) -> float:
    fn()
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _session(data: bytes, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def _models() -> dict[str, tuple[Any, Any, tuple]]:
    """name -> (tenferro module, equivalent torch module with the same weights, input shape
    without batch)."""
    import torch

    import tenferro_nn as nn
    from tenferro_runtime import random

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from demo import cnn

    k = random.split(random.key(0), 3)
    mlp = nn.Sequential(nn.Linear(784, 512, key=k[0]), nn.ReLU(), nn.Linear(512, 512, key=k[1]), nn.ReLU(),
                        nn.Linear(512, 10, key=k[2])).eval()
    t_mlp = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10)).eval()
    c = cnn(random.key(1)).eval()
    t_cnn = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(128, 10)).eval()
    for tf, tt in ((mlp, t_mlp), (c, t_cnn)):
        state = {k: torch.from_numpy(np.array(v)) for k, v in tf.state_dict().items()}
        tt.load_state_dict(state)
    return {"digits CNN": (c, t_cnn, (1, 8, 8)), "MLP 784-512-512-10": (mlp, t_mlp, (784,))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch

    import tenferro_onnx as tox
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import compile

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"threads {args.threads}, median of {args.repeat} runs, times in ms")
    print(f"{'model':<20} {'batch':>5} {'tenferro':>9} {'ORT(tf)':>9} {'ORT(torch)':>10} "
          f"{'tf/ORT(tf)':>10} {'ORT(torch)/ORT(tf)':>18}")
    for name, (model, tmodel, shape) in _models().items():
        example = xp.asarray(rng.random((2, *shape), dtype=np.float32))
        data = tox.export(model, example, dynamic_axes={"x": {0: "batch"}, "output": {0: "batch"}})
        s_tf = _session(data.SerializeToString(), args.threads)
        f = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(tmodel, (torch.from_numpy(np.asarray(example)),), f, dynamo=False,
                              input_names=["x"], output_names=["output"],
                              dynamic_axes={"x": {0: "batch"}, "output": {0: "batch"}})
        s_torch = _session(f.getvalue(), args.threads)
        run = compile(lambda m, x: m(x))
        for batch in args.batch:
            host = rng.random((batch, *shape), dtype=np.float32)
            x = xp.asarray(host)
            want = np.asarray(run(model, x))
            got_tf = s_tf.run(None, {"x": host})[0]
            got_torch = s_torch.run(None, {"x": host})[0]
            assert np.allclose(got_tf, want, rtol=1e-4, atol=1e-5), "tenferro's export disagrees"
            assert np.allclose(got_torch, want, rtol=1e-4, atol=1e-4), "torch's export disagrees"
            feed = {"x": host}
            t_tf = _median_ms(lambda r=run, m=model, v=x: np.asarray(r(m, v)), args.repeat)
            t_ort = _median_ms(lambda s=s_tf, f=feed: s.run(None, f), args.repeat)
            t_ort_torch = _median_ms(lambda s=s_torch, f=feed: s.run(None, f), args.repeat)
            print(f"{name:<20} {batch:>5} {t_tf:>9.3f} {t_ort:>9.3f} {t_ort_torch:>10.3f} "
                  f"{t_tf / t_ort:>10.2f} {t_ort_torch / t_ort:>18.2f}")


if __name__ == "__main__":
    main()
