"""The ledger's hash chain on a real MLflow registry (SQLite), tampered with directly in the registry's database."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlops_cli.app import app
from mlops_core import lifecycle

NO_GATES: dict[str, tuple[str, ...]] = {}


@pytest.fixture
def registry(config_dir: Path) -> tuple[dict[str, str], Path]:
    """Model ``fraud`` with two versions walked to champion (8 ledger entries); returns the CLI env and root."""
    from mlops_config import load_config
    from mlops_core import mlflow_client

    loaded = load_config(config_dir=config_dir, environ={})
    client = mlflow_client(loaded.config.tracking, loaded.root)
    client.create_registered_model("fraud")
    for _ in range(2):
        client.create_model_version("fraud", source=str(loaded.root))
    for version in ("1", "2"):
        for to in lifecycle.LIFECYCLE:
            lifecycle.promote(loaded.config.tracking, loaded.root, "fraud", version, to, reason=f"walk {version}",
                              actor="t", required_gates=NO_GATES)
    return {"MLOPS_CONFIG_DIR": str(config_dir)}, loaded.root


def _db(root: Path) -> Path:
    hits = sorted(root.rglob("mlflow.db"))
    assert hits, f"no mlflow.db under {root}"
    return hits[0]


def _raw(root: Path, seq: int) -> dict:
    with sqlite3.connect(_db(root)) as con:
        (value,) = con.execute("select value from registered_model_tags where key = ?",
                               (f"mlops.ledger.{seq:08d}",)).fetchone()
    return json.loads(value)


def _store(root: Path, seq: int, entry: dict) -> None:
    """Rewrite one entry in the registry's own table: what an editor with database access could do."""
    with sqlite3.connect(_db(root)) as con:
        con.execute("update registered_model_tags set value = ? where key = ?",
                    (json.dumps(entry, sort_keys=True), f"mlops.ledger.{seq:08d}"))


def _verify(env: dict[str, str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["registry", "verify-ledger"], env=env)
    return result.exit_code, result.stdout, result.stderr


def _digest(entry: dict) -> str:
    """The chain's recipe, written out independently: SHA-256 of the canonical JSON without entry_sha256."""
    body = {k: v for k, v in entry.items() if k != "entry_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def test_untouched_ledger_verifies_and_links_each_entry_to_the_previous(registry) -> None:
    env, root = registry
    code, out, err = _verify(env)
    assert code == 0, err
    assert "8 entries verified" in out
    first = _raw(root, 1)
    assert first["prev_sha256"] == "0" * 64
    for seq in range(2, 9):
        assert _raw(root, seq)["prev_sha256"] == _digest(_raw(root, seq - 1))
        assert _raw(root, seq)["entry_sha256"] == _digest(_raw(root, seq))
    # readers of the old shape keep working
    assert lifecycle.aliases(_cfg(env).tracking, root, "fraud", at=_raw(root, 4)["ts"]) == {"champion": "1"}


def _cfg(env: dict[str, str]):
    from mlops_config import load_config

    return load_config(config_dir=Path(env["MLOPS_CONFIG_DIR"]), environ={}).config


def test_an_edited_entry_is_named(registry) -> None:
    env, root = registry
    entry = _raw(root, 3)
    entry["actor"] = "someone-else"
    _store(root, 3, entry)
    code, _, err = _verify(env)
    assert code == 1
    assert "broken at entry #3" in err and "edited" in err


def test_an_edit_with_a_recomputed_hash_is_caught_by_the_next_link(registry) -> None:
    env, root = registry
    entry = _raw(root, 5)
    entry["version"] = "1"
    entry["entry_sha256"] = _digest(entry)
    _store(root, 5, entry)
    code, _, err = _verify(env)
    assert code == 1
    assert "broken at entry #5" in err and "entry #6 recorded" in err


def test_a_deleted_entry_and_stripped_hashes_are_named(registry) -> None:
    env, root = registry
    with sqlite3.connect(_db(root)) as con:
        con.execute("delete from registered_model_tags where key = ?", ("mlops.ledger.00000004",))
    code, _, err = _verify(env)
    assert code == 1 and "entry #4 is missing" in err


def test_stripped_hashes_are_not_mistaken_for_an_old_ledger(registry) -> None:
    env, root = registry
    entry = _raw(root, 7)
    entry.pop("entry_sha256")
    entry.pop("prev_sha256")
    _store(root, 7, entry)
    code, _, err = _verify(env)
    assert code == 1 and "broken at entry #7" in err and "stripped" in err


def test_entries_from_before_the_chain_read_and_verify_as_not_verifiable(registry) -> None:
    env, root = registry
    for seq in range(1, 9):  # the ledger as the old code wrote it: no chain fields
        entry = _raw(root, seq)
        for key in ("entry_sha256", "prev_sha256", "model_digest", "overlay_commit"):
            entry.pop(key)
        _store(root, seq, entry)
    code, out, err = _verify(env)
    assert code == 0, err
    assert "predate the chain" in out
    assert [e.seq for e in lifecycle.history(_cfg(env).tracking, root, "fraud")] == list(range(1, 9))
