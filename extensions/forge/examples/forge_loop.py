"""The loop the examples run: a task for `op`, the candidate's files copied in, verify, bench
(each shape's figures printed) and promote; the promoted entry, or None when a gate failed
(`reports` receives the verify and bench reports)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any


def promote_candidate(candidate: Path, op: str, *, device: str, shapes: list[str],
                      params: dict | None = None, reports: dict | None = None) -> dict | None:
    from tenferro_forge import gates, registry
    from tenferro_forge.task import new_task

    task = Path(tempfile.mkdtemp(prefix="forge-task-")) / candidate.name
    new_task(task, op, device=device, dtype="float32", shapes=shapes, params=params)
    for name in ("kernel.py", "metadata.json"):
        shutil.copyfile(candidate / name, task / name)
    reports = {} if reports is None else reports
    verified = reports["verify"] = gates.verify(task)
    print(f"verify: {'passed' if verified.ok else verified.findings} ({verified.details['calls']} calls"
          f"{', on ' + verified.details['ran_on'] if verified.details.get('ran_on') else ''})")
    benched = reports["bench"] = gates.bench(task, calls=30)
    threads = benched.details.get("threads")
    for s in benched.details.get("shapes", []):
        print(f"bench {tuple(s['shape'])}{_threads(threads)}: default {s['base_median_ns'] / 1e3:.0f} us, "
              f"candidate {s['cand_median_ns'] / 1e3:.0f} us, speedup {s['speedup']:.2f}x "
              f"(95% CI {s['ci_low']:.2f}-{s['ci_high']:.2f})")
        if s.get("vs_dispatch"):
            d = s["vs_dispatch"]
            print(f"  vs the eager dispatch kernel (reported, not gated): {d['median_ns'] / 1e3:.1f} us, "
                  f"speedup {d['speedup']:.2f}x (95% CI {d['ci_low']:.2f}-{d['ci_high']:.2f})")
    if not (verified.ok and benched.ok):
        print(f"not promoted: {benched.findings or verified.findings}")
        return None
    entry = registry.promote(task, verify_report=verified, bench_report=benched)
    print(f"promoted {entry['id']} into {registry.root()}")
    return entry


def _threads(threads: Any) -> str:
    return "" if threads is None else f" ({threads} torch threads)"
