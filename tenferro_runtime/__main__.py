"""``python -m tenferro_runtime plugins``: what was discovered, registered, and what failed;
``python -m tenferro_runtime energy``: the energy meters and what each can read here.

It exits 1 when a plugin failed to load or register, or two distributions claim one
entry-point name (the listing is printed all the same), so CI can run it as a check.
"""

from __future__ import annotations

import argparse
import sys

from .runtime import Runtime


def _plugins(verbose: bool) -> int:
    rt = Runtime.from_entry_points()
    print(f"tenferro plugins (entry-point group 'tenferro'): {len(rt.reports)} found")
    for r in rt.reports:
        status = "disabled" if r.disabled else ("FAILED" if r.error else "ok")
        dist = f"{r.distribution} {r.version}" if r.distribution else "(no distribution)"
        print(f"\n  {r.name:<12} {status:<8} {dist}  [{r.module}]")
        for line in r.registered:
            print(f"      - {line}")
        if r.error:
            print(f"      error: {r.error}")
            if verbose and r.traceback:
                print("      " + r.traceback.rstrip().replace("\n", "\n      "))
    print(f"\ndevices: {', '.join(rt.device_names()) or 'none'}")
    print(f"default device: {rt.default_device() if rt.backends else 'none (no backend installed)'}")
    ext = sorted(n for n in rt.ops if rt.ops[n].family)
    print(f"extension ops: {', '.join(ext) or 'none'}")
    print(f"array_api extensions: {', '.join(sorted(rt.namespaces)) or 'none'}")
    failed = sorted({r.name for r in rt.reports if r.error})
    if failed:
        print(f"\n{len(failed)} plugin(s) failed or conflict: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tenferro_runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="list discovered plugins, what they registered and failures")
    p.add_argument("-v", "--verbose", action="store_true", help="show full tracebacks of failures")
    sub.add_parser("energy", help="list energy meters, what each can read here, and why not")
    args = parser.parse_args(argv)
    if args.command == "plugins":
        return _plugins(args.verbose)
    if args.command == "energy":
        from .energy.cli import main as energy

        return energy()
    return 2


if __name__ == "__main__":
    sys.exit(main())
