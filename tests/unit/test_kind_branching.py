"""No module branches on the model family but :mod:`mlops_model.kind`: everything else looks its stage up by kind.

The family is decided once by ``mlops_model.kind_of`` and each package keeps a registry keyed by
``ModelKind`` (training ``TRAIN_SPECS``, evaluation ``LOADERS`` / ``GATE_SUITES``, serving ``SERVERS``,
monitoring ``DRIFT_SOURCES``, delivery ``CANARY_EVIDENCE``, the pipeline's ``LOOPS``). A comparison against a
kind (``== "causal_lm"``, ``!= ModelKind.TABULAR``, ``in ("tabular_mlp", ...)``, a ``match`` case on one) anywhere
else is a family branch growing back.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KIND_STRINGS = frozenset({"tabular_mlp", "causal_lm", "hf_causal_lm", "tabular"})
"""``model.json`` kinds and the ``training.model`` values that name a family."""
ALLOWED = frozenset({"packages/model/src/mlops_model/kind.py"})
"""Where the kind is decided: ``kind_of`` reads ``training.model`` there."""


def _is_kind(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in KIND_STRINGS
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id == "ModelKind"
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_kind(e) for e in node.elts)
    return False


def kind_branches(source: str, filename: str) -> list[str]:
    """``file:line: code`` of every comparison or ``match`` case against a model kind in ``source``."""
    tree = ast.parse(source, filename)
    found = []
    for node in ast.walk(tree):
        compared = isinstance(node, ast.Compare) and any(_is_kind(n) for n in (node.left, *node.comparators))
        if compared or (isinstance(node, ast.MatchValue) and _is_kind(node.value)):
            found.append(node)
    return [f"{filename}:{n.lineno}: {ast.get_source_segment(source, n)}" for n in found]


def test_the_scan_sees_each_form_of_a_family_branch() -> None:
    """Each way a family test is written is caught; a registry lookup and unrelated compares are not."""
    source = "\n".join(
        [
            'if training.model == "causal_lm": pass',
            'if meta.get("kind") != "tabular_mlp": pass',
            "if kind is ModelKind.HF_CAUSAL_LM: pass",
            'if cand.kind in ("causal_lm", "hf_causal_lm"): pass',
            'match kind:\n    case "tabular":\n        pass',
            "server = SERVERS[kind_of(meta)]",
            'if policy.kind == "transformer": pass',
        ]
    )
    assert [line.split(": ", 1)[0] for line in kind_branches(source, "x.py")] == [
        "x.py:1",
        "x.py:2",
        "x.py:3",
        "x.py:4",
        "x.py:6",
    ]


def test_no_family_branch_outside_the_kind_module() -> None:
    files = sorted(REPO.glob("packages/*/src/**/*.py"))
    assert files, f"no package sources under {REPO / 'packages'}"
    branches = [
        hit
        for f in files
        if (rel := f.relative_to(REPO).as_posix()) not in ALLOWED
        for hit in kind_branches(f.read_text(encoding="utf-8"), rel)
    ]
    assert not branches, (
        "family branches outside the registries; look the stage up by kind "
        "(mlops_model.kind_of + the package's registry) instead:\n" + "\n".join(branches)
    )


def test_every_kind_is_registered_in_each_layer_that_takes_every_family() -> None:
    """What a new family adds, one entry per registry (serving only for the families that are served)."""
    from mlops_delivery.canary_evidence import CANARY_EVIDENCE
    from mlops_evaluation.runner import GATE_SUITES
    from mlops_evaluation.scorer import LOADERS
    from mlops_model import ModelKind
    from mlops_monitoring.monitor import DRIFT_SOURCES
    from mlops_pipeline.pipeline import LOOPS
    from mlops_serving.service import SERVERS
    from mlops_training.spec import TRAIN_SPECS

    every = set(ModelKind)
    assert set(TRAIN_SPECS) == set(LOADERS) == set(GATE_SUITES) == set(LOOPS) == every
    assert set(SERVERS) < every
    assert set(DRIFT_SOURCES) == set(CANARY_EVIDENCE) == set(SERVERS)  # what is served has traffic to watch
