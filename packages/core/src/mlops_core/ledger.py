"""The promotion ledger: one append-only record per alias move, kept in the model registry itself.

Each entry is a tag ``mlops.ledger.<seq>`` on the registered model, holding the entry as JSON. Keeping it
in the registry (SQLite locally, PostgreSQL behind ``mlflow server`` on a cluster) means the ledger lives
in the same backend as the aliases it describes and needs no second store. An entry is written as
``pending`` *before* the aliases move and rewritten as ``applied`` afterwards; a pending entry left by a
crashed process is rolled forward by the next move (see :mod:`mlops_core.lifecycle`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from mlops_core.errors import PlatformError

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

TAG_PREFIX = "mlops.ledger."
Status = Literal["pending", "applied"]


class LedgerError(PlatformError):
    """A ledger entry in the registry is unreadable, or a time given to query it is malformed."""


@dataclass(frozen=True)
class LedgerEntry:
    """One alias move: who moved which version from which alias to which, when, why and on what evidence.

    ``aliases_before`` / ``aliases_after`` are the lifecycle aliases of the whole model (alias → version)
    around the move, so any point in time can be answered from the entry in force then.
    """

    seq: int
    model: str
    action: Literal["promote", "rollback"]
    version: str
    from_alias: str | None
    to_alias: str
    actor: str
    reason: str
    ts: str
    aliases_before: dict[str, str]
    aliases_after: dict[str, str]
    gate_report_sha256: str | None = None
    data_hash: str | None = None
    git_commit: str | None = None
    status: Status = "pending"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def time(self) -> datetime:
        """``ts`` as an aware UTC datetime."""
        return parse_time(self.ts)

    def to_json(self) -> str:
        """The entry as the JSON stored in the registry tag (sorted keys: stable bytes)."""
        return json.dumps(asdict(self), sort_keys=True)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for ``--json`` output and other packages."""
        return asdict(self)

    @classmethod
    def from_json(cls, text: str, *, tag: str = "?") -> LedgerEntry:
        """Parse one stored entry; ``tag`` names it in errors."""
        try:
            data = json.loads(text)
            return cls(**data)
        except (json.JSONDecodeError, TypeError) as exc:
            raise LedgerError(f"ledger tag {tag!r} holds {text[:80]!r}, not a ledger entry ({exc})") from None


def tag_key(seq: int) -> str:
    """Registry tag key of entry ``seq`` (zero-padded so tags sort in ledger order)."""
    return f"{TAG_PREFIX}{seq:08d}"


def now_iso() -> str:
    """Current UTC time, ISO 8601 with microseconds (what entries record)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def parse_time(text: str | datetime) -> datetime:
    """An ISO 8601 time (``2026-11-30T08:00:00Z``, ``2026-11-30 08:00``, ...) as aware UTC; naive means UTC."""
    if isinstance(text, datetime):
        value = text
    else:
        try:
            value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise LedgerError(f"time {text!r} is not ISO 8601; expected e.g. '2026-11-30T08:00:00Z'") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def report_hash(report: Mapping[str, Any]) -> str:
    """SHA-256 of a gate report's canonical JSON (sorted keys, no whitespace)."""
    return hashlib.sha256(json.dumps(report, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def read_entries(tags: Mapping[str, str]) -> list[LedgerEntry]:
    """All entries found in a registered model's tags, in ledger order."""
    entries = [LedgerEntry.from_json(v, tag=k) for k, v in tags.items() if k.startswith(TAG_PREFIX)]
    return sorted(entries, key=lambda e: e.seq)


def load_entries(client: MlflowClient, name: str) -> list[LedgerEntry]:
    """Entries of registered model ``name`` (one registry call)."""
    return read_entries(client.get_registered_model(name).tags)


def write_entry(client: MlflowClient, name: str, entry: LedgerEntry) -> None:
    """Store (or overwrite, e.g. pending → applied) one entry."""
    client.set_registered_model_tag(name, tag_key(entry.seq), entry.to_json())


def mark_applied(client: MlflowClient, name: str, entry: LedgerEntry, **extra: Any) -> LedgerEntry:
    """Rewrite ``entry`` as applied (with optional extra facts, e.g. who recovered it)."""
    done = replace(entry, status="applied", extra={**entry.extra, **extra})
    write_entry(client, name, done)
    return done


def aliases_at(entries: list[LedgerEntry], at: str | datetime | None) -> dict[str, str]:
    """Lifecycle aliases in force at ``at`` (``None``: now) according to the applied entries."""
    when = parse_time(at) if at is not None else None
    state: dict[str, str] = {}
    for entry in entries:
        if entry.status != "applied":
            continue
        if when is not None and entry.time > when:
            break
        state = dict(entry.aliases_after)
    return state
