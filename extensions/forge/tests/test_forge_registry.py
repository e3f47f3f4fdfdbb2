"""The registry round trip through dispatch: promote, the promoted kernel runs eagerly and
compiled (a counter proves it), only for matching signatures; revoke and dispatch falls back;
corrupt, hand-edited, foreign or changed entries are ignored with a note (and a warning);
the opt-out; racing promotions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tenferro_runtime as tr
from forge_helpers import FIXTURES, make_task
from tenferro_forge import VERIFIER_VERSION, registry
from tenferro_forge import plugin as forge_plugin
from tenferro_forge.errors import PromotionError, RegistryError
from tenferro_forge.gates import Report
from tenferro_numpy import plugin as numpy_plugin
from tenferro_runtime import array_api as xp
from tenferro_runtime.runtime import Runtime, use_runtime


def _runtime():
    return Runtime([numpy_plugin, forge_plugin], check_kernels=True)


def _notes(rt):
    return [line for r in rt.reports if r.name.startswith("tenferro_forge") for line in r.registered]


@pytest.fixture
def promoted(example_gates):
    d, verified, benched = example_gates
    return registry.promote(d, verify_report=verified, bench_report=benched)


def _calls(rt, x):
    """(eager result, compiled result, promoted-kernel calls during both)."""
    before = sum(forge_plugin.CALLS.values())
    with use_runtime(rt):
        t = xp.asarray(x)
        eager = np.asarray(xp.max(t, axis=1))
        compiled = np.asarray(tr.compile(lambda a: xp.max(a, axis=1) + 1.0)(t)) - 1.0
    return eager, compiled, sum(forge_plugin.CALLS.values()) - before


def test_round_trip_promote_dispatch_revoke(promoted, monkeypatch, example_gates):
    monkeypatch.setenv("TENFERRO_FORGE_COUNT", "1")
    d = example_gates[0]
    kid = promoted["id"]
    assert kid == "numba_reduce_max_numpy-cpu_float32_8192x32_v1"
    record = json.loads((d / "promotion.json").read_text())
    assert record["id"] == kid and record["source_hash"] == promoted["source_hash"]
    entry = registry.show(kid)
    assert entry["evidence"] == "microbenchmark" and entry["statistics"][0]["ci_low"] >= 1.10
    assert entry["versions"]["numpy"] == np.__version__ and entry["verifier_version"] == VERIFIER_VERSION
    assert (registry.root() / entry["source"]).read_bytes() == (d / "kernel.py").read_bytes()

    rt = _runtime()
    assert any(f"promoted kernel {kid} serves reduce_max" in n for n in _notes(rt))
    x = np.random.default_rng(0).standard_normal((8000, 32)).astype(np.float32)  # bucket 8192x32
    eager, compiled, calls = _calls(rt, x)
    np.testing.assert_array_equal(eager, x.max(axis=1))
    np.testing.assert_allclose(compiled, x.max(axis=1), rtol=1e-6)
    assert calls == 2  # once eagerly, once in the compiled plan
    for other in (x[:100], x.astype(np.float64)):  # another bucket, another dtype: the default
        e, c, n = _calls(rt, other)
        np.testing.assert_array_equal(e, other.max(axis=1))
        assert n == 0

    registry.revoke(kid)
    assert not (registry.root() / entry["source"]).exists()
    rt = _runtime()
    eager, _, calls = _calls(rt, x)
    np.testing.assert_array_equal(eager, x.max(axis=1))
    assert calls == 0 and not any(kid in n for n in _notes(rt))
    with pytest.raises(RegistryError, match="no promoted kernel"):
        registry.revoke(kid)
    with pytest.raises(LookupError):
        registry.show(kid)
    assert registry.promote(d, verify_report=example_gates[1], bench_report=example_gates[2])["id"].endswith(
        "_v2"
    )


def test_corrupt_registry_is_ignored_with_a_warning(promoted):
    (registry.root() / registry.INDEX).write_text('{"format": 1, "entries": {')
    with pytest.warns(forge_plugin.ForgeWarning, match="corrupt"):
        rt = _runtime()
    assert any("registry ignored" in n for n in _notes(rt))
    assert ("numpy", "reduce_max") not in {
        k for k, v in rt.kernels.items() if v[2].startswith("tenferro_forge")
    }
    with pytest.raises(RegistryError):
        registry.entries()


def _edit(kid, **changes):
    index = registry.read_index()
    index["entries"][kid].update(changes)
    return index


@pytest.mark.parametrize("what", ["hand_edit", "fingerprint", "versions", "source"])
def test_entries_that_cannot_serve_are_skipped_with_a_note(promoted, monkeypatch, what):
    monkeypatch.setenv("TENFERRO_FORGE_COUNT", "1")
    kid, base = promoted["id"], registry.root()
    if what == "source":
        (base / promoted["source"]).write_text(
            "import numpy as np\n\ndef kernel(x, *, axes):\n    return np.zeros(x.shape[:1], x.dtype)\n"
        )
    else:
        change = {
            "hand_edit": {"statistics": [{"ci_low": 99.0}]},
            "fingerprint": {"device_fingerprint": "0" * 16},
            "versions": {"versions": {**promoted["versions"], "numpy": "0.0"}},
        }[what]
        index = _edit(kid, **change)
        if what != "hand_edit":  # an honest entry from another machine or install
            index["entries"][kid]["entry_hash"] = registry.entry_hash(index["entries"][kid])
        registry.write_index(base, index)
    want = {
        "hand_edit": "edited by hand",
        "fingerprint": "another machine",
        "versions": "other versions",
        "source": "source changed",
    }[what]
    if what in ("hand_edit", "source"):
        with pytest.warns(forge_plugin.ForgeWarning, match=want):
            rt = _runtime()
    else:
        rt = _runtime()
    assert any(f"promoted kernel {kid} ignored" in n and want in n for n in _notes(rt))
    x = np.random.default_rng(1).standard_normal((8192, 32)).astype(np.float32)
    eager, _, calls = _calls(rt, x)
    np.testing.assert_array_equal(eager, x.max(axis=1))
    assert calls == 0


def test_opt_out_and_the_plugin_listing(promoted):
    env = {**os.environ, "TENFERRO_FORGE_REGISTRY": str(registry.root())}
    out = subprocess.run(
        [sys.executable, "-m", "tenferro_runtime", "plugins"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert f"note: promoted kernel {promoted['id']} serves reduce_max" in out
    os.environ["TENFERRO_FORGE_DISABLE"] = "1"
    try:
        rt = _runtime()
    finally:
        del os.environ["TENFERRO_FORGE_DISABLE"]
    assert any("TENFERRO_FORGE_DISABLE" in n for n in _notes(rt))
    assert not any(v[2].startswith("tenferro_forge") for v in rt.kernels.values())


def _reports():
    shapes = [{"shape": [8192, 32], "ci_low": 2.0, "calls": 30}]
    return {
        "verify_report": Report("verify", True),
        "bench_report": Report("bench", True, details={"shapes": shapes, "gate": 1.1}),
    }


def test_racing_promotions_get_one_id_per_source(tmp_path):
    task = make_task(tmp_path / "a", FIXTURES / "honest_equal_default")
    other = make_task(tmp_path / "b", FIXTURES / "honest_equal_default")
    (other / "kernel.py").write_text((other / "kernel.py").read_text() + "\n# another source\n")
    from tenferro_forge.task import load_task

    jobs = [task, task, other, other, task, other]
    start, ids, errors = threading.Barrier(len(jobs)), [None] * len(jobs), []

    def promote(i, d):
        try:
            start.wait(timeout=30)
            ids[i] = registry.add(load_task(d), d, language="numpy", author="t", **_reports())["id"]
        except Exception as exc:  # collected: the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=promote, args=(i, d)) for i, d in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    prefix = "numpy_reduce_max_numpy-cpu_float32_256x32-128x64_v"
    assert {ids[0], ids[1], ids[4]} == {ids[0]} and {ids[2], ids[3], ids[5]} == {ids[2]}
    assert sorted([ids[0], ids[2]]) == [prefix + "1", prefix + "2"]
    index = registry.read_index()
    assert sorted(index["entries"]) == sorted([ids[0], ids[2]])
    assert not [p for p in registry.root().iterdir() if p.name.startswith(".") and p.name != ".lock"]


def test_promotion_refused_without_both_gates(tmp_path, example_gates):
    d = make_task(tmp_path / "eq", FIXTURES / "honest_equal_default", shapes=[(8192, 32)])
    with pytest.raises(PromotionError, match="bench did not pass.*1.10x"):
        registry.promote(d)
    bad = make_task(tmp_path / "bad", FIXTURES / "partial_computation")
    with pytest.raises(PromotionError, match="verify did not pass") as info:
        registry.promote(bad)
    assert isinstance(info.value, RuntimeError)
    _, verified, benched = example_gates
    with pytest.raises(PromotionError, match="another version of the files"):
        registry.promote(d, verify_report=verified, bench_report=benched)
    assert registry.entries() == [] and not (d / "promotion.json").exists()


def test_reverify_keeps_good_entries_and_revokes_failing_ones(promoted, monkeypatch):
    import tenferro_forge

    newer = VERIFIER_VERSION + 1
    monkeypatch.setattr(tenferro_forge.registry, "VERIFIER_VERSION", newer)  # the verifier gained a check
    [(kid, report)] = registry.reverify()
    assert kid == promoted["id"] and report.ok
    entry = registry.show(kid)
    assert entry["verifier_version"] == newer and entry["entry_hash"] == registry.entry_hash(entry)
    assert any(f"{kid} serves" in n for n in _notes(_runtime()))  # still loads: hash recomputed
    src = registry.root() / promoted["source"]
    src.write_text((FIXTURES / "partial_computation" / "kernel.py").read_text())
    [(kid, report)] = registry.reverify()
    assert not report.ok and "correctness" in report.checks()
    assert registry.entries() == []


RACER = """
import json, sys
from pathlib import Path
from tenferro_forge import registry
from tenferro_forge.gates import Report
from tenferro_forge.task import load_task
d = Path(sys.argv[1])
sys.stdin.readline()  # the go signal: both processes wait for it
shapes = [{"shape": [256, 32], "ci_low": 2.0, "calls": 30}]
entry = registry.add(load_task(d), d, language="numpy", author="t", verify_report=Report("verify", True),
                     bench_report=Report("bench", True, details={"shapes": shapes, "gate": 1.1}))
print(entry["id"])
"""


def test_racing_promotions_across_processes(tmp_path):
    a = make_task(tmp_path / "a", FIXTURES / "honest_equal_default")
    b = make_task(tmp_path / "b", FIXTURES / "honest_equal_default")
    (b / "kernel.py").write_text((b / "kernel.py").read_text() + "\n# another source\n")
    env = {**os.environ, "TENFERRO_FORGE_REGISTRY": str(registry.root())}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(d)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for d in (a, b, a)
    ]
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    ids = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert ids[0] == ids[2] and ids[0] != ids[1]
    assert sorted(registry.read_index()["entries"]) == sorted(ids[:2])
