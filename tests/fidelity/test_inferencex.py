import dataclasses
import json
import re
from pathlib import Path

import pytest

from aisimulate.catalog import get_model
from aisimulate.fidelity import build_case, read_measured
from aisimulate.fidelity.inferencex import (
    Copy,
    RunKey,
    Speculation,
    Sweep,
    Unresolved,
    WorkerShape,
    bundled_entries,
    conventional_max_batch,
    linked,
    parse_table,
    recipe_decode_attention_dp,
    recipe_max_batch,
    resolve,
    runs_on_gpus,
    same_image,
    sweeps,
)
from aisimulate.replay.workers import resolve_engine
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2"


def _entry(conc, prefill, decode, *, spec="none", mtp=None, recipe="r.yaml", isl=1024):
    def role(workers, tp, ep, dp):
        return {"workers": workers, "tp": tp, "ep": ep, "attention_dp": dp}

    return {
        "isl": isl,
        "osl": 1024,
        "concurrency": conc,
        "prefill": role(*prefill),
        "decode": role(*decode),
        "spec_decoding": spec,
        "mtp_draft_tokens": mtp,
        "recipe": recipe,
    }


TABLE = {
    "configs": [
        {
            "config": "dsr1-fp4-gb200-dynamo-trt",
            "model": "deepseek-ai/DeepSeek-R1",
            "system": "gb200",
            "backend": "trtllm",
            "precision": "fp4",
            "image": "nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2",
            "commit": "0" * 40,
            "entries": [
                # DEP32 decode, MTP with 3 draft tokens
                _entry([180], (1, 4, 4, True), (1, 32, 32, True), spec="mtp", mtp=3, recipe="a_mtp3.yaml"),
                # the same deployment at 12 users with and without MTP: ambiguous
                _entry([12, 24], (1, 4, 4, True), (4, 8, 8, False), spec="mtp", mtp=3, recipe="b_mtp3.yaml"),
                _entry([12, 48], (1, 4, 4, True), (4, 8, 8, False), recipe="b_mtp0.yaml"),
                # two entries that name one deployment at 96 users: they agree
                _entry([96], (2, 4, 4, True), (1, 16, 16, True), recipe="c1.yaml"),
                _entry([96, 192], (2, 4, 4, True), (1, 16, 16, True), recipe="c2.yaml"),
                # MTP whose recipe does not say how many draft tokens
                _entry([333], (1, 4, 4, True), (1, 32, 32, True), spec="mtp", recipe="d_mtp.yaml"),
            ],
        }
    ]
}
ENTRIES = parse_table(TABLE)


def _resolve(users, decode_tp, /, **overrides):
    # What the dated exports record: the role's GPUs as tp, the prefill ep as moe_ep for both roles.
    args = {
        "model": "deepseek-ai/DeepSeek-R1",
        "precision": "fp4",
        "system": "gb200",
        "backend": "trtllm",
        "isl": 1024,
        "osl": 1024,
        "concurrency": users,
        "image": IMAGE,
        "prefill": (4, 1, 1, 1, 4),
        "decode": (decode_tp, 1, 1, decode_tp // 4, 4),
        "entries": ENTRIES,
    }
    given = args | overrides
    run = RunKey(
        **{name: given.pop(name) for name in ("model", "precision", "system", "backend", "isl", "osl")}
    )
    return resolve(run, **given)


def test_one_matching_entry_gives_its_workers_shapes_and_mtp():
    found = _resolve(180, 32)
    # The entry's own split, not the export's: DEP32 is attention DP over 32 GPUs, experts over 32.
    assert found.decode == WorkerShape(workers=1, tp=1, attention_dp=32, moe_tp=1, moe_ep=32)
    assert found.prefill == WorkerShape(workers=1, tp=1, attention_dp=4, moe_tp=1, moe_ep=4)
    assert found.nextn == 3
    assert found.source == "InferenceX dsr1-fp4-gb200-dynamo-trt@00000000 a_mtp3.yaml"


@pytest.mark.parametrize(
    ("recipe", "batch"),
    [
        ("ctx1_gen4_tep8_batch16_eplb0_mtp0.yaml", 16),
        ("ctx1_gen3_tep8_batch1_eplb0_mtp0_3.yaml", 1),
        ("ctx5_gen2_dep8_batch768.yaml", 768),
        ("a_mtp3.yaml", None),
        ("", None),
    ],
)
def test_the_recipe_name_gives_the_decode_max_batch_size(recipe, batch):
    assert recipe_max_batch(recipe) == batch


def test_a_resolved_row_carries_its_recipes_decode_batch():
    entry = _entry([180], (1, 4, 4, True), (1, 32, 32, True), recipe="ctx1_gen1_dep32_batch4.yaml")
    entries = parse_table({"configs": [TABLE["configs"][0] | {"entries": [entry]}]})
    assert _resolve(180, 32, entries=entries).decode_max_batch == 4
    assert _resolve(180, 32).decode_max_batch is None  # a_mtp3.yaml names none


@pytest.mark.parametrize(
    ("recipe", "attention_dp"),
    [
        ("ctx1_gen4_tep8_batch16_eplb0_mtp0.yaml", False),
        ("c8_ctx1_gen6_tep8_batch16_eplb0_mtp0.yaml", False),
        ("ctx2_gen1_dep32_batch8_eplb0_mtp0.yaml", True),
        ("ctx1_gen3_tp8_batch1024_eplb0_mtp0.yaml", None),
        ("8k1k-low-latency.sh", None),
        ("", None),
    ],
)
def test_the_recipe_name_gives_the_decode_split(recipe, attention_dp):
    assert recipe_decode_attention_dp(recipe) is attention_dp


def test_a_recipe_naming_tep_decode_workers_runs_them_without_attention_dp():
    # InferenceX's 8k/1k FP4 GB200 config marks ctx1_gen4_tep8_batch16's decode workers dp-attn;
    # the recipe it launches names them TEP8, and its 4 x 16 slots are what the rows' waits show.
    entry = _entry([44], (1, 4, 4, True), (4, 8, 8, True), recipe="ctx1_gen4_tep8_batch16_eplb0_mtp0.yaml")
    entries = parse_table({"configs": [TABLE["configs"][0] | {"entries": [entry]}]})
    found = _resolve(44, 8, entries=entries)
    assert found.decode == WorkerShape(workers=4, tp=8, attention_dp=1, moe_tp=1, moe_ep=8)
    assert found.decode_max_batch == 16
    # A config's dp-attn stands where the recipe names no split.
    plain = _entry([44], (1, 4, 4, True), (4, 8, 8, True), recipe="r.yaml")
    entries = parse_table({"configs": [TABLE["configs"][0] | {"entries": [plain]}]})
    assert _resolve(44, 8, entries=entries).decode.attention_dp == 8


def test_a_tensor_parallel_decode_entry_without_mtp():
    found = _resolve(48, 8)
    assert found.decode == WorkerShape(workers=4, tp=8, attention_dp=1, moe_tp=1, moe_ep=8)
    assert found.nextn == 0


def test_entries_that_agree_on_the_deployment_fill_it_in():
    found = _resolve(96, 16)
    assert (found.prefill.workers, found.decode.workers, found.decode.attention_dp) == (2, 1, 16)


def test_entries_that_disagree_are_ambiguous_and_named():
    with pytest.raises(Unresolved, match=r"ambiguous: 2 InferenceX entries match") as err:
        _resolve(12, 8)
    assert "b_mtp3.yaml" in str(err.value) and "b_mtp0.yaml" in str(err.value)
    assert "mtp 3" in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"model": "zhipuai/GLM-5"}, "no InferenceX disaggregated entry for zhipuai/GLM-5 fp4 on gb200"),
        ({"isl": 8192}, "entry for deepseek-ai/DeepSeek-R1 fp4 on gb200 (trtllm) at 8192/1024"),
        ({"concurrency": 7}, "no InferenceX entry at the row's concurrency"),
        ({"decode": (16, 1, 1, 4, 4)}, "no InferenceX entry at the row's concurrency with its per-role"),
        ({"image": "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.5"}, "not the row's nvcr.io/nvidia/ai"),
        ({"concurrency": None}, "concurrency not recorded"),
    ],
)
def test_rows_that_match_no_entry_say_why(overrides, message):
    with pytest.raises(Unresolved, match=re.escape(message)):
        _resolve(180, 32, **overrides)


def test_a_row_exported_with_the_deployments_gpus_as_each_roles_tp_matches_its_entry():
    # DEP4 prefill + DEP32 decode: 36 GPUs, written as (tp 36, moe_tp 36) for both roles.
    whole = (36, 1, 1, 36, 1)
    found = _resolve(180, 32, prefill=whole, decode=whole)
    assert found.decode == WorkerShape(workers=1, tp=1, attention_dp=32, moe_tp=1, moe_ep=32)
    assert found.nextn == 3
    # Another total matches no entry, and the whole count must be on both roles.
    with pytest.raises(Unresolved, match="no InferenceX entry at the row's concurrency"):
        _resolve(180, 32, prefill=(40, 1, 1, 40, 1), decode=(40, 1, 1, 40, 1))
    with pytest.raises(Unresolved, match="no InferenceX entry at the row's concurrency"):
        _resolve(180, 32, decode=whole)


def test_a_deployment_is_found_by_its_total_gpus_for_the_rows_run():
    run = RunKey(
        model="deepseek-ai/DeepSeek-R1", precision="fp4", system="gb200", backend="trtllm", isl=1024, osl=1024
    )
    # DEP4 + DEP32 and DEP4 + 4 TEP8 are 36 GPUs, 2 DEP4 + DEP16 are 24; none has 8 or 72.
    assert [runs_on_gpus(run, gpus, entries=ENTRIES) for gpus in (36, 24, 8, 72)] == [
        True,
        True,
        False,
        False,
    ]
    # The lengths and the precision are the row's own.
    assert not runs_on_gpus(dataclasses.replace(run, isl=8192), 36, entries=ENTRIES)
    assert not runs_on_gpus(dataclasses.replace(run, precision="fp8"), 36, entries=ENTRIES)


def _two_versions(old_entries):
    new = TABLE["configs"][0] | {
        "entries": [
            _entry([96], (2, 4, 4, True), (1, 16, 16, True), recipe="c1.yaml"),
            _entry([48], (1, 4, 4, True), (4, 8, 8, False), recipe="e_mtp0.yaml"),
            _entry([180], (1, 4, 4, True), (1, 32, 32, True), spec="mtp", mtp=3, recipe="a_mtp3.yaml"),
        ]
    }
    old = TABLE["configs"][0] | {"image": OLD_IMAGE, "commit": "1" * 40, "entries": old_entries}
    return parse_table({"configs": [new, old]})


def test_a_row_without_an_image_replays_when_every_version_that_ran_it_agrees():
    entries = _two_versions(
        [
            _entry([96], (2, 4, 4, True), (1, 16, 16, True), recipe=""),
            _entry([48], (1, 4, 4, True), (2, 8, 8, False), recipe=""),  # 2 decode workers, not 4
            _entry([180], (1, 4, 4, True), (1, 16, 16, True), recipe=""),
        ]
    )
    both = _resolve(96, 16, image="", entries=entries)
    assert (both.prefill.workers, both.decode.attention_dp, both.nextn) == (2, 16, 0)
    assert both.source == (
        "InferenceX dsr1-fp4-gb200-dynamo-trt@00000000 c1.yaml"
        " / InferenceX dsr1-fp4-gb200-dynamo-trt@11111111"
    )
    # 180 users on DEP32: only the newer version has that entry, so only it can have run the row.
    newer = _resolve(180, 32, image="", entries=entries)
    assert (newer.decode.attention_dp, newer.nextn) == (32, 3)
    assert newer.source == "InferenceX dsr1-fp4-gb200-dynamo-trt@00000000 a_mtp3.yaml"
    # ... and on DEP16 only the older one.
    assert _resolve(180, 16, image="", entries=entries).decode.attention_dp == 16
    # The versions disagree at 48 users (4 or 2 decode workers): not guessed.
    with pytest.raises(
        Unresolved, match=r"no container image recorded.*2 versions run different deployments"
    ):
        _resolve(48, 8, image="", entries=entries)
    with pytest.raises(Unresolved, match=r"no container image recorded.*no version has an entry"):
        _resolve(7, 8, image="", entries=entries)


def test_a_row_without_an_image_is_not_replayed_when_one_version_is_itself_ambiguous():
    entries = _two_versions(
        [
            _entry([96], (2, 4, 4, True), (1, 16, 16, True), spec="mtp", mtp=3, recipe="x_mtp3.yaml"),
            _entry([96], (2, 4, 4, True), (1, 16, 16, True), recipe="x_mtp0.yaml"),
        ]
    )
    with pytest.raises(Unresolved, match=r"no container image recorded.*ambiguous: 2 InferenceX entries"):
        _resolve(96, 16, image="", entries=entries)


def test_mtp_without_a_draft_token_count_is_not_replayed_without_it():
    with pytest.raises(Unresolved, match=r"MTP with a number of draft tokens .* \(d_mtp.yaml"):
        _resolve(333, 32)


def test_container_references_compare_across_registry_spellings():
    assert same_image("nvcr.io#nvidia/x:1", "nvcr.io/nvidia/x:1")
    assert not same_image("nvcr.io/nvidia/x:1", "nvcr.io/nvidia/x:2")


def test_the_bundled_table_is_consistent_and_attributed():
    table = json.loads((ROOT / "aisimulate" / "fidelity" / "data" / "inferencex_disagg.json").read_text())
    assert table["source"]["repository"] == "SemiAnalysisAI/InferenceX"
    assert table["source"]["licence"] == "Apache-2.0"
    entries = bundled_entries()
    assert len(entries) > 300
    for e in entries:
        for role in (e.prefill, e.decode):
            assert role.workers >= 1 and role.gpus % role.ep == 0, e.describe()
        assert (e.spec_decoding == "mtp") or e.mtp_draft_tokens is None, e.describe()
    assert {e.system for e in entries} >= {"b300_sxm", "gb200", "gb300", "h100_sxm"}
    assert {e.backend for e in entries} == {"trtllm", "sglang"}
    # Every version is attributed, and every entry names one of them.
    versions = {v["commit"]: v["repository"] for v in table["source"]["versions"]}
    assert set(versions) == set(table["source"]["commits"]) and len(versions) >= 2
    assert {e.commit for e in entries} == set(versions)
    assert {c["repository"] for c in table["configs"]} <= set(versions.values())


OLD_IMAGE = "nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:0.5.1-rc0.pre3"
SGLANG_IMAGE = "lmsysorg/sglang:v0.5.5.post2"
VERSIONS = parse_table(
    {
        "configs": [
            TABLE["configs"][0],
            {
                **TABLE["configs"][0],
                "image": OLD_IMAGE,
                "commit": "1" * 40,
                "users_per_decode_worker": True,
                "entries": [
                    # the older version: 4 TEP8 decode workers, each listed concurrency per worker
                    _entry([16, 36], (1, 4, 4, False), (4, 8, 8, False), spec="mtp", mtp=3, recipe=""),
                    _entry([180], (1, 4, 4, True), (1, 16, 16, True), recipe=""),
                ],
            },
            {
                **TABLE["configs"][0],
                "config": "dsr1-fp4-gb200-dynamo-sglang",
                "backend": "sglang",
                "image": SGLANG_IMAGE,
                "commit": "2" * 40,
                # tp 1, the worker's GPUs as ep (DEP8 prefill, DEP32 decode)
                "entries": [_entry([512], (2, 1, 8, True), (1, 1, 32, True), recipe="")],
            },
        ]
    }
)


def test_the_image_a_row_ran_picks_the_version_of_the_config_that_names_it():
    # 180 users: DEP32 decode in the newer version, DEP16 in the older one.
    new = _resolve(180, 32, entries=VERSIONS)
    old = _resolve(180, 16, image=OLD_IMAGE.replace("#", "/"), entries=VERSIONS)
    assert (new.decode.attention_dp, new.nextn, new.source) == (
        32,
        3,
        "InferenceX dsr1-fp4-gb200-dynamo-trt@00000000 a_mtp3.yaml",
    )
    assert (old.decode.attention_dp, old.nextn, old.source) == (
        16,
        0,
        "InferenceX dsr1-fp4-gb200-dynamo-trt@11111111",
    )
    # The older version's DEP16 shape is no entry of the newer one, whatever the image.
    with pytest.raises(Unresolved, match="no InferenceX entry at the row's concurrency"):
        _resolve(180, 16, entries=VERSIONS)


def test_a_version_whose_client_ran_each_concurrency_per_decode_worker():
    old = {"image": OLD_IMAGE, "entries": VERSIONS}
    # 36 listed, 4 decode workers: the client ran 144 users; 36 itself was never run.
    found = _resolve(144, 8, prefill=(4, 1, 1, 1, 4), **old)
    assert (found.decode.workers, found.decode.tp, found.nextn) == (4, 8, 3)
    with pytest.raises(Unresolved, match="no InferenceX entry at the row's concurrency"):
        _resolve(36, 8, prefill=(4, 1, 1, 1, 4), **old)
    # The newer version's entries are matched at their listed concurrency.
    assert _resolve(48, 8, entries=VERSIONS).decode.workers == 4


def test_a_config_writing_the_workers_gpus_as_ep_runs_them_as_attention_dp_workers():
    # Its export writes tp 1 and no expert split for both roles.
    found = _resolve(
        512,
        1,
        backend="sglang",
        image=SGLANG_IMAGE,
        prefill=(1, 1, 1, 1, 1),
        decode=(1, 1, 1, 1, 1),
        entries=VERSIONS,
    )
    assert found.prefill == WorkerShape(workers=2, tp=1, attention_dp=8, moe_tp=1, moe_ep=8)
    assert found.decode == WorkerShape(workers=1, tp=1, attention_dp=32, moe_tp=1, moe_ep=32)


def test_the_export_writes_the_prefill_expert_split_only_as_far_as_a_role_holds_it():
    from aisimulate.fidelity.inferencex import RoleEntry

    # A TP4 decode role under a DEP8 prefill: its four GPUs hold four of the eight expert groups.
    assert RoleEntry(workers=2, tp=4, ep=4, attention_dp=False).exported(8) == (4, 1, 1, 1, 4)
    assert RoleEntry(workers=1, tp=16, ep=16, attention_dp=True).exported(4) == (16, 1, 1, 4, 4)


HEADER = (ROOT / "tests" / "fidelity" / "data" / "silicon_small.csv").read_text().splitlines()[0]


def _silicon_row(
    row_id,
    concurrency,
    prefill,
    decode,
    image=f"image={IMAGE}",
    *,
    measured=("150.0", "9.0"),
    export=("2026-03-25.csv", "2026-03-23T13:00:07Z"),
):
    """A disaggregated row of InferenceX's dated exports: shapes as exported, worker counts blank."""
    cells = dict.fromkeys(HEADER.split(","), "")
    cells |= {
        "id": row_id,
        "silicon_data_source": f"source_file={export[0]}; model=DeepSeek-R1; "
        f"silicon_concurrency={concurrency}; measured={export[1]}; wip=False; {image}",
        "backend": "trtllm",
        "model_path": "deepseek-ai/DeepSeek-R1",
        "system": "gb200",
        "precision": "fp4",
        "mode": "disagg",
        "isl": "1024",
        "osl": "1024",
        "gemm_quant_mode": "nvfp4",
        "moe_quant_mode": "nvfp4",
        "silicon_ttft_ms": measured[0],
        "silicon_tpot_ms": measured[1],
    }
    for role, (tp, moe_tp, moe_ep) in (("prefill", prefill), ("decode", decode)):
        cells |= {
            f"{role}_tp_size": str(tp),
            f"{role}_pp_size": "1",
            f"{role}_attention_dp_size": "1",
            f"{role}_moe_tp_size": str(moe_tp),
            f"{role}_moe_ep_size": str(moe_ep),
        }
    return ",".join(cells[c] for c in HEADER.split(","))


def test_read_measured_fills_the_counts_from_the_bundled_table_and_the_case_runs_mtp(tmp_path):
    # Entries of InferenceX's dsr1-fp4-gb200-dynamo-trt, 1k/1k: 180 users on 1 DEP4 prefill and
    # 1 DEP32 decode worker with 3 MTP draft tokens; 6144 on 1 DEP4 prefill and 2 DEP4 decode
    # workers; 4 users with MTP only at 4 TEP8 decode workers; 16 users in no entry.
    path = tmp_path / "ix.csv"
    rows = [
        _silicon_row("mtp", 180, (4, 1, 4), (32, 8, 4)),
        _silicon_row("stp", 6144, (4, 1, 4), (4, 1, 4)),
        _silicon_row("none", 16, (4, 1, 4), (8, 2, 4)),
        _silicon_row("old", 180, (4, 1, 4), (32, 8, 4), image="image=nvcr.io/nvidia/other:1"),
    ]
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    read = {r.id: r for r in read_measured(path)}
    mtp = read["mtp"]
    assert mtp.problem == ""
    assert (mtp.prefill.workers, mtp.decode.workers, mtp.decode.attn_dp, mtp.decode.moe_ep) == (1, 1, 32, 32)
    recipe = "ctx1_gen1_dep32_batch4_eplb0_mtp3.yaml"
    assert (mtp.nextn, mtp.workers_from) == (3, f"InferenceX dsr1-fp4-gb200-dynamo-trt@0004cf5f {recipe}")
    stp = read["stp"]
    assert (stp.decode.workers, stp.decode.attn_dp, stp.nextn) == (2, 4, 0)
    assert "counts not recorded; no InferenceX entry at the row's concurrency" in read["none"].problem
    assert "not the row's nvcr.io/nvidia/other:1" in read["old"].problem
    case = build_case(mtp)
    assert case.plan.decode.nextn == 3 and case.plan.prefill.nextn == 3
    # At DeepSeek-R1's acceptance on InferenceX's random-token prompts (the catalog's fitted
    # fraction of the documented 2.82 tokens a step at 3 drafts), not the engine default's 2.1.
    decode = resolve_engine(case.plan, case.plan.decode, perf="analytic", perf_table=None, where="decode")
    rates = get_model("deepseek-ai/DeepSeek-R1").mtp_accept_rates(3, random_prompts=True)
    assert decode.spec.nextn_accept_rates == rates
    assert 2.1 < decode.spec.mean_tokens_per_step < 2.82
    assert (case.plan.decode.attention_dp, case.plan.decode.replicas) == (32, 1)
    assert build_case(stp).plan.decode.nextn == 0
    # The recipe caps each decode rank at 4 sequences (batch4): 128 slots for 180 users.
    assert mtp.decode.max_batch == 4 and mtp.prefill.max_batch is None
    assert case.plan.decode.max_num_seqs == 4
    assert case.plan.prefill.max_num_seqs == 256  # no cap named: room for every user's share


def _extractor():
    return load_script("benchmarks/extract_inferencex_disagg.py")


CONFIG_YAML = """
dsr1-fp4-gb300-dynamo-trt:
  image: nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2
  model: nvidia/DeepSeek-R1-0528-NVFP4-v2
  model-prefix: dsr1
  runner: gb300
  precision: fp4
  framework: dynamo-trt
  multinode: true
  disagg: true
  seq-len-configs:
  - isl: 1024
    osl: 1024
    search-space:
    - spec-decoding: "mtp"
      conc-list: [ 8, 12 ]
      prefill:
        num-worker: 1
        tp: 2
        ep: 2
        dp-attn: true
        additional-settings:
        - "CONFIG_FILE=recipes/trtllm/gb300-fp4/1k1k/mtp/ctx1_gen4_tep8_batch8_eplb0_mtp3.yaml"
      decode:
        num-worker: 4
        tp: 8
        ep: 8
        dp-attn: false
    - conc-list: [ 5 ]
      prefill: {num-worker: 1, tp: 2, ep: 2, dp-attn: true}
      decode: {num-worker: 4, tp: 8, ep: 8}
dsr1-fp8-mi355x-sglang-disagg:
  model-prefix: dsr1
  runner: mi355x
  precision: fp8
  framework: sglang-disagg
  disagg: true
  seq-len-configs: []
dsr1-fp8-b200-trt:
  model-prefix: dsr1
  runner: b200
  precision: fp8
  framework: trt
  seq-len-configs: []
"""


OLDER_YAML = """
dsr1-fp4-gb300-dynamo-trt:
  image: nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2
  model-prefix: dsr1
  runner: gb300
  precision: fp4
  framework: dynamo-trt
  disagg: true
  seq-len-configs: []
dsr1-fp4-gb200-dynamo-trt:
  image: nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:0.5.1-rc0.pre3
  model-prefix: dsr1
  runner: gb200
  precision: fp4
  framework: dynamo-trt
  disagg: true
  seq-len-configs:
  - isl: 8192
    osl: 1024
    search-space:
    - spec-decoding: "mtp"
      conc-list: [ 1, 18 ]
      prefill: {num-worker: 1, tp: 4, ep: 4, dp-attn: false}
      decode:
        num-worker: 3
        tp: 8
        ep: 8
        additional-settings: ["DECODE_MAX_BATCH_SIZE=16", "DECODE_MTP_SIZE=3"]
"""


def test_the_extraction_keeps_every_version_with_its_commit_repository_and_client(tmp_path):
    newer, older, out = tmp_path / "new.yaml", tmp_path / "old.yaml", tmp_path / "table.json"
    newer.write_text(CONFIG_YAML)
    older.write_text(OLDER_YAML)
    extractor = _extractor()
    assert (
        extractor.main([f"{newer}@abc123", f"{older}@def456@InferenceMAX/InferenceMAX", "--out", str(out)])
        == 0
    )
    table = json.loads(out.read_text())
    assert table["source"]["versions"] == [
        {"repository": "SemiAnalysisAI/InferenceX", "commit": "abc123"},
        {"repository": "InferenceMAX/InferenceMAX", "commit": "def456"},
    ]
    # The older file's gb300 config has the newer one's image: only the newer one is kept.
    kept = [
        (c["config"], c["commit"], c["repository"], c["users_per_decode_worker"]) for c in table["configs"]
    ]
    assert kept == [
        ("dsr1-fp4-gb300-dynamo-trt", "abc123", "SemiAnalysisAI/InferenceX", False),
        ("dsr1-fp4-gb200-dynamo-trt", "def456", "InferenceMAX/InferenceMAX", True),
    ]
    # Draft tokens from the inline setting of an entry that names no recipe.
    old = [e for e in parse_table(table) if e.commit == "def456"]
    assert [(e.mtp_draft_tokens, e.recipe, e.users_per_decode_worker) for e in old] == [(3, "", True)]


def test_the_extraction_keeps_disaggregated_nvidia_entries_under_our_names(tmp_path):
    configs, left_out = _extractor().extract(CONFIG_YAML, "abc123")
    (config,) = configs
    assert (config["model"], config["system"], config["backend"], config["commit"]) == (
        "deepseek-ai/DeepSeek-R1",
        "gb300",
        "trtllm",
        "abc123",
    )
    mtp, stp = config["entries"]
    assert (mtp["concurrency"], mtp["spec_decoding"], mtp["mtp_draft_tokens"]) == ([8, 12], "mtp", 3)
    assert mtp["recipe"] == "ctx1_gen4_tep8_batch8_eplb0_mtp3.yaml"
    assert mtp["decode"] == {"workers": 4, "tp": 8, "ep": 8, "attention_dp": False}
    assert (stp["spec_decoding"], stp["mtp_draft_tokens"], stp["recipe"]) == ("none", None, "")
    mi355x = "dsr1-fp8-mi355x-sglang-disagg: no mapping for system of 'mi355x', backend of 'sglang-disagg'"
    assert left_out == [mi355x]
    # The written table reads back as the entries the replay matches against.
    out = tmp_path / "table.json"
    source = tmp_path / "master.yaml"
    source.write_text(CONFIG_YAML)
    assert _extractor().main([f"{source}@abc123", "--out", str(out)]) == 0
    entries = parse_table(json.loads(out.read_text()))
    assert [(e.concurrency, e.mtp_draft_tokens) for e in entries] == [((8, 12), 3), ((5,), None)]


def test_draft_tokens_come_from_the_recipe_name_its_body_or_an_inline_setting():
    depth = _extractor()._mtp_depth
    assert (
        depth({"decode": {}}, "recipes/trtllm/gb200-fp4/1k1k/mtp/ctx1_gen4_tep8_batch8_eplb0_mtp3.yaml") == 3
    )
    # SGLang EAGLE recipes: speculative-num-steps 2 (topk 1, three verified tokens) in the file.
    assert depth({"decode": {}}, "recipes/h100/8k1k/mtp/h100-fp8-1p1d-max-tp-mtp.yaml") == 2
    assert depth({"decode": {"additional-settings": ["DECODE_MTP_SIZE=1"]}}, "") == 1
    assert depth({"decode": {}}, "recipes/h100/1k8k/mtp/h100-fp8-1p1d-max-dep-mtp.yaml") is None


def _results_db_row(row_id, precision, osl, users, decode_workers, decode_batch, measured=("150.0", "9.0")):
    """A disaggregated row of InferenceX's results database: DeepSeek-R1's run written as
    DeepSeek-V3, worker counts recorded, ``decode_batch_size`` the users' share of a decode rank."""
    cells = dict.fromkeys(HEADER.split(","), "")
    quant = "nvfp4" if precision == "fp4" else "fp8"
    cells |= {
        "id": row_id,
        "silicon_data_source": f"db-dump/2026-04-27; config_id=1; silicon_concurrency={users}; "
        f"measured=2026-02-05T00:00:00.000Z; workflow_run_id=1; {IMAGE}",
        "backend": "trtllm",
        "model_path": "deepseek-ai/DeepSeek-V3",
        "system": "gb200",
        "precision": precision,
        "mode": "disagg",
        "isl": "1024",
        "osl": str(osl),
        "gemm_quant_mode": quant,
        "moe_quant_mode": quant,
        "decode_batch_size": str(decode_batch),
        "silicon_ttft_ms": measured[0],
        "silicon_tpot_ms": measured[1],
    }
    ep = {"fp8": 8, "fp4": 4}[precision]
    for role, (workers, tp, dp, moe_ep) in (
        ("prefill", (1, 1, ep, ep)),
        ("decode", (decode_workers, 8, 1, 8)),
    ):
        cells |= {
            f"{role}_num_workers": str(workers),
            f"{role}_tp_size": str(tp),
            f"{role}_pp_size": "1",
            f"{role}_attention_dp_size": str(dp),
            f"{role}_moe_tp_size": "1",
            f"{role}_moe_ep_size": str(moe_ep),
        }
    return ",".join(cells[c] for c in HEADER.split(","))


def test_a_results_database_row_gets_its_recipes_decode_cap_not_its_decode_batch_size(tmp_path):
    # 1k/8k FP8 on 4 TEP8 decode workers at 36 users: the database writes 9 (= 36 / 4 ranks), the
    # recipe InferenceX launched there (dsr1-fp8-gb200-dynamo-trt) caps each rank at 8: 32 slots.
    # 1k/1k FP4, 12 users: the MTP entry (batch8) and the one without (batch32) both match it;
    # the database holds runs without MTP, so the plain entry's cap is the row's.
    path = tmp_path / "db.csv"
    rows = [
        _results_db_row("capped", "fp8", 8192, 36, 4, 9),
        _results_db_row("plain", "fp4", 1024, 12, 4, 3),
        _results_db_row("unmatched", "fp8", 8192, 40, 4, 10),
    ]
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    read = {r.id: r for r in read_measured(path)}
    capped = read["capped"]
    assert capped.problem == "" and capped.decode.workers == 4
    assert capped.decode.max_batch == 8 and capped.prefill.max_batch is None
    assert capped.workers_from.endswith("ctx1_gen4_tep8_batch8_eplb0_mtp0_36.yaml")
    assert build_case(capped).plan.decode.max_num_seqs == 8
    plain = read["plain"]
    assert (plain.decode.max_batch, plain.nextn) == (32, 0)
    assert plain.workers_from.endswith("ctx1_gen4_tep8_batch32_eplb0_mtp0.yaml")
    assert read["unmatched"].problem == "" and read["unmatched"].decode.max_batch is None
    assert read["unmatched"].workers_from == ""


def _copy(row_id, ttft, *, deployment=None, model="R1", users=12, day="2026-03-23"):
    return Copy(
        id=row_id,
        run=RunKey(f"deepseek-ai/DeepSeek-{model}", "fp4", "gb200", "trtllm", 1024, 1024),
        concurrency=users,
        ttft_ms=ttft,
        tpot_ms=9.0,
        day=day,
        recorded=((4, 1, 1, 1, 4), (8, 1, 1, 2, 4)),
        deployment=deployment,
    )


TEP8 = (
    WorkerShape(workers=1, tp=1, attention_dp=4, moe_tp=1, moe_ep=4),
    WorkerShape(workers=4, tp=8, attention_dp=1, moe_tp=1, moe_ep=8),
)


def test_linked_rows_take_what_the_results_database_says_of_their_run():
    said = linked(
        [
            # The database's copy of one run (DeepSeek-R1 written as V3); the exports write the
            # same mean with its last digits rounded differently.
            _copy("db", 13693.258112009305, deployment=TEP8, model="V3"),
            _copy("plain", 13693.258112009304),
            # The other run of that deployment and concurrency that day.
            _copy("other", 6909.4865),
            # Another export's copy of it.
            _copy("later", 6909.4865),
            # The same deployment and concurrency another day: another sweep, nothing said.
            _copy("monday", 7000.0, day="2026-03-16"),
            # At 24 users two runs of one deployment, neither in the database: nothing said.
            _copy("a", 100.0, users=24),
            _copy("b", 200.0, users=24),
            # At 48 users three runs, one in the database: which entry ran the others is open.
            _copy("db48", 1.0, deployment=TEP8, model="V3", users=48),
            _copy("x", 1.0, users=48),
            _copy("y", 2.0, users=48),
            _copy("z", 3.0, users=48),
        ]
    )
    assert said["plain"] == Speculation(mtp=False, deployment=TEP8, row="db")
    assert said["plain"].says == "no MTP: results database row db"
    assert said["other"] == said["later"] == Speculation(mtp=True, deployment=None, row="db")
    assert said["x"].mtp is False
    # Of y, z and monday only the database's run at their concurrency is known, which their own
    # config's entries outrank (below).
    assert not any(said[row].same_run for row in ("y", "z", "monday"))
    assert set(said) == {"plain", "other", "later", "x", "y", "z", "monday"}  # never the database's rows


def test_what_another_record_says_picks_the_entry_of_an_ambiguous_row():
    with pytest.raises(Unresolved, match="ambiguous"):
        _resolve(12, 8)
    mtp = _resolve(12, 8, speculation=Speculation(mtp=True, deployment=None, row="db"))
    assert mtp.nextn == 3
    assert mtp.source == (
        "InferenceX dsr1-fp4-gb200-dynamo-trt@00000000 b_mtp3.yaml"
        " (MTP: its plain twin is results database row db)"
    )
    plain = _resolve(12, 8, speculation=Speculation(mtp=False, deployment=TEP8, row="db"))
    assert (plain.nextn, plain.decode.workers) == (0, 4)
    assert plain.source.endswith("b_mtp0.yaml (no MTP: results database row db)")


def test_a_plain_run_no_entry_names_replays_on_the_deployment_the_database_recorded():
    # At 24 users only the MTP entry runs 4 TEP8 decode workers; the database recorded the run.
    assert _resolve(24, 8).nextn == 3
    found = _resolve(24, 8, speculation=Speculation(mtp=False, deployment=TEP8, row="db"))
    assert (found.prefill, found.decode, found.nextn) == (*TEP8, 0)
    assert found.source == "no MTP: results database row db"


def test_read_measured_links_the_exports_rows_to_the_results_databases(tmp_path):
    # 1k/1k FP4 at 12 users on 1 DEP4 prefill and 4 TEP8 decode workers: InferenceX's MTP entry
    # (batch8, 3 drafts) and its plain one (batch32) both ran there; the export holds both runs,
    # the database the plain one.
    path = tmp_path / "linked.csv"
    rows = [
        _results_db_row("db", "fp4", 1024, 12, 4, 3, measured=("123.45", "6.9")),
        _silicon_row("plain", 12, (4, 1, 4), (8, 2, 4), measured=("123.45", "6.9")),
        _silicon_row("mtp", 12, (4, 1, 4), (8, 2, 4), measured=("99.0", "3.7")),
        _silicon_row("unlinked", 24, (4, 1, 4), (8, 2, 4), measured=("99.0", "3.7")),
        _silicon_row("unlinked2", 24, (4, 1, 4), (8, 2, 4), measured=("98.0", "3.6")),
    ]
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    read = {r.id: r for r in read_measured(path)}
    assert (read["plain"].problem, read["plain"].nextn, read["plain"].decode.max_batch) == ("", 0, 32)
    assert read["plain"].workers_from.endswith("(no MTP: results database row db)")
    assert (read["mtp"].problem, read["mtp"].nextn, read["mtp"].decode.max_batch) == ("", 3, 8)
    assert (read["mtp"].decode.workers, read["mtp"].decode.attn_dp) == (4, 1)
    assert "ambiguous" in read["unlinked"].problem and "ambiguous" in read["unlinked2"].problem


def test_a_row_whose_config_no_version_holds_takes_the_databases_run_at_its_concurrency():
    tep4 = (TEP8[0], WorkerShape(workers=5, tp=4, attention_dp=1, moe_tp=1, moe_ep=4))
    kimi = RunKey("moonshotai/Kimi-K2.5", "fp4", "gb200", "trtllm", 1024, 1024)

    def row(row_id, users, decode_tp, ttft, deployment=None):
        return Copy(
            id=row_id,
            run=kimi,
            concurrency=users,
            ttft_ms=ttft,
            tpot_ms=9.0,
            day="2026-04-02" if deployment is None else "2026-04-18",
            recorded=((4, 1, 1, 4, 1), (decode_tp, 1, 1, decode_tp, 1)),
            deployment=deployment,
        )

    said = linked(
        [
            row("db15", 15, 4, 206.9, tep4),
            row("db192", 192, 8, 395.3, TEP8),
            row("wip15", 15, 4, 2848.6),  # an earlier run: other numbers, same concurrency and GPUs
            row("wip192", 192, 16, 4582.6),  # 16 decode GPUs: not the database's 8
            row("wip30", 30, 4, 3381.4),  # no database run at 30 users
        ]
    )
    assert said == {"wip15": Speculation(mtp=False, deployment=tep4, row="db15", same_run=False)}
    found = resolve(
        kimi,
        concurrency=15,
        image="",
        prefill=(4, 1, 1, 4, 1),
        decode=(4, 1, 1, 4, 1),
        speculation=said["wip15"],
    )
    assert (found.prefill, found.decode, found.nextn) == (*tep4, 0)
    assert found.source == "as the results database's run at its concurrency and GPUs per role, row db15"
    with pytest.raises(Unresolved, match=r"no InferenceX disaggregated entry for moonshotai/Kimi-K2\.5"):
        resolve(kimi, concurrency=30, image="", prefill=(4, 1, 1, 4, 1), decode=(4, 1, 1, 4, 1))
    # Where a bundled entry names the config, its entries decide, not another run's deployment.
    other_run = Speculation(mtp=False, deployment=TEP8, row="db", same_run=False)
    with pytest.raises(Unresolved, match="ambiguous"):
        _resolve(12, 8, speculation=other_run)


GLM5_RECIPE = """
name: "glm5_nvfp4_ISL1K_OSL1K_ctx1dep4_gen4tep8_batch128_allconc_eplb0_mtp0"
model:
  container: "/squash/trtllm-glm5-aarch64-20260402.sqsh"
  precision: "fp4"
resources:
  gpu_type: "gb200"
  prefill_workers: 1
  gpus_per_prefill: 4
  decode_workers: 4
  gpus_per_decode: 8
backend:
  type: trtllm
  trtllm_config:
    prefill: {tensor_parallel_size: 4, moe_expert_parallel_size: 4, enable_attention_dp: true}
    decode:
      tensor_parallel_size: 8
      moe_expert_parallel_size: 8
      enable_attention_dp: false
      speculative_config: {decoding_type: MTP, num_nextn_predict_layers: 3}
benchmark: {isl: 1024, osl: 1024, concurrencies: "4x180x360"}
"""
GLM5_PATH = (
    "recipes/GLM5/disagg/trtllm_dynamo/gb200_nvfp4/ISL1K_OSL1K/MTP/ctx1dep4_gen4tep8_batch128_mtp3.yaml"
)


def test_an_srt_slurm_recipe_becomes_a_config_with_its_repository_commit_and_path(tmp_path):
    recipe = tmp_path / GLM5_PATH
    recipe.parent.mkdir(parents=True)
    recipe.write_text(GLM5_RECIPE)
    config = _extractor().extract_recipe(GLM5_RECIPE, GLM5_PATH, "abc123")
    assert (config["model"], config["system"], config["backend"], config["precision"]) == (
        "zhipuai/GLM-5",
        "gb200",
        "trtllm",
        "fp4",
    )
    assert (config["repository"], config["commit"], config["image"]) == (
        "NVIDIA/srt-slurm",
        "abc123",
        "trtllm-glm5-aarch64-20260402.sqsh",
    )
    (entry,) = config["entries"]
    assert entry["concurrency"] == [4, 180, 360]  # written x-separated
    assert entry["prefill"] == {"workers": 1, "tp": 4, "ep": 4, "attention_dp": True}
    assert entry["decode"] == {"workers": 4, "tp": 8, "ep": 8, "attention_dp": False}
    assert (entry["spec_decoding"], entry["mtp_draft_tokens"], entry["recipe"]) == ("mtp", 3, GLM5_PATH)
    # --recipe alone keeps the table's InferenceX configs and versions and adds the recipe's.
    out = tmp_path / "table.json"
    master = tmp_path / "master.yaml"
    master.write_text(CONFIG_YAML)
    assert _extractor().main([f"{master}@def456", "--out", str(out)]) == 0
    assert _extractor().main(["--recipe", f"{tmp_path}@abc123:{GLM5_PATH}", "--out", str(out)]) == 0
    assert _extractor().main(["--recipe", f"{tmp_path}@abc123:{GLM5_PATH}", "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    assert [(c["repository"], c["commit"]) for c in table["configs"]] == [
        ("SemiAnalysisAI/InferenceX", "def456"),
        ("NVIDIA/srt-slurm", "abc123"),
    ]
    assert table["source"]["commits"] == ["def456", "abc123"]
    assert table["source"]["versions"][1] == {"repository": "NVIDIA/srt-slurm", "commit": "abc123"}


def test_an_allconc_recipe_records_the_batch_each_merged_concurrency_ran_at():
    merged = GLM5_RECIPE.replace(
        'name: "glm5', '# Merged concurrencies: batch1(4), batch32(180), batch64(360)\nname: "glm5'
    )
    (entry,) = _extractor().extract_recipe(merged, GLM5_PATH, "a")["entries"]
    assert entry["batch_at"] == [[4, 1], [180, 32], [360, 64]]
    (plain,) = _extractor().extract_recipe(GLM5_RECIPE, GLM5_PATH, "a")["entries"]
    assert "batch_at" not in plain


def test_a_merged_concurrency_runs_at_its_own_decode_batch_others_at_the_recipe_names():
    raw = _entry(
        [4, 180, 616], (1, 4, 4, True), (4, 8, 8, False), recipe="ctx1dep4_gen4tep8_batch128_allconc.yaml"
    )
    config = TABLE["configs"][0] | {"entries": [raw | {"batch_at": [[4, 1], [180, 32]]}]}
    (entry,) = parse_table({"configs": [config]})
    assert [entry.decode_batch(u) for u in (4, 180, 616)] == [1, 32, 128]


def test_a_recipe_whose_tensor_parallel_size_is_not_its_workers_gpus_is_refused():
    with pytest.raises(ValueError, match="tensor_parallel_size 8 is not the worker's 4 GPUs"):
        _extractor().extract_recipe(
            GLM5_RECIPE.replace("gpus_per_decode: 8", "gpus_per_decode: 4"), GLM5_PATH, "a"
        )


def test_a_recipe_entry_matches_rows_exported_with_each_roles_gpus_as_tp_and_moe_tp():
    entries = parse_table(
        {
            "configs": [
                {
                    "config": "recipes/GLM5/disagg/trtllm_dynamo/gb200_nvfp4",
                    "model": "zhipuai/GLM-5",
                    "system": "gb200",
                    "backend": "trtllm",
                    "precision": "fp4",
                    "image": "glm5.sqsh",
                    "commit": "b8ae71a5" + "0" * 32,
                    "repository": "NVIDIA/srt-slurm",
                    "entries": [_entry([4, 180], (1, 4, 4, True), (4, 8, 8, False), recipe=GLM5_PATH)],
                }
            ]
        }
    )
    glm5 = RunKey("zhipuai/GLM-5", "fp4", "gb200", "trtllm", 1024, 1024)
    found = resolve(
        glm5, concurrency=180, image="", prefill=(4, 1, 1, 4, 1), decode=(8, 1, 1, 8, 1), entries=entries
    )
    # The recipe's own split: DEP4 prefill, four TEP8 decode workers; its name caps them at 128.
    assert found.prefill == WorkerShape(workers=1, tp=1, attention_dp=4, moe_tp=1, moe_ep=4)
    assert found.decode == WorkerShape(workers=4, tp=8, attention_dp=1, moe_tp=1, moe_ep=8)
    assert (found.decode_max_batch, found.source) == (128, f"NVIDIA/srt-slurm@b8ae71a5 {GLM5_PATH}")
    # InferenceX's export form (the prefill ep as moe_ep) is not how those rows were written.
    with pytest.raises(Unresolved, match="no version has an entry"):
        resolve(
            glm5, concurrency=180, image="", prefill=(4, 1, 1, 1, 4), decode=(8, 1, 1, 2, 4), entries=entries
        )


def test_the_bundled_glm5_gb200_rows_replay_on_their_srt_slurm_recipes(tmp_path):
    # The 2026-03-25 export's work-in-progress GLM-5 rows: no image, each role's GPUs as tp.
    path = tmp_path / "glm5.csv"
    rows = [
        _silicon_row("tep8", 180, (4, 4, 1), (8, 8, 1), image="wip=True"),
        _silicon_row("tep4", 30, (4, 4, 1), (4, 4, 1), image="wip=True"),
        _silicon_row("dep32", 1229, (4, 4, 1), (32, 32, 1), image="wip=True"),
        _silicon_row("tep2", 7, (4, 4, 1), (4, 4, 1), image="wip=True"),  # no recipe runs 7 users
    ]
    text = "\n".join([HEADER, *rows]).replace("deepseek-ai/DeepSeek-R1", "zhipuai/GLM-5")
    path.write_text(text.replace("model=DeepSeek-R1", "model=GLM-5") + "\n")
    read = {r.id: r for r in read_measured(path)}
    tep8 = read["tep8"]
    assert tep8.problem == "" and tep8.nextn == 0
    assert (tep8.prefill.workers, tep8.prefill.attn_dp, tep8.decode.workers, tep8.decode.tp) == (1, 4, 4, 8)
    # The allconc recipe's cap is 128; 180 users ran its merged batch32 recipe.
    assert tep8.decode.max_batch == 32
    assert tep8.workers_from.startswith("NVIDIA/srt-slurm@b8ae71a5 recipes/GLM5/disagg/trtllm_dynamo/")
    assert (read["tep4"].decode.workers, read["tep4"].decode.tp, read["tep4"].decode.max_batch) == (5, 4, 4)
    assert (read["dep32"].decode.workers, read["dep32"].decode.attn_dp) == (1, 32)
    assert "no version has an entry" in read["tep2"].problem
    # The catalog's GLM-5 replays in those shapes.
    for row in ("tep8", "tep4", "dep32"):
        plan = build_case(read[row]).plan
        assert plan.decode.replicas == read[row].decode.workers
    assert build_case(tep8).plan.decode.attention_dp == 1


NODES_YAML = """
dsr1-fp8-gb200-dynamo-sglang:
  image: nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.5.1-rc0.pre1
  model-prefix: dsr1
  runner: gb200
  precision: fp8
  framework: dynamo-sglang
  disagg: true
  seq-len-configs:
  - isl: 8192
    osl: 1024
    search-space:
    - spec-decoding: "none"
      conc-list: [ 128, 384 ]
      prefill:
        num-worker: 6
        tp: 1
        ep: 1
        dp-attn: true
        additional-settings: ["PREFILL_NODES=12", "N_ADDITIONAL_FRONTENDS=8"]
      decode:
        num-worker: 1
        tp: 1
        ep: 1
        dp-attn: true
        additional-settings: ["DECODE_NODES=6"]
"""


def test_the_extraction_reads_workers_sized_in_nodes_as_their_gpus_and_keep_adds_an_older_version(tmp_path):
    (config,), _ = _extractor().extract(NODES_YAML, "00e77d0b", "dukebw/InferenceMAX")
    (entry,) = config["entries"]
    # 12 nodes of 4 GPUs over 6 prefill workers: DEP8 each; 6 nodes for the one decode worker.
    assert entry["prefill"] == {"workers": 6, "tp": 1, "ep": 8, "attention_dp": True}
    assert entry["decode"] == {"workers": 1, "tp": 1, "ep": 24, "attention_dp": True}
    (parsed,) = parse_table({"configs": [config]})
    assert parsed.total_gpus == 72
    assert parsed.shapes()[0] == WorkerShape(workers=6, tp=1, attention_dp=8, moe_tp=1, moe_ep=8)
    newer, older, out = tmp_path / "new.yaml", tmp_path / "old.yaml", tmp_path / "table.json"
    newer.write_text(CONFIG_YAML)
    older.write_text(NODES_YAML)
    extractor = _extractor()
    assert extractor.main([f"{newer}@abc123", "--out", str(out)]) == 0
    assert extractor.main(["--keep", f"{older}@def456@dukebw/InferenceMAX", "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    assert [c["commit"] for c in table["configs"]] == ["abc123", "def456"]
    assert table["source"]["versions"][-1] == {"repository": "dukebw/InferenceMAX", "commit": "def456"}


def test_a_rows_day_sweep_names_the_version_that_ran_it():
    run = RunKey("deepseek-ai/DeepSeek-R1", "fp8", "gb200", "sglang", 8192, 1024)
    whole = (72, 1, 1, 72, 1)
    # Without its sweep the row at 512 users could be any of three versions' 72-GPU entries.
    with pytest.raises(Unresolved, match="3 versions run different deployments"):
        resolve(run, concurrency=512, image="", prefill=whole, decode=whole)
    # Its day also ran 128 to 576 users on 72 GPUs: only the November version lists those.
    day = frozenset((users, 72) for users in (128, 256, 384, 448, 512, 576, 1024, 2048, 4096))
    found = resolve(
        run, concurrency=512, image="", prefill=whole, decode=whole, sweep=Sweep("2025-12-05", day)
    )
    assert found.source == "InferenceX dsr1-fp8-gb200-dynamo-sglang@00e77d0b"
    assert (found.prefill.workers, found.prefill.attention_dp, found.decode.attention_dp) == (6, 8, 24)
    # A sweep no version covers whole leaves every version in (the rule needs one that has it all).
    odd = Sweep("2025-12-05", frozenset({(512, 72), (4608, 72)}))
    with pytest.raises(Unresolved, match="3 versions run different deployments"):
        resolve(run, concurrency=512, image="", prefill=whole, decode=whole, sweep=odd)


def test_a_version_whose_image_first_ran_after_another_was_still_run_came_after_the_rows_day():
    run = RunKey("deepseek-ai/DeepSeek-R1", "fp8", "gb200", "sglang", 1024, 1024)
    twenty = (20, 1, 1, 20, 1)
    # 1 prefill + 4 decode workers on 20 GPUs at 8 users: the November version (DEP4 workers)
    # and the December one (its low-latency script launches plain TP4) both list the day's sweep.
    runs = frozenset({(8, 20), (1024, 72)})
    with pytest.raises(Unresolved, match="2 versions run different deployments"):
        resolve(run, concurrency=8, image="", prefill=twenty, decode=twenty, sweep=Sweep("2025-12-05", runs))
    # November's image was still run on 2025-12-15, December's first on 2025-12-19.
    images = (
        ("lmsysorg/sglang:v0.5.5.post2", "2025-12-19", "2025-12-21"),
        ("nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.5.1-rc0.pre1", "2025-12-15", "2025-12-15"),
    )
    found = resolve(
        run, concurrency=8, image="", prefill=twenty, decode=twenty, sweep=Sweep("2025-12-05", runs, images)
    )
    assert found.source == "InferenceX dsr1-fp8-gb200-dynamo-sglang@00e77d0b 1p_4d.sh"
    assert (found.decode.workers, found.decode.attention_dp, found.decode.moe_ep) == (4, 4, 4)
    # A row of a day after the older image's last run says nothing of the order.
    late = Sweep("2025-12-16", runs, images)
    assert not late.excludes("lmsysorg/sglang:v0.5.5.post2", [i for i, _, _ in images])


def test_sweeps_group_a_configs_rows_by_run_key_and_day_and_span_its_recorded_images():
    run = RunKey("deepseek-ai/DeepSeek-R1", "fp8", "gb200", "sglang", 8192, 1024)
    rows = [
        ("a", run, "2025-12-05", 128, 72),
        ("b", run, "2025-12-05", 512, 72),
        ("c", run, "2025-12-06", 512, 72),
    ]
    # The results database names R1's runs DeepSeek-V3; other lengths are the same config.
    db = dataclasses.replace(run, model="deepseek-ai/DeepSeek-V3", isl=1024)
    recorded = [(run, "img:a", "2025-12-15"), (db, "img:a", "2025-12-01"), (run, "img:b", "2025-12-19")]
    found = sweeps(rows, recorded)
    assert found["a"].runs == found["b"].runs == frozenset({(128, 72), (512, 72)})
    assert found["c"] == Sweep("2025-12-06", frozenset({(512, 72)}), found["a"].images)
    assert found["a"].images == (("img:a", "2025-12-01", "2025-12-15"), ("img:b", "2025-12-19", "2025-12-19"))


def test_a_config_no_version_names_gets_the_srt_slurm_decode_cap_of_its_sweep(tmp_path):
    # Kimi-K2.5: no InferenceX version or recipe names its GB200 TensorRT-LLM runs. The results
    # database's runs of one config id and deployment are one sweep, capped for its largest
    # concurrency (55 users on five TEP8 decode workers: 8 a worker); a work-in-progress row of
    # the dated export ran one recipe per concurrency (15 users: 2 a worker).
    path = tmp_path / "kimi.csv"
    rows = [_results_db_row(f"db{u}", "fp4", 1024, u, 5, u // 5) for u in (5, 15, 55)]
    rows += [_silicon_row("wip15", 15, (4, 4, 1), (8, 8, 1), image="wip=True")]
    text = "\n".join([HEADER, *rows])
    for name in ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"):
        text = text.replace(name, "moonshotai/Kimi-K2.5")
    path.write_text(text + "\n")
    read = {r.id: r for r in read_measured(path)}
    assert [read[f"db{u}"].decode.max_batch for u in (5, 15, 55)] == [8, 8, 8]
    assert read["db55"].workers_from == "decode batch 8: the srt-slurm recipes' cap for a sweep to 55 users"
    wip = read["wip15"]
    assert (wip.problem, wip.decode.workers, wip.decode.max_batch) == ("", 5, 2)
    assert build_case(wip).plan.decode.max_num_seqs == 2
    # A config a bundled entry names keeps what its entries say (none here: no cap).
    deepseek = tmp_path / "dsr1.csv"
    deepseek.write_text("\n".join([HEADER, _results_db_row("named", "fp4", 1024, 55, 5, 11)]) + "\n")
    (named,) = read_measured(deepseek)
    assert named.decode.max_batch is None
    # Nor does a run another tool measured (not launched from srt-slurm recipes).
    other = tmp_path / "other.csv"
    other.write_text(text.replace("db-dump/2026-04-27", "source_file=/data/gap-analysis.csv") + "\n")
    assert [r.decode.max_batch for r in read_measured(other) if r.id.startswith("db")] == [None] * 3


@pytest.mark.parametrize(
    ("users", "ranks", "batch"),
    [(15, 5, 2), (30, 5, 4), (50, 5, 8), (180, 4, 32), (616, 4, 128), (2253, 16, 128), (3, 4, 1)],
)
def test_the_srt_slurm_convention_caps_a_decode_rank_at_the_largest_power_of_two_the_users_fill(
    users, ranks, batch
):
    assert conventional_max_batch(users, ranks) == batch
