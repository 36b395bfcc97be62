"""The validation gate: Great Expectations suites as code, row-level quarantine, batch-level rejection.

For each raw batch:

1. Batch checks: the file exists, is non-empty and readable parquet; the GX suite :func:`build_batch_suite`
   (exactly the raw columns, row count within bounds); Arrow types compatible with the contract's raw schema
   (:func:`~mlops_features.schema.raw_schema`).
   A failure rejects the whole batch: the file is copied to ``quarantine/batches/`` and every readable
   row counts as quarantined.
2. Row checks (GX suite :func:`build_suite`): the contract's expectations (not-null columns, ranges, allowed
   values), label in {0, 1}, unique record id, no event time in the future, ``created >= event_timestamp``;
   plus record ids already accepted from another batch. Passing rows go to ``validated/<batch>.parquet``, the rest
   to ``quarantine/<batch>.rows.parquet`` with the failed expectations per row.

Every batch also gets ``quarantine/<batch>.report.json``. Accepted + quarantined == input, always.
Re-validating a batch overwrites its own outputs, so it never duplicates rows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mlops_config import ContractConfig, DataConfig
from mlops_core import Progress, atomic_path, atomic_write_bytes, atomic_write_text
from mlops_features.errors import DataError
from mlops_features.schema import raw_schema

logger = logging.getLogger(__name__)

FAILED_COLUMN = "failed_expectations"
"""Column of quarantined rows: the expectations each row failed, comma-separated."""


@dataclass
class BatchResult:
    """What the gate did with one batch."""

    batch: str
    input_rows: int
    accepted_rows: int
    quarantined_rows: int
    batch_rejected: bool
    reasons: list[str] = field(default_factory=list)
    row_failures: dict[str, int] = field(default_factory=dict)
    validated_path: str | None = None
    quarantine_path: str | None = None
    report_path: str | None = None


@dataclass
class ValidationSummary:
    """Per-batch results of one :func:`validate_batches` call."""

    batches: list[BatchResult]

    @property
    def input_rows(self) -> int:
        return sum(b.input_rows for b in self.batches)

    @property
    def accepted_rows(self) -> int:
        return sum(b.accepted_rows for b in self.batches)

    @property
    def quarantined_rows(self) -> int:
        return sum(b.quarantined_rows for b in self.batches)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: totals plus one entry per batch."""
        return {
            "input_rows": self.input_rows,
            "accepted_rows": self.accepted_rows,
            "quarantined_rows": self.quarantined_rows,
            "rejected_batches": sum(b.batch_rejected for b in self.batches),
            "batches": [asdict(b) for b in self.batches],
        }


def build_suite(now: datetime, *, contract: ContractConfig) -> Any:
    """The row-level GX suite for raw rows under ``contract`` (``now`` bounds event times); needs an active GX
    context."""
    import great_expectations as gx

    e = gx.expectations
    expect = contract.expectations
    suite = gx.ExpectationSuite(name="raw_rows")
    for column in expect.not_null:
        suite.add_expectation(e.ExpectColumnValuesToNotBeNull(column=column))
    for column, bounds in expect.ranges.items():
        suite.add_expectation(e.ExpectColumnValuesToBeBetween(column=column, min_value=bounds.min,
                                                              max_value=bounds.max))
    for column, allowed in expect.allowed_values.items():
        suite.add_expectation(e.ExpectColumnValuesToBeInSet(column=column, value_set=list(allowed)))
    suite.add_expectation(e.ExpectColumnValuesToBeInSet(column=contract.label, value_set=[0, 1]))
    suite.add_expectation(e.ExpectColumnValuesToBeUnique(column=contract.record_id))
    suite.add_expectation(e.ExpectColumnValuesToBeBetween(column="event_timestamp", max_value=pd.Timestamp(now)))
    suite.add_expectation(
        e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="created", column_B="event_timestamp", or_equal=True)
    )
    return suite


def build_batch_suite(data: DataConfig, *, contract: ContractConfig) -> Any:
    """The batch-level GX suite: exactly the raw columns, a row count within bounds; needs an active GX context."""
    import great_expectations as gx

    e = gx.expectations
    suite = gx.ExpectationSuite(name="raw_batch")
    suite.add_expectation(e.ExpectTableColumnsToMatchSet(column_set=list(contract.raw_columns), exact_match=True))
    suite.add_expectation(
        e.ExpectTableRowCountToBeBetween(min_value=data.min_batch_rows, max_value=data.max_batch_rows)
    )
    return suite


def validate_batches(
    paths: Iterable[str | Path], data: DataConfig, root: str | Path, *, now: datetime | None = None,
    contract: ContractConfig,
) -> ValidationSummary:
    """Run the gate over raw batch files; see the module doc for what lands where.

    Args:
        paths: Raw parquet batches.
        data: The ``data`` section (output folders, row-count bounds).
        root: Repo root the section's folders are relative to.
        now: Upper bound for event times; default: the current UTC time.
        contract: The model's contract: the raw columns, their types and the expectations on them.
    """
    root = Path(root)
    validated_dir, quarantine_dir = root / data.validated_dir, root / data.quarantine_dir
    validated_dir.mkdir(parents=True, exist_ok=True)
    quarantine_dir.mkdir(parents=True, exist_ok=True)
    now = now or datetime.now(UTC)
    runner = _SuiteRunner(data, now, contract)
    results = []
    batches = [Path(p) for p in paths]
    progress = Progress(len(batches), "batch")  # a bar on a terminal, a line per batch (up to 20) elsewhere
    for done, path in enumerate(batches, start=1):
        result = _validate_one(path, runner, validated_dir, quarantine_dir)
        report = quarantine_dir / f"{_stem(path)}.report.json"
        result.report_path = str(report)
        atomic_write_text(report, json.dumps(_report_record(result, root), indent=2) + "\n")
        assert result.accepted_rows + result.quarantined_rows == result.input_rows, "gate lost rows"
        logger.info("%s: %d in, %d accepted, %d quarantined%s", path.name, result.input_rows, result.accepted_rows,
                    result.quarantined_rows, " (batch rejected)" if result.batch_rejected else "")
        results.append(result)
        progress.update(done, f"{path.name}: {result.accepted_rows} accepted, {result.quarantined_rows} quarantined")
    progress.close()
    return ValidationSummary(results)


class _SuiteRunner:
    """One ephemeral GX context and batch definition reused across batches (GX setup is the slow part)."""

    def __init__(self, data: DataConfig, now: datetime, contract: ContractConfig) -> None:
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context = gx.get_context(mode="ephemeral")  # suites need an active context
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        self.suite = build_suite(now, contract=contract)
        self.batch_suite = build_batch_suite(data, contract=contract)
        self.schema = raw_schema(contract)
        self.record_id = contract.record_id
        self.bounds = (data.min_batch_rows, data.max_batch_rows)
        asset = context.data_sources.add_pandas("raw").add_dataframe_asset("transactions")
        self.batch_definition = asset.add_batch_definition_whole_dataframe("whole")

    def batch_problems(self, df: pd.DataFrame, name: str) -> list[str]:
        """Reasons the batch suite rejects the whole batch (empty when it passes)."""
        batch = self.batch_definition.get_batch(batch_parameters={"dataframe": df})
        problems = []
        for r in batch.validate(self.batch_suite).results:
            if r.success:
                continue
            if r.expectation_config.type == "expect_table_columns_to_match_set":
                expected = self.schema.names
                missing = [c for c in expected if c not in df.columns]
                extra = [c for c in df.columns if c not in expected]
                problems.append(f"schema mismatch in {name!r}: missing columns {missing!r}, unexpected {extra!r} "
                                f"({r.expectation_config.type})")
            elif r.expectation_config.type == "expect_table_row_count_to_be_between":
                problems.append(f"row count {len(df)} of {name!r} outside [{self.bounds[0]}, {self.bounds[1]}] "
                                f"(data.min_batch_rows / data.max_batch_rows)")
            else:  # pragma: no cover - the suite holds only the two above
                problems.append(f"{r.expectation_config.type} failed on {name!r}")
        return sorted(problems)

    def failures(self, df: pd.DataFrame) -> dict[str, list[int]]:
        """Failed expectation id → positional indices of the failing rows."""
        batch = self.batch_definition.get_batch(batch_parameters={"dataframe": df})
        result = batch.validate(self.suite, result_format={"result_format": "COMPLETE"})
        out: dict[str, list[int]] = {}
        for r in result.results:
            if r.success:
                continue
            cfg = r.expectation_config
            kw = cfg.kwargs
            cols = kw.get("column") or ",".join(str(kw[k]) for k in ("column_A", "column_B") if k in kw)
            name = f"{cfg.type}({cols})"
            raised = r.exception_info.get("raised_exception") if isinstance(r.exception_info, dict) else False
            if raised or "unexpected_index_list" not in r.result:
                raise DataError(f"expectation {name} could not be evaluated on this batch: {r.exception_info}")
            out[name] = list(r.result["unexpected_index_list"])
        return out


def _report_record(result: BatchResult, root: Path) -> dict[str, Any]:
    """The report file's form of ``result``: its paths under ``root`` relative to it (the report is an output of
    the DVC ``validate`` stage, so what ``dvc.lock`` records must not depend on where the checkout is); a path
    elsewhere stays as it is. The returned :class:`BatchResult` keeps the full paths."""
    record = asdict(result)
    base = root.resolve()
    for key in ("validated_path", "quarantine_path", "report_path"):
        path = None if record[key] is None else Path(record[key]).resolve()
        if path is not None and path.is_relative_to(base):
            record[key] = path.relative_to(base).as_posix()
    return record


def _validate_one(
    path: Path, runner: _SuiteRunner, validated_dir: Path, quarantine_dir: Path
) -> BatchResult:
    name = _stem(path)
    table, rows, problem = _read_batch(path)
    if table is not None:
        problems = _batch_problems(table, runner, path.name)
        if problems:
            table, problem = None, "; ".join(problems)
    if problem is not None:
        kept = quarantine_dir / "batches" / path.name
        if path.exists():
            atomic_write_bytes(kept, path.read_bytes())
        (validated_dir / f"{name}.parquet").unlink(missing_ok=True)
        return BatchResult(batch=name, input_rows=rows, accepted_rows=0, quarantined_rows=rows, batch_rejected=True,
                           reasons=[problem], quarantine_path=str(kept) if path.exists() else None)
    assert table is not None
    schema = runner.schema
    df = table.select(schema.names).cast(schema).to_pandas().reset_index(drop=True)
    failures = runner.failures(df)
    dup_name, dup_rows = _accepted_elsewhere(df, validated_dir, name, runner.record_id)
    if dup_rows:
        failures[dup_name] = dup_rows
    per_row: dict[int, list[str]] = {}
    for expectation, indices in sorted(failures.items()):
        for i in indices:
            per_row.setdefault(int(i), []).append(expectation)
    bad = pd.Series(False, index=df.index)
    bad.iloc[sorted(per_row)] = True
    accepted, rejected = df[~bad.to_numpy()], df[bad.to_numpy()].copy()
    result = BatchResult(batch=name, input_rows=len(df), accepted_rows=len(accepted), quarantined_rows=len(rejected),
                         batch_rejected=False, row_failures={k: len(v) for k, v in sorted(failures.items())},
                         reasons=[f"{k}: {len(v)} rows" for k, v in sorted(failures.items())])
    validated = validated_dir / f"{name}.parquet"
    quarantined = quarantine_dir / f"{name}.rows.parquet"
    if len(accepted):
        _write(pa.Table.from_pandas(accepted, schema=schema, preserve_index=False), validated)
        result.validated_path = str(validated)
    else:
        validated.unlink(missing_ok=True)
    if len(rejected):
        rejected[FAILED_COLUMN] = [",".join(per_row[i]) for i in sorted(per_row)]
        _write(pa.Table.from_pandas(rejected, preserve_index=False), quarantined)
        result.quarantine_path = str(quarantined)
    else:
        quarantined.unlink(missing_ok=True)
    return result


def _batch_problems(table: pa.Table, runner: _SuiteRunner, name: str) -> list[str]:
    """Batch suite (columns, row count) first, then Arrow types, which GX cannot see in a pandas frame."""
    problems = runner.batch_problems(table.to_pandas(), name)
    if problems:
        return problems
    wrong = [
        f"{f.name}: {table.schema.field(f.name).type} (expected {f.type})"
        for f in runner.schema
        if not _compatible(table.schema.field(f.name).type, f.type)
    ]
    return [f"wrong column types in {name!r}: {'; '.join(wrong)}"] if wrong else []


def _read_batch(path: Path) -> tuple[pa.Table | None, int, str | None]:
    """The batch as an Arrow table and its row count, or a problem when the file cannot be read."""
    if not path.is_file():
        return None, 0, f"file {str(path)!r} does not exist"
    if path.stat().st_size == 0:
        return None, 0, f"empty file {path.name!r} (0 bytes): expected a parquet batch"
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        return None, _count_rows(path), f"unreadable parquet {path.name!r} (truncated or not parquet): {exc}"
    return table, table.num_rows, None


def _compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_timestamp(expected):
        return pa.types.is_timestamp(actual) and actual.tz in ("UTC", "+00:00", "Etc/UTC")
    if pa.types.is_string(expected):
        return pa.types.is_string(actual) or pa.types.is_large_string(actual)
    if pa.types.is_floating(expected):
        return pa.types.is_floating(actual) or pa.types.is_integer(actual)
    if pa.types.is_integer(expected):
        return pa.types.is_integer(actual)
    return actual == expected


def _count_rows(path: Path) -> int:
    """Rows a damaged file claims in its footer; 0 when even that is unreadable."""
    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except Exception:  # any damage: the file is kept whole in quarantine anyway
        return 0


def _accepted_elsewhere(df: pd.DataFrame, validated_dir: Path, name: str, record_id: str) -> tuple[str, list[int]]:
    """Rows whose record id was already accepted from another batch."""
    others = [p for p in sorted(validated_dir.glob("*.parquet")) if p.stem != name]
    label = f"unique_across_batches({record_id})"
    if not others:
        return label, []
    seen = set()
    for p in others:
        seen.update(pq.read_table(p, columns=[record_id]).column(0).to_pylist())
    return label, [i for i, t in enumerate(df[record_id]) if t in seen]


def _write(table: pa.Table, path: Path) -> None:
    with atomic_path(path) as tmp:  # hidden temporary name, fsync, rename: readers never see half a file
        pq.write_table(table, tmp)


def _stem(path: Path) -> str:
    return path.name[: -len(".parquet")] if path.name.endswith(".parquet") else path.name
