"""The prediction log's store: hive-partitioned parquet parts on any fsspec filesystem.

One URI names the store: a plain path or ``file://`` locally and in the rehearsal, ``s3://bucket/prefix`` in a
cluster (s3fs; credentials and endpoint from the usual ``AWS_*`` env vars, e.g. ``AWS_ENDPOINT_URL``). Serving
pods write to it, and the drift job and the canary analysis read it, wherever each of them runs. Layout::

    <uri>/model=<model>/version=<version>/hour=<YYYY-MM-DDTHH>/part-<UTC stamp>-<host>-<pid>-<token>.parquet

``hour`` is the UTC hour of the rows' ``ts``. A part appears whole or not at all: on a local filesystem it is
written under a ``.tmp`` name and renamed; on an object store one PUT of the finished bytes is atomic.

A reader of a time window lists the hour folders of each version and opens only the parts of the hours that
overlap the window; a pyarrow dataset over those parts then pushes the exact ``ts`` bound down to the
row groups. Memory follows the window, not the history. Retention: :func:`prune_prediction_log` deletes
whole hour partitions older than ``serving.prediction_log_retention_hours`` (the writer calls it once an
hour; deleting twice is harmless, so every replica may).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlops_serving.errors import PredictionLogError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from fsspec import AbstractFileSystem

log = logging.getLogger(__name__)

HOUR_FORMAT = "%Y-%m-%dT%H"
_VALUE = re.compile(r"^[A-Za-z0-9._-]+$")
_HOUR = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}$")


def resolve_prediction_log_uri(uri: str | Path, root: Path) -> str:
    """``uri`` with a relative local path made absolute against ``root``; URIs with a scheme pass unchanged."""
    text = str(uri)
    if "://" in text:
        return text[len("file://"):] if text.startswith("file://") else text
    path = Path(text)
    return str(path if path.is_absolute() else root / path)


def hour_key(ts: datetime) -> str:
    """The ``hour=`` partition value of a timestamp (naive means UTC)."""
    return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).astimezone(UTC).strftime(HOUR_FORMAT)


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _check_value(what: str, value: str) -> str:
    if not _VALUE.match(value):
        raise PredictionLogError(f"{what} {value!r} cannot name a prediction-log partition; "
                                 "expected letters, digits, '.', '_' or '-'")
    return value


class PredictionLogStore:
    """The parts of one model in one store: write a partition's part, list a window's parts, prune old hours."""

    def __init__(self, uri: str | Path, model: str) -> None:
        from fsspec.core import url_to_fs

        self.uri = str(uri)
        self.model = _check_value("model", model)
        try:
            fs, base = url_to_fs(self.uri)
        except (ImportError, ValueError) as exc:
            raise PredictionLogError(f"prediction-log store {self.uri!r} cannot be opened: {exc}") from None
        self.fs: AbstractFileSystem = fs
        self.base = base.rstrip("/")
        self.model_dir = f"{self.base}/model={self.model}"
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))
        self._writer_id = f"{_check_part_token(socket.gethostname())}-{os.getpid()}"

    # -- writing ---------------------------------------------------------------------------------------------
    def write_part(self, version: str, hour: str, table: pa.Table) -> str:
        """Write ``table`` as one new part of partition (version, hour); returns its path."""
        import pyarrow.parquet as pq

        folder = f"{self.model_dir}/version={_check_value('version', version)}/hour={hour}"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        final = f"{folder}/part-{stamp}-{self._writer_id}-{uuid.uuid4().hex[:8]}.parquet"
        if self.local:
            self.fs.makedirs(folder, exist_ok=True)
            tmp = f"{final}.tmp"
            try:
                with self.fs.open(tmp, "wb") as f:
                    pq.write_table(table, f)
                os.replace(tmp, final)  # atomic on one filesystem: readers never see half a part
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        else:
            import pyarrow as pa

            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            self.fs.pipe_file(final, sink.getvalue().to_pybytes())  # one PUT: the object appears whole
        return final

    # -- listing ---------------------------------------------------------------------------------------------
    def versions(self) -> list[str]:
        """The versions that have a partition, sorted."""
        return sorted(v for v in (_partition_value(p, "version") for p in self._ls(self.model_dir)) if v)

    def hours(self, version: str) -> list[str]:
        """The ``hour=`` values of one version, sorted."""
        hours = (_partition_value(p, "hour") for p in self._ls(f"{self.model_dir}/version={version}"))
        return sorted(h for h in hours if h and _HOUR.match(h))

    def window_parts(self, since: datetime | None = None, until: datetime | None = None,
                     versions: Iterable[str | int] | None = None) -> list[str]:
        """The parts of the hour partitions that overlap ``[since, until]`` (of ``versions`` only, if given).

        Lists folder names only (versions, then each version's hours); files are listed in matching hours only.
        """
        self.fs.invalidate_cache(self.model_dir)  # s3fs keeps listings: a long-lived reader must see new parts
        first = hour_key(since) if since is not None else None
        last = hour_key(until) if until is not None else None
        wanted = None if versions is None else {str(v) for v in versions}
        parts: list[str] = []
        for version in self.versions():
            if wanted is not None and version not in wanted:
                continue
            for hour in self.hours(version):
                if (first is not None and hour < first) or (last is not None and hour > last):
                    continue
                folder = f"{self.model_dir}/version={version}/hour={hour}"
                parts += sorted(p for p in self._ls(folder)
                                if p.rsplit("/", 1)[-1].startswith("part-") and p.endswith(".parquet"))
        return parts

    def _ls(self, path: str) -> list[str]:
        try:
            return [p.rstrip("/") for p in self.fs.ls(path, detail=False)]
        except FileNotFoundError:
            return []

    def legacy_parts(self) -> list[str]:
        """Parts in the old flat layout ``<uri>/<model>/part-*.parquet`` (written before the partitioned store)."""
        return [p for p in self._ls(f"{self.base}/{self.model}") if p.endswith(".parquet")]

    # -- retention -------------------------------------------------------------------------------------------
    def prune(self, retention: timedelta, now: datetime | None = None) -> list[str]:
        """Delete every hour partition that ended before ``now - retention``; returns the deleted folders."""
        cutoff = _utc(now or datetime.now(UTC)) - retention
        self.fs.invalidate_cache(self.model_dir)
        deleted = []
        for version in self.versions():
            for hour in self.hours(version):
                end = datetime.strptime(hour, HOUR_FORMAT).replace(tzinfo=UTC) + timedelta(hours=1)
                if end > cutoff:
                    break  # sorted: the rest are younger
                folder = f"{self.model_dir}/version={version}/hour={hour}"
                try:
                    self.fs.rm(folder, recursive=True)
                except FileNotFoundError:  # another replica pruned it first
                    continue
                deleted.append(folder)
        if deleted:
            log.info("prediction log %s: pruned %d hour partition(s) older than %s", self.model_dir, len(deleted),
                     cutoff.isoformat())
        return deleted


def _partition_value(path: str, key: str) -> str | None:
    name = path.rsplit("/", 1)[-1]
    prefix = f"{key}="
    return name[len(prefix):] if name.startswith(prefix) else None


def _check_part_token(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "-", text)[:63] or "host"


def partition_rows(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """Rows grouped by partition: (``model_version``, hour of ``ts``), in arrival order within a group."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        ts = row.get("ts")
        if not isinstance(ts, datetime):
            raise PredictionLogError(f"a prediction-log row needs a datetime 'ts', got {ts!r:.60}")
        groups.setdefault((str(row.get("model_version")), hour_key(ts)), []).append(row)
    return groups


@dataclass(frozen=True)
class LogColumns:
    """Prediction-log rows by column (name → one value per row): how the request path hands over a batch's rows.

    The same rows as the dicts :func:`rows_table` reads, in the same order: column order is the order in which
    a row's keys first appear, a value a row lacks is None. Built once per batch, never as a dict per row.
    """

    columns: dict[str, list[Any]]
    n: int

    @classmethod
    def of_rows(cls, rows: Sequence[Mapping[str, Any]]) -> LogColumns:
        """Row dicts by column (the union of their keys, in order of first appearance)."""
        names = dict.fromkeys(key for row in rows for key in row)
        return cls({name: [row.get(name) for row in rows] for name in names}, len(rows))

    def take(self, index: Sequence[int]) -> LogColumns:
        """The rows at ``index``, in that order."""
        return LogColumns({name: [column[i] for i in index] for name, column in self.columns.items()}, len(index))

    def split(self, k: int) -> tuple[LogColumns, LogColumns]:
        """The first ``k`` rows and the rest."""
        k = min(max(k, 0), self.n)
        head = {name: column[:k] for name, column in self.columns.items()}
        tail = {name: column[k:] for name, column in self.columns.items()}
        return LogColumns(head, k), LogColumns(tail, self.n - k)


def partition_columns(blocks: Sequence[LogColumns]) -> dict[tuple[str, str], list[LogColumns]]:
    """:func:`partition_rows` for column blocks: each block's rows grouped by (``model_version``, hour of
    ``ts``), groups in order of first appearance, blocks and rows in arrival order within a group."""
    groups: dict[tuple[str, str], list[LogColumns]] = {}
    hours: dict[datetime, str] = {}  # a batch's rows share one ts object: its hour is formatted once
    for block in blocks:
        stamps = block.columns.get("ts", [None] * block.n)
        versions = block.columns.get("model_version", [None] * block.n)
        keys: dict[tuple[str, str], list[int]] = {}
        for i, (ts, version) in enumerate(zip(stamps, versions, strict=True)):
            if not isinstance(ts, datetime):
                raise PredictionLogError(f"a prediction-log row needs a datetime 'ts', got {ts!r:.60}")
            hour = hours.get(ts)
            if hour is None:
                hour = hours[ts] = hour_key(ts)
            keys.setdefault((str(version), hour), []).append(i)
        for key, index in keys.items():
            groups.setdefault(key, []).append(block if len(index) == block.n else block.take(index))
    return groups


def columns_table(blocks: Sequence[LogColumns]) -> pa.Table:
    """:func:`rows_table` of the blocks' rows, one after the other: the same table, built column by column."""
    names: dict[str, None] = {}
    for block in blocks:
        names.update(dict.fromkeys(block.columns))
    data: dict[str, list[Any]] = {}
    for name in names:
        values: list[Any] = []
        for block in blocks:
            column = block.columns.get(name)
            values.extend(column if column is not None else [None] * block.n)
        data[name] = values
    return _table(data)


def rows_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """An Arrow table of rows (the union of their keys; a key missing in a row is null there)."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return _table({n: [row.get(n) for row in rows] for n in names})


def _table(data: dict[str, list[Any]]) -> pa.Table:
    import pyarrow as pa

    table = pa.Table.from_pydict(data)
    index = table.schema.get_field_index("ts")
    if index >= 0 and table.schema.field(index).type != pa.timestamp("us", tz="UTC"):
        table = table.set_column(index, "ts", table.column(index).cast(pa.timestamp("us", tz="UTC")))
    return table


def write_prediction_log(uri: str | Path, model: str, rows: Sequence[Mapping[str, Any]] | pd.DataFrame) -> int:
    """Write rows (dicts or a DataFrame with the contract's columns) as parts of their partitions; returns rows."""
    import pandas as pd

    if isinstance(rows, pd.DataFrame):
        frame = rows.copy()
        frame["ts"] = pd.to_datetime(frame["ts"], utc=True)
        records: Sequence[Mapping[str, Any]] = [
            {**r, "ts": r["ts"].to_pydatetime()} for r in frame.to_dict(orient="records")]
    else:
        records = rows
    store = PredictionLogStore(uri, model)
    for (version, hour), group in partition_rows(records).items():
        store.write_part(version, hour, rows_table(group))
    return len(records)


def read_prediction_log(
    uri: str | Path,
    model: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    versions: Iterable[str | int] | None = None,
    columns: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Logged predictions of ``model`` with ``since <= ts <= until`` (UTC; naive means UTC), oldest first.

    Only the parts of the hour partitions overlapping the window (and of ``versions``, if given) are opened.
    ``columns`` limits what is read (``ts`` is read for the bound and the order either way). Returns an empty
    frame with no columns when nothing was logged in the window's partitions.

    Raises:
        PredictionLogError: the store cannot be opened or read, a column is unknown, or the store holds parts
            in the old flat layout.
    """
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    store = PredictionLogStore(uri, model)
    parts = store.window_parts(since, until, versions)
    if not parts:
        legacy = store.legacy_parts()
        if legacy:
            raise PredictionLogError(
                f"{store.base}/{model} holds {len(legacy)} prediction-log part(s) in the old flat layout; expected "
                f"{store.model_dir}/version=<v>/hour=<YYYY-MM-DDTHH>/part-*.parquet: rewrite them with "
                "mlops_serving.write_prediction_log")
        return pd.DataFrame()
    try:
        schema = pa.unify_schemas(_part_schemas(store, parts), promote_options="permissive")
        dataset = ds.dataset(parts, schema=schema, format="parquet", filesystem=store.fs)
    except (OSError, pa.ArrowException) as exc:
        raise PredictionLogError(f"cannot read the prediction log of {model!r} in {store.uri!r}: {exc}") from None
    wanted = list(schema.names) if columns is None else list(columns)
    unknown = [c for c in wanted if c not in schema.names]
    if unknown:
        raise PredictionLogError(f"unknown prediction-log column(s) {unknown!r}; the log has {schema.names!r}")
    ts_type = pa.timestamp("us", tz="UTC")
    row_filter = None
    for bound, op in ((since, pc.greater_equal), (until, pc.less_equal)):
        if bound is not None:
            term = op(pc.field("ts"), pa.scalar(_utc(bound), type=ts_type))
            row_filter = term if row_filter is None else row_filter & term
    read = wanted if "ts" in wanted else [*wanted, "ts"]
    try:
        table = dataset.to_table(columns=read, filter=row_filter)
    except (OSError, pa.ArrowException) as exc:
        raise PredictionLogError(f"cannot read the prediction log of {model!r} in {store.uri!r}: {exc}") from None
    frame = table.to_pandas().sort_values("ts", kind="stable").reset_index(drop=True)
    return frame[wanted]


def prediction_log_parts(
    uri: str | Path, model: str, *, since: datetime | None = None, until: datetime | None = None,
    versions: Iterable[str | int] | None = None,
) -> tuple[list[str], AbstractFileSystem | None]:
    """The parquet parts of the hour partitions overlapping ``[since, until]``, for an engine that reads them
    itself (the DuckDB drift path), and the fsspec filesystem to read them through (``None`` when local).

    The rows of those parts still need the exact ``since <= ts <= until`` filter.

    Raises:
        PredictionLogError: the store cannot be opened, or holds parts in the old flat layout.
    """
    store = PredictionLogStore(uri, model)
    parts = store.window_parts(since, until, versions)
    if not parts and store.legacy_parts():
        raise PredictionLogError(
            f"{store.base}/{model} holds prediction-log parts in the old flat layout; expected "
            f"{store.model_dir}/version=<v>/hour=<YYYY-MM-DDTHH>/part-*.parquet: rewrite them with "
            "mlops_serving.write_prediction_log")
    return parts, None if store.local else store.fs


def _part_schemas(store: PredictionLogStore, parts: Sequence[str]) -> list[pa.Schema]:
    """Each part's schema (a footer read each; in parallel, as an object store answers each after a round trip).

    Parts of one window may differ (a column null in every row of one flush, a feature added): unified on read.
    """
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    with ThreadPoolExecutor(max_workers=1 if store.local else 8) as pool:
        return list(pool.map(lambda p: pq.read_schema(p, filesystem=store.fs), parts))


def prune_prediction_log(uri: str | Path, model: str, *, retention_hours: float,
                         now: datetime | None = None) -> list[str]:
    """Delete ``model``'s hour partitions that ended more than ``retention_hours`` before ``now``."""
    if retention_hours <= 0:
        raise PredictionLogError(f"retention_hours={retention_hours!r} must be positive")
    return PredictionLogStore(uri, model).prune(timedelta(hours=retention_hours), now)
