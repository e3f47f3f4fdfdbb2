"""Energy across ranks: each rank measures its own steps, the job report holds every rank's
joules and sources per step and epoch (identical on all ranks), and a job budget stops all
ranks after the same step."""

from __future__ import annotations

import pytest

import dp_helpers as H
import tfdist_helpers as h


def worker_energy() -> dict:
    import tenferro_distributed as dist
    import tenferro_nn as nn
    from tenferro_ad import value_and_grad
    from tenferro_distributed.data_parallel import allreduce_gradients
    from tenferro_distributed.job_energy import JobEnergy, JobEnergyBudgetExceeded
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import compile

    r, n = dist.rank(), dist.world_size()
    opt = nn.SGD(lr=0.1)
    vg = compile(value_and_grad(H.loss_fn))

    def train(p, st, s):
        x, y = H.batch(s)
        _, g = vg(p, xp.asarray(H.local(x, r, n)), xp.asarray(H.local(y, r, n)))
        return opt.update(p, allreduce_gradients(g), st)

    p = H.make_params()
    st = opt.init(p)
    job = JobEnergy()
    for e in range(2):
        with job.epoch(f"epoch {e}"):
            for s in range(3):
                with job.step() as region:
                    p, st = train(p, st, s)
                assert region.joules >= 0
    report = job.report()
    per_step = job.steps[0].total
    # warm steps only (the first one compiled the step): crossed during the second step or so,
    # and within 50 however much warm steps vary
    budget = job.steps[1].total + job.steps[2].total * 0.5
    bjob = JobEnergy(max_joules=budget)
    p = H.make_params()
    st = opt.init(p)
    stopped = None
    for s in range(50):
        try:
            with bjob.step():
                p, st = train(p, st, s)
        except JobEnergyBudgetExceeded as e:
            stopped = {"at": s, "spent": e.spent, "budget": e.budget, "where": e.where}
            break
    return {"report": report, "table": job.table(), "per_step": per_step, "stopped": stopped,
            "bstep_totals": [x.total for x in bjob.steps], "digest": H.digest(p)}


def test_job_report_and_budget_on_two_ranks(tmp_path):
    res = h.run_workers("test_jobenergy_ranks:worker_energy", 2, tmp_path, timeout=90)
    outs = []
    for r, (status, *rest) in enumerate(res):
        assert status == "ok", (r, rest)
        outs.append(rest[0])
    rep = outs[0]["report"]
    assert all(o["report"] == rep for o in outs)  # every rank holds the same job report
    assert len(rep["steps"]) == 6 and len(rep["epochs"]) == 2
    for s in rep["steps"]:
        assert len(s["joules_per_rank"]) == 2 and all(j > 0 for j in s["joules_per_rank"])
        assert s["total_joules"] == pytest.approx(sum(s["joules_per_rank"]))
        assert all(src and src != "none" for src in s["sources_per_rank"])
    for k, e in enumerate(rep["epochs"]):
        steps = rep["steps"][3 * k:3 * k + 3]
        for r in range(2):
            assert e["joules_per_rank"][r] == pytest.approx(sum(s["joules_per_rank"][r] for s in steps))
    assert rep["total_joules"] == pytest.approx(sum(s["total_joules"] for s in rep["steps"]))
    assert "rank 1 J" in outs[0]["table"] and "epoch 1" in outs[0]["table"]
    # the budget: every rank stops after the same step, the first whose job total crosses it
    st = [o["stopped"] for o in outs]
    assert st[0] is not None and all(s == st[0] for s in st)
    totals = outs[0]["bstep_totals"]
    assert sum(totals[:-1]) <= st[0]["budget"] < sum(totals) == pytest.approx(st[0]["spent"])
    assert len({o["digest"] for o in outs}) == 1  # parameters whole and equal on every rank


def test_job_energy_bad_input_is_typed():
    from tenferro_core.errors import ArgumentError, ArgumentValueError, EnergyBudgetExceeded
    from tenferro_distributed.errors import NotInitializedError
    from tenferro_distributed.job_energy import JobEnergy, JobEnergyBudgetExceeded, _code, _decode

    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ArgumentValueError, match="max_joules"):
            JobEnergy(max_joules=bad)
    with pytest.raises(ArgumentError, match="max_joules"):
        JobEnergy(max_joules="5")
    with pytest.raises(NotInitializedError):
        JobEnergy()
    assert issubclass(JobEnergyBudgetExceeded, EnergyBudgetExceeded)
    assert _decode(_code("rapl, estimate ~")) == "rapl, estimate ~"
    assert _decode(_code("")) == "none"
