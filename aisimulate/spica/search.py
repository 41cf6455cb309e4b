"""The search loop: per branch, rounds of ask -> sample -> dedupe -> evaluate -> tell -> record.

A round asks for the candidates it still needs, evaluates the new ones in parallel and tells all
of them in trial-number order, so results do not depend on the number of workers or on which
finished first. A sample seen before (in this run or a resumed one) is told the cached outcome
at once and recorded as a duplicate: it costs an ask but no evaluation and does not count toward
the round's quota (``candidates_per_round`` new samples). A round gives up after
``11 x quota`` asks. Once a round has seen a repeated sample, its replacement asks come from
random sampling (seeded), so a converged optimizer cannot stall a branch that still has unseen
samples; a round short of its quota even so means the branch's space is (nearly) exhausted, and
the branch stops there.

Resume: each trial carries its round and sample as user attributes, the study remembers finished
rounds, and the journal holds finished evaluations. A resumed run tells the asked-but-untold
trials of a killed round (evaluating only those the journal lacks) and carries on as the
uninterrupted run would have.
"""

from __future__ import annotations

import logging
import math
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
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
from aisimulate.spica.records import JOURNAL, Journal, TrialRecord, sample_key
from aisimulate.spica.sample import kv_load_fields, unroll_sample
from aisimulate.spica.sampler import BranchSampler, Suggestion, directions
from aisimulate.spica.score import OBJECTIVE_DIRECTIONS, PARETO, Scored, hypervolume, pareto_front, rank
from aisimulate.spica.search_space import Branch, SearchPlan, enumerate_branches, filter_scaling_policies

logger = logging.getLogger("aisimulate.spica")

STUDY_DB = "study.db"
ASK_CAP_PER_QUOTA = 11  # the reference's replacement-ask cap: 11 asks per wanted candidate
_ROUND, _SAMPLE, _STATUS = "spica_round", "spica_sample", "spica_status"
_ROUNDS_DONE, _STOPPED = "spica_rounds_done", "spica_stopped"


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    goal: OptimizationGoal
    best: tuple[TrialRecord, ...]  # ranked best first, or the Pareto front along its last objective
    records: tuple[TrialRecord, ...]  # every trial, by branch then trial number
    tallies: Mapping[str, int]
    # After each round (branches in order): the front's hypervolume (Pareto) or the best value of
    # the objective in its own units (nan before anything is feasible).
    progress_by_round: tuple[float, ...]
    plan: SearchPlan
    forecasters: Forecasters = field(default_factory=Forecasters)


def study_name(branch: Branch) -> str:
    return f"spica_{branch.deployment_mode}"


@experimental
def run_smart_search(
    config: SmartSearchConfig,
    *,
    evaluator: Evaluator = evaluate,
    output_dir: Path | None = None,
    resume: bool = False,
    on_trial: Callable[[TrialRecord], None] | None = None,
) -> SearchResult:
    """Search every branch and merge by goal. With ``output_dir`` the journal and the study are
    kept there (the study in ``sweep.storage`` when set) and ``resume`` continues them; without
    it everything stays in memory."""
    plan = enumerate_branches(config)
    space = config.search_space
    kept, _ = filter_scaling_policies(space, config.goal)
    forecasters = choose_forecasters(config.workload, kept, space.load_predictor_candidates)
    journal = Journal(output_dir / JOURNAL) if output_dir is not None else None
    storage = _storage(config, output_dir, plan, resume)
    search = _Search(config, journal, on_trial, forecasters)
    executor = make_executor(config, evaluator)
    try:
        for branch in plan.branches:
            search.branch(branch, storage, executor)
    finally:
        executor.close()
    return merge(config, search.records, plan, forecasters)


def _storage(
    config: SmartSearchConfig, output_dir: Path | None, plan: SearchPlan, resume: bool
) -> optuna.storages.BaseStorage | str:
    if output_dir is None:
        return optuna.storages.InMemoryStorage()
    output_dir.mkdir(parents=True, exist_ok=True)
    url = config.sweep.storage or f"sqlite:///{(output_dir / STUDY_DB).resolve()}"
    if not resume:
        existing = set(optuna.study.get_all_study_names(url))
        taken = [study_name(b) for b in plan.branches if study_name(b) in existing]
        if taken or (output_dir / JOURNAL).exists():
            raise ConfigError(
                f"{output_dir} already holds a search ({', '.join(taken) or JOURNAL}); "
                "pass --resume to continue it, or choose another output directory",
                where="sweep.output_dir",
            )
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
        previous = journal.read() if journal is not None else []
        # Resumed evaluations by (branch, trial): a killed round's finished trials are not re-run.
        self.finished = {(r.branch, r.trial_number): r for r in previous}
        self.records: dict[tuple[str, int], TrialRecord] = dict(self.finished)
        self.cache: dict[str, tuple[Evaluation, int]] = {}
        for r in previous:
            if r.status != "duplicate" and r.sample_key is not None:
                self.cache.setdefault(r.sample_key, (r.evaluation(), r.trial_number))

    def branch(self, branch: Branch, storage: optuna.storages.BaseStorage | str, executor: Executor) -> None:
        sweep = self.config.sweep
        quota = sweep.candidates_per_round
        cap = ASK_CAP_PER_QUOTA * quota
        study = optuna.create_study(
            storage=storage,
            study_name=study_name(branch),
            directions=directions(self.config.goal),
            load_if_exists=True,
        )
        sampler = BranchSampler(study, branch, kind=sweep.sampler, seed=sweep.random_seed, batch_size=quota)
        if study.user_attrs.get(_STOPPED):
            return
        running = [(t.number, t.user_attrs.get(_SAMPLE), None) for t in sampler.running()]
        for round_no in range(study.user_attrs.get(_ROUNDS_DONE, 0) + 1, sweep.max_rounds + 1):
            told = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(_ROUND) == round_no]
            unique = sum(t.user_attrs.get(_STATUS) not in (None, "duplicate") for t in told)
            attempts = len(told)
            if running:
                unique += self._batch(sampler, running, round_no, executor)
                running = []
            while unique < quota and attempts < cap:
                # Replacements for repeated samples explore: the optimizer has just shown that it
                # keeps proposing what it knows. A pure function of the round's counts, so a
                # resumed round asks exactly as the uninterrupted one did.
                explore = attempts > unique
                suggestions = sampler.ask(min(quota - unique, cap - attempts), explore=explore)
                attempts += len(suggestions)
                items = [self._build(sampler, s, round_no) for s in suggestions]
                unique += self._batch(sampler, items, round_no, executor)
            study.set_user_attr(_ROUNDS_DONE, round_no)
            if unique < quota:
                logger.info(
                    "%s: stopped after round %d: %d of %d asks in the round were new samples (wanted %d)",
                    branch.deployment_mode,
                    round_no,
                    unique,
                    attempts,
                    quota,
                )
                study.set_user_attr(_STOPPED, True)
                return

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
            prior = self.finished.get((mode, n))  # journaled before a kill, not yet told
            if prior is not None and prior.status != "duplicate":
                results[n] = prior.evaluation()
            elif key is not None and key in self.cache:
                evaluation, first = self.cache[key]
                self._tell(sampler, n, round_no, sample, evaluation, duplicate_of=first)
                continue
            elif key is not None and key in queued:
                original[n] = queued[key]
                continue
            elif early is not None or sample is None:
                lost = Evaluation(status="failed", reason="candidate build failed in an interrupted run")
                results[n] = self._finished(n, mode, round_no, sample, early or lost)
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
        if duplicate_of is not None and (mode, n) not in self.finished:
            # Journaled before the tell: a kill in between leaves a record, never a lost trial.
            record = TrialRecord.of(evaluation, trial_number=n, branch=mode, round=round_no, sample=sample)
            self._record(
                replace(
                    record,
                    status="duplicate",
                    reason=f"same sample as {mode} trial {duplicate_of}",
                    summary=None,
                    wall_s=0.0,
                )
            )
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

    def _record(self, record: TrialRecord) -> None:
        self.records[(record.branch, record.trial_number)] = record
        if self.journal is not None:
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


def _progress(
    goal: OptimizationGoal, records: Sequence[TrialRecord], order: Mapping[str, int]
) -> tuple[float, ...]:
    rounds = sorted({(order.get(r.branch, len(order)), r.round) for r in records})
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
        upto = [r for r in feasible if (order.get(r.branch, len(order)), r.round) <= position]
        if goal.target == PARETO:
            vectors = [[r.objectives[o] for o in goal.objectives] for r in upto if r.objectives is not None]
            finite = [v for v in vectors if all(math.isfinite(x) for x in v)]
            progress.append(hypervolume(finite, reference, signs))
        else:
            best = max(upto, key=lambda r: r.score if r.score is not None else -math.inf, default=None)
            progress.append(math.nan if best is None else (best.objectives or {})[goal.target])
    return tuple(progress)
