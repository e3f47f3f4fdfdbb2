"""The built-in compiler passes, one module each, registered through the plugin hook.

Every pass is a `Graph -> Graph` function that keeps the values `eval_graph` gives for the
unoptimized graph (bitwise: no pass reassociates floating-point arithmetic). Positions
leave room for third-party passes between them (`registry.add_pass(name, fn, position=...)`).
"""

from __future__ import annotations

import importlib

from tenferro_core.plugins import hookimpl

# name -> (module, function, position), in pipeline order
BUILTIN = {
    "inline": ("inline", "inline_calls", 100.0),
    "simplify": ("simplify", "simplify", 200.0),
    "fold": ("fold", "fold_constants", 300.0),
    "cse": ("cse", "common_subexpressions", 400.0),
    "scan_residuals": ("scan_residuals", "recompute_scan_residuals", 450.0),
    "dce": ("dce", "dead_code_elimination", 500.0),
    "layout": ("layout", "choose_conv_layout", 600.0),
    "fusion": ("fusion", "fuse_elementwise", 700.0),
    "schedule": ("schedule", "schedule", 800.0),
    "memory": ("memory", "plan_memory", 900.0),
}


def builtin_pass(name: str):
    """The function of built-in pass `name`."""
    module, fn, _ = BUILTIN[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), fn)


@hookimpl
def tenferro_register(registry) -> None:
    for name, (_, _, position) in BUILTIN.items():
        registry.add_pass(name, builtin_pass(name), position=position)
