"""Every cheat family and bad candidate Forge must reject, each with the right reason, and the
honest example accepted: zero false accepts."""

from __future__ import annotations

import json

import pytest

from forge_helpers import BENCH, EXAMPLE, FIXTURES, make_task
from tenferro_forge import gates

REJECTED_BY_VERIFY = {
    "returns_reference": ("scan", "reference or the baseline"),
    "uninitialized_output": ("stale_memory", "poison"),
    "stale_buffer": ("stale_memory", "earlier call"),
    "input_mutation": ("input_mutation", "changed its input"),
    "identity_cache": ("identity_cache", "caching by identity"),
    "content_cache": ("content_cache", "caching by content"),
    "deferred_thread": ("scan", "threads"),
    "lazy_object": ("scan", "lazy or array-like"),
    "timer_patching": ("scan", "timers"),
    "analytic_constant": ("correctness", "outside the float32 tolerance"),
    "partial_computation": ("correctness", "outside the float32 tolerance"),
    "precision_downcast": ("scan", "dtype downcast"),
    "exact_shapes_only": ("correctness", "edge shape"),
    "normal_inputs_only": ("correctness", "IEEE specials"),
    "deep_recursion": ("error", "RecursionError"),
    "interpreter_crash": ("crash", "SIGSEGV"),
    "abort": ("scan", "import of os"),
    "missing_files": ("files", "kernel.py is missing"),
    "malformed_metadata": ("metadata", "not valid JSON"),
    "wrong_metadata": ("metadata", "'claims' must be a str"),
}


@pytest.mark.parametrize("name", sorted(REJECTED_BY_VERIFY))
def test_cheat_rejected_by_verify_with_its_reason(tmp_path, name):
    check, words = REJECTED_BY_VERIFY[name]
    d = make_task(tmp_path / name, FIXTURES / name)
    report = gates.verify(d, timeout_s=60, memory_mb=1024)
    assert not report.ok
    hits = [f["reason"] for f in report.findings if f["check"] == check]
    assert hits and any(words in r for r in hits), report.findings
    assert json.loads((d / "verify.json").read_text())["ok"] is False


def test_wrong_metadata_names_every_field(tmp_path):
    d = make_task(tmp_path / "t", FIXTURES / "wrong_metadata")
    reasons = " ".join(f["reason"] for f in gates.verify(d).findings)
    assert "'claims' must be a str" in reasons
    (d / "metadata.json").write_text(
        json.dumps(
            {
                "author": "a",
                "language": "cobol",
                "op": "reduce_min",
                "signature": {"dtype": "float64"},
                "claims": "c",
            }
        )
    )
    reasons = " ".join(f["reason"] for f in gates.verify(d).findings)
    assert "cobol" in reasons and "reduce_min" in reasons and "does not name the task's dtype" in reasons


def test_downcast_hidden_from_the_scan_fails_the_dtype_tolerance(tmp_path):
    d = make_task(tmp_path / "t", FIXTURES / "precision_downcast_hidden")
    assert gates.verify(d).ok is False  # the scan alone: nothing found, so the child ran
    report = gates.verify(d, skip_scan=True)
    assert "correctness" in report.checks() and not report.ok


def test_a_crash_the_scan_stops_is_still_contained_by_the_sandbox(tmp_path):
    d = make_task(tmp_path / "t", FIXTURES / "abort")
    report = gates.verify(d, skip_scan=True)
    assert [f["check"] for f in report.findings] == ["crash"]
    assert "SIGABRT" in report.findings[0]["reason"]
    assert not report.ok


def test_hanging_candidate_times_out(tmp_path):
    d = make_task(tmp_path / "t", FIXTURES / "hanging")
    report = gates.verify(d, timeout_s=2)
    assert report.checks() == {"timeout"} and "2 s" in report.findings[0]["reason"]


def test_memory_exhausting_candidate_hits_the_cap(tmp_path):
    d = make_task(tmp_path / "t", FIXTURES / "memory_hog")
    report = gates.verify(d, memory_mb=768)
    assert report.checks() == {"memory"} and "memory cap" in report.findings[0]["reason"]


def test_honest_example_accepted_and_too_fast_rejected_by_the_roofline(tmp_path, example_gates):
    _, verified, benched = example_gates
    assert verified.ok and verified.findings == []
    assert benched.ok, benched.findings
    d = make_task(tmp_path / "fast", FIXTURES / "too_fast", shapes=[(65536, 32)])  # 8 MiB per call
    # 60 calls: 12 timed calls compute (5 per input set, less 3 warmup), 48 are cache hits, so
    # the median stays a hit even when a loaded CI machine preempts many of them (with 30 calls,
    # four slow hits out of 18 moved the median above the roofline once).
    report = gates.bench(d, calls=60)
    assert "roofline" in report.checks() and "too fast to be true" in report.findings[0]["reason"]


def test_honest_example_passes_verification_on_other_ops_shapes(tmp_path):
    d = make_task(tmp_path / "t", EXAMPLE, shapes=[(64, 5), (3, 128), (2, 200)])
    report = gates.verify(d)
    assert report.ok, report.findings


@pytest.mark.parametrize(
    "name, check", [("deferred_thread", "deferred_work"), ("lazy_object", "lazy_output")]
)
def test_deferred_work_is_caught_at_run_time_too(tmp_path, name, check):
    d = make_task(tmp_path / name, FIXTURES / name)
    report = gates.verify(d, skip_scan=True)
    assert check in report.checks() and not report.ok, report.findings


def test_bench_scans_and_its_timer_is_out_of_the_candidates_reach(tmp_path):
    d = make_task(tmp_path / "ref", FIXTURES / "returns_reference", shapes=BENCH)
    assert gates.bench(d).checks() == {"scan"}
    d = make_task(tmp_path / "timer", FIXTURES / "timer_patching", shapes=BENCH)
    report = gates.bench(d, skip_scan=True)  # it patches time.perf_counter_ns at import
    [shape] = report.details["shapes"]
    assert shape["cand_median_ns"] > 0 and shape["ci_low"] < 1.10 and "gate" in report.checks()
    assert not report.ok
