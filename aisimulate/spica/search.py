"""The search loop: per branch, rounds of ask -> sample -> dedupe -> evaluate -> tell -> record.

A round asks for the candidates it still needs, evaluates the new ones in parallel and tells all
of them in trial-number order, so results do not depend on the number of workers or on which
finished first. A sample seen before in this run is told the cached outcome
at once and recorded as a duplicate: it costs an ask but no evaluation and does not count toward
the round's quota (``candidates_per_round`` new samples). A round gives up after
``11 x quota`` asks. Once a round has seen a repeated sample, its replacement asks come from
random sampling (seeded), so a converged optimizer cannot stall a branch that still has unseen
samples; a round short of its quota even so means the branch's space is (nearly) exhausted, and
the branch stops there.

Resume replays: the search runs again from its first ask with fresh studies, and every trial the
journal holds is told its journaled outcome instead of being evaluated. Asks depend only on the
seed and the trials told so far, so the replay proposes exactly what the killed run proposed, and
the trials that were in flight (asked, built or evaluating) are evaluated now. A resumed run ends
with the trials, results and best of an uninterrupted one; resuming with a larger
``max_rounds`` extends a finished search. A journaled trial whose sample differs from the one the
replay builds means another config wrote the journal, and is an error.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna

from aisimulate.catalog import ModelSpec, System
from aisimulate.errors import ConfigError, InfeasibleError
from aisimulate.spica.config import OptimizationGoal, SmartSearchConfig
from aisimulate.spica.evaluate import STATUSES, Evaluation, Evaluator, evaluate
from aisimulate.spica.executor import Executor, make_executor
from aisimulate.spica.experimental import experimental
from aisimulate.spica.forecasters import Forecasters, choose_forecasters
from aisimulate.spica.preflight import check_perf_provider
from aisimulate.spica.records import JOURNAL, Journal, TrialRecord, sample_key
from aisimulate.spica.sample import kv_load_fields, unroll_sample
from aisimulate.spica.sampler import BranchSampler, Suggestion, directions
from aisimulate.spica.score import OBJECTIVE_DIRECTIONS, PARETO, Scored, hypervolume, pareto_front, rank
from aisimulate.spica.search_space import Branch, SearchPlan, enumerate_branches, filter_scaling_policies

logger = logging.getLogger("aisimulate.spica")

STUDY_DB = "study.db"
ASK_CAP_PER_QUOTA = 11  # the reference's replacement-ask cap: 11 asks per wanted candidate
_ROUND, _SAMPLE, _STATUS = "spica_round", "spica_sample", "spica_status"


@dataclass(frozen=True, kw_only=True)
class BranchOutcome:
    """How a branch's rounds went: all of them, or a stop (the round, and why)."""

    deployment_mode: str
    rounds: int  # rounds run
    asks: int  # trials asked, duplicates included
    new_samples: int  # trials evaluated (or decided without a replay)
    stopped: str | None = None  # why the branch stopped before max_rounds; None: it ran them all


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    goal: OptimizationGoal
    best: tuple[TrialRecord, ...]  # ranked best first, or the Pareto front along its last objective
    records: tuple[TrialRecord, ...]  # every trial, by branch then trial number
    tallies: Mapping[str, int]
    # After each round (branches in order): the front's hypervolume (Pareto) or the best value of
    # the objective in its own units (nan before anything is feasible).
    progress_by_round: tuple[float, ...]
    rounds: tuple[tuple[str, int], ...]  # (branch, round) of each progress_by_round entry
    plan: SearchPlan
    forecasters: Forecasters = field(default_factory=Forecasters)
    # One per branch searched, in order; empty when the result was merged from a journal alone.
    branches: tuple[BranchOutcome, ...] = ()
    wall_s: float = 0.0  # the search's own wall time (this call; a resume counts from its start)

    def __iter__(self) -> Iterator[TrialRecord]:
        """The reference returned its candidates as a list: iterating a result walks ``best``."""
        return iter(self.best)

    def __len__(self) -> int:
        return len(self.best)

    def __getitem__(self, index: int) -> TrialRecord:
        return self.best[index]


def study_name(branch: Branch) -> str:
    return f"spica_{branch.deployment_mode}"


@experimental
def run_smart_search(
    config: SmartSearchConfig,
    *,
    evaluator: Evaluator | None = None,
    output_dir: Path | None = None,
    resume: bool = False,
    on_trial: Callable[[TrialRecord], None] | None = None,
) -> SearchResult:
    """Search every branch and merge by goal. ``evaluator`` (None: ``evaluate``, the replay) is a
    top-level function ``(config, sample) -> Evaluation``. With ``output_dir`` the journal and the
    study are kept there (the study in ``sweep.storage`` when set) and ``resume`` continues them;
    without it everything stays in memory. The result iterates over its ``best`` records."""
    started = time.perf_counter()
    plan = enumerate_branches(config)
    check_perf_provider(config, plan)
    space = config.search_space
    kept, _ = filter_scaling_policies(space, config.goal)
    forecasters = choose_forecasters(config.workload, kept, space.load_predictor_candidates)
    journal = Journal(output_dir / JOURNAL) if output_dir is not None else None
    storage = _storage(config, output_dir, plan, resume)
    search = _Search(config, journal, on_trial, forecasters)
    executor = make_executor(config, evaluator or evaluate)
    try:
        outcomes = tuple(search.branch(branch, storage, executor) for branch in plan.branches)
    finally:
        executor.close()
    result = merge(config, search.records, plan, forecasters)
    return replace(result, branches=outcomes, wall_s=time.perf_counter() - started)


def _storage(
    config: SmartSearchConfig, output_dir: Path | None, plan: SearchPlan, resume: bool
) -> optuna.storages.BaseStorage | str:
    if output_dir is None:
        return optuna.storages.InMemoryStorage()
    output_dir.mkdir(parents=True, exist_ok=True)
    url = config.sweep.storage or f"sqlite:///{(output_dir / STUDY_DB).resolve()}"
    existing = set(optuna.study.get_all_study_names(url))
    taken = [study_name(b) for b in plan.branches if study_name(b) in existing]
    if not resume and (taken or (output_dir / JOURNAL).exists()):
        raise ConfigError(
            f"{output_dir} already holds a search ({', '.join(taken) or JOURNAL}); "
            "pass --resume to continue it, or choose another output directory",
            where="sweep.output_dir",
        )
    for name in taken:  # a resume rebuilds the studies from the journal
        optuna.delete_study(study_name=name, storage=url)
    return url


class _Search:
    def __init__(
        self,
        config: SmartSearchConfig,
        journal: Journal | None,
        on_trial: Callable[[TrialRecord], None] | None,
        forecasters: Forecasters,
    ) -> None:
        self.config = config
        self.forecasters = forecasters
        self.journal = journal
        self.on_trial = on_trial
        self.model: ModelSpec = config.search_space.resolve_model()
        self.system: System = config.search_space.resolve_system()
        # The journal of a killed run, by (branch, trial): the replay tells these without evaluating.
        self.journaled = {(r.branch, r.trial_number): r for r in journal.resume()} if journal else {}
        self.records: dict[tuple[str, int], TrialRecord] = {}
        self.cache: dict[str, tuple[Evaluation, int]] = {}

    def branch(
        self, branch: Branch, storage: optuna.storages.BaseStorage | str, executor: Executor
    ) -> BranchOutcome:
        sweep = self.config.sweep
        quota = sweep.candidates_per_round
        cap = ASK_CAP_PER_QUOTA * quota
        study = optuna.create_study(
            storage=storage, study_name=study_name(branch), directions=directions(self.config.goal)
        )
        sampler = BranchSampler(study, branch, kind=sweep.sampler, seed=sweep.random_seed, batch_size=quota)
        mode = branch.deployment_mode
        total_asks = total_new = 0
        for round_no in range(1, sweep.max_rounds + 1):
            unique = attempts = 0  # new samples and asks in this round
            while unique < quota and attempts < cap:
                # Replacements for repeated samples explore: the optimizer has just shown that it
                # keeps proposing what it knows.
                explore = attempts > unique
                suggestions = sampler.ask(min(quota - unique, cap - attempts), explore=explore)
                attempts += len(suggestions)
                items = [self._build(sampler, s, round_no) for s in suggestions]
                unique += self._batch(sampler, items, round_no, executor)
            total_asks, total_new = total_asks + attempts, total_new + unique
            if unique < quota:
                why = (
                    f"round {round_no} found {unique} new sample(s) of {quota} wanted in {attempts} asks; "
                    "the rest repeated earlier samples, so the branch's space is (nearly) exhausted"
                )
                logger.info("%s: stopped: %s", mode, why)
                return BranchOutcome(
                    deployment_mode=mode, rounds=round_no, asks=total_asks, new_samples=total_new, stopped=why
                )
        return BranchOutcome(
            deployment_mode=mode, rounds=sweep.max_rounds, asks=total_asks, new_samples=total_new
        )

    def _build(
        self, sampler: BranchSampler, suggestion: Suggestion, round_no: int
    ) -> tuple[int, dict[str, Any] | None, Evaluation | None]:
        """The flat sample of a suggestion, with its KV-load concurrency; a sample that cannot be
        built comes back with its evaluation already decided."""
        selection, n = suggestion.selection, suggestion.trial_number
        sampler.set_user_attr(n, _ROUND, round_no)
        sample: dict[str, Any] | None = None
        early = None
        try:
            forecaster = self.forecasters.for_policy(selection["planner_scaling_policy"])
            sample = unroll_sample(self.config.search_space, selection, suggestion.config, forecaster)
            if "kv_load_ratio" in selection:
                workload = self.config.workload
                assert workload.isl is not None and workload.osl is not None
                fields = kv_load_fields(
                    sample,
                    selection["kv_load_ratio"],
                    self.model,
                    self.system,
                    isl=workload.isl,
                    osl=workload.osl,
                )
                sample.update(fields)
        except InfeasibleError as err:
            early = Evaluation(status="infeasible", reason=f"candidate KV capacity infeasible: {err}")
        except Exception as err:
            early = Evaluation(
                status="failed",
                reason=f"candidate build failed: {type(err).__name__}: {err}",
                traceback=traceback.format_exc(),
            )
        if sample is not None:
            sampler.set_user_attr(n, _SAMPLE, sample)
        return n, sample, early

    def _batch(
        self,
        sampler: BranchSampler,
        items: Sequence[tuple[int, dict[str, Any] | None, Evaluation | None]],
        round_no: int,
        executor: Executor,
    ) -> int:
        """Evaluate the new samples among ``items`` and tell everything in trial order; returns
        how many were new."""
        mode = sampler.branch.deployment_mode
        results: dict[int, Evaluation] = {}
        samples = {n: sample for n, sample, _ in items}
        original: dict[int, int] = {}  # duplicate trial -> the trial that holds its outcome
        queued: dict[str, int] = {}
        to_run: list[int] = []
        for n, sample, early in items:
            key = sample_key(sample) if sample is not None else None
            prior = self._journaled(mode, n, key)
            if key is not None and key in self.cache:
                evaluation, first = self.cache[key]
                self._tell(sampler, n, round_no, sample, evaluation, duplicate_of=first)
                continue
            if key is not None and key in queued:
                original[n] = queued[key]
                continue
            if prior is not None:
                results[n] = prior.evaluation()
                self._record(prior, journal=False)
            elif early is not None:
                results[n] = self._finished(n, mode, round_no, sample, early)
            else:
                to_run.append(n)
            if key is not None:
                queued[key] = n
        for index, evaluation in executor.run([samples[n] for n in to_run]):
            n = to_run[index]
            results[n] = self._finished(n, mode, round_no, samples[n], evaluation)
        for n in sorted([*results, *original]):
            if n in results:
                evaluation = results[n]
                if samples[n] is not None:
                    self.cache[sample_key(samples[n])] = (evaluation, n)
                self._tell(sampler, n, round_no, samples[n], evaluation)
            else:
                self._tell(sampler, n, round_no, samples[n], results[original[n]], duplicate_of=original[n])
        return len(results)

    def _journaled(self, mode: str, n: int, key: str | None) -> TrialRecord | None:
        """The journaled outcome of trial ``n``, checked against the sample the replay built."""
        prior = self.journaled.get((mode, n))
        if prior is not None and prior.sample_key != key:
            journal = self.journal.path if self.journal is not None else JOURNAL
            raise ConfigError(
                f"{journal} holds another search: its {mode} trial {n} evaluated another sample; resume "
                "with the config (and flags) that started it, or choose another output directory",
                where="sweep.output_dir",
            )
        return prior

    def _finished(
        self, n: int, mode: str, round_no: int, sample: Mapping[str, Any] | None, evaluation: Evaluation
    ) -> Evaluation:
        """Log a failure's traceback and journal the evaluation as soon as it is known."""
        if evaluation.traceback:
            logger.warning("%s trial %d failed: %s\n%s", mode, n, evaluation.reason, evaluation.traceback)
        self._record(TrialRecord.of(evaluation, trial_number=n, branch=mode, round=round_no, sample=sample))
        return evaluation

    def _tell(
        self,
        sampler: BranchSampler,
        n: int,
        round_no: int,
        sample: Mapping[str, Any] | None,
        evaluation: Evaluation,
        *,
        duplicate_of: int | None = None,
    ) -> None:
        mode = sampler.branch.deployment_mode
        if duplicate_of is not None:
            # Journaled before the tell: a kill in between leaves a record, never a lost trial.
            record = TrialRecord.of(evaluation, trial_number=n, branch=mode, round=round_no, sample=sample)
            record = replace(
                record,
                status="duplicate",
                reason=f"same sample as {mode} trial {duplicate_of}",
                summary=None,
                wall_s=0.0,
            )
            self._record(record, journal=(mode, n) not in self.journaled)
        sampler.set_user_attr(n, _STATUS, "duplicate" if duplicate_of is not None else evaluation.status)
        if evaluation.status == "feasible":
            sampler.tell(n, self._values(evaluation))
        else:
            sampler.tell_infeasible(n, evaluation.reason or evaluation.status)

    def _values(self, evaluation: Evaluation) -> list[float]:
        assert evaluation.objectives is not None and evaluation.score is not None
        if self.config.goal.target != PARETO:
            return [evaluation.score]
        return [evaluation.objectives[name] for name in self.config.goal.objectives]

    def _record(self, record: TrialRecord, *, journal: bool = True) -> None:
        self.records[(record.branch, record.trial_number)] = record
        if journal and self.journal is not None:
            self.journal.append(record)
        if self.on_trial is not None:
            self.on_trial(record)


def merge(
    config: SmartSearchConfig,
    records: Mapping[tuple[str, int], TrialRecord],
    plan: SearchPlan,
    forecasters: Forecasters | None = None,
) -> SearchResult:
    """The answer from the records alone, so a resumed or interrupted search is summarised the
    same way as a finished one."""
    order = {b.deployment_mode: i for i, b in enumerate(plan.branches)}
    ordered = sorted(records.values(), key=lambda r: (order.get(r.branch, len(order)), r.trial_number))
    goal = config.goal
    scored = [_scored(r, goal) for r in ordered if r.status == "feasible"]
    best = pareto_front(scored, goal.objectives) if goal.target == PARETO else rank(scored)
    tallies = Counter({status: 0 for status in STATUSES})
    tallies.update(r.status for r in ordered)
    return SearchResult(
        goal=goal,
        best=tuple(s.payload for s in best),
        records=tuple(ordered),
        tallies=dict(tallies),
        progress_by_round=_progress(goal, ordered, order),
        rounds=tuple((r.branch, r.round) for r in _last_of_each_round(ordered, order)),
        plan=plan,
        forecasters=forecasters or Forecasters(),
    )


def _scored(record: TrialRecord, goal: OptimizationGoal) -> Scored[TrialRecord]:
    assert record.score is not None and record.sample is not None
    return Scored(
        score=record.score,
        used_gpus=record.sample["used_gpus"],
        payload=record,
        objectives=record.objectives if goal.target == PARETO else None,
    )


def reference_point(goal: OptimizationGoal, points: Sequence[Sequence[float]]) -> list[float]:
    """0 for maximised objectives; for minimised ones 10% beyond the worst value seen, so every
    evaluated point has some volume and the reference does not depend on a guess of the scale."""
    reference = []
    for i, name in enumerate(goal.objectives):
        if OBJECTIVE_DIRECTIONS[name] == "max":
            reference.append(0.0)
        else:
            worst = max((p[i] for p in points), default=0.0)
            reference.append(worst * 1.1 if worst > 0 else 1.0)
    return reference


def _round_position(record: TrialRecord, order: Mapping[str, int]) -> tuple[int, int]:
    return order.get(record.branch, len(order)), record.round


def _last_of_each_round(records: Sequence[TrialRecord], order: Mapping[str, int]) -> list[TrialRecord]:
    """One record per (branch, round), in search order."""
    last = {_round_position(r, order): r for r in records}
    return [last[position] for position in sorted(last)]


def _progress(
    goal: OptimizationGoal, records: Sequence[TrialRecord], order: Mapping[str, int]
) -> tuple[float, ...]:
    rounds = [_round_position(r, order) for r in _last_of_each_round(records, order)]
    feasible = [r for r in records if r.status == "feasible"]
    if goal.target == PARETO:
        points = [
            [r.objectives[o] for o in goal.objectives]
            for r in feasible
            if r.objectives is not None and all(math.isfinite(r.objectives[o]) for o in goal.objectives)
        ]
        reference = reference_point(goal, points)
        signs = [OBJECTIVE_DIRECTIONS[o] for o in goal.objectives]
    progress = []
    for position in rounds:
        upto = [r for r in feasible if _round_position(r, order) <= position]
        if goal.target == PARETO:
            vectors = [[r.objectives[o] for o in goal.objectives] for r in upto if r.objectives is not None]
            finite = [v for v in vectors if all(math.isfinite(x) for x in v)]
            progress.append(hypervolume(finite, reference, signs))
        else:
            best = max(upto, key=lambda r: r.score if r.score is not None else -math.inf, default=None)
            progress.append(math.nan if best is None else (best.objectives or {})[goal.target])
    return tuple(progress)
