"""The public surface: what each layer package exports, and that it stays importable."""

import aisimulate
import aisimulate.catalog
import aisimulate.errors
import aisimulate.perf


def test_version():
    assert aisimulate.__version__


def test_catalog_exports():
    assert set(aisimulate.catalog.__all__) == {
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
    }


def test_perf_exports():
    for name in aisimulate.perf.__all__:
        assert getattr(aisimulate.perf, name) is not None
    assert {"PerfModel", "BatchShape", "estimate_memory", "get_perf_model", "AnalyticPerfModel"} <= set(
        aisimulate.perf.__all__
    )


def test_errors_are_value_errors():
    assert issubclass(aisimulate.errors.ConfigError, ValueError)
    assert issubclass(aisimulate.errors.UnknownNameError, aisimulate.errors.ConfigError)
    assert issubclass(aisimulate.errors.InfeasibleError, aisimulate.errors.ConfigError)


def test_lower_layers_do_not_import_higher_ones():
    import ast
    from pathlib import Path

    root = Path(aisimulate.__file__).parent
    order = ["errors", "rounding", "catalog", "workload", "perf", "planner", "replay", "spica"]
    for path in root.rglob("*.py"):
        layer = path.relative_to(root).parts[0].removesuffix(".py")
        if layer not in order:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aisimulate."):
                target = node.module.split(".")[1]
                if target in order:
                    assert order.index(target) <= order.index(layer), f"{path} imports {node.module}"
