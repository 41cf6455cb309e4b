"""Write the measured NCCL all-to-all tables the analytic model interpolates (``alltoall_tables.json``).

    pip install -e ".[aic]"
    python benchmarks/extract_alltoall_tables.py [--db DIR] [--out aisimulate/perf/data/alltoall_tables.json]

Reads AIConfigurator 0.12's NCCL measurements (``systems/data/<system>/comm/nccl/<version>/
nccl_perf``, the version ``extract_kernel_points.py`` keeps) for every system: per GPU count (2,
4, 8 on HGX; 2, 4 on the NVL72 systems) the all-to-all latency at every message size measured
(each GPU's whole send buffer, 512 B - 1 GB, fp16 elements), 4 significant digits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from extract_kernel_points import SYSTEMS, db_and_out, nccl_points

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "aisimulate" / "perf" / "data" / "alltoall_tables.json"


def extract(db: Path) -> dict[str, Any]:
    tables: dict[str, dict[str, dict[str, list[float]]]] = {}
    versions: dict[str, str] = {}
    for system in SYSTEMS:
        for row in sorted(
            (r for r in nccl_points(db, system) if r["op"] == "alltoall"),
            key=lambda r: (int(r["num_gpus"]), int(r["message_elements"])),
        ):
            table = tables.setdefault(system, {}).setdefault(
                str(int(row["num_gpus"])), {"message_bytes": [], "latency_ms": []}
            )
            table["message_bytes"].append(2 * int(row["message_elements"]))
            table["latency_ms"].append(float(f"{float(row['latency_ms']):.4g}"))
            versions[system] = str(row["_version"])
    return {
        "attribution": "Contains performance data from NVIDIA AIConfigurator, Apache-2.0",
        "provenance": (
            "benchmarks/extract_alltoall_tables.py: aiconfigurator-core 0.12.0 systems/data/<system>/comm/"
            "nccl/<version>/nccl_perf, op alltoall"
        ),
        "nccl_versions": versions,
        "alltoall": tables,
    }


def main() -> None:
    db, out = db_and_out(__doc__.splitlines()[0], DEFAULT_OUT)
    payload = extract(db)
    out.write_text(json.dumps(payload, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"{out}: {out.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
