"""``packages/`` holds no use-case name in code: the tabular model's names come from its declared contract.

A use case's names (its label ``is_fraud``, its money field ``amount``, the word ``fraud`` in an identifier or a
string) belong in ``configs/models/<m>.yaml`` and ``feature_repo/``. Docstrings and comments may still use the
reference model as their example; code may not. :data:`ALLOWED` lists the files that still do, with why: it only
shrinks (a file that no longer needs its entry fails the test until the entry goes). The config schema's defaults
name no use case either (#26): :data:`DEFAULTS_ALLOWED` lists the keys that still do.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from mlops_config import PlatformConfig
from mlops_core import flatten

REPO = Path(__file__).resolve().parents[2]
USE_CASE = re.compile(r"fraud|amount", re.IGNORECASE)
"""``fraud``, ``is_fraud``, ``FraudModel``, ``train_fraud``, ``amount``, ``user_amount_mean``, …"""

_REHEARSAL = "the rehearsal's topology names the reference deployment (fraud-serving, its Feast users, alerts)"
ALLOWED: dict[str, str] = {
    "packages/model/src/mlops_model/contract.py": "DEFAULT_CONTRACT: the fallback for an export recording none",
    "packages/features/src/mlops_features/sample.py": "the reference model's data generator (belongs to its use case)",
    "packages/features/src/mlops_features/pipeline.py": "passes data.fraud_rate to the generator",
    "packages/cli/src/mlops_cli/commands/data.py": "passes data.fraud_rate to the generator",
    "packages/config/src/mlops_config/data.py": "fraud_rate (generator)",
    "packages/config/src/mlops_config/moved.py": "data.max_amount, refused at load with its replacement's path",
    "packages/delivery/src/mlops_delivery/shadow_stage.py": "names the shadow overlay under infra/",
    "packages/evaluation/src/mlops_evaluation/calibration_gate.py": "'frauds' in the inconclusive verdict (tested)",
    "packages/pipeline/src/mlops_pipeline/steps.py": "the demo's steps: the reference model's drift and bad rows",
    "packages/pipeline/src/mlops_pipeline/rehearsal/context.py": _REHEARSAL,
    "packages/pipeline/src/mlops_pipeline/rehearsal/loop.py": _REHEARSAL,
    "packages/pipeline/src/mlops_pipeline/rehearsal/release.py": _REHEARSAL,
    "packages/pipeline/src/mlops_pipeline/rehearsal/serving.py": _REHEARSAL,
    "packages/pipeline/src/mlops_pipeline/rehearsal/topology.py": _REHEARSAL,
    "packages/pipeline/src/mlops_pipeline/rehearsal/workloads.py": _REHEARSAL,
    "packages/serving/src/mlops_serving/metrics.py": "the score histogram's HELP text",
}
"""File (relative to the repo) → why it still names the use case; only shrinks."""

DEFAULTS_ALLOWED: dict[str, str] = {
    "data.fraud_rate": "the key's name (the sample generator's), not a default value; renaming it is a moved key",
}
"""Dotted config key → why its name or default value still names the use case; only shrinks."""


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings: a bare string statement (module, class, function or
    attribute docstring)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def use_case_names(source: str, filename: str) -> list[str]:
    """``file:line: name`` of every identifier or string in code (not a docstring or comment) naming a use case."""
    tree = ast.parse(source, filename)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            names = [node.value]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.arg | ast.keyword) and node.arg:
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [node.name, node.asname or ""]
        found += [f"{filename}:{node.lineno}: {n!r:.60}" for n in names if USE_CASE.search(n)]
    return found


def _offenders() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in sorted(REPO.glob("packages/*/src/**/*.py")):
        rel = path.relative_to(REPO).as_posix()
        hits = use_case_names(path.read_text(), rel)
        if hits:
            out[rel] = hits
    return out


def test_the_scan_finds_names_in_code_and_skips_docstrings_and_comments() -> None:
    source = ('"""A fraud model."""\n'
              "LABEL = 'is_fraud'  # the fraud label\n"
              "def f(amount: float) -> None:\n"
              "    '''Scores an amount.'''\n"
              "    train_fraud(x=amount)\n"
              "    g(user_amount_mean=1)\n")
    hits = use_case_names(source, "m.py")
    assert sorted(h.split(": ", 1)[1] for h in hits) == sorted(
        ["'is_fraud'", "'amount'", "'train_fraud'", "'amount'", "'user_amount_mean'"])


def test_packages_hold_no_use_case_name_outside_the_allowlist() -> None:
    offenders = _offenders()
    new = {f: hits for f, hits in offenders.items() if f not in ALLOWED}
    assert not new, "use-case names in packages/ code (declare them in the model's contract instead):\n" + "\n".join(
        h for hits in new.values() for h in hits)
    cleaned = sorted(set(ALLOWED) - set(offenders))
    assert not cleaned, f"{cleaned!r} no longer name a use case: drop them from ALLOWED"


def test_the_config_defaults_name_no_use_case() -> None:
    """The schema's defaults (every section built bare) are generic: the reference model's names (its project,
    model file, experiment, FeatureService, Feast project) come from configs/ (#26)."""
    defaults = flatten(PlatformConfig().model_dump(mode="json"))
    named = {key: value for key, value in defaults.items() if USE_CASE.search(f"{key} {json.dumps(value)}")}
    new = {key: value for key, value in named.items() if key not in DEFAULTS_ALLOWED}
    assert not new, f"config defaults that name a use case (set them in configs/ instead): {new!r}"
    cleaned = sorted(set(DEFAULTS_ALLOWED) - set(named))
    assert not cleaned, f"{cleaned!r} no longer name a use case: drop them from DEFAULTS_ALLOWED"
