"""The packaging contract read from pyproject.toml: one distribution, ``aisimulate.spica`` inside
it, no top-level ``spica`` package and no console scripts (the search runs as
``python -m aisimulate.spica``)."""

import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).parents[1]


def test_only_aisimulate_packages_ship_and_spica_is_one_of_them():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = find_packages(str(ROOT), include=include)
    assert {p.split(".")[0] for p in packages} == {"aisimulate"}
    assert "aisimulate.spica" in packages and "spica" not in packages


def test_no_console_scripts_and_ray_is_an_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "aisimulate"
    assert not {"scripts", "gui-scripts", "entry-points"} & set(project)
    assert any(req.startswith("ray>=") for req in project["optional-dependencies"]["ray"])
    assert "optuna>=5.0" in project["dependencies"]  # the sampler adapter uses Trial.set_constraint


def test_the_built_wheel_ships_the_search_and_its_data(tmp_path):
    """Build the wheel as a user would (isolated build env from the package index)."""
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("aisimulate-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = archive.read(metadata).decode()
    assert "aisimulate/spica/search.py" in names and "aisimulate/spica/__main__.py" in names
    assert not any(n.startswith("spica/") for n in names)  # no top-level spica package
    assert not any(n.endswith("entry_points.txt") for n in names)  # no console scripts
    assert "aisimulate/perf/data/calibration.json" in names
    assert any(n.startswith("aisimulate/catalog/systems/") and n.endswith(".yaml") for n in names)
    assert "Name: aisimulate" in meta and "Requires-Dist: optuna>=5.0" in meta


def test_installed_metadata_matches_the_project():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = metadata.metadata("aisimulate")
    assert installed["Name"] == project["name"] and installed["Version"] == project["version"]
