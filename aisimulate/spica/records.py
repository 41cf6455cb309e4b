"""The trial journal: one JSON line per finished trial in ``OUTPUT_DIR/trials.jsonl``.

Appended as each trial finishes and flushed at once, so a killed search loses nothing that
finished; ``--resume`` reads it back and tells those trials their journaled outcome. The
sample key is a hash of the canonical JSON of the sample, stable across runs and machines.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aisimulate.spica.evaluate import Evaluation, Status

JOURNAL = "trials.jsonl"


def sample_key(sample: Mapping[str, Any]) -> str:
    text = json.dumps(sample, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    trial_number: int  # within the branch's study
    branch: str
    round: int  # 1-based, within the branch
    status: Status
    reason: str | None
    sample: Mapping[str, Any] | None  # None only when the sample could not be built
    sample_key: str | None
    summary: Mapping[str, Any] | None
    objectives: Mapping[str, float] | None
    score: float | None
    wall_s: float

    @classmethod
    def of(
        cls,
        evaluation: Evaluation,
        *,
        trial_number: int,
        branch: str,
        round: int,
        sample: Mapping[str, Any] | None,
    ) -> TrialRecord:
        return cls(
            trial_number=trial_number,
            branch=branch,
            round=round,
            status=evaluation.status,
            reason=evaluation.reason,
            sample=sample,
            sample_key=sample_key(sample) if sample is not None else None,
            summary=evaluation.summary,
            objectives=evaluation.objectives,
            score=evaluation.score,
            wall_s=evaluation.wall_s,
        )

    # The reference returned candidates with these three names; a TrialRecord answers to them.
    @property
    def config(self) -> Mapping[str, Any]:
        """The flat sample (the reference's ``Candidate.config``); empty if it was never built."""
        return self.sample or {}

    @property
    def used_gpus(self) -> int:
        return int(self.config.get("used_gpus", 0))

    @property
    def metrics(self) -> Mapping[str, Any]:
        """The replay report's summary (the reference's ``Candidate.metrics``); empty without one."""
        return self.summary or {}

    def evaluation(self) -> Evaluation:
        return Evaluation(
            status=self.status,
            reason=self.reason,
            summary=self.summary,
            objectives=self.objectives,
            score=self.score,
            wall_s=self.wall_s,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Journal:
    """Appends records to a JSON-lines file; reading skips a last line cut short by a kill."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: TrialRecord) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record.to_json(), allow_nan=True) + "\n")

    def resume(self) -> list[TrialRecord]:
        """The records, after cutting a last line a kill left unfinished (appending to it would
        spoil the next record too)."""
        if self.path.is_file():
            text = self.path.read_bytes()
            if text and not text.endswith(b"\n"):
                with self.path.open("r+b") as out:
                    out.truncate(text.rfind(b"\n") + 1)
        return self.read()

    def read(self) -> list[TrialRecord]:
        if not self.path.is_file():
            return []
        records = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(TrialRecord(**json.loads(line)))
            except (json.JSONDecodeError, TypeError):
                continue  # a partial line from a killed run; a resume evaluates its trial again
        return records
