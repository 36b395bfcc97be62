"""Moving the use-case defaults out of ``packages/`` (#26) left every resolved config as it was.

``resolved_before_26.json`` is a snapshot written once from main's code before the move (commit 5b73505, by this
module's :func:`_snapshot` run on that code, never since): for every profile and every ``configs/models/*.yaml`` (and
the model the loader picks when none is named: the demo), the resolved values and the layer that set each. It holds
the demo (``local/(default)``) whole and every other pair as its differences from the demo, flattened to dotted
keys. The only change #26 meant is :data:`CHANGED`; the demo's entry must match to the source, since DVC's
``config`` stage writes both (``dvc.lock`` holds its md5). A key that moved since the snapshot
(``mlops_config.moved.MOVED``) is compared at its new place: same value, same layer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlops_config import load_config
from mlops_config.moved import MOVED

REPO = Path(__file__).resolve().parents[3]
SNAPSHOT = Path(__file__).with_name("resolved_before_26.json")
DEMO = "local/(default)"
ABSENT = "<absent>"
CHANGED: dict[str, dict[str, dict[str, Any]]] = {
    f"{profile}/llm-tiny": {"config": {"tracking.experiment": "llm-tiny"},
                            "sources": {"tracking.experiment": "configs/models/llm-tiny.yaml"}}
    for profile in ("local", "staging", "production")
}
"""Entry → part → key → the new value: llm-tiny logs to its own experiment, no longer the reference model's."""
for _profile in ("local", "staging", "production"):
    for _model in ("llm-tiny", "llm-sft"):
        CHANGED.setdefault(f"{_profile}/{_model}", {"config": {}, "sources": {}})["config"].update({
            "monitoring.key_features": [],
            "monitoring.ignore_columns": ["request_id", "ts", "model_name", "model_version", "variant",
                                          "event_timestamp", "created", "degraded", "latency_ms"]})
"""The models without a contract (the LMs) no longer resolve the reference model's columns as their key features and
ignored ids (``transaction_id``, ``user_id``, ``merchant_id``, ``is_fraud``, ``amount``, ...)."""


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys, as ``mlops_core.flatten`` but keeping an empty section as a value (the snapshot holds them)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else key
        out.update(_flat(value, path) if isinstance(value, dict) and value else {path: value})
    return out


def _resolved(profile: str, model: str | None) -> dict[str, dict[str, Any]]:
    loaded = load_config(profile, model, config_dir=REPO / "configs", environ={}, check_secrets=False)
    return {"config": _flat(loaded.config.model_dump(mode="json")), "sources": dict(loaded.sources)}


def _diff(entry: dict[str, dict[str, Any]], demo: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {part: {k: entry[part].get(k, ABSENT) for k in sorted(entry[part].keys() | demo[part].keys())
                   if entry[part].get(k, ABSENT) != demo[part].get(k, ABSENT)} for part in ("config", "sources")}


def _snapshot() -> dict[str, dict[str, dict[str, Any]]]:
    """The demo whole, every other (profile, model) as its differences from the demo."""
    models = (None, *sorted(p.stem for p in (REPO / "configs" / "models").glob("*.yaml")))
    entries = {f"{p}/{m or '(default)'}": _resolved(p, m) for p in ("local", "staging", "production") for m in models}
    demo = entries[DEMO]
    return {name: demo if name == DEMO else _diff(entry, demo) for name, entry in entries.items()}


def _moved(key: str) -> str:
    """Where a snapshot key lives now: at its new path if it (or a subsection above it) moved since."""
    for old, new in MOVED.items():
        if key == old or key.startswith(old + "."):
            return new + key[len(old):]
    return key


def _expected() -> dict[str, dict[str, dict[str, Any]]]:
    snapshot: dict[str, dict[str, dict[str, Any]]] = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    expected = {name: {part: {_moved(k): v for k, v in values.items()} for part, values in parts.items()}
                for name, parts in snapshot.items()}
    for name, parts in CHANGED.items():
        for part, values in parts.items():
            expected[name][part].update(values)
    return expected


@pytest.fixture(scope="module")
def now() -> dict[str, dict[str, dict[str, Any]]]:
    return _snapshot()


def test_the_snapshot_covers_every_model_file_in_every_profile(now: dict[str, Any]) -> None:
    assert set(_expected()) <= set(now)  # a model file added since is not in the snapshot


def test_the_demo_resolves_as_before_value_by_value_and_source_by_source(now: dict[str, Any]) -> None:
    """Every key of the snapshot resolves as it did, from the same layer; a key added to the config since the
    snapshot (absent there) is a new setting, not a moved one, and is not compared."""
    expected = _expected()[DEMO]
    for part in ("config", "sources"):
        changed = {k: (expected[part][k], now[DEMO][part].get(k, ABSENT))
                   for k in expected[part] if expected[part][k] != now[DEMO][part].get(k, ABSENT)}
        assert not changed, f"the demo's {part} changed (before, now): {changed}"


@pytest.mark.parametrize("name", sorted(set(_expected()) - {DEMO}))
def test_every_model_file_resolves_as_before_but_llm_tiny_s_experiment(name: str, now: dict[str, Any]) -> None:
    assert now[name] == _expected()[name]
