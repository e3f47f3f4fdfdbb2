"""`make demo`: trains the digits CNN to >= 97% test accuracy, saves, reloads and gets the
same accuracy (the numbers are deterministic: keyed initialization and shuffling)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.py"


def test_demo_trains_the_digits_cnn(tmp_path):
    out = subprocess.run([sys.executable, str(DEMO), "--out", str(tmp_path / "cnn.safetensors")],
                         capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    epochs = re.findall(r"epoch +(\d+): loss ([\d.]+) +train accuracy ([\d.]+) +test accuracy ([\d.]+) +"
                        r"energy ([\d.e+-]+) J \((estimate|rapl|nvml)", out.stdout)
    assert len(epochs) == 20
    assert float(epochs[-1][1]) < float(epochs[0][1]) / 10
    reloaded = re.search(r"reloaded model's test accuracy: ([\d.]+) \(before saving: ([\d.]+), same: True\)",
                         out.stdout)
    assert reloaded and float(reloaded[1]) >= 0.97 and reloaded[1] == reloaded[2]
    assert "CacheInfo(hits=" in out.stdout and "misses=1," in out.stdout  # one trace for the train step
    assert "training: 20 epochs" in out.stderr  # no terminal: no progress bar ...
    assert "\r" not in out.stdout and "\r" not in out.stderr  # ... so no carriage-return redraws
    assert (tmp_path / "cnn.safetensors").stat().st_size > 100_000
    assert all(float(e[4]) > 0 for e in epochs)  # energy per epoch, labelled with its source
    assert "op category" in out.stdout and "contraction" in out.stdout
    assert (tmp_path / "energy.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal as on Linux")
def test_the_progress_bar_is_drawn_on_a_terminal(tmp_path):
    """On a terminal (stdout and stderr a tty) the bar redraws itself (carriage returns)."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns for the bar
    cmd = [sys.executable, str(DEMO), "--epochs", "2", "--out", str(tmp_path / "c.safetensors")]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=300) == 0
    os.close(master)
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")  # the tty's newlines
    assert re.search(r"\rtraining: +100%.*2/2", text)  # tqdm's bar, redrawn in place
    assert "no progress bar" not in text and re.search(r"epoch +2: loss", text)
