"""Measured serving benchmarks as typed rows, read from CSV with errors that name the cell.

The format is the one of ``benchmarks/data/calibration/e2e_measured_h100.csv``: one closed-loop
benchmark per row (system, backend, model, precision, isl, osl, concurrency, parallel shape,
measured mean TTFT and TPOT). Extra columns are ignored, so exports of other tools can be read
as they are. The measured latencies may be named ``measured_ttft_ms`` / ``measured_tpot_ms``
or plain ``ttft_ms`` / ``tpot_ms``. The optional ``backend_version`` and ``measured`` (the day the
benchmark ran) tell which release's defaults the server ran with.

AIConfigurator's serving-run format (``systems/silicon_sample.csv``: ``model_path``,
``*_size`` shape columns, ``prefill_*``/``decode_*`` worker columns, ``silicon_ttft_ms`` /
``silicon_tpot_ms``) is read too, aggregated and disaggregated rows alike. That file is a
third party's export with blanks where a run did not record something, so a row of it that
cannot be read keeps its place with the reason (``MeasuredRow.problem``) instead of stopping
the read; a missing column still does. Its disaggregated rows from InferenceX's dated exports,
which leave the worker counts blank, take them (and the run's MTP) from the InferenceX config entry
they match (``aisimulate.fidelity.inferencex``); those the same exports label ``agg`` with the whole
deployment's GPUs as ``tp`` are read as the disaggregated runs they are. Rows that name one
benchmark task (``gtl_task_id``) are one deployment's concurrency sweep; a sweep whose mean TPOT
falls as its users grow contradicts the deployment it records and is not replayed.
"""

from __future__ import annotations

import csv
import importlib.util
import re
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

from aisimulate.errors import ConfigError
from aisimulate.fidelity import inferencex

REQUIRED = ("system", "backend", "model", "isl", "osl", "concurrency", "tp")
MEASURED = {"ttft": ("measured_ttft_ms", "ttft_ms"), "tpot": ("measured_tpot_ms", "tpot_ms")}
SILICON_REQUIRED = ("id", "silicon_data_source", "backend", "model_path", "system", "mode", "isl", "osl")
SILICON_MEASURED = ("silicon_ttft_ms", "silicon_tpot_ms")


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedWorkers:
    """One role of a measured run as its row records it: each worker's split and how many ran.

    Kept raw, not a ``ParallelShape``: a recorded split may be one no engine allows, and that
    row is then skipped with its reason when its case is built."""

    tp: int
    pp: int = 1
    attn_dp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1
    workers: int = 1
    max_batch: int | None = None  # sequences a rank ran at most (the recipe's max_batch_size); None: unknown


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasuredRow:
    """One measured benchmark. Quantisation columns are kept as written (blank: the checkpoint's
    own); ``moe_tp``/``moe_ep`` of 0 in the source mean 1, as the benchmark files write them."""

    id: str
    line: int
    system: str
    backend: str
    backend_version: str  # as written; blank when the file does not say
    measured_on: date | None  # the ``measured`` column's day; None when the file does not say
    model: str
    precision: str
    gemm_quant: str
    moe_quant: str
    isl: int
    osl: int
    concurrency: int
    tp: int
    pp: int
    attn_dp: int
    moe_tp: int
    moe_ep: int
    measured_ttft_ms: float | None
    measured_tpot_ms: float | None
    mode: str = "agg"  # "agg", or "disagg" with ``prefill`` and ``decode`` set
    workers: int = 1  # aggregated replicas that shared the concurrency
    prefill: RecordedWorkers | None = None
    decode: RecordedWorkers | None = None
    source: str = ""  # where the row came from, as written (AIConfigurator's silicon_data_source)
    nextn: int = 0  # MTP draft tokens per decode step the run used (InferenceX's config says)
    workers_from: str = ""  # InferenceX entry taken: unrecorded worker counts or decode cap (blank: none)
    problem: str = ""  # why the row cannot be replayed as read (blank: it can)

    def measured_ms(self, metric: str) -> float | None:
        """The measured mean ``"ttft"`` or ``"tpot"``."""
        return self.measured_ttft_ms if metric == "ttft" else self.measured_tpot_ms


def _int(raw: str, *, field: str, where: str, default: int | None = None, zero_is_one: bool = False) -> int:
    text = raw.strip()
    if not text and default is not None:
        return default
    try:
        value = int(float(text))
    except ValueError:
        raise ConfigError(f"{field} must be a whole number, but got {raw!r}", where=where) from None
    if value == 0 and zero_is_one:
        return 1
    if value < 1:
        raise ConfigError(f"`{field} >= 1` must hold, but got {field}={value}", where=where)
    return value


def _unrecorded(text: str) -> bool:
    """A cell the exporting tool filled in for "not recorded"."""
    return text.lower() in ("", "nan", "none", "unknown")


def _version(raw: str) -> str:
    text = raw.strip()
    return "" if _unrecorded(text) else text


def _day(raw: str, *, where: str) -> date | None:
    text = raw.strip()
    if _unrecorded(text):
        return None
    try:
        return date.fromisoformat(text[:10])
    except ValueError:
        raise ConfigError(f"measured must be an ISO date, but got {raw!r}", where=where) from None


def _latency(raw: str, *, field: str, where: str) -> float | None:
    text = raw.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{field} must be a number of milliseconds, but got {raw!r}", where=where) from None
    if not value > 0:
        raise ConfigError(f"`{field} > 0` must hold, but got {field}={value}", where=where)
    return value


def _measured_column(header: list[str], metric: str, path: Path) -> str:
    for name in MEASURED[metric]:
        if name in header:
            return name
    names = " or ".join(MEASURED[metric])
    raise ConfigError(f"missing column {names}", where=f"{path}:1")


def aic_silicon_path() -> Path:
    """The serving runs AIConfigurator ships (``systems/silicon_sample.csv`` of the installed
    ``aiconfigurator_core``), located without importing the package."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            'AIConfigurator is not installed: pip install "aisimulate[aic]", or pass --csv FILE',
            where="--aic-silicon",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "systems" / "silicon_sample.csv"
    if not path.is_file():
        raise ConfigError(f"the installed AIConfigurator has no {path.name}", where=str(path))
    return path


def _source_field(source: str, key: str) -> str:
    """``key=value`` out of a silicon_data_source (``db-dump/...; key=value; ...``)."""
    found = re.search(rf"(?:^|;)\s*{key}=([^;]*)", source)
    return found[1].strip() if found else ""


def _silicon_int(cell: dict[str, str], field: str, where: str, *, default: int | None = 1) -> int | None:
    """A shape cell; blank is ``default`` and 0 means 1, as the export writes "not split"."""
    text = cell.get(field, "").strip()
    if not text:
        return default
    return _int(text, field=field, where=f"{where}: {field}", zero_is_one=True)


def _sglang_tp_times_ep(
    cell: dict[str, str], source: str, *, tp: int, attn_dp: int, moe_tp: int, moe_ep: int
) -> bool:
    """Whether an aggregated row is an InferenceX database SGLang run whose tp_size is its
    ``--tensor-parallel-size`` (moe_tp) times its ``--ep-size`` (moe_ep): SGLang splits the
    experts of its TP ranks EP ways, so EP divides TP."""
    return (
        cell["backend"].strip().lower() == "sglang"
        and source.startswith("db-dump/")
        and attn_dp == 1
        and moe_ep > 1
        and tp == moe_tp * moe_ep
        and moe_tp % moe_ep == 0
    )


def _worker_shape(cell: dict[str, str], role: str, where: str) -> RecordedWorkers:
    tp = _silicon_int(cell, f"{role}_tp_size", where, default=None)
    if tp is None:
        raise ConfigError(f"{role}_tp_size is blank", where=f"{where}: {role}_tp_size")
    # 0: not recorded (InferenceX's dated exports); its config may tell them (_inferencex_workers).
    workers = _silicon_int(cell, f"{role}_num_workers", where, default=0)
    return RecordedWorkers(
        tp=tp,
        pp=_silicon_int(cell, f"{role}_pp_size", where) or 1,
        attn_dp=_silicon_int(cell, f"{role}_attention_dp_size", where) or 1,
        moe_tp=_silicon_int(cell, f"{role}_moe_tp_size", where) or 1,
        moe_ep=_silicon_int(cell, f"{role}_moe_ep_size", where) or 1,
        workers=workers,
    )


def _disaggregated_gpus(cell: dict[str, str], source: str, where: str) -> int | None:
    """The GPUs of a disaggregated run that an InferenceX dated export (``source_file=
    YYYY-MM-DD.csv``) labelled ``agg``, or None for a row that is what its label says.

    Such a row writes the whole deployment's GPUs as ``tp`` and ``moe_tp`` (no attention DP, no
    expert parallelism), the way the same file writes its disaggregated rows of December 2025;
    it is read as disaggregated when InferenceX declares a disaggregated deployment of exactly
    that many GPUs for its model, precision, system, backend and lengths
    (``inferencex.runs_on_gpus``). The gb200 DeepSeek-R1 rows of November 2025 (``tp 12`` to
    ``tp 72``) are so: each has a disaggregated twin in the file at the same lengths,
    concurrency and total."""
    if cell["mode"].strip().lower() != "agg":
        return None
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}\.csv", _source_field(source, "source_file")):
        return None
    try:
        tp = _silicon_int(cell, "tp_size", where, default=None)
        split = [_silicon_int(cell, f, where) for f in ("pp_size", "attention_dp_size", "moe_ep_size")]
        moe_tp = _silicon_int(cell, "moe_tp_size", where)
        run = _run_key(cell, where)
    except ConfigError:
        return None  # the row is reported as it is read
    if tp is None or tp == 1 or moe_tp != tp or split != [1, 1, 1]:
        return None
    return tp if inferencex.runs_on_gpus(run, tp) else None


def _silicon_fields(
    cell: dict[str, str],
    source: str,
    where: str,
    speculation: inferencex.Speculation | None = None,
    *,
    whole_gpus: int | None,
    sweep: inferencex.Sweep | None = None,
) -> dict[str, object]:
    """The fields of one silicon row past its names; raises ``ConfigError`` for a cell it lacks.

    The concurrency the client ran is the source's ``silicon_concurrency``; without it, the
    batch sizes times the ranks that shared it. ``batch_size`` is per attention-DP rank of one
    aggregated worker, so a concurrency that is a whole multiple of batch × attention DP
    ran on that many aggregated replicas. ``whole_gpus``: the row is a disaggregated run its
    export labelled aggregated, written as that many GPUs (``_disaggregated_gpus``).
    """
    mode = "disagg" if whole_gpus else cell["mode"].strip().lower()
    if mode not in ("agg", "disagg"):
        raise ConfigError(f"mode must be agg or disagg, but got {cell['mode']!r}", where=f"{where}: mode")
    recorded = _source_field(source, "silicon_concurrency")
    concurrency = (
        _int(recorded, field="silicon_concurrency", where=f"{where}: silicon_data_source")
        if recorded
        else None
    )
    fields: dict[str, object] = {}
    if mode == "agg":
        tp = _silicon_int(cell, "tp_size", where, default=None)
        if tp is None:
            raise ConfigError("tp_size is blank", where=f"{where}: tp_size")
        attn_dp = _silicon_int(cell, "attention_dp_size", where) or 1
        per_worker = _silicon_int(cell, "batch_size", where, default=None)
        per_worker = per_worker * attn_dp if per_worker is not None else None
        concurrency = concurrency or per_worker
        workers = 1
        if concurrency and per_worker and concurrency % per_worker == 0:
            workers = concurrency // per_worker
        moe_ep = _silicon_int(cell, "moe_ep_size", where) or 1
        if cell["backend"].strip().lower() == "vllm" and attn_dp > 1 and moe_ep == tp * attn_dp:
            # InferenceX's single-node vLLM recipes (MiniMax-M2.5 on H100 and B300) launch
            # `--tensor-parallel-size TP --enable-expert-parallel`, no data parallelism: the export
            # writes their EP_SIZE as attention DP and TP x EP_SIZE as the expert split (`tp 4,
            # attention_dp 4, moe_ep 16` for the rows InferenceX names `tp4_ep4`). vLLM's experts
            # then span the TP ranks.
            attn_dp, moe_ep = 1, tp
        moe_tp = _silicon_int(cell, "moe_tp_size", where) or 1
        if _sglang_tp_times_ep(cell, source, tp=tp, attn_dp=attn_dp, moe_tp=moe_tp, moe_ep=moe_ep):
            # InferenceX's results database writes a single-node SGLang run's
            # `--tensor-parallel-size TP --ep-size EP` as moe_tp TP, moe_ep EP and tp TP x EP
            # (`tp 16, moe_tp 4, moe_ep 4` for dsr1_fp4_b300.sh's TP4 EP4 on one 8-GPU node).
            # SGLang's experts then span the TP ranks, EP ways.
            tp, moe_tp = moe_tp, moe_tp // moe_ep
        fields.update(
            tp=tp,
            pp=_silicon_int(cell, "pp_size", where) or 1,
            attn_dp=attn_dp,
            moe_tp=moe_tp,
            moe_ep=moe_ep,
            workers=workers,
        )
    else:
        if whole_gpus:
            # Both roles written as the deployment's GPUs, worker counts not recorded.
            prefill = decode = RecordedWorkers(tp=whole_gpus, moe_tp=whole_gpus, workers=0)
        else:
            prefill, decode = _worker_shape(cell, "prefill", where), _worker_shape(cell, "decode", where)
        if not (prefill.workers and decode.workers):
            prefill, decode, taken = _inferencex_workers(
                cell, source, concurrency, prefill, decode, where, speculation, sweep
            )
            fields.update(taken)
        elif concurrency:
            run, image = _run_key(cell, where), _db_image(source)
            prefill, decode = _launched_split(run, image, concurrency, prefill, decode)
            decode, taken = _recorded_max_batch(run, image, concurrency, prefill, decode)
            fields.update(taken)
        batch = _silicon_int(cell, "decode_batch_size", where, default=None)
        concurrency = concurrency or (batch and batch * decode.attn_dp * decode.workers)
        fields.update(
            tp=decode.tp,
            pp=decode.pp,
            attn_dp=decode.attn_dp,
            moe_tp=decode.moe_tp,
            moe_ep=decode.moe_ep,
            prefill=prefill,
            decode=decode,
        )
    if not concurrency:
        raise ConfigError("concurrency not recorded", where=f"{where}: silicon_data_source")
    ttft, tpot = (_latency(cell[c], field=c, where=f"{where}: {c}") for c in SILICON_MEASURED)
    return fields | {
        "concurrency": concurrency,
        "measured_on": _day(_source_field(source, "measured"), where=f"{where}: silicon_data_source"),
        "precision": cell.get("precision", "").strip().lower(),
        "gemm_quant": cell.get("gemm_quant_mode", "").strip().lower(),
        "moe_quant": cell.get("moe_quant_mode", "").strip().lower(),
        "isl": _int(cell["isl"], field="isl", where=f"{where}: isl"),
        "osl": _int(cell["osl"], field="osl", where=f"{where}: osl"),
        "measured_ttft_ms": ttft,
        "measured_tpot_ms": tpot,
    }


def _run_key(cell: dict[str, str], where: str) -> inferencex.RunKey:
    """What InferenceX's entries are matched on first, as a silicon row writes it."""
    return inferencex.RunKey(
        model=cell["model_path"].strip(),
        precision=cell.get("precision", "").strip().lower(),
        system=cell["system"].strip(),
        backend=cell["backend"].strip().lower(),
        isl=_int(cell["isl"], field="isl", where=f"{where}: isl"),
        osl=_int(cell["osl"], field="osl", where=f"{where}: osl"),
    )


def _inferencex_workers(
    cell: dict[str, str],
    source: str,
    concurrency: int | None,
    prefill: RecordedWorkers,
    decode: RecordedWorkers,
    where: str,
    speculation: inferencex.Speculation | None,
    sweep: inferencex.Sweep | None = None,
) -> tuple[RecordedWorkers, RecordedWorkers, dict[str, object]]:
    """A disaggregated row without worker counts, as the InferenceX entry it matches ran
    (``aisimulate.fidelity.inferencex``), narrowed by what another record of its run says
    (``speculation``); raises ``ConfigError`` with the reason when none does."""

    def recorded(r: RecordedWorkers) -> tuple[int, int, int, int, int]:
        return (r.tp, r.pp, r.attn_dp, r.moe_tp, r.moe_ep)

    try:
        found = inferencex.resolve(
            _run_key(cell, where),
            concurrency=concurrency,
            image=_source_field(source, "image"),
            prefill=recorded(prefill),
            decode=recorded(decode),
            speculation=speculation,
            sweep=sweep,
        )
    except inferencex.Unresolved as err:
        aggregated = cell["mode"].strip().lower() == "agg"
        labelled = f"labelled agg, {prefill.tp} GPUs as tp: " if aggregated else ""
        raise ConfigError(
            f"{labelled}disaggregated worker counts not recorded; {err}", where=f"{where}: num_workers"
        ) from None
    prefill, decode = _recorded(found.prefill), _recorded(found.decode, max_batch=found.decode_max_batch)
    return prefill, decode, {"nextn": found.nextn, "workers_from": found.source}


def _shape(r: RecordedWorkers) -> inferencex.WorkerShape:
    return inferencex.WorkerShape(
        workers=r.workers, tp=r.tp, attention_dp=r.attn_dp, moe_tp=r.moe_tp, moe_ep=r.moe_ep
    )


def _recorded(s: inferencex.WorkerShape, *, pp: int = 1, max_batch: int | None = None) -> RecordedWorkers:
    """An InferenceX entry's role as a recorded one (``_shape`` the other way)."""
    return RecordedWorkers(
        tp=s.tp,
        pp=pp,
        attn_dp=s.attention_dp,
        moe_tp=s.moe_tp,
        moe_ep=s.moe_ep,
        workers=s.workers,
        max_batch=max_batch,
    )


def _db_image(source: str) -> str:
    """The container image of a row's source; the results database writes it as the source's
    last, unnamed field."""
    return (_source_field(source, "image") or source.rsplit(";", 1)[-1]).strip()


def _launched_split(
    run: inferencex.RunKey, image: str, concurrency: int, prefill: RecordedWorkers, decode: RecordedWorkers
) -> tuple[RecordedWorkers, RecordedWorkers]:
    """The roles of a row that records its workers, split as its launch script ran them where
    InferenceX's config declared another split (``inferencex.launched_split``); as recorded
    otherwise."""
    if prefill.pp != 1 or decode.pp != 1:
        return prefill, decode
    found = inferencex.launched_split(
        run, concurrency=concurrency, image=image, prefill=_shape(prefill), decode=_shape(decode)
    )
    if found is None:
        return prefill, decode
    # The entry matched each role's worker count, so only the split changes.
    return (
        _recorded(found[0], pp=prefill.pp, max_batch=prefill.max_batch),
        _recorded(found[1], pp=decode.pp, max_batch=decode.max_batch),
    )


def _recorded_max_batch(
    run: inferencex.RunKey, image: str, concurrency: int, prefill: RecordedWorkers, decode: RecordedWorkers
) -> tuple[RecordedWorkers, dict[str, object]]:
    """The decode role of a row that records its workers, capped at its InferenceX recipe's batch
    where one matches it (``inferencex.recorded_max_batch``); as recorded otherwise."""
    found = inferencex.recorded_max_batch(
        run, concurrency=concurrency, image=image, prefill=_shape(prefill), decode=_shape(decode)
    )
    if found is None or decode.pp != 1 or prefill.pp != 1:
        return decode, {}
    max_batch, entry = found
    return replace(decode, max_batch=max_batch), {"workers_from": entry}


_UNREAD: dict[str, object] = {
    "measured_on": None,
    "precision": "",
    "gemm_quant": "",
    "moe_quant": "",
    "isl": 1,
    "osl": 1,
    "concurrency": 1,
    "tp": 1,
    "pp": 1,
    "attn_dp": 1,
    "moe_tp": 1,
    "moe_ep": 1,
    "measured_ttft_ms": None,
    "measured_tpot_ms": None,
}


def _copy(cell: dict[str, str], where: str) -> inferencex.Copy | None:
    """A disaggregated row as ``inferencex.linked`` compares it; None for any other, or one that
    cannot be read (its own read says why)."""
    source = cell["silicon_data_source"].strip()
    recorded = _source_field(source, "silicon_concurrency")
    if cell["mode"].strip().lower() != "disagg" or not recorded:
        return None
    try:
        roles = _worker_shape(cell, "prefill", where), _worker_shape(cell, "decode", where)
        ttft, tpot = (_latency(cell[c], field=c, where=where) for c in SILICON_MEASURED)
        concurrency = _int(recorded, field="silicon_concurrency", where=where)
        run = _run_key(cell, where)
    except ConfigError:
        return None
    if ttft is None or tpot is None:
        return None
    return inferencex.Copy(
        id=cell["id"].strip(),
        run=run,
        concurrency=concurrency,
        ttft_ms=ttft,
        tpot_ms=tpot,
        day=_source_field(source, "measured")[:10],
        recorded=tuple((r.tp, r.pp, r.attn_dp, r.moe_tp, r.moe_ep) for r in roles),  # type: ignore[arg-type]
        deployment=(_shape(roles[0]), _shape(roles[1])) if all(r.workers for r in roles) else None,
    )


def _sweep_member(
    cell: dict[str, str], whole_gpus: int | None, where: str
) -> tuple[str, inferencex.RunKey, str, int, int] | None:
    """(id, run key, day, users, GPUs) of a dated export's disaggregated row that records neither
    image nor workers and writes its deployment's GPUs as both roles' ``tp`` (or was labelled
    ``agg`` with them, ``whole_gpus``); None for any other row (``inferencex.sweeps``)."""
    source = cell["silicon_data_source"].strip()
    users = _source_field(source, "silicon_concurrency")
    if not users or _source_field(source, "image") or not _source_field(source, "source_file"):
        return None
    try:
        gpus = whole_gpus
        if gpus is None and cell["mode"].strip().lower() == "disagg":
            roles = _worker_shape(cell, "prefill", where), _worker_shape(cell, "decode", where)
            written = {(r.tp, r.pp, r.attn_dp, r.moe_tp, r.moe_ep, r.workers) for r in roles}
            if len(written) == 1 and roles[0].tp == roles[0].moe_tp and not roles[0].workers:
                gpus = roles[0].tp
        if not gpus or gpus == 1:
            return None
        run = _run_key(cell, where)
        day = _source_field(source, "measured")[:10]
        return cell["id"].strip(), run, day, _int(users, field="silicon_concurrency", where=where), gpus
    except ConfigError:
        return None  # the row is reported as it is read


def _recorded_image(cell: dict[str, str], where: str) -> tuple[inferencex.RunKey, str, str] | None:
    """(run key, image, day) of a row that records its container image (``inferencex.sweeps``)."""
    source = cell["silicon_data_source"].strip()
    day = _source_field(source, "measured")[:10]
    image = _source_field(source, "image") if _source_field(source, "source_file") else _db_image(source)
    if not image or not day or "=" in image:
        return None
    try:
        return _run_key(cell, where), image, day
    except ConfigError:
        return None


def _read_silicon(path: Path, reader: csv.DictReader) -> list[MeasuredRow]:
    cells = [{k: (v or "") for k, v in raw.items() if k is not None} for raw in reader]
    # Other records of the same runs (the results database's, other exports') say what the
    # dated exports leave blank.
    linked = inferencex.linked(
        c for c in (_copy(cell, f"{path}:{line}") for line, cell in enumerate(cells, start=2)) if c
    )
    whole = [
        _disaggregated_gpus(c, c["silicon_data_source"].strip(), f"{path}:{n}")
        for n, c in enumerate(cells, 2)
    ]
    sweeps = inferencex.sweeps(
        (
            m
            for m in (
                _sweep_member(c, g, f"{path}:{n}")
                for n, (c, g) in enumerate(zip(cells, whole, strict=True), 2)
            )
            if m
        ),
        (r for r in (_recorded_image(c, f"{path}:{n}") for n, c in enumerate(cells, 2)) if r),
    )
    rows = []
    for line, (cell, whole_gpus) in enumerate(zip(cells, whole, strict=True), start=2):
        source = cell["silicon_data_source"].strip()
        row_id = cell["id"].strip() or f"line{line}"
        names = {
            "id": row_id,
            "line": line,
            "system": cell["system"].strip(),
            "backend": cell["backend"].strip().lower(),
            "backend_version": _version(cell.get("backend_version", "")),
            "model": cell["model_path"].strip(),
            "source": source,
            # Kept on a row that cannot be read too, so that its mode's coverage counts it.
            "mode": "disagg" if whole_gpus or cell["mode"].strip().lower() == "disagg" else "agg",
        }
        try:
            fields = _silicon_fields(
                cell,
                source,
                f"{path}:{line}",
                linked.get(row_id),
                whole_gpus=whole_gpus,
                sweep=sweeps.get(row_id),
            )
            rows.append(MeasuredRow(**names, **fields))  # type: ignore[arg-type]
        except ConfigError as err:
            rows.append(MeasuredRow(**names, **_UNREAD, problem=str(err)))  # type: ignore[arg-type]
    return rows


# How far a deployment's mean TPOT may fall as its users grow before its sweep contradicts itself.
# Not fitted: a pass only grows with the sequences in it, so on a fixed deployment the TPOT does
# not fall at all; repeated runs of one deployment agree within 2% (InferenceX's November and
# December runs of the same gb200 DeepSeek-R1 deployments, 51 of 55 pairs), a tenth of this.
SWEEP_TPOT_FALL = 0.2


def _sweep(row: MeasuredRow) -> tuple[object, ...] | None:
    """The benchmark task and deployment a row was measured on, when its source names the task
    (``gtl_task_id``, the AIConfigurator team's runs): rows sharing it are one deployment's
    concurrency sweep. None: the row names no task."""
    task = _source_field(row.source, "gtl_task_id")
    if not task or row.problem:
        return None
    file = _source_field(row.source, "source_file")
    run = (row.system, row.backend, row.model, row.mode, row.precision, row.isl, row.osl)
    return (file, task, *run, row.tp, row.pp, row.attn_dp, row.moe_tp, row.moe_ep)


def _contradicting_sweeps_skipped(rows: list[MeasuredRow]) -> list[MeasuredRow]:
    """The rows, with those of a concurrency sweep whose mean TPOT falls by more than
    ``SWEEP_TPOT_FALL`` as its users grow marked unreplayable: a closed loop on the deployment
    the rows record cannot measure that, so the sweep ran on something else (shared GPUs or
    hosts, a different deployment) that no row says."""
    sweeps: dict[tuple[object, ...], list[MeasuredRow]] = {}
    for row in rows:
        key = _sweep(row)
        if key is not None:
            sweeps.setdefault(key, []).append(row)
    problems: dict[int, str] = {}
    for members in sweeps.values():
        fall = _tpot_fall(members)
        if fall is not None:
            problems.update((id(r), fall) for r in members)
    return [replace(r, problem=problems[id(r)]) if id(r) in problems else r for r in rows]


def _tpot_fall(members: list[MeasuredRow]) -> str | None:
    """The largest fall of the mean TPOT from fewer users to more in one sweep, as a reason, when
    it exceeds ``SWEEP_TPOT_FALL``; None otherwise."""
    measured = sorted((r.concurrency, r.measured_tpot_ms) for r in members if r.measured_tpot_ms)
    worst: tuple[float, int, float, int, float] | None = None
    for i, (few, slow) in enumerate(measured):
        for many, fast in measured[i + 1 :]:
            fall = 1 - fast / slow
            if many > few and fall > SWEEP_TPOT_FALL and (worst is None or fall > worst[0]):
                worst = (fall, few, slow, many, fast)
    if worst is None:
        return None
    fall, few, slow, many, fast = worst
    task = _source_field(members[0].source, "gtl_task_id")
    return (
        f"its deployment's sweep ({task}) contradicts itself: mean TPOT {slow:.1f} ms at {few} users, "
        f"{fast:.1f} ms at {many} ({fall:.0%} less with more users), which no closed loop on the "
        "recorded deployment measures (a pass only grows with its sequences)"
    )


def _unnamed_trtllm_run(row: MeasuredRow) -> bool:
    """A replayable InferenceX TensorRT-LLM disaggregated row (results database or dated export)
    without a decode cap whose config no bundled InferenceX version or recipe names (Kimi-K2.5's
    GB200 runs). Other sources' runs were not launched from srt-slurm recipes."""
    if row.problem or row.mode != "disagg" or row.backend != "trtllm" or row.decode is None:
        return False
    dated = re.fullmatch(r"\d{4}-\d{2}-\d{2}\.csv", _source_field(row.source, "source_file"))
    if not (row.source.startswith("db-dump/") or dated):
        return False
    run = inferencex.RunKey(row.model, row.precision, row.system, row.backend, row.isl, row.osl)
    return row.decode.max_batch is None and not inferencex.names_run(run)


def _conventional_decode_caps(rows: list[MeasuredRow]) -> list[MeasuredRow]:
    """The rows, those of a TensorRT-LLM disaggregated config no bundled entry names capped at
    the decode batch its srt-slurm recipe would set (``inferencex.conventional_max_batch``) for
    the sweep it ran in: a results-database run's config (``config_id``, one deployment per
    lengths for its whole concurrency list, as InferenceX's entries are) at its largest
    concurrency; an export's work-in-progress row at its own, one recipe per concurrency, as
    the same export's GLM-5 rows ran (``inferencex.Entry.decode_batch``).

    Without the cap a replay decodes every user at once; Kimi-K2.5's rows measure the queue:
    users x decode time / (TTFT + decode time), the sequences decoding at once by Little's law,
    is 40.1 at 55 users on five TEP4 decode workers, 78.7 at 105 (8k prompts), 485 at 668 on
    four TEP8 (database runs: caps 40, 80, 512), and 10.1, 20.2, 40.2 at 15, 30, 55 users on
    the five TEP4 (work-in-progress runs: caps 10, 20, 40)."""

    def sweep(row: MeasuredRow) -> tuple[object, ...]:
        if not row.source.startswith("db-dump/"):
            return (row.id,)
        config = (_source_field(row.source, f) for f in ("config_id", "workflow_run_id"))
        return (*config, row.model, row.system, row.isl, row.osl, row.prefill, row.decode)

    capped = [_unnamed_trtllm_run(r) for r in rows]
    reach: dict[tuple[object, ...], int] = {}
    for row, cap in zip(rows, capped, strict=True):
        if cap:
            reach[sweep(row)] = max(reach.get(sweep(row), 0), row.concurrency)
    out = []
    for row, cap in zip(rows, capped, strict=True):
        if cap:
            assert row.decode is not None
            users = reach[sweep(row)]
            batch = inferencex.conventional_max_batch(users, row.decode.workers * row.decode.attn_dp)
            said = f"decode batch {batch}: the srt-slurm recipes' cap for a sweep to {users} users"
            row = replace(
                row,
                decode=replace(row.decode, max_batch=batch),
                workers_from="; ".join(w for w in (row.workers_from, said) if w),
            )
        out.append(row)
    return out


def read_measured(path: str | Path) -> list[MeasuredRow]:
    """All rows of a measured-benchmark CSV; a malformed cell raises ``ConfigError`` naming it
    (in AIConfigurator's silicon format, it marks that row's ``problem`` instead)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as err:
        raise ConfigError(f"cannot read measured benchmarks: {err.strerror}", where=str(path)) from None
    reader = csv.DictReader(text.splitlines())
    header = list(reader.fieldnames or [])
    if "silicon_data_source" in header:
        missing = [c for c in (*SILICON_REQUIRED, *SILICON_MEASURED) if c not in header]
        if missing:
            raise ConfigError(f"missing column(s) {', '.join(missing)}", where=f"{path}:1")
        return _conventional_decode_caps(_contradicting_sweeps_skipped(_read_silicon(path, reader)))
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ConfigError(f"missing column(s) {', '.join(missing)}", where=f"{path}:1")
    ttft_col, tpot_col = _measured_column(header, "ttft", path), _measured_column(header, "tpot", path)
    rows = []
    for line, raw in enumerate(reader, start=2):
        cell = {k: (v or "") for k, v in raw.items() if k is not None}

        def where(field: str, line: int = line) -> str:
            return f"{path}:{line}: {field}"

        for field in ("system", "backend", "model"):
            if not cell[field].strip():
                raise ConfigError(f"{field} must not be empty", where=where(field))
        rows.append(
            MeasuredRow(
                id=cell.get("id", "").strip() or f"line{line}",
                line=line,
                system=cell["system"].strip(),
                backend=cell["backend"].strip().lower(),
                backend_version=_version(cell.get("backend_version", "")),
                measured_on=_day(cell.get("measured", ""), where=where("measured")),
                model=cell["model"].strip(),
                precision=cell.get("precision", "").strip().lower(),
                gemm_quant=cell.get("gemm_quant", "").strip().lower(),
                moe_quant=cell.get("moe_quant", "").strip().lower(),
                isl=_int(cell["isl"], field="isl", where=where("isl")),
                osl=_int(cell["osl"], field="osl", where=where("osl")),
                concurrency=_int(cell["concurrency"], field="concurrency", where=where("concurrency")),
                tp=_int(cell["tp"], field="tp", where=where("tp")),
                pp=_int(cell.get("pp", ""), field="pp", where=where("pp"), default=1),
                attn_dp=_int(cell.get("attn_dp", ""), field="attn_dp", where=where("attn_dp"), default=1),
                moe_tp=_int(
                    cell.get("moe_tp", ""), field="moe_tp", where=where("moe_tp"), default=1, zero_is_one=True
                ),
                moe_ep=_int(
                    cell.get("moe_ep", ""), field="moe_ep", where=where("moe_ep"), default=1, zero_is_one=True
                ),
                measured_ttft_ms=_latency(cell[ttft_col], field=ttft_col, where=where(ttft_col)),
                measured_tpot_ms=_latency(cell[tpot_col], field=tpot_col, where=where(tpot_col)),
                source=cell.get("source_file", "").strip(),
            )
        )
    return rows
