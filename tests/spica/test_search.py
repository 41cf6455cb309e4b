"""The search loop with fake evaluators: ranking, tallies, dedupe, the ask cap, failures,
timeouts, early branch stop, Pareto merge, determinism and resume."""

import importlib
import json
import logging
import sys

import pytest

from aisimulate.errors import ConfigError
from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.experimental import ExperimentalWarning
from aisimulate.spica.records import Journal
from aisimulate.spica.sampler import BranchSampler
from aisimulate.spica.search import run_smart_search
from tests.spica import fakes

# Every search warns that spica is experimental; the first test checks it once.
pytestmark = pytest.mark.filterwarnings("ignore::aisimulate.spica.experimental.ExperimentalWarning")

BASE = {
    "search_space": {
        "model_name": "meta-llama/Llama-3.1-8B",
        "hardware_sku": "h200_sxm",
        "gpu_budget": 4,
        "context_length": 4096,
        "deployment_mode": ["agg"],
        "router_mode": ["round_robin"],
        "planner_scaling_policy": ["disabled"],
        "agg_max_num_batched_tokens": [8192],
        "agg_max_num_seqs": [64, 128, 256, 512, 1024],
    },
    "workload": {"isl": 1024, "osl": 128, "concurrency": 16, "num_request_ratio": 2},
    "goal": {"target": "throughput_per_gpu"},
    "sweep": {"max_rounds": 3, "parallel_evals": 1, "candidates_per_round": 3, "random_seed": 3},
}


def config(**changes):
    data = json.loads(json.dumps(BASE))
    for dotted, value in changes.items():
        block, name = dotted.split("__")
        data[block][name] = value
    return SmartSearchConfig.from_mapping(data)


def fingerprint(result):
    return [(r.branch, r.trial_number, r.status, r.sample_key, r.objectives) for r in result.records]


def test_feasible_candidates_are_ranked_best_first_and_tallied():
    with pytest.warns(ExperimentalWarning, match="EXPERIMENTAL"):
        result = run_smart_search(config(), evaluator=fakes.fake)
    scores = [r.score for r in result.best]
    assert scores == sorted(scores, reverse=True) and len(scores) == result.tallies["feasible"]
    assert result.tallies["feasible"] == len({r.sample_key for r in result.best})
    assert sum(result.tallies.values()) == len(result.records)
    assert set(result.tallies) == {"feasible", "infeasible", "failed", "unsupported", "duplicate"}
    best = result.best[0]
    # per GPU: (100 * gpus + seqs) / gpus, so the biggest batch on one GPU wins once it is found
    assert best.objectives == {"throughput_per_gpu": pytest.approx(best.score)}
    # the best throughput per GPU so far, in tok/s per GPU, never falls from round to round
    assert result.progress_by_round == tuple(sorted(result.progress_by_round))
    assert result.progress_by_round[-1] == best.objectives["throughput_per_gpu"]


def test_a_single_sample_space_dedupes_up_to_the_ask_cap_and_stops_the_branch():
    pinned = config(
        search_space__agg_max_num_seqs=[256],
        search_space__parallel_configs=[{"tp": 1, "replicas": 2}],
        sweep__candidates_per_round=2,
    )
    fakes.CALLS.clear()
    result = run_smart_search(pinned, evaluator=fakes.fake)
    assert len(fakes.CALLS) == 1  # evaluated once, every other ask is a duplicate
    assert len(result.records) == 11 * 2  # the cap ends the round; the short round ends the branch
    assert result.tallies["feasible"] == 1 and result.tallies["duplicate"] == 21
    assert {r.reason for r in result.records[1:]} == {"same sample as agg trial 0"}
    assert {r.round for r in result.records} == {1}


def test_a_failing_candidate_is_recorded_and_the_search_goes_on(caplog):
    with caplog.at_level(logging.WARNING, logger="aisimulate.spica"):
        result = run_smart_search(config(), evaluator=fakes.fails_on_big_batches)
    failed = [r for r in result.records if r.status == "failed"]
    assert failed and result.tallies["feasible"] > 0
    assert all(r.reason.startswith("replay failed: RuntimeError: no room for") for r in failed)
    assert all(r.sample["agg_max_num_seqs"] > 256 for r in failed)
    assert "Traceback" in caplog.text and "no room for" in caplog.text
    assert all(r.sample["agg_max_num_seqs"] <= 256 for r in result.best)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stuck_evaluation_is_stopped_alone(workers):
    stuck = config(sweep__max_eval_seconds=2, sweep__parallel_evals=workers, sweep__max_rounds=2)
    result = run_smart_search(stuck, evaluator=fakes.hangs_on_big_batches)
    timed_out = [r for r in result.records if r.status == "failed"]
    assert timed_out and {r.reason for r in timed_out} == {"evaluation exceeded max_eval_seconds=2"}
    assert all(r.sample["agg_max_num_seqs"] > 256 for r in timed_out)
    assert result.tallies["feasible"] > 0


def test_a_stalled_branch_stops_and_the_next_branch_still_runs():
    both = config(
        search_space__deployment_mode=["agg", "disagg"],
        search_space__agg_max_num_seqs=[256],
        search_space__decode_max_num_seqs=[256, 512],
        search_space__gpu_budget=2,
        sweep__candidates_per_round=2,
    )
    result = run_smart_search(both, evaluator=fakes.fake)
    agg = [r for r in result.records if r.branch == "agg"]
    disagg = [r for r in result.records if r.branch == "disagg"]
    # Three layouts fit 2 GPUs (tp1 x1, tp1 x2, tp2 x1), so round 2 finds one new sample and stops
    # the branch before its third round.
    assert {r.round for r in agg} == {1, 2} and result.tallies["feasible"] >= 3
    assert len({r.sample_key for r in agg}) == 3 and len([r for r in agg if r.round == 2]) == 11 * 2
    assert disagg and all(r.sample["deployment_mode"] == "disagg" for r in disagg)
    agg_outcome = result.branches[0]
    assert (agg_outcome.deployment_mode, agg_outcome.rounds, agg_outcome.new_samples) == ("agg", 2, 3)
    assert agg_outcome.asks == len(agg)
    assert agg_outcome.stopped.startswith("round 2 found 1 new sample(s) of 2 wanted in 22 asks")


def test_pareto_goal_returns_the_front_sorted_along_the_last_objective():
    pareto = config(
        goal__target="pareto",
        goal__pareto_objectives=["throughput_per_gpu", "e2e_latency"],
        workload__concurrency=None,
        workload__kv_load_ratio=[0.1, 0.9],
    )
    result = run_smart_search(pareto, evaluator=fakes.fake)
    front = [r.objectives for r in result.best]
    assert front and [f["e2e_latency"] for f in front] == sorted(f["e2e_latency"] for f in front)
    feasible = [r.objectives for r in result.records if r.status == "feasible"]
    for point in front:  # nothing evaluated dominates a front point
        assert not any(
            o["throughput_per_gpu"] >= point["throughput_per_gpu"]
            and o["e2e_latency"] <= point["e2e_latency"]
            and o != point
            for o in feasible
        )
    assert all(0.1 <= r.sample["kv_load_ratio"] <= 0.9 for r in result.records if r.sample)
    assert result.progress_by_round[-1] > 0


def test_same_seed_same_results_with_one_or_three_workers():
    """The round size is fixed (16 by default), so the worker count only changes how many run
    at once; a different seed searches differently."""
    data = json.loads(json.dumps(BASE))
    del data["sweep"]["candidates_per_round"]
    data["sweep"]["max_rounds"] = 1
    data["search_space"]["gpu_budget"] = 8  # room for 16 new samples in a round
    one = run_smart_search(SmartSearchConfig.from_mapping(data), evaluator=fakes.fake)
    data["sweep"]["parallel_evals"] = 3
    three = run_smart_search(SmartSearchConfig.from_mapping(data), evaluator=fakes.fake)
    assert fingerprint(one) == fingerprint(three)
    assert len([r for r in one.records if r.status != "duplicate"]) == 16
    other_seed = run_smart_search(config(sweep__random_seed=4), evaluator=fakes.fake)
    assert fingerprint(other_seed) != fingerprint(run_smart_search(config(), evaluator=fakes.fake))


def journal_lines(path):
    """The journal as a set of records, without the wall times (which no two runs share)."""
    return {
        json.dumps({k: v for k, v in json.loads(line).items() if k != "wall_s"}, sort_keys=True)
        for line in path.read_text().splitlines()
    }


def test_resume_after_a_kill_loses_and_reruns_nothing(tmp_path):
    search = config(sweep__max_rounds=4)
    uninterrupted = run_smart_search(search, evaluator=fakes.fake, output_dir=tmp_path / "whole")
    fakes.CALLS.clear()
    fakes.KILL_AFTER[:] = [5]
    with pytest.raises(fakes.Killed):
        run_smart_search(search, evaluator=fakes.killed_midway, output_dir=tmp_path / "killed")
    before = {r.sample_key for r in Journal(tmp_path / "killed" / "trials.jsonl").read()}
    assert len(before) == 5
    fakes.CALLS.clear()
    resumed = run_smart_search(search, evaluator=fakes.fake, output_dir=tmp_path / "killed", resume=True)
    assert not before & set(fakes.CALLS)  # finished evaluations are not run again
    assert fingerprint(resumed) == fingerprint(uninterrupted)
    lines = (tmp_path / "killed" / "trials.jsonl").read_text().splitlines()
    assert len(lines) == len(resumed.records)  # each trial journaled exactly once


@pytest.mark.parametrize("builds", [1, 4, 7, 11])
def test_a_trial_killed_while_its_sample_is_built_is_evaluated_on_resume(tmp_path, monkeypatch, builds):
    """A kill between the ask and the evaluation (the trial asked, its sample not yet built):
    the resumed run ends with exactly the trials, results and best of an uninterrupted one."""
    search = config(sweep__max_rounds=4)
    whole = run_smart_search(search, evaluator=fakes.fake, output_dir=tmp_path / "whole")
    search_module = importlib.import_module("aisimulate.spica.search")
    real_unroll = search_module.unroll_sample
    calls = []

    def killed_on_build(*args, **kwargs):
        calls.append(1)
        if len(calls) > builds:
            raise fakes.Killed
        return real_unroll(*args, **kwargs)

    monkeypatch.setattr(search_module, "unroll_sample", killed_on_build)
    with pytest.raises(fakes.Killed):
        run_smart_search(search, evaluator=fakes.fake, output_dir=tmp_path / "killed")
    monkeypatch.setattr(search_module, "unroll_sample", real_unroll)
    resumed = run_smart_search(search, evaluator=fakes.fake, output_dir=tmp_path / "killed", resume=True)
    assert fingerprint(resumed) == fingerprint(whole)
    assert [r.sample_key for r in resumed.best] == [r.sample_key for r in whole.best]
    assert journal_lines(tmp_path / "killed" / "trials.jsonl") == journal_lines(
        tmp_path / "whole" / "trials.jsonl"
    )
    assert "interrupted" not in (tmp_path / "killed" / "trials.jsonl").read_text()


def test_a_resume_cuts_a_half_written_line_and_may_extend_the_search(tmp_path):
    out = tmp_path / "out"
    run_smart_search(config(sweep__max_rounds=2), evaluator=fakes.fake, output_dir=out)
    journal = out / "trials.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:-2]) + lines[-2][:20])  # killed while writing a line
    longer = config(sweep__max_rounds=3)
    resumed = run_smart_search(longer, evaluator=fakes.fake, output_dir=out, resume=True)
    whole = run_smart_search(longer, evaluator=fakes.fake, output_dir=tmp_path / "whole")
    assert fingerprint(resumed) == fingerprint(whole) and {r.round for r in resumed.records} == {1, 2, 3}
    assert journal_lines(journal) == journal_lines(tmp_path / "whole" / "trials.jsonl")


def test_a_resume_with_another_config_is_refused(tmp_path):
    run_smart_search(config(sweep__max_rounds=1), evaluator=fakes.fake, output_dir=tmp_path)
    with pytest.raises(ConfigError, match="holds another search: its agg trial 0 evaluated another sample"):
        run_smart_search(
            config(sweep__max_rounds=1, sweep__random_seed=9),
            evaluator=fakes.fake,
            output_dir=tmp_path,
            resume=True,
        )


def test_an_output_dir_with_a_search_needs_resume(tmp_path):
    run_smart_search(config(sweep__max_rounds=1), evaluator=fakes.fake, output_dir=tmp_path)
    with pytest.raises(ConfigError, match="pass --resume"):
        run_smart_search(config(sweep__max_rounds=1), evaluator=fakes.fake, output_dir=tmp_path)


def test_the_real_evaluator_replays_planner_samples():
    planner = config(
        search_space__planner_scaling_policy=["disabled", "load_180_5"],
        search_space__agg_max_num_seqs=[64],
        sweep__max_rounds=1,
        sweep__candidates_per_round=4,
    )
    result = run_smart_search(planner)
    feasible = [r for r in result.records if r.status == "feasible"]
    assert feasible and all(r.summary["completed_requests"] == 32 for r in feasible)
    scaled = [r for r in feasible if r.sample["enable_load_scaling"]]
    assert scaled and all("planner_total_ticks" in r.summary for r in scaled)
    static = [r for r in feasible if not r.sample["enable_load_scaling"]]
    assert all("planner_total_ticks" not in r.summary for r in static)


def test_a_candidate_the_replay_refuses_is_unsupported(monkeypatch):
    def refuse(*args, **kwargs):
        raise ConfigError("no measured data for this shape", where="sweep.perf")

    # The package re-exports the evaluate function under the module's name: patch the module.
    monkeypatch.setattr(importlib.import_module("aisimulate.spica.evaluate"), "simulate", refuse)
    result = run_smart_search(config(sweep__max_rounds=1, sweep__candidates_per_round=2))
    assert result.tallies["unsupported"] >= 1
    assert all("no measured data" in r.reason for r in result.records if r.status == "unsupported")


def test_the_ray_executor_without_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"pip install 'aisimulate\[ray\]'"):
        run_smart_search(config(sweep__executor="ray"), evaluator=fakes.fake)


def test_replacements_for_repeated_samples_are_asked_at_random(monkeypatch):
    asks = []
    real_ask = BranchSampler.ask

    def spy(self, count, *, explore=False):
        asks.append((count, explore))
        return real_ask(self, count, explore=explore)

    monkeypatch.setattr(BranchSampler, "ask", spy)
    # 3 layouts within 2 GPUs x 5 batch sizes = 15 samples for 6 rounds of 3: repeats must happen.
    result = run_smart_search(config(search_space__gpu_budget=2, sweep__max_rounds=6), evaluator=fakes.fake)
    assert result.tallies["duplicate"] > 0
    by_round = {}
    for record in result.records:
        by_round.setdefault(record.round, []).append(record.status)
    ask_iter = iter(asks)
    for statuses in by_round.values():
        count, explore = next(ask_iter)
        assert not explore  # a round starts with the optimizer
        seen = count
        while seen < len(statuses):
            count, explore = next(ask_iter)
            assert explore  # a replacement is asked only after a repeat, and explores
            seen += count
