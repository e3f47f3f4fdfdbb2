"""Launch shapes of the generated row kernels at short rows, on a CUDA GPU.

For softmax and layer norm over 4096 x L (L = 256..2048, float32), builds the executor's
row kernel with each (rows a program, warps a program) pair and times it with
`triton.testing.do_bench` (L2 flushed before each call) against torch's kernel: the
figures behind `rows_source.blocks`' choice at short rows. GPU only; prints a table.
"""

from __future__ import annotations

import math

import numpy as np


def sweep(kind: str, lengths=(256, 512, 1024, 2048), n_rows: int = 4096,
          rows_options=(1, 2, 4, 8, 16, 32), warps_options=(1, 2, 4, 8),
          device: str = "torch:cuda:0") -> list[dict]:
    import torch
    from triton.testing import do_bench

    import tenferro_nn.functional as F
    import tenferro_runtime as tr
    from tenferro_runtime import array_api as xp
    from tenferro_runtime.passes.fusion import fuse_groups
    from tenferro_triton import codegen, rows
    from tenferro_triton import rows_source as rs
    from tenferro_triton.launch import Launcher

    rng, out = np.random.default_rng(0), []
    for L in lengths:
        args = [xp.asarray(rng.standard_normal((n_rows, L)).astype(np.float32), device=device)]
        if kind == "softmax":
            fn, ref = (lambda x: F.softmax(x, -1)), (lambda x: torch.softmax(x, -1))
        else:
            args += [xp.asarray(rng.standard_normal(L).astype(np.float32), device=device)
                     for _ in "wb"]
            fn = lambda x, w, b: F.layer_norm(x, tuple(w.shape), w, b)  # noqa: E731
            ref = lambda x, w, b: torch.nn.functional.layer_norm(x, tuple(w.shape), w, b)  # noqa: E731
        graph = tr.compile(fn).lower(*args)
        grouped = fuse_groups(graph, rows.find_groups(graph))
        node = next(n for n in grouped.nodes if n.prim.name == "fused")
        prog, consts = rows._program(node.params["graph"])
        lay = rs.analyze(prog)
        env = {v: a._buf for v, a in zip(graph.inputs, args)}
        env.update((v, t._buf) for v, t in graph.consts.items())
        bufs = [env[v] for v in node.inputs] + list(consts)
        strides = tuple(b.stride() for b in bufs)
        outs = [torch.empty(s, dtype=d, device=bufs[0].device) for s, d in rows._compiled(prog).out_types]
        torch_bufs = [a._buf for a in args]
        expect = ref(*torch_bufs)
        t_torch = do_bench(lambda: ref(*torch_bufs))  # noqa: B023
        base = rs.blocks(lay, rows.SINGLE_PASS_MAX, rows.CHUNK, rows.ROW_ELEMS,
                         rs.column_values(prog, lay), rows.LIVE_ELEMS)
        print(f"{kind} {n_rows} x {L}: torch {t_torch * 1e3:.2f} us; default br={base.br} "
              f"warps={base.num_warps}", flush=True)
        best = None
        for br in rows_options:
            if br * base.bc > 16384:
                continue
            line = []
            for w in warps_options:
                b = rs.Blocks(br, base.bc, base.chunked, math.ceil(lay.rows / br), w)
                launch = Launcher(codegen.load(rs.source(prog, lay, b, strides, False), "row_kernel"),
                                  (b.grid,), num_warps=w)
                launch(*bufs, *outs)
                torch.testing.assert_close(outs[0], expect, rtol=1e-4, atol=1e-5)
                t = do_bench(lambda: launch(*bufs, *outs))  # noqa: B023
                out.append({"kind": kind, "L": L, "br": br, "warps": w, "us": t * 1e3,
                            "torch_us": t_torch * 1e3, "speed": t_torch / t})
                line.append(f"w{w} {t * 1e3:6.2f} ({t_torch / t:4.2f}x)")
                if best is None or t < best[0]:
                    best = (t, br, w)
            print(f"  br={br:<3d}" + "  ".join(line), flush=True)
        print(f"  best: br={best[1]} warps={best[2]} {best[0] * 1e3:.2f} us, "
              f"{t_torch / best[0]:.2f}x torch", flush=True)
    return out


def main() -> None:
    import json
    import sys

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to sweep")
        return
    print(f"GPU: {torch.cuda.get_device_name(0)}")
    res = sweep("softmax") + sweep("layer_norm", lengths=(256, 512, 1024))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
