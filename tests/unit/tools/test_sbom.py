"""tools/sbom.py: the serving image's dependency closure from the lock, as CycloneDX 1.6, validated offline."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "sbom.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sbom_tool", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            out[_canonical(name)] = version.strip()
    return out


@pytest.mark.slow
def test_sbom_lists_the_image_closure_at_locked_versions_and_validates(tmp_path: Path) -> None:
    summary = _tool().build(tmp_path / "serving.cdx.json")
    doc = json.loads((tmp_path / "serving.cdx.json").read_text())
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    got = {_canonical(c["name"]): c["version"] for c in doc["components"]}
    lock = _lock()
    assert summary["components"] == len(got) == summary["locked"]
    assert all(lock[n] == v for n, v in got.items())  # every version is the locked one
    # every declared requirement of every workspace package is in (direct deps, read here from the pyprojects)
    for pyproject in (ROOT / "packages").glob("*/pyproject.toml"):
        for req in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
            name = _canonical(re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0])
            if not name.startswith("mlops-"):
                assert name in got, f"{name} (from {pyproject.parent.name}) missing from the SBOM"
    assert got["model-signing"] == "1.1.1" and got["torch"] == "2.13.0"
    assert "pytest" not in got and "ruff" not in got  # dev tools are not in the image
    assert all(c["purl"] == f"pkg:pypi/{c['name']}@{c['version']}" for c in doc["components"] if "purl" in c)


def test_validation_refuses_a_malformed_document() -> None:
    tool = _tool()
    with pytest.raises(SystemExit, match=r"not valid CycloneDX 1\.6"):
        tool.validate(json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6", "components": [{"name": 3}]}))


def test_make_demo_writes_the_sbom_before_the_pipeline_runs() -> None:
    """Training attaches the SBOM to the new version only when the file exists, so it must come first."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    planned = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    lines = planned.splitlines()
    sbom = next(i for i, line in enumerate(lines) if "tools/sbom.py" in line)
    pipeline = next(i for i, line in enumerate(lines) if "mlops pipeline run" in line)
    assert sbom < pipeline, planned
