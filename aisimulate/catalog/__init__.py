"""Facts only: GPU systems and model architectures, loaded from bundled data files."""

from aisimulate.catalog.models import (
    ModelSpec,
    ParamCounts,
    PublisherConfig,
    get_model,
    list_models,
    parse_hf_config,
    publisher_config,
)
from aisimulate.catalog.systems import System, get_system, list_systems

__all__ = [
    "ModelSpec",
    "ParamCounts",
    "PublisherConfig",
    "System",
    "get_model",
    "get_system",
    "list_models",
    "list_systems",
    "parse_hf_config",
    "publisher_config",
]
