"""Loading a repository script (``benchmarks/``, the examples' tools) as a module, for tests."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """The script at ``relative`` (from the repository root), run as a module named after its file.

    The module is registered in ``sys.modules`` first: dataclasses defined in a script look their
    module up by name. Its folder goes on the import path, as when the script runs, so it can
    import its sibling scripts' helpers.
    """
    path = ROOT / relative
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
