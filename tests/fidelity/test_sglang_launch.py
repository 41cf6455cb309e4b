"""How InferenceX's SGLang GB200 runs were launched: the split their launch scripts fixed, and the
engine settings of their recipes."""

from dataclasses import replace
from pathlib import Path

from aisimulate.fidelity import build_case, read_measured
from aisimulate.fidelity.inferencex import RunKey, WorkerShape, launched_split, parse_table, resolve
from aisimulate.fidelity.sglang_recipes import KV_CACHE_DTYPE, TENSOR_PARALLEL_MEMORY_FRACTION
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
HEADER = (ROOT / "tests" / "fidelity" / "data" / "silicon_small.csv").read_text().splitlines()[0]
IMAGE = "lmsysorg/sglang:v0.5.5.post2"
RUN = RunKey(
    model="deepseek-ai/DeepSeek-R1", precision="fp8", system="gb200", backend="sglang", isl=1024, osl=1024
)


def _role(workers, tp, ep, dp):
    return {"workers": workers, "tp": tp, "ep": ep, "attention_dp": dp}


def _entry(conc, prefill, decode, recipe):
    return {
        "isl": 1024,
        "osl": 1024,
        "concurrency": conc,
        "prefill": _role(*prefill),
        "decode": _role(*decode),
        "spec_decoding": "none",
        "mtp_draft_tokens": None,
        "recipe": recipe,
    }


# A December SGLang config: "tp 1" and the worker's GPUs as ep in every entry, the split fixed by
# the launch script each entry's SCRIPT_MODE picks.
ENTRIES = parse_table(
    {
        "configs": [
            {
                "config": "dsr1-fp8-gb200-dynamo-sglang",
                "model": "deepseek-ai/DeepSeek-R1",
                "system": "gb200",
                "backend": "sglang",
                "precision": "fp8",
                "image": IMAGE,
                "commit": "5" * 40,
                "entries": [
                    _entry([4, 16], (1, 1, 4, True), (4, 1, 4, True), "1k1k-low-latency.sh"),
                    _entry([1024], (3, 1, 8, True), (1, 1, 48, True), "1k1k-max-tpt.sh"),
                ],
            }
        ]
    }
)


def test_a_low_latency_launch_script_runs_plain_tensor_parallel_workers():
    found = resolve(RUN, concurrency=16, image=IMAGE, prefill=(1,) * 5, decode=(1,) * 5, entries=ENTRIES)
    assert found.prefill == WorkerShape(workers=1, tp=4, attention_dp=1, moe_tp=4, moe_ep=1)
    assert found.decode == WorkerShape(workers=4, tp=4, attention_dp=1, moe_tp=4, moe_ep=1)
    # The other scripts run attention DP with the experts over every GPU, as the config reads.
    wide = resolve(RUN, concurrency=1024, image=IMAGE, prefill=(1,) * 5, decode=(1,) * 5, entries=ENTRIES)
    assert wide.decode == WorkerShape(workers=1, tp=1, attention_dp=48, moe_tp=1, moe_ep=48)


def test_a_recorded_split_of_a_launch_script_config_is_replaced_by_what_the_script_ran():
    # The results database writes those rows as attention DP over a tensor-split MoE.
    recorded = WorkerShape(workers=4, tp=1, attention_dp=4, moe_tp=4, moe_ep=1)
    prefill = WorkerShape(workers=1, tp=1, attention_dp=4, moe_tp=4, moe_ep=1)
    found = launched_split(
        RUN, concurrency=16, image=IMAGE, prefill=prefill, decode=recorded, entries=ENTRIES
    )
    assert found == (
        WorkerShape(workers=1, tp=4, attention_dp=1, moe_tp=4, moe_ep=1),
        WorkerShape(workers=4, tp=4, attention_dp=1, moe_tp=4, moe_ep=1),
    )
    # Another worker count, concurrency or image is no run of those entries.
    for kwargs in (
        {"concurrency": 16, "image": IMAGE, "decode": WorkerShape(2, 1, 4, 4, 1)},
        {"concurrency": 8, "image": IMAGE, "decode": recorded},
        {"concurrency": 16, "image": "lmsysorg/sglang:v0.5.8-cu130", "decode": recorded},
    ):
        assert launched_split(RUN, prefill=prefill, entries=ENTRIES, **kwargs) is None


def _db_row(row_id, isl, users, prefill, decode):
    """A row of InferenceX's results database for a December SGLang run, its split as written."""
    cells = dict.fromkeys(HEADER.split(","), "")
    cells |= {
        "id": row_id,
        "silicon_data_source": f"db-dump/2026-04-27; config_id=1; silicon_concurrency={users}; "
        f"measured=2025-12-21T00:00:00.000Z; workflow_run_id=1; {IMAGE}",
        "backend": "sglang",
        "model_path": "deepseek-ai/DeepSeek-V3",
        "system": "gb200",
        "precision": "fp8",
        "mode": "disagg",
        "isl": str(isl),
        "osl": "1024",
        "gemm_quant_mode": "fp8_block",
        "moe_quant_mode": "fp8_block",
        "silicon_ttft_ms": "500.0",
        "silicon_tpot_ms": "10.0",
    }
    for role, (workers, dp, moe_tp) in (("prefill", prefill), ("decode", decode)):
        cells |= {
            f"{role}_num_workers": str(workers),
            f"{role}_tp_size": "1",
            f"{role}_pp_size": "1",
            f"{role}_attention_dp_size": str(dp),
            f"{role}_moe_tp_size": str(moe_tp),
            f"{role}_moe_ep_size": "1",
        }
    return ",".join(cells[c] for c in HEADER.split(","))


def test_december_sglang_rows_replay_as_their_launch_scripts_ran_with_the_recipes_kv_cache(tmp_path):
    path = tmp_path / "db.csv"
    rows = [
        _db_row("low_latency", 1024, 16, (1, 4, 4), (4, 4, 4)),  # 1 prefill, 4 decode workers of 4 GPUs
        _db_row("max_tpt", 8192, 512, (5, 8, 8), (1, 32, 32)),  # 5 DEP8 prefill, 1 DEP32 decode
    ]
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    read = {r.id: r for r in read_measured(path)}
    low, wide = read["low_latency"], read["max_tpt"]
    assert (low.decode.tp, low.decode.attn_dp, low.decode.moe_tp, low.decode.moe_ep) == (4, 1, 4, 1)
    assert (low.prefill.tp, low.prefill.attn_dp, low.prefill.workers) == (4, 1, 1)
    assert (wide.decode.tp, wide.decode.attn_dp, wide.decode.moe_tp, wide.decode.moe_ep) == (1, 32, 1, 32)
    assert (wide.prefill.attn_dp, wide.prefill.moe_ep, wide.prefill.workers) == (8, 8, 5)
    # Every role runs the recipes' FP8 KV cache; the tensor-parallel ones at their memory fraction.
    low_plan, wide_plan = build_case(low).plan, build_case(wide).plan
    assert {low_plan.decode.kv_cache_dtype, wide_plan.prefill.kv_cache_dtype} == {KV_CACHE_DTYPE}
    assert low_plan.decode.gpu_memory_utilization == TENSOR_PARALLEL_MEMORY_FRACTION
    assert wide_plan.decode.gpu_memory_utilization is None
    # The wide (attention DP over expert-parallel) workers exchange tokens with DeepEP; the
    # tensor-parallel ones run SGLang's default MoE.
    assert {wide_plan.prefill.sglang.moe_a2a_backend, wide_plan.decode.sglang.moe_a2a_backend} == {"deepep"}
    assert {low_plan.prefill.sglang.moe_a2a_backend, low_plan.decode.sglang.moe_a2a_backend} == {"none"}


def test_other_rows_keep_the_engine_defaults(tmp_path):
    from tests.fidelity.test_inferencex import _results_db_row

    path = tmp_path / "db.csv"
    path.write_text("\n".join([HEADER, _results_db_row("trtllm", "fp8", 8192, 36, 4, 9)]) + "\n")
    (row,) = read_measured(path)
    plan = build_case(row).plan
    assert (plan.decode.kv_cache_dtype, plan.decode.gpu_memory_utilization) == ("auto", None)
    assert plan.decode.sglang.moe_a2a_backend == "none"


def test_the_extraction_names_an_entrys_launch_script_by_its_script_mode():
    text = """
dsr1-fp8-gb200-dynamo-sglang:
  image: lmsysorg/sglang:v0.5.5.post2
  model: /models/deepseek-r1-0528
  model-prefix: dsr1
  runner: gb200
  precision: fp8
  framework: dynamo-sglang
  multinode: true
  disagg: true
  seq-len-configs:
  - isl: 1024
    osl: 1024
    search-space:
    - spec-decoding: "none"
      conc-list: [ 2, 4 ]
      prefill:
        num-worker: 1
        tp: 1
        ep: 4
        dp-attn: true
        additional-settings:
        - "PREFILL_NODES=1"
        - "SCRIPT_MODE=1k1k-low-latency"
      decode:
        num-worker: 4
        tp: 1
        ep: 4
        dp-attn: true
"""
    (config,), _ = load_script("benchmarks/extract_inferencex_disagg.py").extract(text, "525079ad")
    (entry,) = config["entries"]
    assert entry["recipe"] == "1k1k-low-latency.sh"
    (parsed,) = parse_table({"configs": [config]})
    assert parsed.shapes()[1] == WorkerShape(workers=4, tp=4, attention_dp=1, moe_tp=4, moe_ep=1)


def test_gb300_sglang_rows_run_the_same_recipe_fields_as_gb200(tmp_path):
    # InferenceX's GB300 SGLang configs launch srt-slurm recipes with the same flags as GB200's
    # (trtllm_mla with an FP8 KV cache, DeepEP on the wide workers): the same engine fields.
    path = tmp_path / "db.csv"
    rows = [
        _db_row("low_latency", 1024, 16, (1, 4, 4), (4, 4, 4)),
        _db_row("max_tpt", 8192, 512, (5, 8, 8), (1, 32, 32)),
    ]
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    for row in read_measured(path):
        gb200, gb300 = build_case(row).plan, build_case(replace(row, system="gb300")).plan
        assert gb300.system == "gb300"
        for role in ("prefill", "decode"):
            ours, theirs = getattr(gb300, role), getattr(gb200, role)
            assert ours.kv_cache_dtype == theirs.kv_cache_dtype == KV_CACHE_DTYPE
            assert ours.gpu_memory_utilization == theirs.gpu_memory_utilization
            assert ours.sglang.moe_a2a_backend == theirs.sglang.moe_a2a_backend
    # A system whose recipes were not read keeps SGLang's defaults.
    (low, _) = read_measured(path)
    b300 = build_case(replace(low, system="b300_sxm")).plan
    assert (b300.decode.kv_cache_dtype, b300.decode.gpu_memory_utilization) == ("auto", None)
