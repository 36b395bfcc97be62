"""Lifecycle on a real MLflow registry (SQLite): order, gates, fallback, rollback, ledger, recovery, lock."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mlops_config import TrackingConfig
from mlops_core import lifecycle
from mlops_core.ledger import LedgerEntry, LedgerError, now_iso, parse_time, report_hash, write_entry
from mlops_core.lifecycle import GateNotPassedError, LifecycleError
from mlops_core.registry_lock import LockTimeoutError, lock_name, registry_lock

NO_GATES: dict[str, tuple[str, ...]] = {}
ALL4 = ["quality", "reproducibility", "latency", "contract"]


@pytest.fixture
def reg(tmp_path: Path) -> tuple[TrackingConfig, Path]:
    """A registry with model ``fraud`` and three versions, the first with a run tagged with a data hash."""
    from mlops_core import mlflow_client

    tracking = TrackingConfig(uri="sqlite:///mlflow.db", artifact_location="artifacts")
    client = mlflow_client(tracking, tmp_path)
    client.create_registered_model("fraud")
    run = client.create_run("0", tags={"mlops.data_hash": "d" * 64})
    client.create_model_version("fraud", source=str(tmp_path), run_id=run.info.run_id)
    for _ in range(2):
        client.create_model_version("fraud", source=str(tmp_path))
    return tracking, tmp_path


def _promote(reg: tuple[TrackingConfig, Path], version: str, to: str, **kw) -> LedgerEntry:
    kw.setdefault("reason", "test")
    kw.setdefault("actor", "t")
    return lifecycle.promote(reg[0], reg[1], "fraud", version, to, **kw)


def _walk(tracking: TrackingConfig, root: Path, version: str) -> None:
    for to in lifecycle.LIFECYCLE:
        lifecycle.promote(tracking, root, "fraud", version, to, reason=f"walk {version}", actor="t",
                          required_gates=NO_GATES)


def _report(version: str, failed: str | None = None, drop: str | None = None) -> dict:
    gates = [{"name": g, "passed": g != failed, "reason": f"{g} reason", "evidence": {}} for g in ALL4 if g != drop]
    return {"model": "fraud", "candidate": {"version": version}, "passed": failed is None, "gates": gates}


def test_walk_to_champion_keeps_previous_as_fallback_and_rollback_restores(reg) -> None:
    tracking, root = reg
    _walk(tracking, root, "1")
    assert lifecycle.aliases(tracking, root, "fraud") == {"champion": "1"}
    _walk(tracking, root, "2")
    assert lifecycle.aliases(tracking, root, "fraud") == {"champion": "2", "fallback": "1"}
    started = time.perf_counter()
    entry = lifecycle.restore_champion(tracking, root, "fraud", reason="drift", actor="monitor")
    # a rollback stuck on the registry lock would wait out its 30 s timeout; a loaded machine takes seconds
    assert time.perf_counter() - started < 20.0
    assert (entry.action, entry.version, entry.extra["replaced"]) == ("rollback", "1", "2")
    assert lifecycle.aliases(tracking, root, "fraud") == {"champion": "1"}
    with pytest.raises(LifecycleError, match="no 'fallback'"):
        lifecycle.restore_champion(tracking, root, "fraud", reason="again", actor="monitor")
    seqs = [e.seq for e in lifecycle.history(tracking, root, "fraud")]
    assert seqs == list(range(1, 10))


def test_order_is_enforced_with_a_clear_reason(reg) -> None:
    tracking, root = reg
    with pytest.raises(LifecycleError, match=r"not 'canary'.*in order"):
        lifecycle.promote(tracking, root, "fraud", "1", "champion", reason="skip", actor="t", required_gates=NO_GATES)
    with pytest.raises(LifecycleError, match="'fallback'"):
        lifecycle.promote(tracking, root, "fraud", "1", "fallback", reason="x", actor="t")
    with pytest.raises(LifecycleError, match=r"no version '9'; known versions: \[1, 2, 3\]"):
        lifecycle.promote(tracking, root, "fraud", "9", "candidate", reason="x", actor="t")
    with pytest.raises(LifecycleError, match=r"'abc' .* not a version number"):
        lifecycle.promote(tracking, root, "fraud", "abc", "candidate", reason="x", actor="t")
    with pytest.raises(LifecycleError, match="needs a reason"):
        lifecycle.promote(tracking, root, "fraud", "1", "candidate", reason=" ", actor="t")
    with pytest.raises(LifecycleError, match="'nope' does not exist"):
        lifecycle.aliases(tracking, root, "nope")


def test_staging_requires_all_gates_passed_for_this_version(reg) -> None:
    tracking, root = reg
    lifecycle.promote(tracking, root, "fraud", "1", "candidate", reason="new", actor="t")
    with pytest.raises(GateNotPassedError, match="no gate report") as info:
        lifecycle.promote(tracking, root, "fraud", "1", "staging", reason="x", actor="t")
    assert info.value.exit_code == 1
    with pytest.raises(GateNotPassedError, match="latency: latency reason"):
        _promote(reg, "1", "staging", gate_report=_report("1", "latency"))
    with pytest.raises(GateNotPassedError, match="gate 'contract' was not run"):
        _promote(reg, "1", "staging", gate_report=_report("1", drop="contract"))
    with pytest.raises(GateNotPassedError, match="version '2', not 'fraud' version '1'"):
        lifecycle.promote(tracking, root, "fraud", "1", "staging", reason="x", actor="t", gate_report=_report("2"))
    assert lifecycle.aliases(tracking, root, "fraud") == {"candidate": "1"}  # nothing moved
    good = _report("1")
    entry = _promote(reg, "1", "staging", reason="gates green", actor="ci", gate_report=good)
    expected_hash = __import__("hashlib").sha256(
        json.dumps(good, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert entry.gate_report_sha256 == expected_hash == report_hash(good)
    assert entry.data_hash == "d" * 64
    assert (entry.from_alias, entry.to_alias, entry.actor, entry.status) == ("candidate", "staging", "ci", "applied")


def test_history_answers_which_version_was_champion_at_t(reg) -> None:
    tracking, root = reg
    _walk(tracking, root, "1")
    time.sleep(0.05)
    between = now_iso()
    time.sleep(0.05)
    _walk(tracking, root, "2")
    assert lifecycle.aliases(tracking, root, "fraud", at=between) == {"champion": "1"}
    assert lifecycle.aliases(tracking, root, "fraud", at="2000-01-01T00:00:00Z") == {}
    assert lifecycle.aliases(tracking, root, "fraud", at=now_iso())["champion"] == "2"
    assert [e.seq for e in lifecycle.history(tracking, root, "fraud", at=between)] == [1, 2, 3, 4]
    with pytest.raises(LedgerError, match="'yesterday' is not ISO 8601"):
        lifecycle.history(tracking, root, "fraud", at="yesterday")
    assert parse_time("2026-11-30 08:00").isoformat() == "2026-11-30T08:00:00+00:00"


def test_pending_entry_from_a_crashed_move_is_rolled_forward(reg) -> None:
    from mlops_core import mlflow_client

    tracking, root = reg
    _walk(tracking, root, "1")
    client = mlflow_client(tracking, root)
    # A process died after journalling "2 → candidate" and before moving any alias.
    crashed = LedgerEntry(seq=5, model="fraud", action="promote", version="2", from_alias=None,
                          to_alias="candidate", actor="dead", reason="crash", ts=now_iso(),
                          aliases_before={"champion": "1"}, aliases_after={"champion": "1", "candidate": "2"})
    write_entry(client, "fraud", crashed)
    assert lifecycle.aliases(tracking, root, "fraud", at=now_iso()) == {"champion": "1"}  # pending is not history
    entry = _promote(reg, "2", "staging", actor="t", required_gates=NO_GATES)
    assert entry.seq == 6 and entry.aliases_before == {"champion": "1", "candidate": "2"}
    recovered = lifecycle.history(tracking, root, "fraud")[4]
    assert (recovered.seq, recovered.status, recovered.extra["recovered_by"]) == (5, "applied", "t")


def test_lock_waits_times_out_and_breaks_expired(reg) -> None:
    from mlops_core import mlflow_client

    tracking, root = reg
    client = mlflow_client(tracking, root)
    with registry_lock(client, "fraud", ttl_s=60), pytest.raises(LockTimeoutError, match=r"fraud\.lifecycle-lock"):
        lifecycle.promote(tracking, root, "fraud", "1", "candidate", reason="x", actor="t", lock_timeout_s=0.3)
    assert lifecycle.promote(tracking, root, "fraud", "1", "candidate", reason="x", actor="t").seq == 1
    # A holder that died: its lock expires and the next move breaks it.
    client.create_registered_model(lock_name("fraud"), description=json.dumps({"token": "dead", "expires": 0}))
    assert _promote(reg, "2", "candidate", lock_timeout_s=5).seq == 2
