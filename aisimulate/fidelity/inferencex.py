"""InferenceX's own declaration of its disaggregated runs, for the rows that do not record their
worker counts.

InferenceX's dated exports (``source_file=YYYY-MM-DD.csv`` in AIConfigurator's serving runs) leave
every disaggregated row's ``*_num_workers`` blank. InferenceX declares each multi-node
disaggregated benchmark it runs in ``.github/configs/nvidia-master.yaml`` of
https://github.com/SemiAnalysisAI/InferenceX (Apache-2.0): per model, precision, GPU and
framework, and per sequence length, entries of a concurrency list run on one deployment (workers,
TP, EP and attention DP per role, MTP or not). ``data/inferencex_disagg.json`` holds those entries
of every stored version of that file, each config with its commit, repository and container image
(extracted by ``benchmarks/extract_inferencex_disagg.py``): the image a row records picks the version
that ran it.

The exports write each role's split in a fixed way that loses part of it: the role's ``tp`` is
InferenceX's (the role's GPUs), attention DP is always 1, and both roles get the *prefill* role's
``ep`` as ``moe_ep`` where the role's GPUs hold it (``moe_tp`` = ``tp / moe_ep``). A row is matched
to the entries of its model, precision, system, backend, lengths, container image and concurrency
whose shapes export to what the row records; the entry's own shapes (decode EP and attention DP
included) and its MTP draft tokens are what ran. No entry, entries that disagree, or MTP whose
draft-token count the entry does not name leave the row unreplayed, with that reason. A row
that records no image is replayed only when every bundled version that has an entry for it gives
it the same deployment. Where InferenceX's results database holds the same run (``linked``), it
says which of an MTP and a plain entry ran it.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

TABLE = Path(__file__).parent / "data" / "inferencex_disagg.json"
# TensorRT-LLM recipe names (NVIDIA/srt-slurm, e.g. ``ctx1_gen4_tep8_batch16_eplb0_mtp0.yaml``)
# carry the decode workers' ``max_batch_size`` (per attention-DP rank) as ``batch<N>``.
RECIPE_BATCH = re.compile(r"_batch(\d+)(?:_|\.|$)")
# They also name the decode workers' split (``gen4_tep8``: tensor-parallel attention, experts over
# the 8 GPUs; ``gen1_dep32``: attention data-parallel over the 32 GPUs; the recipes set the decode
# role's ``enable_attention_dp`` to match), which is what ran where the config's ``dp-attn`` field
# says otherwise.
RECIPE_DECODE_SPLIT = re.compile(r"(?:^|_)gen\d+_(tep|dep)\d+(?:_|\.|$)")
# Launch scripts that fix a worker's split whatever the config's ``tp``/``ep``/``dp-attn`` say.
# InferenceX's December SGLang GB200 configs pick Dynamo's
# ``examples/backends/sglang/slurm_jobs/scripts/gb200-fp{4,8}/disagg/<SCRIPT_MODE>.sh`` (their
# comment: "tp, ep, and dp-attn do nothing because they are hardcoded"); the low-latency ones
# launch both roles as plain tensor parallelism over the worker's GPUs
# (``--tensor-parallel-size <GPUs> --data-parallel-size 1 --expert-parallel-size 1``), the
# others attention DP with the experts over every GPU (``--tp-size``, ``--dp-size`` and
# ``--ep-size`` the GPUs, ``--enable-dp-attention``), as the config's ``dp-attn`` reads.
TENSOR_PARALLEL_SCRIPTS = frozenset({"1k1k-low-latency.sh", "8k1k-low-latency.sh"})
# The NVIDIA/srt-slurm recipes (Apache-2.0) that launched exported runs no InferenceX config names
# (the 2026-03-25 export's work-in-progress GB200 GLM-5 rows, measured 2026-04-02 on the recipes'
# 2026-04-02 container). That export writes those rows with each role's GPUs as its ``tp`` and
# ``moe_tp`` and ``moe_ep`` 1 (ids ``..._tp4_0_ep_...``), whatever expert split the recipe ran.
RECIPES_REPOSITORY = "NVIDIA/srt-slurm"


@dataclass(frozen=True, slots=True)
class RoleEntry:
    """One role of an InferenceX entry as its config writes it: GPUs per worker (``tp``), the
    expert split over them (``ep``), attention data-parallel over them or not."""

    workers: int
    tp: int
    ep: int
    attention_dp: bool

    @property
    def gpus(self) -> int:
        """GPUs per worker. The early SGLang GB200 configs write ``tp: 1`` and the worker's GPUs as
        ``ep`` (their launch script fixes the split; its comments name DEP4 to DEP48 workers)."""
        return max(self.tp, self.ep)

    def exported(self, prefill_ep: int) -> tuple[int, int, int, int, int]:
        """(tp, pp, attention DP, moe_tp, moe_ep) as the dated exports write this role: the
        prefill ``ep`` as far as the role's ``tp`` holds it."""
        return (self.tp, 1, 1, max(self.tp // prefill_ep, 1), min(prefill_ep, self.tp))

    def tensor_parallel(self) -> WorkerShape:
        """The role as a plain tensor-parallel worker over its GPUs, experts split the same way."""
        return WorkerShape(workers=self.workers, tp=self.gpus, attention_dp=1, moe_tp=self.gpus, moe_ep=1)

    def shape(self) -> WorkerShape:
        """The role in our terms: a worker of ``tp x attention_dp`` GPUs, experts over all of them."""
        attention_dp = self.gpus if self.attention_dp else 1
        return WorkerShape(
            workers=self.workers,
            tp=self.gpus // attention_dp,
            attention_dp=attention_dp,
            moe_tp=self.gpus // self.ep,
            moe_ep=self.ep,
        )


@dataclass(frozen=True, slots=True)
class WorkerShape:
    workers: int
    tp: int
    attention_dp: int
    moe_tp: int
    moe_ep: int


@dataclass(frozen=True, slots=True)
class Entry:
    config: str  # InferenceX's config name, e.g. dsr1-fp4-gb200-dynamo-trt
    model: str
    system: str
    backend: str
    precision: str
    image: str
    isl: int
    osl: int
    concurrency: tuple[int, ...]
    prefill: RoleEntry
    decode: RoleEntry
    spec_decoding: str  # "mtp" or "none"
    mtp_draft_tokens: int | None  # None: no MTP, or MTP whose recipe does not name the count
    recipe: str  # the recipe file the entry launches ("" when it names none)
    commit: str = ""  # the version of InferenceX's config the entry is from
    users_per_decode_worker: bool = False  # the client ran each listed concurrency per decode worker
    repository: str = ""  # where the entry is from (InferenceX's file, or RECIPES_REPOSITORY)
    # (concurrency, decode max_batch_size) of the per-concurrency recipes an srt-slurm ``allconc``
    # recipe merges, as its comment records them; empty where it merges none.
    batch_at: tuple[tuple[int, int], ...] = ()

    def exports_to(self, prefill: tuple[int, ...], decode: tuple[int, ...]) -> bool:
        """Whether a row recording these (tp, pp, attention DP, moe_tp, moe_ep) per role is this
        entry as an export writes it: each role's own GPUs (``RoleEntry.exported``), or the
        deployment's GPUs (every prefill and decode worker's together) as both roles' ``tp`` and
        ``moe_tp``, the way the 2026-04-06 export writes the runs of December 2025."""
        ep = self.prefill.ep
        if self.repository == RECIPES_REPOSITORY:
            return (prefill, decode) == tuple((r.gpus, 1, 1, r.gpus, 1) for r in (self.prefill, self.decode))
        if (self.prefill.exported(ep), self.decode.exported(ep)) == (prefill, decode):
            return True
        whole = (self.total_gpus, 1, 1, self.total_gpus, 1)
        return prefill == whole and decode == whole

    @property
    def total_gpus(self) -> int:
        """Every prefill and decode worker's GPUs together."""
        return self.prefill.workers * self.prefill.gpus + self.decode.workers * self.decode.gpus

    def runs_at(self, users: int) -> bool:
        """Whether the client ran ``users`` concurrent requests against this entry."""
        scale = self.decode.workers if self.users_per_decode_worker else 1
        return any(users == c * scale for c in self.concurrency)

    def decode_batch(self, users: int) -> int | None:
        """The decode ``max_batch_size`` per rank the run at ``users`` had: the per-concurrency
        recipe's an ``allconc`` recipe merges for that concurrency, else the recipe name's.

        The 2026-03-25 export's GLM-5 rows ran the merged recipes' batches, not the merged cap:
        users x decode time / (TTFT + decode time), the sequences decoding at once by Little's
        law, is 10.1, 20.3 and 39.8 at 15, 30 and 50 users on five TEP4 workers (batch 2, 4, 8)
        and 128.5, 256.0 and 503.9 at 180, 360 and 616 on four TEP8 (batch 32, 64, 128), where
        the ``allconc`` caps of 40 and 512 would leave no one waiting below 50 and 616 users."""
        merged = dict(self.batch_at)
        if users in merged:
            return merged[users]
        return recipe_max_batch(self.recipe)

    @property
    def script_launched(self) -> bool:
        """Whether a launch script picked by the entry's ``SCRIPT_MODE`` (``<mode>.sh``) fixed its
        split, whatever the config's fields say (InferenceX's December SGLang GB200 configs)."""
        return self.recipe.endswith(".sh")

    def shapes(self) -> tuple[WorkerShape, WorkerShape]:
        """(prefill, decode) as launched: the config's split, or plain tensor parallelism where the
        entry's launch script fixes that (``TENSOR_PARALLEL_SCRIPTS``); a TensorRT-LLM recipe
        naming its decode workers TEP or DEP (``RECIPE_DECODE_SPLIT``) sets their attention DP."""
        if self.recipe in TENSOR_PARALLEL_SCRIPTS:
            return self.prefill.tensor_parallel(), self.decode.tensor_parallel()
        decode = self.decode
        named = recipe_decode_attention_dp(self.recipe)
        if named is not None and named != decode.attention_dp:
            decode = replace(decode, attention_dp=named)
        return self.prefill.shape(), decode.shape()

    @property
    def provenance(self) -> str:
        """Which config version and recipe the entry is, for the row's ``workers_from``."""
        if self.repository == RECIPES_REPOSITORY:
            return f"{self.repository}@{self.commit[:8]} {self.recipe}"
        return f"InferenceX {self.config}@{self.commit[:8]} {self.recipe}".strip()

    @property
    def ran(self) -> tuple[RoleEntry, RoleEntry, str, int | None]:
        """What a replay takes from the entry; entries that agree on it are one deployment."""
        return (self.prefill, self.decode, self.spec_decoding, self.mtp_draft_tokens)

    def describe(self) -> str:
        def role(r: RoleEntry) -> str:
            return f"{r.workers}x(tp{r.tp} ep{r.ep}{' dp-attn' if r.attention_dp else ''})"

        mtp = f", mtp {self.mtp_draft_tokens or '?'}" if self.spec_decoding == "mtp" else ""
        name = Path(self.recipe).name or self.config
        return f"{name}: prefill {role(self.prefill)}, decode {role(self.decode)}{mtp}"


@dataclass(frozen=True, slots=True)
class Resolved:
    """The deployment an InferenceX row ran, from the one entry (or agreeing entries) it matches."""

    prefill: WorkerShape
    decode: WorkerShape
    nextn: int  # MTP draft tokens per decode step; 0 without speculative decoding
    source: str  # which entry: InferenceX config and recipe
    decode_max_batch: int | None = None  # the recipe's decode max_batch_size per rank, if it names one


def recipe_max_batch(recipe: str) -> int | None:
    """The decode ``max_batch_size`` a recipe's name declares (``..._batch16_...``), or None."""
    found = RECIPE_BATCH.search(recipe)
    return int(found[1]) if found else None


def conventional_max_batch(users: int, decode_ranks: int) -> int:
    """The decode ``max_batch_size`` per rank an NVIDIA/srt-slurm TensorRT-LLM recipe sets for a
    sweep that reaches ``users``, where no recipe of the run is known: the largest power of two
    whose total over the decode ranks (workers x attention DP) does not exceed the users.

    The recipes size the cap so: 266 of the 338 TensorRT-LLM recipe entries bundled here name
    exactly that batch for their largest concurrency (59 a larger one, 13 a smaller one, mostly
    a batch of 48, 192, 384 or 768 that is not a power of two), and every concurrency an
    ``allconc`` recipe says it merged ran at it (``Entry.batch_at``: 2 at 15 users on five
    workers, 32 at 180 on four, ...)."""
    per_rank = max(users // decode_ranks, 1)
    return 1 << (per_rank.bit_length() - 1)


def names_run(run: RunKey, entries: tuple[Entry, ...] | None = None) -> bool:
    """Whether any bundled entry is of the run's model (as the results database names it too),
    precision, system, backend and lengths."""
    entries = bundled_entries() if entries is None else entries
    db = replace(run, model=RESULTS_DB_MODEL.get(run.model, run.model))
    return any(run.names(e) or db.names(e) for e in entries)


def recipe_decode_attention_dp(recipe: str) -> bool | None:
    """Whether a recipe's name declares attention-DP decode workers (``..._gen1_dep32_...``:
    True; ``..._gen4_tep8_...``: False), or None where it names neither."""
    found = RECIPE_DECODE_SPLIT.search(recipe)
    return None if found is None else found[1] == "dep"


@dataclass(frozen=True, slots=True)
class RunKey:
    """What a measured row is matched to InferenceX's entries on first: model, precision, system,
    backend and lengths, as both write them."""

    model: str
    precision: str
    system: str
    backend: str
    isl: int
    osl: int

    def names(self, e: Entry) -> bool:
        return (e.model, e.precision, e.system, e.backend, e.isl, e.osl) == (
            self.model,
            self.precision,
            self.system,
            self.backend,
            self.isl,
            self.osl,
        )


class Unresolved(ValueError):
    """Why a row's workers cannot be taken from InferenceX's entries."""


class NoEntry(Unresolved):
    """No entry of the row's config version runs its concurrency on its recorded shapes."""


# The results database (``db-dump/`` rows) holds InferenceX's runs without speculative decoding
# only. Of its 92 development rows whose image, concurrency and workers per role a bundled entry
# names, 67 match only plain entries, 24 a plain and an MTP entry, and one (GB200 FP4 1k/8k at 7
# users) only an MTP entry, whose plain twin lists 5 users at 0004cf5f. Of the 27 pairs of runs
# of one deployment, concurrency and measurement time in the dated exports (an MTP entry's and a
# plain entry's), it holds one run in 17 and neither in 10, never both.


@dataclass(frozen=True, slots=True)
class Copy:
    """A measured row as ``linked`` compares it with the other records of the same run."""

    id: str
    run: RunKey  # the model as the row writes it (the results database: DeepSeek-V3 for R1)
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    day: str  # the day it was measured (``YYYY-MM-DD``)
    recorded: tuple[tuple[int, ...], tuple[int, ...]]  # (tp, pp, attention DP, moe_tp, moe_ep) per role
    deployment: tuple[WorkerShape, WorkerShape] | None  # recorded workers and split; None: counts blank


@dataclass(frozen=True, slots=True)
class Speculation:
    """What another record of a row's run says of it: MTP or not, and, from the results database,
    the deployment it recorded."""

    mtp: bool
    deployment: tuple[WorkerShape, WorkerShape] | None
    row: str  # the results database's row of the run (mtp False) or of its plain twin (mtp True)
    # False: not this run, but the database's run of the same model, lengths and concurrency on as
    # many GPUs per role (what a row whose config no bundled version holds can go by).
    same_run: bool = True

    @property
    def says(self) -> str:
        """Where it comes from, for the row's ``workers_from``."""
        if not self.same_run:
            return f"as the results database's run at its concurrency and GPUs per role, row {self.row}"
        if self.mtp:
            return f"MTP: its plain twin is results database row {self.row}"
        return f"no MTP: results database row {self.row}"

    def keeps(self, found: list[Entry]) -> list[Entry]:
        """The matching entries that can have run as that record says: MTP ones, or plain ones of
        the recorded deployment's workers and GPUs per role (an entry's own split may differ from
        the database's, e.g. for script-launched SGLang workers)."""
        if self.mtp:
            return [e for e in found if e.spec_decoding == "mtp"]
        assert self.deployment is not None
        sizes = _sizes(self.deployment)
        return [e for e in found if e.spec_decoding == "none" and _sizes(e.shapes()) == sizes]


def _sizes(roles: tuple[WorkerShape, WorkerShape]) -> tuple[tuple[int, int], ...]:
    return tuple((r.workers, r.tp * r.attention_dp) for r in roles)


def _gpus(c: Copy) -> tuple[int, ...]:
    """GPUs per role: the recorded deployment's, or the exported ``tp`` (the role's GPUs)."""
    if c.deployment is not None:
        return tuple(r.tp * r.attention_dp for r in c.deployment)
    return tuple(role[0] for role in c.recorded)


def _digits(ms: float) -> str:
    """A measured mean to 12 significant digits: the exports write the same float with its last
    digits rounded differently (13693.258112009305 and ...304)."""
    return f"{ms:.12g}"


def linked(copies: Iterable[Copy]) -> dict[str, Speculation]:
    """What other records of the same runs say of the rows that leave their worker counts blank.

    One measurement is one run, concurrency, mean TTFT and mean TPOT to 12 digits: InferenceX's
    dated exports and its results database write the same runs with the same numbers. A row whose
    measurement the results database holds ran without MTP on the deployment the database
    recorded. Exactly two measurements of one run key, concurrency, day and GPUs per role are the
    runs of two entries of one sweep (an MTP entry's and a plain entry's); where the database
    holds one of them, the other ran with MTP. Every copy of a measurement takes the same.
    """
    measurements: defaultdict[tuple, list[Copy]] = defaultdict(list)
    for c in copies:
        run = replace(c.run, model=RESULTS_DB_MODEL.get(c.run.model, c.run.model))
        measurements[(run, c.concurrency, _digits(c.ttft_ms), _digits(c.tpot_ms))].append(c)
    said: dict[tuple, Speculation] = {}
    for key, found in measurements.items():
        recorded = {c.deployment: c.id for c in found if c.deployment is not None}
        if len(recorded) == 1:
            ((deployment, row),) = recorded.items()
            said[key] = Speculation(mtp=False, deployment=deployment, row=row)
    sweeps: defaultdict[tuple, set[tuple]] = defaultdict(set)
    for key, found in measurements.items():
        for c in found:
            sweeps[(key[0], c.concurrency, c.day, _gpus(c))].add(key)
    for keys in sweeps.values():
        plain = [k for k in keys if k in said and not said[k].mtp]
        if len(keys) == 2 and len(plain) == 1:
            (other,) = keys - set(plain)
            said[other] = Speculation(mtp=True, deployment=None, row=said[plain[0]].row)
    taken = {
        c.id: said[key]
        for key, found in measurements.items()
        if key in said
        for c in found
        if c.deployment is None
    }
    return taken | _same_search(measurements, taken)


def _same_search(
    measurements: dict[tuple, list[Copy]], taken: dict[str, Speculation]
) -> dict[str, Speculation]:
    """For the rest of the rows without counts: the deployment of the results database's runs at
    the same run key and concurrency whose GPUs per role are the row's recorded ``tp``, where they
    agree on one. Kimi-K2.5's work-in-progress GB200 TensorRT-LLM rows of the 2026-03-25 export
    (measured 2026-04-02) ran the concurrencies the database holds for its 2026-04-18 runs (5, 15,
    30, 55 users on TP4 decode workers, 192, 360, 668 on TP8, ...), a config no bundled version of
    InferenceX's file names."""
    database: defaultdict[tuple, set[tuple[tuple[WorkerShape, WorkerShape], str]]] = defaultdict(set)
    for (run, users, _, _), found in measurements.items():
        for c in found:
            if c.deployment is not None:
                database[(run, users, _gpus(c))].add((c.deployment, c.id))
    out = {}
    for (run, users, _, _), found in measurements.items():
        for c in found:
            if c.deployment is not None or c.id in taken:
                continue
            ran = database.get((run, users, _gpus(c)), set())
            if len({deployment for deployment, _ in ran}) == 1:
                deployment, row = min(ran, key=lambda d: d[1])
                out[c.id] = Speculation(mtp=False, deployment=deployment, row=row, same_run=False)
    return out


def _role(raw: dict) -> RoleEntry:
    return RoleEntry(
        workers=int(raw["workers"]),
        tp=int(raw["tp"]),
        ep=int(raw["ep"]),
        attention_dp=bool(raw["attention_dp"]),
    )


def parse_table(table: dict) -> tuple[Entry, ...]:
    """The entries of a table in ``inferencex_disagg.json``'s layout."""
    entries = []
    for config in table["configs"]:
        for raw in config["entries"]:
            entries.append(
                Entry(
                    config=config["config"],
                    model=config["model"],
                    system=config["system"],
                    backend=config["backend"],
                    precision=config["precision"],
                    image=config["image"],
                    isl=int(raw["isl"]),
                    osl=int(raw["osl"]),
                    concurrency=tuple(int(c) for c in raw["concurrency"]),
                    prefill=_role(raw["prefill"]),
                    decode=_role(raw["decode"]),
                    spec_decoding=raw["spec_decoding"],
                    mtp_draft_tokens=raw["mtp_draft_tokens"],
                    recipe=raw["recipe"],
                    commit=config.get("commit", ""),
                    users_per_decode_worker=bool(config.get("users_per_decode_worker", False)),
                    repository=config.get("repository", ""),
                    batch_at=tuple((int(c), int(b)) for c, b in raw.get("batch_at", ())),
                )
            )
    return tuple(entries)


@cache
def bundled_entries() -> tuple[Entry, ...]:
    return parse_table(json.loads(TABLE.read_text(encoding="utf-8")))


def same_image(a: str, b: str) -> bool:
    """Container references as InferenceX writes them (``nvcr.io#nvidia/...`` is ``nvcr.io/nvidia/...``)."""
    return a.replace("#", "/").strip() == b.replace("#", "/").strip()


def resolve(
    run: RunKey,
    *,
    concurrency: int | None,
    image: str,
    prefill: tuple[int, int, int, int, int],
    decode: tuple[int, int, int, int, int],
    entries: tuple[Entry, ...] | None = None,
    speculation: Speculation | None = None,
    sweep: Sweep | None = None,
) -> Resolved:
    """The deployment of a disaggregated InferenceX row, from the entries matching it.

    ``prefill``/``decode`` are the row's recorded (tp, pp, attention DP, moe_tp, moe_ep). Raises
    ``Unresolved`` with the reason when no entry, or entries that disagree, match.
    ``speculation``: what another record of the same run says of it (``linked``); it keeps the
    matching entries that ran as that record says. ``sweep``: what the config's other rows say
    of the version that ran a row recording no image (``Sweep``).
    """
    entries = bundled_entries() if entries is None else entries
    what = f"{run.model} {run.precision} on {run.system} ({run.backend}) at {run.isl}/{run.osl}"
    same = [e for e in entries if run.names(e)]
    if not same and speculation is not None and speculation.deployment is not None:
        prefill_shape, decode_shape = speculation.deployment
        return Resolved(prefill=prefill_shape, decode=decode_shape, nextn=0, source=speculation.says)
    if not same:
        raise Unresolved(f"no InferenceX disaggregated entry for {what}")
    if not image:
        return _resolve_any_version(
            run,
            same,
            concurrency=concurrency,
            prefill=prefill,
            decode=decode,
            speculation=speculation,
            sweep=sweep,
        )
    ran = [e for e in same if same_image(e.image, image)]
    if not ran:
        images = ", ".join(sorted({e.image for e in same}))
        raise Unresolved(f"InferenceX's config runs {images}, not the row's {image}")
    if concurrency is None:
        raise Unresolved("concurrency not recorded")
    found = [e for e in ran if e.runs_at(concurrency) and e.exports_to(prefill, decode)]
    said = ""
    if speculation is not None and speculation.same_run:
        kept = speculation.keeps(found)
        if not kept and speculation.deployment is not None:
            # No entry of this version names the deployment the database recorded for the run.
            prefill_shape, decode_shape = speculation.deployment
            return Resolved(prefill=prefill_shape, decode=decode_shape, nextn=0, source=speculation.says)
        found, said = (kept, f" ({speculation.says})") if kept else (found, "")
    if not found:
        raise NoEntry("no InferenceX entry at the row's concurrency with its per-role shapes")
    if len({e.ran for e in found}) > 1:
        raise Unresolved(
            f"ambiguous: {len(found)} InferenceX entries match ({'; '.join(e.describe() for e in found)})"
        )
    entry = found[0]
    if entry.spec_decoding == "mtp" and entry.mtp_draft_tokens is None:
        raise Unresolved(
            f"MTP with a number of draft tokens InferenceX's entry does not name ({entry.describe()})"
        )
    prefill_shape, decode_shape = entry.shapes()
    return Resolved(
        prefill=prefill_shape,
        decode=decode_shape,
        nextn=entry.mtp_draft_tokens or 0,
        source=entry.provenance + said,
        decode_max_batch=entry.decode_batch(concurrency),
    )


def _resolve_any_version(
    run: RunKey,
    same: list[Entry],
    *,
    concurrency: int | None,
    prefill: tuple[int, int, int, int, int],
    decode: tuple[int, int, int, int, int],
    speculation: Speculation | None,
    sweep: Sweep | None,
) -> Resolved:
    """A row that records no container image: which version of the config ran it is unknown.
    Each bundled version (one per image) is tried; a version with no entry at the row's
    concurrency on its shapes cannot have run it, nor one without an entry at every (users,
    GPUs) its day's sweep ran (where some version has them all), nor one that came after the
    row's day (``Sweep.excludes``); the rest must resolve it to one deployment (workers,
    shapes, draft tokens, decode cap) for it to be replayed."""
    unknown = "no container image recorded, so which version of InferenceX's config ran is unknown"
    images: dict[str, str] = {}
    for e in same:
        images.setdefault(e.image.replace("#", "/").strip(), e.image)
    if sweep is not None:
        covering = {i: image for i, image in images.items() if _runs_sweep(same, image, sweep.runs)}
        images = covering or images
        earlier = {i: image for i, image in images.items() if not sweep.excludes(image, images.values())}
        images = earlier or images
    found: list[Resolved] = []
    for image in images.values():
        try:
            found.append(
                resolve(
                    run,
                    concurrency=concurrency,
                    image=image,
                    prefill=prefill,
                    decode=decode,
                    entries=tuple(same),
                    speculation=speculation,
                )
            )
        except NoEntry:
            continue
        except Unresolved as err:
            raise Unresolved(f"{unknown} (the version on {image}: {err})") from None
    if not found:
        raise NoEntry(
            f"{unknown}, and no version has an entry at the row's concurrency with its per-role shapes"
        )
    if len({replace(r, source="") for r in found}) > 1:
        raise Unresolved(
            f"{unknown} ({len(found)} versions run different deployments at the row's concurrency)"
        )
    return replace(found[0], source=" / ".join(r.source for r in found))


def _runs_sweep(same: list[Entry], image: str, runs: frozenset[tuple[int, int]]) -> bool:
    """Whether the version of the config on ``image`` has an entry at each (users, GPUs)."""
    version = [e for e in same if same_image(e.image, image)]
    return all(any(e.runs_at(users) and e.total_gpus == gpus for e in version) for users, gpus in runs)


@dataclass(frozen=True, slots=True)
class Sweep:
    """What the other rows of a config say of the version of InferenceX's file that ran a row
    recording no image: ``runs``, the (users, GPUs) of every such row of its run key and
    ``day``; ``images``, each image the config's rows do record, with the first and last day
    they ran it."""

    day: str
    runs: frozenset[tuple[int, int]] = frozenset()
    images: tuple[tuple[str, str, str], ...] = ()

    def excludes(self, image: str, candidates: Iterable[str]) -> bool:
        """Whether the version on ``image`` came after the day: another candidate's image was
        still run on or after the row's day, and ``image`` first ran after that. One config
        names one image at a time and its versions follow one another, so the row's day fell
        before the version on ``image`` existed."""
        days = {i.replace("#", "/").strip(): (first, last) for i, first, last in self.images}
        mine = days.get(image.replace("#", "/").strip())
        if mine is None or not self.day:
            return False
        for other in candidates:
            theirs = days.get(other.replace("#", "/").strip())
            if theirs is not None and mine[0] > theirs[1] >= self.day:
                return True
        return False


def sweeps(
    rows: Iterable[tuple[str, RunKey, str, int, int]], recorded: Iterable[tuple[RunKey, str, str]]
) -> dict[str, Sweep]:
    """Each row's ``Sweep``. ``rows``: (row id, run key, day, users, GPUs) of the rows that record
    neither image nor workers; ``recorded``: (run key, image, day) of the rows that record their
    image (their model, precision, system and backend name the config, whatever the lengths).

    One day's runs of one config are one version of InferenceX's file: the gb200 SGLang
    DeepSeek-R1 FP8 8k/1k rows of 2025-12-05 ran 128 to 4,096 users on 72 GPUs, which only the
    November version (``sglang-runtime:0.5.1-rc0.pre1``, 6 DEP8 prefill workers and a DEP24
    decode worker) lists; the later versions list 512 users and up. That image was still run on
    2025-12-15, and the December version's ``v0.5.5.post2`` first on 2025-12-19, so the
    1k/1k rows of 2025-12-05 did not run the December version either."""
    rows = list(rows)
    days: defaultdict[tuple[RunKey, str], set[tuple[int, int]]] = defaultdict(set)
    for _, run, day, users, gpus in rows:
        days[(run, day)].add((users, gpus))
    spans: defaultdict[tuple, dict[str, tuple[str, str]]] = defaultdict(dict)
    for run, image, day in recorded:
        config = (RESULTS_DB_MODEL.get(run.model, run.model), run.precision, run.system, run.backend)
        first, last = spans[config].get(image, (day, day))
        spans[config][image] = (min(first, day), max(last, day))

    def images(run: RunKey) -> tuple[tuple[str, str, str], ...]:
        found = spans.get((run.model, run.precision, run.system, run.backend), {})
        return tuple((image, first, last) for image, (first, last) in sorted(found.items()))

    return {
        row: Sweep(day=day, runs=frozenset(days[(run, day)]), images=images(run))
        for row, run, day, _, _ in rows
    }


# InferenceX's results database writes its DeepSeek-R1 configs' runs (ids ``dsr1_...``) as
# DeepSeek-V3, the same architecture.
RESULTS_DB_MODEL = {"deepseek-ai/DeepSeek-V3": "deepseek-ai/DeepSeek-R1"}


def _db_run_entries(
    run: RunKey, concurrency: int, image: str, entries: tuple[Entry, ...] | None
) -> list[Entry]:
    """The entries a results-database row could have run: its model (as the database names it),
    precision, system, backend and lengths, its image and its concurrency."""
    entries = bundled_entries() if entries is None else entries
    run = replace(run, model=RESULTS_DB_MODEL.get(run.model, run.model))
    return [e for e in entries if run.names(e) and same_image(e.image, image) and e.runs_at(concurrency)]


def recorded_max_batch(
    run: RunKey,
    *,
    concurrency: int,
    image: str,
    prefill: WorkerShape,
    decode: WorkerShape,
    entries: tuple[Entry, ...] | None = None,
) -> tuple[int, str] | None:
    """The decode ``max_batch_size`` per rank of a row that records its workers, and the entry it
    is from: the recipe batch of the entries run at its model, precision, system, backend,
    lengths, image and concurrency on its exact deployment, when they all name the same one.

    Its own ``decode_batch_size`` cannot say: the results database writes the users' share of a
    decode rank there (concurrency / (decode workers x attention DP), on every row), not the cap.
    Only plain entries count: the database holds runs without MTP (``linked``)."""
    found = [
        e
        for e in _db_run_entries(run, concurrency, image, entries)
        if e.spec_decoding == "none" and e.shapes() == (prefill, decode)
    ]
    batches = {e.decode_batch(concurrency) for e in found}
    if len(batches) != 1 or None in batches:
        return None
    entry = found[0]
    return batches.pop(), f"InferenceX {entry.config}@{entry.commit[:8]} {entry.recipe}".strip()


def launched_split(
    run: RunKey,
    *,
    concurrency: int,
    image: str,
    prefill: WorkerShape,
    decode: WorkerShape,
    entries: tuple[Entry, ...] | None = None,
) -> tuple[WorkerShape, WorkerShape] | None:
    """The roles of a row that records its workers, as its launch script ran them, where the
    config's split was not what ran (``TENSOR_PARALLEL_SCRIPTS`` and their December SGLang GB200
    configs): the results database writes those rows' splits from the config's placeholder
    fields (``tp 1``, attention DP and a tensor-split MoE over the worker's GPUs). Matched on the
    row's model, precision, system, backend, lengths, image and concurrency, and each role's
    workers and GPUs; None when no such entry matches or the matches disagree."""

    def size(shape: WorkerShape) -> tuple[int, int]:
        return shape.workers, shape.tp * shape.attention_dp

    found = {
        e.shapes()
        for e in _db_run_entries(run, concurrency, image, entries)
        if e.script_launched
        and (size(e.prefill.shape()), size(e.decode.shape())) == (size(prefill), size(decode))
    }
    return found.pop() if len(found) == 1 else None


def runs_on_gpus(run: RunKey, gpus: int, *, entries: tuple[Entry, ...] | None = None) -> bool:
    """Whether InferenceX declares a disaggregated deployment of exactly ``gpus`` GPUs (every
    prefill and decode worker's together) for the row's model, precision, system, backend and
    lengths, in any bundled version of its config.

    The 2026-04-06 export writes some multi-node disaggregated runs of November 2025 as
    aggregated rows with that total as ``tp`` and ``moe_tp`` (gb200 DeepSeek-R1, ``tp 12`` to
    ``tp 72``): every one of them has a disaggregated twin in the same file, written the same way
    (lengths, concurrency, total), measured two to three weeks later."""
    entries = bundled_entries() if entries is None else entries
    return any(run.names(e) and e.total_gpus == gpus for e in entries)
