"""``tenferro-forge`` / ``python -m tenferro_forge``: new, verify, bench, promote, list, show,
revoke, reverify. Exit status 0 when the step passed, 1 when a candidate was rejected, 2 for
a bad argument or file (a typed error's message on stderr)."""

from __future__ import annotations

import argparse
import json
import sys

from tenferro_core.errors import TenferroError


def _params(text: str) -> dict:
    from .errors import ForgeArgumentError

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ForgeArgumentError(
            f"--params takes a JSON object such as '{{\"axes\": [1]}}', got {text!r} ({exc})"
        ) from exc
    if not isinstance(value, dict):
        raise ForgeArgumentError(f"--params takes a JSON object, got {text!r}")
    return value


def _print_report(report, as_json: bool) -> int:
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
        return 0 if report.ok else 1
    print(f"{report.step}: {'PASSED' if report.ok else 'REJECTED'}")
    for f in report.findings:
        line = f" (line {f['line']})" if f.get("line") else ""
        print(f"  - [{f['check']}]{line} {f['reason']}")
    for s in report.details.get("shapes", []) or []:
        print(
            f"  shape {tuple(s['shape'])}: baseline {s['base_median_ns'] / 1e3:.1f} us "
            f"(IQR {s['base_iqr_ns'] / 1e3:.1f}), candidate {s['cand_median_ns'] / 1e3:.1f} us "
            f"(IQR {s['cand_iqr_ns'] / 1e3:.1f}), speedup {s['speedup']:.2f}x, 95% CI "
            f"[{s['ci_low']:.2f}, {s['ci_high']:.2f}] over {s['calls']} calls"
        )
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tenferro-forge", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    n = sub.add_parser("new", help="write a task directory (task.json, PROMPT.md) for an op")
    n.add_argument("op")
    n.add_argument("dir")
    n.add_argument("--device", default="numpy:cpu")
    n.add_argument("--dtype", default="float32")
    n.add_argument("--shapes", nargs="+", required=True, help="shapes such as 4096x32 1024x64")
    n.add_argument("--params", default="{}", help="the op's params as JSON, e.g. '{\"axes\": [1]}'")
    n.add_argument("--objective", default="latency")
    for name, help_ in (
        ("verify", "verify the candidate in DIR"),
        ("bench", "benchmark it"),
        ("promote", "verify, benchmark and promote it into the registry"),
    ):
        s = sub.add_parser(name, help=help_)
        s.add_argument("dir")
        s.add_argument("--timeout", type=float, default=120.0, help="seconds per sandboxed step")
        s.add_argument("--memory-mb", type=int, default=4096, help="memory cap of the sandbox")
        s.add_argument("--json", action="store_true")
        if name != "verify":
            s.add_argument("--calls", type=int, default=30, help="timed calls per shape (>= 30 to promote)")
    sub.add_parser("list", help="list promoted kernels")
    for name in ("show", "revoke"):
        sub.add_parser(name, help=f"{name} a promoted kernel").add_argument("id")
    sub.add_parser("reverify", help="re-verify every promoted kernel (failing ones are revoked)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except TenferroError as exc:
        print(f"tenferro-forge {args.command}: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from . import gates, registry
    from .task import new_task

    if args.command == "new":
        path = new_task(
            args.dir,
            args.op,
            device=args.device,
            dtype=args.dtype,
            shapes=args.shapes,
            params=_params(args.params),
            objective=args.objective,
        )
        print(f"task written: {path / 'task.json'}, {path / 'PROMPT.md'}")
        return 0
    limits = {"timeout_s": args.timeout, "memory_mb": args.memory_mb} if hasattr(args, "timeout") else {}
    if args.command == "verify":
        return _print_report(gates.verify(args.dir, **limits), args.json)
    if args.command == "bench":
        return _print_report(gates.bench(args.dir, calls=args.calls, **limits), args.json)
    if args.command == "promote":
        entry = registry.promote(args.dir, calls=args.calls, **limits)
        print(f"promoted {entry['id']} into {registry.root()}")
        return 0
    if args.command == "list":
        for e in registry.entries():
            lows = ", ".join(f"{s['ci_low']:.2f}x" for s in e.get("statistics", []))
            print(
                f"{e['id']}  {e['op']} {e['device']} {e['dtype']} {'/'.join(e['shape_buckets'])}  "
                f"CI low {lows}"
            )
        return 0
    if args.command == "show":
        print(json.dumps(registry.show(args.id), indent=2))
        return 0
    if args.command == "revoke":
        print(f"revoked {registry.revoke(args.id)['id']}")
        return 0
    if args.command == "reverify":
        bad = 0
        for kid, rep in registry.reverify():
            bad += not rep.ok
            print(
                f"{kid}: "
                + (
                    "ok"
                    if rep.ok
                    else "FAILED (revoked): " + "; ".join(f["reason"] for f in rep.findings[:3])
                )
            )
        return 1 if bad else 0
    return 2


__all__ = ["build_parser", "main"]
