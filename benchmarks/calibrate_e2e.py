"""Fit the end-to-end constants of the analytic model to measured serving benchmarks.

    python benchmarks/calibrate_e2e.py [--csv benchmarks/data/calibration/e2e_measured_h100.csv]

Keeps the kernel fits of ``aisimulate/perf/data/calibration.json`` (``calibrate_perf.py``) and
rewrites its ``overhead`` and ``e2e_fit`` entries. Only the rows of ``FIT_MODELS`` are used;
every other model's rows stay held out for ``fidelity_measured.py`` to report on.

Method, per backend, every row replayed as ``fidelity_measured.py`` replays it:
1. Overhead: with no overhead, fit ``base_ms + per_sequence_ms * running`` so that the replayed
   mean TPOT matches the measured one (robust least squares on the relative error). A decode
   token gap is one pass, so the overhead adds to TPOT almost one for one; a second round
   replays with the first fit and corrects each row's measured sensitivity before refitting.
2. Desynchronisation: the output-length spread (from ``SPREADS``) whose replays give the lowest
   median |TTFT error|; it decides whether the closed loop runs in lock-step waves or split up.
Step 1 runs with a provisional spread, then again with the chosen one.
3. Frontend latency: the per-request time outside the engine (client, HTTP, tokenisation), the
   value from ``FRONTEND_MS`` whose replays (final overheads and spreads) give the lowest sum of
   the median |TTFT error| and the median |TPOT error|. It is not a constant added to TTFT:
   requests reach the engine later, so the closed loop's batches change too.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from aisimulate.catalog import get_model
from aisimulate.fidelity import (
    MeasuredRow,
    Prediction,
    ReplayCase,
    build_case,
    predict,
    read_measured,
    signed_error_pct,
)
from aisimulate.perf.calibration import reload_calibration, write_calibration_data
from aisimulate.replay.plan import EngineSpec

HERE = Path(__file__).resolve().parent
DEFAULT_CSV = HERE / "data" / "calibration" / "e2e_measured_h100.csv"
CALIBRATION = HERE.parent / "aisimulate" / "perf" / "data" / "calibration.json"
FIT_MODELS = ("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-32B")
BACKENDS = ("sglang", "trtllm", "vllm")
SPREADS = (0.0, 0.005, 0.02)
PROVISIONAL_SPREAD = 0.005
FRONTEND_MS = (0.0, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
MAX_RUNNING = EngineSpec().max_num_seqs
ZERO = {b: {"base_ms": 0.0, "per_sequence_ms": 0.0} for b in BACKENDS}

Overheads = dict[str, dict[str, float]]


def _write(overheads: Overheads, e2e_fit: dict | None = None) -> None:
    data = json.loads(CALIBRATION.read_text())
    data["overhead"] = overheads
    data["e2e_fit"] = e2e_fit or {}
    write_calibration_data(CALIBRATION, data)
    reload_calibration()


def _cases(
    rows: list[MeasuredRow], spread: dict[str, float], frontend: dict[str, float] | None = None
) -> list[ReplayCase]:
    frontend = frontend or dict.fromkeys(BACKENDS, 0.0)
    cases = [
        build_case(row, osl_spread=spread[row.backend], frontend_latency_ms=frontend[row.backend])
        for row in rows
    ]
    assert all(isinstance(c, ReplayCase) for c in cases)  # fitted rows are all replayable
    return cases  # type: ignore[return-value]


def _replay(cases: list[ReplayCase]) -> list[Prediction]:
    out = [predict(case) for case in cases]
    assert all(isinstance(p, Prediction) for p in out)
    return out  # type: ignore[return-value]


def _added_ms(overheads: Overheads, case: ReplayCase) -> float:
    o = overheads[case.row.backend]
    return o["base_ms"] + o["per_sequence_ms"] * min(case.row.concurrency, MAX_RUNNING)


def _fit_overheads(cases: list[ReplayCase], base: list[Prediction], gain: np.ndarray) -> Overheads:
    overheads = {}
    for backend in BACKENDS:
        idx = [i for i, c in enumerate(cases) if c.row.backend == backend]
        running = np.array([min(cases[i].row.concurrency, MAX_RUNNING) for i in idx], dtype=float)
        measured = np.array([cases[i].row.measured_tpot_ms for i in idx], dtype=float)
        predicted = np.array([base[i].tpot_ms for i in idx])
        g = gain[idx]

        def relative(x, running=running, measured=measured, predicted=predicted, g=g):
            return (predicted + g * (x[0] + x[1] * running) - measured) / measured

        fit = least_squares(
            relative, [1.0, 0.01], bounds=([0.0, 0.0], [20.0, 0.5]), loss="soft_l1", f_scale=0.1
        )
        base_ms, per_seq_ms = (round(float(v), 6) for v in fit.x)
        overheads[backend] = {"base_ms": base_ms, "per_sequence_ms": per_seq_ms}
        print(
            f"  overhead {backend:6s} rows={len(idx):3d} base={base_ms:.3f} ms "
            f"per_sequence={per_seq_ms * 1e3:.1f} us"
        )
    return overheads


def _overheads(rows: list[MeasuredRow], spread: dict[str, float]) -> Overheads:
    cases = _cases(rows, spread)
    _write(ZERO)
    base = _replay(cases)
    first = _fit_overheads(cases, base, np.ones(len(cases)))
    _write(first)
    moved = np.array([r.tpot_ms - b.tpot_ms for r, b in zip(_replay(cases), base, strict=True)])
    added = np.array([_added_ms(first, c) for c in cases])
    gain = np.where(added > 0, moved / np.maximum(added, 1e-9), 1.0)
    print("  refit with each row's replayed sensitivity")
    return _fit_overheads(cases, base, gain)


def _median_abs(cases: list[ReplayCase], preds: list[Prediction], metric: str) -> float:
    errors = [
        abs(signed_error_pct(p.latency_ms(metric), c.row.measured_ms(metric)))  # type: ignore[arg-type]
        for c, p in zip(cases, preds, strict=True)
    ]
    return round(statistics.median(errors), 2)


def _best_per_backend(
    label: str, grid: Sequence[float], cases_for: Callable[[float], list[ReplayCase]], metrics: Sequence[str]
) -> dict[str, float]:
    """Per backend, the grid value whose replays give the lowest sum of median |errors| of
    ``metrics``."""
    scores: dict[str, list[tuple[float, float]]] = {b: [] for b in BACKENDS}
    for value in grid:
        cases = cases_for(value)
        preds = _replay(cases)
        for backend in BACKENDS:
            idx = [i for i, c in enumerate(cases) if c.row.backend == backend]
            errors = {m: _median_abs([cases[i] for i in idx], [preds[i] for i in idx], m) for m in metrics}
            scores[backend].append((sum(errors.values()), value))
            shown = " ".join(f"{m.upper()} {e:5.1f}%" for m, e in errors.items())
            print(f"  {label} {value:7.3f} {backend:6s} median |error| {shown}")
    return {b: min(s)[1] for b, s in scores.items()}


def _spreads(rows: list[MeasuredRow]) -> dict[str, float]:
    return _best_per_backend(
        "spread", SPREADS, lambda spread: _cases(rows, dict.fromkeys(BACKENDS, spread)), ("ttft",)
    )


def _frontend_latency(rows: list[MeasuredRow], spread: dict[str, float]) -> dict[str, float]:
    return _best_per_backend(
        "frontend ms",
        FRONTEND_MS,
        lambda latency: _cases(rows, spread, dict.fromkeys(BACKENDS, latency)),
        ("ttft", "tpot"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    args = parser.parse_args()
    sources = {get_model(m).source for m in FIT_MODELS}
    rows = [r for r in read_measured(args.csv) if isinstance(build_case(r), ReplayCase)]
    rows = [r for r in rows if get_model(r.model).source in sources]
    print(f"fitting on {len(rows)} rows of {', '.join(FIT_MODELS)}")
    print("1. overheads with a provisional spread")
    provisional = _overheads(rows, dict.fromkeys(BACKENDS, PROVISIONAL_SPREAD))
    _write(provisional)
    print("2. desynchronisation")
    spread = _spreads(rows)
    print("3. overheads with the chosen spread")
    final = _overheads(rows, spread)
    _write(final)
    print("4. frontend latency")
    frontend = _frontend_latency(rows, spread)
    e2e_fit = {
        "models": list(FIT_MODELS),
        "rows": len(rows),
        "csv": "benchmarks/data/calibration/e2e_measured_h100.csv",
        "osl_spread": spread,
        "frontend_latency_ms": frontend,
        "method": (
            "benchmarks/calibrate_e2e.py: per backend, the overhead fitted to the replayed mean TPOT, "
            "the output-length spread chosen by replayed median |TTFT error| and the frontend "
            "latency by replayed median |TTFT error| + median |TPOT error|, on the rows of these "
            "models only; all other rows are held out"
        ),
    }
    _write(final, e2e_fit)
    cases = _cases(rows, spread, frontend)
    preds = _replay(cases)
    fitted = {
        "ttft_median_abs_pct": _median_abs(cases, preds, "ttft"),
        "tpot_median_abs_pct": _median_abs(cases, preds, "tpot"),
    }
    print(
        json.dumps(
            {
                "benchmark": "calibrate_e2e",
                "overhead": final,
                "osl_spread": spread,
                "frontend_latency_ms": frontend,
                "fitted_rows": fitted,
            }
        )
    )


if __name__ == "__main__":
    main()
