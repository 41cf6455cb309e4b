"""Extract InferenceX's disaggregated NVIDIA benchmark entries into aisimulate's bundled table.

InferenceX (https://github.com/SemiAnalysisAI/InferenceX, Apache-2.0) declares every multi-node
disaggregated benchmark it runs in ``.github/configs/nvidia-master.yaml``: per config (model,
precision, runner, framework) and per sequence length a search space of entries, each a list of
concurrencies run on one prefill/decode deployment (``num-worker``, ``tp``, ``ep``, ``dp-attn`` per
role), some with speculative decoding (``spec-decoding: mtp``; the number of draft tokens is in
the TensorRT-LLM recipe's name, ``..._mtp3.yaml``).

The table (``aisimulate/fidelity/data/inferencex_disagg.json``) keeps those facts, one entry per
search-space entry, under our names: the model id, the system, the backend. It is read at run time
by ``aisimulate.fidelity.inferencex``; this script is not.

    python benchmarks/extract_inferencex_disagg.py nvidia-master.yaml --commit <sha> [--out FILE]
    python benchmarks/extract_inferencex_disagg.py NEWEST.yaml@SHA OLDER.yaml@SHA@OWNER/REPO ...

``--commit`` names the InferenceX commit the file was taken at; several versions of the file are
given newest first, each ``FILE@SHA`` (``FILE@SHA@OWNER/REPO`` when read from another repository
than SemiAnalysisAI/InferenceX, e.g. its earlier name InferenceMAX/InferenceMAX). Every config
keeps its commit, repository and image, so a row matches the version that names its container; a
config an earlier-listed (newer) file already holds with the same image is left out.

Some runs InferenceX exported were launched from NVIDIA/srt-slurm recipes its file never named
(the 2026-03-25 export's work-in-progress GB200 GLM-5 rows). ``--recipe CHECKOUT@SHA:PATH`` reads
one such recipe (``PATH`` inside a checkout of https://github.com/NVIDIA/srt-slurm, Apache-2.0, at
``SHA``) into a config of its own, with that repository, commit and the recipe's path. Without
InferenceX files the table at ``--out`` is kept and only its recipe configs are replaced:

    python benchmarks/extract_inferencex_disagg.py --recipe CHECKOUT@SHA:recipes/GLM5/.../x.yaml ...

``--keep`` adds older versions to the table at ``--out`` as it is (configs it holds with the same
image stay as they are): the November 2025 ``dsr1-fp8-gb200-dynamo-sglang`` whose 8k/1k entry lists
128 to 576 users, read at commit ``00e77d0b`` of InferenceMAX's history (as the fork
dukebw/InferenceMAX holds it):

    python benchmarks/extract_inferencex_disagg.py --keep nvidia-master.yaml@00e77d0b...@dukebw/InferenceMAX
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

REPOSITORY = "SemiAnalysisAI/InferenceX"
PATH = ".github/configs/nvidia-master.yaml"
OUT = Path(__file__).resolve().parents[1] / "aisimulate" / "fidelity" / "data" / "inferencex_disagg.json"

# InferenceX's model-prefix -> the model id AIConfigurator's serving runs give its rows.
MODELS = {
    "dsr1": "deepseek-ai/DeepSeek-R1",
    "gptoss": "openai/gpt-oss-120b",
    "kimik2.5": "moonshotai/Kimi-K2.5",
    "glm5": "zhipuai/GLM-5",
}
# InferenceX runner (its GPU pool) -> our system; a pool's suffix (-multinode, -nvs, ...) is dropped.
SYSTEMS = {
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "h100": "h100_sxm",
    "h200": "h200_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
}
BACKENDS = {"dynamo-trt": "trtllm", "dynamo-sglang": "sglang", "dynamo-vllm": "vllm"}
RECIPES_REPOSITORY = "NVIDIA/srt-slurm"
# srt-slurm's model folder (``recipes/<MODEL>/...``) -> our model id; its ``backend.type`` -> ours.
RECIPE_MODELS = {"GLM5": "zhipuai/GLM-5"}
RECIPE_BACKENDS = {"trtllm": "trtllm", "sglang": "sglang", "vllm": "vllm"}
MTP_DEPTH = re.compile(r"_mtp(\d+)(?:_\d+)?\.yaml")
# Before its recipes, InferenceX launched these TensorRT-LLM runs with inline settings, the draft
# tokens among them (``DECODE_MTP_SIZE=3``).
MTP_SETTING = re.compile(r"DECODE_MTP_SIZE=(\d+)")
# SGLang recipes (srt-slurm, ``CONFIG_FILE`` as InferenceX names them) whose names do not carry the
# draft count: EAGLE with ``speculative-num-steps: 2``, ``speculative-eagle-topk: 1``,
# ``speculative-num-draft-tokens: 3`` on both roles (read at csahithi/srt-slurm 31050f9a), i.e. two
# drafted tokens a step.
RECIPE_MTP_DRAFTS = {
    "recipes/h100/1k1k/mtp/h100-fp8-1p1d-max-dep-mtp.yaml": 2,
    "recipes/h100/1k1k/mtp/h100-fp8-1p2d-max-tp-mtp.yaml": 2,
    "recipes/h100/8k1k/mtp/h100-fp8-1p1d-max-tp-mtp.yaml": 2,
}
# Configs (name, image) whose client ran each listed concurrency once per decode worker: the dated
# exports record exactly the list times the decode workers for every multi-worker entry of these
# (dsr1-fp4-gb200-dynamo-trt before its recipes: 4 TEP8 workers at 4 x [1 2 4 8 16 36 ...] =
# 4, 8, ... 144; 3 at 3 x [1 2 4 8 18] = 3, ... 54), never the list itself.
USERS_PER_DECODE_WORKER = {
    ("dsr1-fp4-gb200-dynamo-trt", "nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:0.5.1-rc0.pre3"),
}


# GPUs in one node of a runner whose earliest SGLang configs size workers in nodes (a GB200 NVL72
# compute tray holds 4 GPUs).
GPUS_PER_NODE = {"gb200": 4}
# Those configs (InferenceMAX's November 2025 ``dsr1-fp8-gb200-dynamo-sglang``, Dynamo's
# ``sglang-runtime:0.5.1-rc0.pre1``) write ``tp: 1``, ``ep: 1`` ("they do nothing because they are
# hardcoded" in the launch script) and each role's nodes, all its workers' together, as
# ``PREFILL_NODES`` / ``DECODE_NODES`` (their comments: "6 prefill workers" on 12 nodes are DEP8).
ROLE_NODES = re.compile(r"(?:PREFILL|DECODE)_NODES=(\d+)")


def _role(block: dict, runner: str = "") -> dict:
    """A role as the config writes it; where it sizes its workers only in nodes, the worker's GPUs
    as ``ep`` with ``tp`` 1, the way InferenceX's December configs of the same launch scripts write
    them (``RoleEntry.gpus``)."""
    workers, tp, ep = int(block["num-worker"]), int(block["tp"]), int(block.get("ep", 1))
    per_node = GPUS_PER_NODE.get(runner.split("-")[0])
    for setting in block.get("additional-settings") or []:
        found = ROLE_NODES.fullmatch(str(setting).strip())
        if found and per_node and tp == ep == 1:
            gpus, rest = divmod(int(found[1]) * per_node, workers)
            if rest:
                raise ValueError(f"{setting} does not split over {workers} workers")
            ep = gpus
    return {"workers": workers, "tp": tp, "ep": ep, "attention_dp": bool(block.get("dp-attn", False))}


def _mtp_depth(entry: dict, recipe: str) -> int | None:
    """The draft tokens an MTP entry names: in its recipe's file name or body, or an inline setting."""
    found = MTP_DEPTH.search(recipe)
    if found:
        return int(found[1])
    if recipe in RECIPE_MTP_DRAFTS:
        return RECIPE_MTP_DRAFTS[recipe]
    for setting in entry["decode"].get("additional-settings") or []:
        found = MTP_SETTING.fullmatch(str(setting).strip())
        if found:
            return int(found[1])
    return None


def _recipe(entry: dict) -> str:
    """The recipe file the entry launches, as its ``CONFIG_FILE`` names it, or the launch script
    its ``SCRIPT_MODE`` picks (InferenceX's December SGLang GB200 configs: Dynamo's
    ``slurm_jobs/scripts/gb200-fp{4,8}/disagg/<SCRIPT_MODE>.sh``); "" when none."""
    for role in ("prefill", "decode"):
        for setting in entry[role].get("additional-settings") or []:
            if str(setting).startswith("CONFIG_FILE="):
                return str(setting).split("=", 1)[1].strip()
    for role in ("prefill", "decode"):
        for setting in entry[role].get("additional-settings") or []:
            if str(setting).startswith("SCRIPT_MODE="):
                return str(setting).split("=", 1)[1].strip() + ".sh"
    return ""


def extract(text: str, commit: str, repository: str = REPOSITORY) -> tuple[list[dict], list[str]]:
    """The disaggregated NVIDIA configs of one nvidia-master.yaml, and what was left out and why."""
    configs, left_out = [], []
    for name, config in yaml.safe_load(text).items():
        if not isinstance(config, dict) or not config.get("disagg"):
            continue
        runner = str(config["runner"])
        known = {
            "model": MODELS.get(config.get("model-prefix", "")),
            "system": SYSTEMS.get(runner.split("-")[0]),
            "backend": BACKENDS.get(config["framework"]),
        }
        raw = {"model": config.get("model-prefix"), "system": runner, "backend": config["framework"]}
        missing = [f"{k} of {raw[k]!r}" for k, v in known.items() if v is None]
        if missing:
            left_out.append(f"{name}: no mapping for {', '.join(missing)}")
            continue
        entries: list[dict] = []
        configs.append(
            {
                "config": name,
                **known,
                "precision": config["precision"],
                "image": config["image"],
                "commit": commit,
                "repository": repository,
                "users_per_decode_worker": (name, config["image"]) in USERS_PER_DECODE_WORKER,
                "entries": entries,
            }
        )
        for seq in config["seq-len-configs"]:
            for entry in seq["search-space"]:
                config_file = _recipe(entry)
                recipe = Path(config_file).name if config_file else ""
                spec = str(entry.get("spec-decoding", "none"))
                depth = _mtp_depth(entry, config_file) if spec == "mtp" else None
                entries.append(
                    {
                        "isl": int(seq["isl"]),
                        "osl": int(seq["osl"]),
                        "concurrency": [int(c) for c in entry["conc-list"]],
                        "prefill": _role(entry["prefill"], runner),
                        "decode": _role(entry["decode"], runner),
                        "spec_decoding": spec,
                        "mtp_draft_tokens": depth,
                        "recipe": recipe,
                    }
                )
    return configs, left_out


def _recipe_role(workers: int, gpus: int, settings: dict) -> dict:
    """A recipe's role as InferenceX's entries write one: ``tp`` the worker's GPUs (TensorRT-LLM's
    ``tensor_parallel_size`` spans the attention-DP ranks too)."""
    tp = int(settings["tensor_parallel_size"])
    if tp != gpus:
        raise ValueError(f"tensor_parallel_size {tp} is not the worker's {gpus} GPUs")
    return {
        "workers": workers,
        "tp": tp,
        "ep": int(settings.get("moe_expert_parallel_size", 1)),
        "attention_dp": bool(settings.get("enable_attention_dp", False)),
    }


# An ``allconc`` recipe merges the recipes of one deployment run one per concurrency, each at its
# own decode ``max_batch_size``, and records them in a comment:
# ``# Merged concurrencies: batch1(5), batch2(15), batch4(30), batch8(50)``.
MERGED = re.compile(r"^#\s*Merged concurrencies:(.*)$", re.MULTILINE)
MERGED_PAIR = re.compile(r"batch(\d+)\((\d+)\)")


def merged_batches(text: str) -> list[list[int]]:
    """[concurrency, decode max_batch_size] of each recipe an ``allconc`` recipe's comment says it
    merges, in its order; [] where it names none."""
    found = MERGED.search(text)
    if found is None:
        return []
    return [[int(users), int(batch)] for batch, users in MERGED_PAIR.findall(found[1])]


def extract_recipe(text: str, path: str, commit: str) -> dict:
    """One srt-slurm TensorRT-LLM disaggregated recipe as a config of one entry: its deployment
    (``resources``, ``trtllm_config``), MTP draft tokens (``speculative_config``), lengths and
    concurrencies (``benchmark``; written space- or ``x``-separated), the decode batch each
    concurrency ran at where the recipe merges per-concurrency ones (``merged_batches``), and its
    container."""
    recipe = yaml.safe_load(text)
    folder = Path(path).parts[1]
    res, backend = recipe["resources"], recipe["backend"]
    known = {
        "model": RECIPE_MODELS.get(folder),
        "system": SYSTEMS.get(str(res["gpu_type"])),
        "backend": RECIPE_BACKENDS.get(str(backend["type"])),
    }
    missing = [k for k, v in known.items() if v is None]
    if missing:
        raise ValueError(f"{path}: no mapping for {', '.join(missing)}")
    roles = backend["trtllm_config"]
    speculative = roles["decode"].get("speculative_config") or {}
    mtp = str(speculative.get("decoding_type", "")).lower() == "mtp"
    bench = recipe["benchmark"]
    entry = {
        "isl": int(bench["isl"]),
        "osl": int(bench["osl"]),
        "concurrency": [int(c) for c in re.split(r"[x\s]+", str(bench["concurrencies"]).strip())],
        "prefill": _recipe_role(int(res["prefill_workers"]), int(res["gpus_per_prefill"]), roles["prefill"]),
        "decode": _recipe_role(int(res["decode_workers"]), int(res["gpus_per_decode"]), roles["decode"]),
        "spec_decoding": "mtp" if mtp else "none",
        "mtp_draft_tokens": int(speculative["num_nextn_predict_layers"]) if mtp else None,
        "recipe": path,
    }
    if merged := merged_batches(text):
        entry["batch_at"] = merged
    return {
        "config": str(Path(path).parent.parent.parent),
        **known,
        "precision": str(recipe["model"]["precision"]),
        "image": Path(str(recipe["model"]["container"])).name,
        "commit": commit,
        "repository": RECIPES_REPOSITORY,
        "users_per_decode_worker": False,
        "entries": [entry],
    }


def _recipe_configs(specs: list[str]) -> list[dict]:
    """``CHECKOUT@SHA:PATH`` recipes as configs, one per recipe folder, commit and container."""
    configs: dict[tuple[str, str, str], dict] = {}
    for spec in specs:
        checkout, _, rest = spec.partition("@")
        commit, _, path = rest.partition(":")
        found = extract_recipe((Path(checkout) / path).read_text(encoding="utf-8"), path, commit)
        key = (found["config"], commit, found["image"])
        if key in configs:
            configs[key]["entries"] += found["entries"]
        else:
            configs[key] = found
    for config in configs.values():
        config["entries"].sort(key=lambda e: (e["isl"], e["recipe"]))
    return sorted(configs.values(), key=lambda c: (c["config"], c["commit"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "files", nargs="*", help="nvidia-master.yaml, or FILE@COMMIT[@OWNER/REPO] for several, newest first"
    )
    parser.add_argument(
        "--recipe",
        action="append",
        default=[],
        help="CHECKOUT@SHA:PATH of an srt-slurm recipe InferenceX's file does not name (repeatable)",
    )
    parser.add_argument("--commit", default="", help="the InferenceX commit of a single file")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the table at --out and add the files as versions older than every one it holds",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if not args.files and not args.recipe:
        parser.error("give InferenceX's nvidia-master.yaml files, --recipe files, or both")
    configs, commits, versions = [], [], []
    if args.keep or not args.files:
        kept = json.loads(args.out.read_text(encoding="utf-8"))
        ours = (lambda r: True) if args.keep else (lambda r: r != RECIPES_REPOSITORY)
        configs = [c for c in kept["configs"] if ours(c["repository"])]
        versions = [v for v in kept["source"]["versions"] if ours(v["repository"])]
        commits = [v["commit"] for v in versions]
    for spec in args.files:
        path, _, rest = spec.partition("@")
        commit, _, repository = rest.partition("@")
        commit, repository = commit or args.commit, repository or REPOSITORY
        if not commit:
            parser.error(f"{spec}: name its InferenceX commit (--commit SHA or FILE@SHA)")
        found, left_out = extract(Path(path).read_text(encoding="utf-8"), commit, repository)
        held = {(c["config"], c["image"]) for c in configs}
        for config in found:
            if (config["config"], config["image"]) in held:
                left_out.append(
                    f"{config['config']} at {commit[:8]}: a newer file holds it with the same image"
                )
            else:
                configs.append(config)
        commits.append(commit)
        versions.append({"repository": repository, "commit": commit})
        for line in left_out:
            print(f"left out: {line}", file=sys.stderr)
    for config in _recipe_configs(args.recipe):
        configs.append(config)
        if config["commit"] not in commits:
            commits.append(config["commit"])
            versions.append({"repository": RECIPES_REPOSITORY, "commit": config["commit"]})
    table = {
        "source": {
            "repository": REPOSITORY,
            "path": PATH,
            "commits": commits,
            "versions": versions,
            "licence": "Apache-2.0",
            "note": "facts of InferenceX's disaggregated benchmark configs, and of NVIDIA/srt-slurm "
            "recipes (Apache-2.0) that ran exported runs no config names; extracted by "
            "benchmarks/extract_inferencex_disagg.py",
        },
    }
    # One search-space entry per line: the table stays small and its diffs readable.
    parts = []
    for config in configs:
        head = json.dumps({k: v for k, v in config.items() if k != "entries"})[:-1]
        lines = ",\n  ".join(json.dumps(e, separators=(",", ":")) for e in config["entries"])
        parts.append(f'{head}, "entries": [\n  {lines}\n]}}')
    source = json.dumps(table["source"], indent=1)
    body = ",\n".join(parts)
    args.out.write_text(f'{{"source": {source},\n"configs": [\n{body}\n]}}\n', encoding="utf-8")
    count = sum(len(c["entries"]) for c in configs)
    print(json.dumps({"configs": len(configs), "entries": count, "commits": commits, "out": str(args.out)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
