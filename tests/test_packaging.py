"""environment.yml, pyproject.toml, Makefile and README stay consistent."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from eagle3kit.assets import ASSETS

REPO = Path(__file__).resolve().parents[1]


def test_environment_yml_matches_pyproject():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    python = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python=")]
    assert python == ["python=" + project["requires-python"].removeprefix(">=")]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    extras = {m for line in pip for m in re.findall(r"\.\[([\w,]+)\]", line)}
    assert extras and extras <= set(project["optional-dependencies"]), extras
    assert "conda-forge" in env["channels"]


def test_asset_step_is_the_same_everywhere():
    text = (REPO / "environment.yml").read_text()
    for name, version in ASSETS.items():
        assert f"{name}=={version}" in text
    assert "eagle3kit install-assets" in (REPO / "Makefile").read_text()
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "speculators==0.9.0" in deps and not any(d.startswith(tuple(ASSETS)) for d in deps)


def test_readme_commands_exist_in_makefile_and_ci():
    readme = (REPO / "README.md").read_text()
    make = (REPO / "Makefile").read_text()
    for target in ("demo", "test", "lab"):
        assert f"make {target}" in readme and re.search(rf"^{target}:", make, re.M)
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_console_script():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"eagle3kit": "eagle3kit.cli:main"}


def test_the_console_script_answers_help():
    script = Path(sys.executable).with_name("eagle3kit")
    if not script.exists():
        pytest.skip(f"{script} is not installed (pip install -e .)")
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120, check=True).stdout
    assert "run-notebooks" in out and "train" in out
