"""Offline GitOps checks: the rendered manifests, the schemas they are checked against, the CLI tree.

Every tool runs from the repo's own environments (kubectl and actionlint from .venv, checkov from its own
venv made by `make checkov-setup`); a missing tool fails the test instead of skipping it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCHEMAS = Path(__file__).parent / "schemas"
# What `kubectl kustomize` renders: both overlays, the platform services, the cluster-scoped training runtime,
# the Argo CD bootstrap.
TARGETS = {
    "staging": "infra/overlays/staging",
    "production": "infra/overlays/production",
    "platform": "infra/platform",
    "cluster": "infra/cluster",
    "argocd": "argocd",
}


def tool(name: str, venv_bin: Path = BIN) -> str:
    """Absolute path of a tool the repo installs; fails loudly when it is missing."""
    path = venv_bin / name
    if not path.exists():
        pytest.fail(f"{name} is not installed at {path}; run `make setup` (and `make checkov-setup` for checkov)")
    return str(path)


def render(target: str | Path, cwd: Path = REPO) -> str:
    """``kubectl kustomize <target>`` (offline)."""
    proc = subprocess.run([tool("kubectl"), "kustomize", str(target)], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, f"kubectl kustomize {target} failed:\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="session")
def rendered_text() -> dict[str, str]:
    return {name: render(path) for name, path in TARGETS.items()}


@pytest.fixture(scope="session")
def rendered(rendered_text: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    return {name: [d for d in yaml.safe_load_all(text) if d] for name, text in rendered_text.items()}


@pytest.fixture(scope="session")
def rendered_dir(rendered_text: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rendered")
    for name, text in rendered_text.items():
        (out / f"{name}.yaml").write_text(text)
    return out


# --- OpenAPI model walker: kserve / kubernetes client models, and model tables kept as JSON ------------

ModelTable = dict[str, tuple[str, str]]  # json key -> (attribute, type string)


def _python_model(name: str) -> ModelTable | None:
    import kserve.models
    import kubernetes.client.models

    for module in (kserve.models, kubernetes.client.models):
        cls = getattr(module, name, None)
        if cls is not None and hasattr(cls, "openapi_types"):
            return {cls.attribute_map[a]: (a, t) for a, t in cls.openapi_types.items()}
    return None


def _json_models(path: Path) -> dict[str, ModelTable]:
    data = json.loads(path.read_text())
    return {cls: {key: (attr, typ) for attr, (key, typ) in fields.items()} for cls, fields in data.items()}


class ModelValidator:
    """Checks a document against generated OpenAPI model classes: unknown keys and wrong types are errors."""

    def __init__(self, extra: dict[str, ModelTable] | None = None) -> None:
        self.extra = extra or {}

    def table(self, name: str) -> ModelTable | None:
        return self.extra.get(name) or _python_model(name)

    def errors(self, value: Any, typ: str, path: str = "") -> Iterator[str]:
        if value is None:
            return
        if m := re.fullmatch(r"[Ll]ist\[(.+)\]", typ):
            if not isinstance(value, list):
                yield f"{path}: expected a list ({typ}), got {type(value).__name__}"
                return
            for i, item in enumerate(value):
                yield from self.errors(item, m.group(1), f"{path}[{i}]")
            return
        if m := re.fullmatch(r"[Dd]ict[(\[]str, (.+)[)\]]", typ):
            if not isinstance(value, dict):
                yield f"{path}: expected a mapping ({typ}), got {type(value).__name__}"
                return
            for k, v in value.items():
                yield from self.errors(v, m.group(1), f"{path}.{k}")
            return
        simple: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float),
                                               "datetime": (str,), "date": (str,)}
        if typ in simple:
            if not isinstance(value, simple[typ]) or (typ in ("int", "float") and isinstance(value, bool)):
                yield f"{path}: expected {typ}, got {value!r}"
            return
        if typ == "object":
            return
        table = self.table(typ)
        if table is None:
            yield f"{path}: no model {typ!r} to check against"
            return
        if not isinstance(value, dict):
            yield f"{path}: expected an object ({typ}), got {type(value).__name__}"
            return
        for key, item in value.items():
            if key not in table:
                yield f"{path}.{key}: unknown field of {typ} (known: {sorted(table)})"
                continue
            yield from self.errors(item, table[key][1], f"{path}.{key}")


@pytest.fixture(scope="session")
def model_validator() -> ModelValidator:
    return ModelValidator(_json_models(SCHEMAS / "kubeflow-training-1.9.4-models.json"))


@pytest.fixture(scope="session")
def json_schema() -> Callable[[str], Any]:
    from jsonschema import Draft202012Validator

    def load(name: str) -> Draft202012Validator:
        schema = json.loads((SCHEMAS / name).read_text())
        Draft202012Validator.check_schema(schema)
        return Draft202012Validator(schema)

    return load


@pytest.fixture(scope="session")
def kit() -> Any:
    """The helpers above for tests: ``tool``, ``render``, ``repo``, ``bin``."""
    from types import SimpleNamespace

    return SimpleNamespace(tool=tool, render=render, repo=REPO, bin=BIN)
