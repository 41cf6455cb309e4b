"""Fake evaluators for the search tests: top-level functions, so spawned workers can import them.

Each maps a sample to a made-up replay summary: more GPUs and more sequences give more tokens per
second, more sequences give fewer tokens per user, so there is a trade-off to search."""

import time
from collections.abc import Mapping
from typing import Any

from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.evaluate import Evaluation, judge

CALLS: list[str] = []  # samples this process evaluated, by sample key, for in-process tests


def summary_of(sample: Mapping[str, Any]) -> dict[str, float]:
    seqs = sample.get("agg_max_num_seqs") or sample["decode_max_num_seqs"]
    gpus = sample["used_gpus"]
    return {
        "output_throughput_tok_s": 100.0 * gpus + seqs + sample.get("kv_load_ratio", 0.0),
        "mean_output_token_throughput_per_user": 10_000.0 / seqs,
        "mean_e2e_latency_ms": 10.0 * seqs,
        "gpu_hours": float(gpus),
        "duration_ms": 3_600_000.0,
    }


def fake(config: SmartSearchConfig, sample: Mapping[str, Any]) -> Evaluation:
    from aisimulate.spica.records import sample_key

    CALLS.append(sample_key(sample))
    return judge(config, summary_of(sample))


def fails_on_big_batches(config: SmartSearchConfig, sample: Mapping[str, Any]) -> Evaluation:
    if sample["agg_max_num_seqs"] > 256:
        raise RuntimeError(f"no room for {sample['agg_max_num_seqs']} sequences")
    return judge(config, summary_of(sample))


def hangs_on_big_batches(config: SmartSearchConfig, sample: Mapping[str, Any]) -> Evaluation:
    while sample["agg_max_num_seqs"] > 256:
        time.sleep(0.05)
    return judge(config, summary_of(sample))


class Killed(BaseException):
    """Stands for the search process being killed: nothing in the search may catch it."""


KILL_AFTER: list[int] = []  # evaluations allowed before the "kill"


def killed_midway(config: SmartSearchConfig, sample: Mapping[str, Any]) -> Evaluation:
    if len(CALLS) >= KILL_AFTER[0]:
        raise Killed
    return fake(config, sample)


def slow(config: SmartSearchConfig, sample: Mapping[str, Any]) -> Evaluation:
    """An evaluation that takes a moment: long enough for its coordinator to go away first."""
    time.sleep(0.5)
    return judge(config, summary_of(sample))
