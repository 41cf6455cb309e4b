"""A winning sample as something to launch: engine command lines and a Dynamo graph deployment.

Pure functions from a flat sample to text, so the output module only decides where it goes.
Flags use each engine's current CLI names; the Dynamo manifest follows the public
``DynamoGraphDeployment`` layout (one service per role with replicas, GPU limits and the engine's
arguments). The container image is a placeholder: which release to run is the user's choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from aisimulate.catalog.backends import backend_profile

IMAGE_PLACEHOLDER = "<dynamo-runtime-image>"


def roles(sample: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(role, prefix of its parallel keys): ``agg`` has unprefixed shape keys."""
    if sample["deployment_mode"] == "disagg":
        return (("prefill", "prefill_"), ("decode", "decode_"))
    return (("agg", ""),)


def gpus_per_engine(sample: Mapping[str, Any], prefix: str) -> int:
    return int(sample[f"{prefix}tp"] * sample[f"{prefix}attention_dp"])


def _vllm(sample: Mapping[str, Any], role: str, prefix: str) -> list[str]:
    args = [
        "--tensor-parallel-size",
        str(sample[f"{prefix}tp"]),
        "--data-parallel-size",
        str(sample[f"{prefix}attention_dp"]),
    ]
    if sample[f"{prefix}moe_ep"] > 1:
        args.append("--enable-expert-parallel")
    args += [
        "--max-num-seqs",
        str(sample[f"{role}_max_num_seqs"]),
        "--max-num-batched-tokens",
        str(sample[f"{role}_max_num_batched_tokens"]),
        "--gpu-memory-utilization",
        str(sample[f"{role}_gpu_memory_utilization"]),
        "--block-size",
        str(sample[f"{role}_block_size"]),
    ]
    args.append(
        "--enable-prefix-caching" if sample[f"{role}_enable_prefix_caching"] else "--no-enable-prefix-caching"
    )
    return args


def _sglang(sample: Mapping[str, Any], role: str, prefix: str) -> list[str]:
    dp = sample[f"{prefix}attention_dp"]
    args = ["--tp-size", str(gpus_per_engine(sample, prefix))]
    if dp > 1:
        args += ["--dp-size", str(dp), "--enable-dp-attention"]
    if sample[f"{prefix}moe_ep"] > 1:
        args += ["--ep-size", str(sample[f"{prefix}moe_ep"])]
    args += [
        "--max-running-requests",
        str(sample[f"{role}_max_num_seqs"]),
        "--chunked-prefill-size",
        str(sample[f"{role}_max_num_batched_tokens"]),
        "--mem-fraction-static",
        str(sample[f"{role}_gpu_memory_utilization"]),
        "--page-size",
        str(sample[f"{role}_block_size"]),
    ]
    if not sample[f"{role}_enable_prefix_caching"]:
        args.append("--disable-radix-cache")
    if role != "agg":
        args += ["--disaggregation-mode", role]
    return args


def _trtllm(sample: Mapping[str, Any], role: str, prefix: str) -> list[str]:
    # Attention data parallelism is an LLM-API option (enable_attention_dp), not a flag.
    args = ["--tp_size", str(gpus_per_engine(sample, prefix))]
    if sample[f"{prefix}moe_ep"] > 1:
        args += ["--ep_size", str(sample[f"{prefix}moe_ep"])]
    args += [
        "--max_batch_size",
        str(sample[f"{role}_max_num_seqs"]),
        "--max_num_tokens",
        str(sample[f"{role}_max_num_batched_tokens"]),
        "--kv_cache_free_gpu_memory_fraction",
        str(sample[f"{role}_gpu_memory_utilization"]),
    ]
    return args


ENGINE_ARGS = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}  # one per backend profile


def engine_args(sample: Mapping[str, Any], role: str, prefix: str) -> list[str]:
    args = ENGINE_ARGS[sample["backend"]](sample, role, prefix)
    if sample.get("context_length"):
        args += [backend_profile(sample["backend"]).context_length_flag, str(sample["context_length"])]
    return args


def launch_commands(sample: Mapping[str, Any]) -> str:
    """A shell script: one standalone engine command per role, with its replica count."""
    lines = [
        "#!/usr/bin/env sh",
        f"# {sample['deployment_mode']} {sample['backend']} for {sample['model_name']}",
    ]
    for role, prefix in roles(sample):
        replicas = sample[f"{prefix}replicas"]
        lines.append(f"# {role}: {replicas} replica(s) of {gpus_per_engine(sample, prefix)} GPU(s) each")
        launcher = backend_profile(sample["backend"]).launch_command
        command = [*launcher, sample["model_name"], *engine_args(sample, role, prefix)]
        lines.append(" ".join(command))
    return "\n".join(lines) + "\n"


def dynamo_graph_deployment(sample: Mapping[str, Any], name: str) -> str:
    """A ``DynamoGraphDeployment`` manifest: a frontend plus one worker service per role."""
    profile = backend_profile(sample["backend"])
    frontend_args = ["--router-mode", "kv"] if sample.get("router_mode") == "kv_router" else []
    services: dict[str, Any] = {
        "Frontend": {
            "componentType": "frontend",
            "replicas": 1,
            "extraPodSpec": {
                "mainContainer": {
                    "image": IMAGE_PLACEHOLDER,
                    "command": ["python3", "-m", "dynamo.frontend"],
                    "args": frontend_args,
                }
            },
        }
    }
    for role, prefix in roles(sample):
        service = profile.service_prefix + ("" if role == "agg" else role.title()) + "Worker"
        args = ["--model", sample["model_name"], *engine_args(sample, role, prefix)]
        if role == "prefill" and profile.prefill_worker_flag:
            args.append(profile.prefill_worker_flag)
        spec: dict[str, Any] = {"componentType": "worker"}
        if role != "agg":
            spec["subComponentType"] = role
        gpus = str(gpus_per_engine(sample, prefix))
        spec.update(
            replicas=sample[f"{prefix}replicas"],
            resources={"limits": {"gpu": gpus}, "requests": {"gpu": gpus}},
            extraPodSpec={
                "mainContainer": {
                    "image": IMAGE_PLACEHOLDER,
                    "command": ["python3", "-m", profile.dynamo_module],
                    "args": args,
                }
            },
        )
        services[service] = spec
    manifest = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": name},
        "spec": {"services": services},
    }
    return yaml.safe_dump(manifest, sort_keys=False)
