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

``--commit`` names the InferenceX commit the file was taken at (several files: give each with its
commit, ``FILE@SHA``); entries of every file are kept, each with its commit.
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
MTP_DEPTH = re.compile(r"_mtp(\d+)(?:_\d+)?\.yaml")


def _role(block: dict) -> dict:
    return {
        "workers": int(block["num-worker"]),
        "tp": int(block["tp"]),
        "ep": int(block.get("ep", 1)),
        "attention_dp": bool(block.get("dp-attn", False)),
    }


def _recipe(entry: dict) -> str:
    for role in ("prefill", "decode"):
        for setting in entry[role].get("additional-settings") or []:
            if str(setting).startswith("CONFIG_FILE="):
                return Path(str(setting).split("=", 1)[1]).name
    return ""


def extract(text: str, commit: str) -> tuple[list[dict], list[str]]:
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
                "entries": entries,
            }
        )
        for seq in config["seq-len-configs"]:
            for entry in seq["search-space"]:
                recipe = _recipe(entry)
                spec = str(entry.get("spec-decoding", "none"))
                depth = MTP_DEPTH.search(recipe) if spec == "mtp" else None
                entries.append(
                    {
                        "isl": int(seq["isl"]),
                        "osl": int(seq["osl"]),
                        "concurrency": [int(c) for c in entry["conc-list"]],
                        "prefill": _role(entry["prefill"]),
                        "decode": _role(entry["decode"]),
                        "spec_decoding": spec,
                        "mtp_draft_tokens": int(depth[1]) if depth else None,
                        "recipe": recipe,
                    }
                )
    return configs, left_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="nvidia-master.yaml, or FILE@COMMIT for several")
    parser.add_argument("--commit", default="", help="the InferenceX commit of a single file")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    configs, commits = [], []
    for spec in args.files:
        path, _, commit = spec.partition("@")
        commit = commit or args.commit
        if not commit:
            parser.error(f"{spec}: name its InferenceX commit (--commit SHA or FILE@SHA)")
        found, left_out = extract(Path(path).read_text(encoding="utf-8"), commit)
        configs += found
        commits.append(commit)
        for line in left_out:
            print(f"left out: {line}", file=sys.stderr)
    table = {
        "source": {
            "repository": REPOSITORY,
            "path": PATH,
            "commits": commits,
            "licence": "Apache-2.0",
            "note": "facts of InferenceX's disaggregated benchmark configs; extracted by "
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
