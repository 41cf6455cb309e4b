"""GPU systems: one YAML file per SKU, validated once and cached."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from aisimulate.errors import ConfigError, UnknownNameError

GIB = 1024**3
MIB = 1024**2


class System(BaseModel):
    """Facts about one GPU SKU. Bandwidths are GB/s in one direction per GPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    sm_version: int
    hbm_gib: float = Field(gt=0)
    hbm_gbps: float = Field(gt=0)
    hbm_efficiency: float = Field(gt=0, le=1)
    mem_latency_us: float = Field(ge=0)
    tflops: dict[str, float]
    nvlink_gbps: float = Field(gt=0)
    inter_node_gbps: float = Field(gt=0)
    pcie_gbps: float = Field(gt=0)
    p2p_latency_us: float = Field(ge=0)
    # NCCL's small-message all-reduce latency over one node's GPUs, where measured: what an
    # all-reduce spanning nodes pays inside them (the custom kernels need one node).
    nccl_latency_us: float | None = Field(default=None, ge=0)
    gpus_per_node: int = Field(gt=0)
    gpus_per_rack: int | None = None
    power_w: float = Field(gt=0)
    runtime_overhead_gib: float = Field(ge=0)
    nccl_mib_by_tp: dict[int, float]
    price_per_gpu_hour_usd: float | None = Field(default=None, ge=0)

    @field_validator("tflops")
    @classmethod
    def _needs_bf16(cls, value: dict[str, float]) -> dict[str, float]:
        if "bf16" not in value or any(v <= 0 for v in value.values()):
            raise ValueError("must list a positive 'bf16' entry and only positive values")
        return value

    @property
    def hbm_bytes(self) -> int:
        return int(self.hbm_gib * GIB)

    @property
    def math_dtypes(self) -> frozenset[str]:
        return frozenset(self.tflops)

    @property
    def nvlink_domain(self) -> int:
        """GPUs that share the fast intra-node fabric (a whole rack on NVL72 systems)."""
        return self.gpus_per_rack or self.gpus_per_node

    def nccl_bytes(self, num_gpus: int) -> int:
        """NCCL buffer memory per GPU for a communicator of ``num_gpus`` (largest listed size below)."""
        if num_gpus <= 1:
            return 0
        sizes = [n for n in sorted(self.nccl_mib_by_tp) if n <= num_gpus] or [min(self.nccl_mib_by_tp)]
        return int(self.nccl_mib_by_tp[sizes[-1]] * MIB)


def _systems_dir() -> Path:
    return Path(str(resources.files("aisimulate.catalog") / "systems"))


def load_system_file(path: str | Path) -> System:
    """Parse and validate one system YAML; errors name the file and the field."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read system file: {err}", where=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError("a system file must be a YAML mapping", where=str(path))
    try:
        return System(**data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{field}: {first['msg']}", where=str(path)) from None


@functools.cache
def _all_systems() -> dict[str, System]:
    return {p.stem: load_system_file(p) for p in sorted(_systems_dir().glob("*.yaml"))}


def list_systems() -> list[str]:
    return sorted(_all_systems())


def get_system(name: str | System, *, where: str | None = None) -> System:
    """Look a system up by its AIConfigurator-compatible name (``h200_sxm``), or a YAML path."""
    if isinstance(name, System):
        return name
    systems = _all_systems()
    key = name.strip().lower().replace("-", "_")
    if key in systems:
        return systems[key]
    if name.endswith((".yaml", ".yml")) and Path(name).is_file():
        return load_system_file(name)
    raise UnknownNameError("system", name, systems, where=where)
