"""Checkpoint and restart: a 2-process job under ``torchrun --max-restarts=1`` whose rank 1
crashes on the first attempt resumes from the last checkpoint (rank 0 wrote it atomically,
every rank loaded it) and ends with the uninterrupted run's parameters, bit for bit (the
deterministic mode makes them equal to a single-process run computed here)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import dp_helpers as H
from tenferro_core.errors import ArgumentError

HERE = Path(__file__).resolve().parent
STEPS, EVERY, FAIL_AT = 16, 5, 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _private_network() -> list[str]:
    """A prefix running the command in its own network namespace with only loopback up, where
    the OS allows it: torchrun's agent store (a TCPStore) listens on every interface, and
    there it can only be reached through loopback."""
    try:
        ok = subprocess.run(["unshare", "-rn", "ip", "link", "set", "lo", "up"], capture_output=True,
                            timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"] if ok else []


def test_torchrun_restart_resumes_from_the_last_checkpoint(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    out, ckpt = tmp_path / "out.json", tmp_path / "ckpt.safetensors"
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", PYTHONPATH=os.pathsep.join(
        [str(HERE), os.environ.get("PYTHONPATH", "")]))
    cmd = [str(torchrun), "--nnodes=1", "--nproc-per-node=2", "--max-restarts=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{_free_port()}", "--monitor-interval=0.1",
           str(HERE / "dp_helpers.py"), str(out), str(ckpt), str(STEPS), str(EVERY), str(FAIL_AT)]
    # its own process group (start_new_session), killed whole on timeout
    proc = subprocess.Popen(_private_network() + cmd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        raise AssertionError(f"torchrun passed its 120 s deadline:\n{log[-5000:]}") from None
    assert proc.returncode == 0, log[-5000:]
    res = json.loads(out.read_text())
    assert res["attempt"] == 1  # the first attempt crashed, the restart finished
    assert res["start"] == FAIL_AT // EVERY * EVERY  # resumed from the last checkpoint (step 10)
    assert res["digest"] == H.deterministic_reference(STEPS, H._adam)[-1]
    assert ckpt.exists() and not list(tmp_path.glob("*.tmp*"))  # no temporary file left


def test_checkpoint_bad_input_is_typed(tmp_path):
    from tenferro_distributed.checkpoint import load_checkpoint, save_checkpoint
    from tenferro_distributed.errors import NotInitializedError

    with pytest.raises(NotInitializedError):
        save_checkpoint(tmp_path / "c", {}, step=1)
    with pytest.raises(NotInitializedError):
        load_checkpoint(tmp_path / "c", {})
    from tenferro_distributed.checkpoint import _check_step

    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ArgumentError):
            _check_step(bad)
