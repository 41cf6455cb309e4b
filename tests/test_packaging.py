"""The packaging contract read from pyproject.toml: one distribution, ``aisimulate.spica`` inside
it, no top-level ``spica`` package and no console scripts (the search runs as
``python -m aisimulate.spica``)."""

import tomllib
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
