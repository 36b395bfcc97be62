"""The promotion ledger: one append-only record per alias move, kept in the model registry itself.

Each entry is a tag ``mlops.ledger.<seq>`` on the registered model, holding the entry as JSON. Keeping it
in the registry (SQLite locally, PostgreSQL behind ``mlflow server`` on a cluster) means the ledger lives
in the same backend as the aliases it describes and needs no second store. An entry is written as
``pending`` *before* the aliases move and rewritten as ``applied`` afterwards; a pending entry left by a
crashed process is rolled forward by the next move (see :mod:`mlops_core.lifecycle`).

The ledger is a hash chain, so an edit made behind the platform's back (a tag rewritten in the registry's
database) is found: every entry stores ``entry_sha256``, the SHA-256 of its own canonical JSON (every field
but that one), and ``prev_sha256``, the digest of the entry before it. :func:`verify_chain` recomputes both
and names the first entry that does not match. An editor who also recomputes the edited entry's own hash is
caught by the next entry's ``prev_sha256``; only the newest entry can be rewritten consistently by someone
who knows the recipe, which is why the head digest is worth copying elsewhere (a release, a GitOps commit).
Entries written before the chain existed carry no hashes: they read as before and verify as "not verifiable".
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
GENESIS = "0" * 64
"""``prev_sha256`` of the first entry."""
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
    action: Literal["promote", "rollback", "deploy"]
    """``deploy``: a GitOps overlay commit that deployed ``version`` to stage ``to_alias`` (no alias moves)."""
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
    model_digest: str | None = None
    """The signed model's manifest digest (registry version tag ``mlops.model_digest``), when known."""
    overlay_commit: str | None = None
    """The GitOps overlay commit that deployed (or rolled back) this version, when known."""
    prev_sha256: str | None = None
    """:func:`entry_digest` of the entry before this one (``GENESIS`` for the first)."""
    entry_sha256: str | None = None
    """:func:`entry_digest` of this entry, set each time it is written."""

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


def entry_digest(entry: LedgerEntry) -> str:
    """SHA-256 of the entry's canonical JSON without ``entry_sha256`` (what the chain links)."""
    body = {k: v for k, v in asdict(entry).items() if k != "entry_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def chain_link(entries: list[LedgerEntry]) -> str:
    """``prev_sha256`` for the entry appended after ``entries`` (ledger order)."""
    return entry_digest(entries[-1]) if entries else GENESIS


def write_entry(client: MlflowClient, name: str, entry: LedgerEntry) -> LedgerEntry:
    """Store (or overwrite, e.g. pending → applied) one entry, sealed with its ``entry_sha256``; returns it."""
    sealed = replace(entry, entry_sha256=entry_digest(entry))
    client.set_registered_model_tag(name, tag_key(entry.seq), sealed.to_json())
    return sealed


def mark_applied(client: MlflowClient, name: str, entry: LedgerEntry, **extra: Any) -> LedgerEntry:
    """Rewrite ``entry`` as applied (with optional extra facts, e.g. who recovered it)."""
    return write_entry(client, name, replace(entry, status="applied", extra={**entry.extra, **extra}))


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


@dataclass(frozen=True)
class ChainVerdict:
    """What :func:`verify_chain` found: ``ok``, how many entries it checked, and the first broken one."""

    ok: bool
    checked: int
    head_sha256: str | None
    first_bad_seq: int | None = None
    problem: str | None = None
    unchained: list[int] = field(default_factory=list)
    """Entries written before the chain existed (no hashes): readable, but not verifiable."""

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for ``--json``."""
        return asdict(self)


def verify_chain(tags: Mapping[str, str]) -> ChainVerdict:
    """Walk the ledger stored in a registered model's ``tags`` and name the first entry that does not match.

    Checks, in order: each tag parses as an entry whose ``seq`` is the one its key names; sequence numbers
    run 1, 2, 3... without a gap; each entry's ``entry_sha256`` matches its content; each ``prev_sha256``
    matches the digest of the entry before it.
    """
    raw = sorted((k, v) for k, v in tags.items() if k.startswith(TAG_PREFIX))
    entries: list[LedgerEntry] = []
    for key, text in raw:
        try:
            entry = LedgerEntry.from_json(text, tag=key)
        except LedgerError as exc:
            seq = _seq_of(key)
            return ChainVerdict(False, len(entries), None, seq, f"entry #{seq} is unreadable: {exc}")
        if tag_key(entry.seq) != key:
            return ChainVerdict(False, len(entries), None, _seq_of(key),
                                f"entry stored under {key!r} claims seq {entry.seq}: it was moved or edited")
        entries.append(entry)
    unchained: list[int] = []
    prev: LedgerEntry | None = None
    for i, entry in enumerate(entries):
        if entry.seq != i + 1:
            return ChainVerdict(False, i, None, i + 1, f"entry #{i + 1} is missing (next stored is #{entry.seq}): "
                                                       "it was deleted")
        if entry.entry_sha256 is None and entry.prev_sha256 is None:
            if prev is not None and prev.entry_sha256 is not None:
                return ChainVerdict(False, i, None, entry.seq, f"entry #{entry.seq} has no hashes but follows "
                                                               "chained entries: its hashes were stripped")
            unchained.append(entry.seq)
        else:
            if entry.entry_sha256 != entry_digest(entry):
                return ChainVerdict(False, i, None, entry.seq,
                                    f"entry #{entry.seq} was edited: its content hashes to "
                                    f"{entry_digest(entry)[:12]}, its entry_sha256 says "
                                    f"{str(entry.entry_sha256)[:12]}")
            want = entry_digest(prev) if prev is not None else GENESIS
            if entry.prev_sha256 != want:
                bad = prev.seq if prev is not None else entry.seq
                return ChainVerdict(False, i, None, bad,
                                    f"entry #{bad} does not match the digest entry #{entry.seq} recorded for it "
                                    f"(recorded {str(entry.prev_sha256)[:12]}, now {want[:12]}): it was edited "
                                    "after the next entry was written")
        prev = entry
    head = entry_digest(entries[-1]) if entries else None
    return ChainVerdict(True, len(entries), head, unchained=unchained)


def _seq_of(key: str) -> int | None:
    tail = key.removeprefix(TAG_PREFIX)
    return int(tail) if tail.isdigit() else None
