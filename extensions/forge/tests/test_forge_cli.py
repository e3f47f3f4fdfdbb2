"""The CLI (in process, and once as `python -m` and the console script), and the benchmark's
discipline: the same candidate twice gives overlapping intervals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge_helpers import BENCH, EXAMPLE, FIXTURES, make_task
from tenferro_forge import gates, registry
from tenferro_forge.cli import main


def test_cli_loop_new_verify_promote_list_show_revoke(tmp_path, capsys):
    d = tmp_path / "task"
    assert main(["new", "reduce_max", str(d), "--shapes", "8192x32", "--params", '{"axes": [1]}']) == 0
    assert (d / "PROMPT.md").is_file()
    for name in ("kernel.py", "metadata.json"):
        (d / name).write_bytes((FIXTURES / "content_cache" / name).read_bytes())
    capsys.readouterr()
    assert main(["verify", str(d)]) == 1
    assert "[content_cache]" in capsys.readouterr().out
    for name in ("kernel.py", "metadata.json"):
        (d / name).write_bytes((EXAMPLE / name).read_bytes())
    assert main(["promote", str(d)]) == 0
    kid = "numba_reduce_max_numpy-cpu_float32_8192x32_v1"
    assert f"promoted {kid}" in capsys.readouterr().out
    assert json.loads((d / "promotion.json").read_text())["id"] == kid
    assert main(["list"]) == 0 and kid in capsys.readouterr().out
    assert main(["show", kid]) == 0 and json.loads(capsys.readouterr().out)["evidence"] == "microbenchmark"
    assert main(["reverify"]) == 0 and f"{kid}: ok" in capsys.readouterr().out
    assert main(["revoke", kid]) == 0 and main(["list"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"revoked {kid}"]  # and an empty list


def test_cli_errors_exit_2_with_the_reason(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["new", "reduce_max", str(tmp_path / "t"), "--shapes", "8x8", "--params", "[1"]) == 2
    assert "--params takes a JSON object" in capsys.readouterr().err
    assert main(["revoke", "numpy_nothing_v1"]) == 2
    assert "no promoted kernel" in capsys.readouterr().err
    d = make_task(tmp_path / "eq", FIXTURES / "honest_equal_default", shapes=BENCH)
    assert main(["promote", str(d)]) == 2
    assert "not promoted: bench did not pass" in capsys.readouterr().err
    assert main(["bench", str(d), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["findings"][0]["check"] == "gate" and report["details"]["shapes"][0]["calls"] == 30


def test_same_candidate_twice_gives_overlapping_intervals(example_gates):
    """Two benches of one candidate under the same load give overlapping intervals. The suite's
    other worker changes the load of the two cores from one moment to the next (once the
    baseline's median moved 494 -> 584 us and the speedup 2.9 -> 2.2), so two consecutive
    benches are compared whose baselines' medians agree within 10%."""
    d, _, first = example_gates
    a = first.details["shapes"][0]
    assert a["ci_low"] <= a["speedup"] <= a["ci_high"] and a["calls"] == 30
    for _ in range(6):
        b = gates.bench(d, calls=30, write=False).details["shapes"][0]
        if abs(b["base_median_ns"] / a["base_median_ns"] - 1) <= 0.10:
            break
        a = b
    else:
        pytest.fail(f"no two consecutive benches ran under the same load: {a}, {b}")
    slack = 0.10  # more than a quiet machine's drift (DRIFT_FLOOR)
    assert a["ci_low"] * (1 - slack) <= b["ci_high"] * (1 + slack), (a, b)
    assert b["ci_low"] * (1 - slack) <= a["ci_high"] * (1 + slack), (a, b)
    assert first.details["bandwidth"] > 0 and registry.bandwidth_cached() is not None


def test_module_and_console_script_run(tmp_path):
    env = {**os.environ, "TENFERRO_FORGE_REGISTRY": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "tenferro_forge", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout == ""
    script = Path(sys.executable).with_name("tenferro-forge")
    out = subprocess.run([str(script), "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "verify" in out.stdout and "promote" in out.stdout
