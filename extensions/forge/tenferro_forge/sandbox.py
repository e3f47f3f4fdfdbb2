"""Run one Forge step in a child process: a timeout, a memory cap (RLIMIT_AS), no core
dumps, its own session (killed whole on timeout), and a result channel the candidate cannot
forge (a line tagged with a nonce the harness reads from stdin before importing it)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from typing import Any

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MEMORY_MB = 4096


def _limits(memory_mb: int | None) -> Any:
    """No core dumps; an address-space cap of `memory_mb` unless None (CUDA reserves far more
    virtual address space than any cap allows: GPU children run without one)."""

    def apply() -> None:
        import resource

        if memory_mb is not None:
            cap = int(memory_mb) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_child(
    mode: str,
    args: dict,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int | None = DEFAULT_MEMORY_MB,
    env: dict | None = None,
) -> dict:
    """Run ``python -m tenferro_forge.harness`` for `mode` with `args`; its JSON result, or
    ``{"ok": False, "findings": [...]}`` saying it timed out, ran out of memory, crashed or
    printed no result. Never raises for anything the child does."""
    nonce = secrets.token_hex(16)
    child_env = {**os.environ, **(env or {}), "PYTHONDONTWRITEBYTECODE": "1"}
    for var in [k for k, v in (env or {}).items() if v is None]:  # None: unset in the child
        child_env.pop(var, None)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        child_env.setdefault(var, "1")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tenferro_forge.harness", mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env,
            start_new_session=True,
            preexec_fn=_limits(memory_mb),
            text=True,
        )
    except OSError as exc:
        return _failed("sandbox", f"could not start the harness process: {exc}")
    try:
        out, err = proc.communicate(json.dumps({"nonce": nonce, **args}) + "\n", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, err = proc.communicate()
        return _failed(
            "timeout",
            f"{mode} did not finish within {timeout_s:g} s (a hanging or "
            f"far too slow candidate); the process was killed",
        )
    for line in reversed(out.splitlines()):
        if line.startswith(nonce + " "):
            try:
                return json.loads(line[len(nonce) + 1 :])
            except ValueError:
                break
    tail = err.strip().splitlines()[-3:]
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        return _failed("crash", f"the candidate crashed the interpreter ({sig}); {' | '.join(tail)}")
    if "MemoryError" in err:
        return _failed("memory", f"the process exceeded its {memory_mb} MiB memory cap; {' | '.join(tail)}")
    return _failed(
        "crash",
        f"the harness exited with status {proc.returncode} and no result; {' | '.join(tail) or 'no output'}",
    )


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _failed(check: str, reason: str) -> dict:
    return {"ok": False, "findings": [{"check": check, "reason": reason}]}


__all__ = ["DEFAULT_MEMORY_MB", "DEFAULT_TIMEOUT_S", "run_child"]
