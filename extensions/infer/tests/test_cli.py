"""``python -m tenferro_infer``: generate (in process and as a real subprocess), serve (a real
subprocess on 127.0.0.1), and clear errors for bad arguments."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tenferro_infer.__main__ import main
from tenferro_infer.engine import Engine
from tenferro_infer.sampling import SamplingParams

ROOT = Path(__file__).resolve().parents[1]  # extensions/infer
TINY = ["--tiny", "--max-tokens", "5", "--temperature", "0"]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = main(list(argv), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def test_generate_streams_the_greedy_text_and_reports_speed_and_energy() -> None:
    rc, out, err = cli("generate", "--prompt", "Hello there", *TINY)
    assert rc == 0, err
    expected = Engine.tiny().generate("Hello there", SamplingParams(temperature=0, max_tokens=5))[0]
    assert out == expected.text + ("" if expected.text.endswith("\n") else "\n")
    assert "tokens/s" in err and " J (" in err and f"finish: {expected.finish_reason}" in err


def test_generate_chat_and_seeded_sampling_is_reproducible() -> None:
    rc, out, err = cli("generate", "--prompt", "Hi!", "--chat", *TINY)
    assert rc == 0 and out and "tokens in" in err
    seeded = ["generate", "--tiny", "--prompt", "Hi", "--max-tokens", "6", "--temperature", "0.9",
              "--seed", "7"]
    assert cli(*seeded)[1] == cli(*seeded)[1]


@pytest.mark.parametrize("args, words", [
    (["--prompt", ""], "prompt is empty"),
    (["--prompt", "x", "--temperature", "-1"], "temperature"),
    (["--prompt", "x", "--max-tokens", "0"], "max_tokens"),
    (["--prompt", "x", "--device", "nosuch:cpu"], "nosuch"),
])
def test_generate_errors_are_one_clear_line(args: list[str], words: str) -> None:
    rc, out, err = cli("generate", "--tiny", *args)
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and words in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [
    [], ["generate"], ["generate", "--prompt", "x", "--max-tokens", "many"],
    ["serve", "--port", "99999"], ["bake"],
])
def test_bad_arguments_exit_2_with_usage(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def test_python_m_generate() -> None:
    p = subprocess.run([sys.executable, "-m", "tenferro_infer", "generate", "--prompt", "Hi",
                        *TINY], capture_output=True, text=True, timeout=60, cwd=ROOT, env=_env())
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() and "tokens/s" in p.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_python_m_serve() -> None:
    import httpx
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tenferro_infer", "serve", "--tiny",
                             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=_env())
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:  # bounded poll until the server answers
            assert proc.poll() is None, proc.communicate(timeout=10)
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.05)
        assert httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"] == "tiny-llama"
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 3},
                       timeout=20)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    finally:
        proc.send_signal(signal.SIGINT)  # uvicorn shuts down gracefully
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate(timeout=10)
    assert "serving tiny-llama on http://127.0.0.1" in err
