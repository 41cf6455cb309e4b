"""Launch flags per engine and the Dynamo graph deployment of a winning sample."""

import json

import yaml

from aisimulate.spica.artifacts import dynamo_graph_deployment, launch_commands
from aisimulate.spica.config import SmartSearchConfig
from aisimulate.spica.output import describe
from aisimulate.spica.parallel import DisaggConfig, ReplicaConfig, WorkerShape
from aisimulate.spica.sample import unroll_sample
from tests.spica.test_sample import AGG, AGG_SELECTION, CONFIG, DISAGG_SELECTION, SPACE

MOE_SPACE = SmartSearchConfig.from_mapping(
    {
        **json.loads(CONFIG.model_dump_json(exclude_defaults=True)),
        "search_space": {
            **json.loads(SPACE.model_dump_json(exclude_defaults=True)),
            "model_name": "Qwen/Qwen3-30B-A3B",
        },
    }
).search_space
MOE_DISAGG = DisaggConfig(
    ReplicaConfig(WorkerShape(tp=2, moe_ep=2), 1), ReplicaConfig(WorkerShape(attention_dp=4, moe_ep=4), 2)
)


def disagg(backend):
    selection = {**DISAGG_SELECTION, "backend": backend, "planner_scaling_policy": "disabled"}
    return unroll_sample(MOE_SPACE, selection, MOE_DISAGG)


def test_vllm_flags_for_an_aggregated_dense_winner():
    script = launch_commands(unroll_sample(SPACE, AGG_SELECTION, AGG))
    command = script.splitlines()[-1]
    assert command.startswith(
        "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 4 --data-parallel-size 1"
    )
    assert "--max-num-seqs 256 --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9" in command
    assert "--enable-expert-parallel" not in command and "# agg: 2 replica(s) of 4 GPU(s) each" in script


def test_each_engine_gets_its_own_flag_names_for_a_moe_disagg_pair():
    vllm = launch_commands(disagg("vllm")).splitlines()
    decode = vllm[-1]
    assert "--tensor-parallel-size 1 --data-parallel-size 4 --enable-expert-parallel" in decode
    assert "--max-num-seqs 512" in decode and "--no-enable-prefix-caching" in decode
    sglang = launch_commands(disagg("sglang")).splitlines()
    assert "--tp-size 4 --dp-size 4 --enable-dp-attention --ep-size 4" in sglang[-1]
    assert "--disaggregation-mode decode" in sglang[-1] and "--disaggregation-mode prefill" in sglang[-3]
    trtllm = launch_commands(disagg("trtllm")).splitlines()
    assert "trtllm-serve Qwen/Qwen3-30B-A3B --tp_size 2 --ep_size 2 --max_batch_size 8" in trtllm[-3]


def test_dynamo_graph_deployment_has_a_service_per_role():
    manifest = yaml.safe_load(dynamo_graph_deployment(disagg("sglang"), "spica-disagg-1"))
    assert (manifest["apiVersion"], manifest["kind"]) == ("nvidia.com/v1alpha1", "DynamoGraphDeployment")
    services = manifest["spec"]["services"]
    assert set(services) == {"Frontend", "SglangPrefillWorker", "SglangDecodeWorker"}
    decode = services["SglangDecodeWorker"]
    assert (decode["replicas"], decode["subComponentType"], decode["resources"]["limits"]["gpu"]) == (
        2,
        "decode",
        "4",
    )
    assert decode["extraPodSpec"]["mainContainer"]["command"] == ["python3", "-m", "dynamo.sglang"]
    assert services["Frontend"]["extraPodSpec"]["mainContainer"]["args"] == ["--router-mode", "kv"]


def test_a_winner_is_spelled_out():
    words = describe(disagg("vllm"))
    assert words["shape"] == "prefill 1× tp2·ep2 (2 GPU each); decode 2× tp1·dp4·ep4 (4 GPU each)"
    assert (words["gpus"], words["router"], words["planner"]) == ("10", "kv_router", "disabled")
    assert words["batching"] == "prefill seqs 8, tokens 16384; decode seqs 512, tokens 8192"
