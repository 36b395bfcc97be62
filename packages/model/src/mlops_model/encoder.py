"""The one encoding from a training-set or request row to the model's float32 input.

:class:`EncoderSpec` is fitted on the training split, travels inside the exported model's ``model.json``
(``features.encoder``) and is validated when read back. Its columns, in order:

- ``numeric``: ``{"name", "log", "mean", "std"}``; ``log`` columns go through ``sign(x) * log1p(|x|)``
  before standardisation; a missing value encodes as the mean (0 after scaling).
- ``derived``: ``{"name", "op", "args", "mean", "std"}`` computed from numeric columns (raw values);
  ``log_ratio`` is ``log((|a| + 1) / (|b| + 1))`` (a value against its usual level).
- ``categorical``: ``{"name", "vocab"}``; one-hot over the vocabulary plus one slot for anything else
  (new or missing values).
- ``input_dim``: width of the encoded row.

Which columns are log-scaled and which are derived is the model contract's (``contract.log_prefixes``,
``contract.derived``); :meth:`EncoderSpec.fit` reads it, the fitted spec records the outcome.

One column kernel (:meth:`EncoderSpec._encode`) does the arithmetic; thin adapters feed it columns:
:meth:`EncoderSpec.encode_frame` (a DataFrame: training, evaluation), :meth:`EncoderSpec.encode_columns`
(name → list of values: serving's hot path, the online lookup's columns as they come, no row dict or DataFrame
built per request) and :meth:`EncoderSpec.encode_records` (a list of row dicts). Same kernel, same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from mlops_model.errors import EncoderSpecError

if TYPE_CHECKING:
    import pandas as pd

    from mlops_config import ContractConfig

ENCODER_VERSION: Literal[1] = 1


class _Column(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    """Column name in the training set / request row."""


class _Scaled(_Column):
    mean: float = Field(allow_inf_nan=False)
    """Mean of the (log-transformed) training values."""
    std: float = Field(gt=0, allow_inf_nan=False)
    """Standard deviation of the (log-transformed) training values; 1 where they were constant."""


class NumericColumn(_Scaled):
    log: bool
    """Whether ``sign(x) * log1p(|x|)`` is applied before standardising."""


class DerivedColumn(_Scaled):
    op: Literal["log_ratio"]
    """How the column is computed from ``args``."""
    args: tuple[str, str]
    """The two numeric columns it is computed from (raw values)."""


class CategoricalColumn(_Column):
    vocab: tuple[str, ...]
    """Known values, in slot order; one more slot follows for anything else."""


def default_numeric(df: pd.DataFrame, *, contract: ContractConfig) -> list[str]:
    """The contract's numeric request fields, then the frame's other numeric, non-key, non-label columns."""
    import pandas as pd  # here, not at the top: the LM workers import this package but never handle a DataFrame

    skip = {*contract.numeric_fields, *contract.entity_keys, contract.label}
    rest = [c for c in df.columns if c not in skip and pd.api.types.is_numeric_dtype(df[c])
            and not pd.api.types.is_bool_dtype(df[c])]
    return [c for c in contract.numeric_fields if c in df.columns] + rest


class EncoderSpec(BaseModel):
    """A fitted encoder: frozen, validated, JSON round-trippable (``to_dict`` / ``from_dict``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = ENCODER_VERSION
    """Format version of the spec."""
    numeric: tuple[NumericColumn, ...]
    """Numeric columns, in output order."""
    derived: tuple[DerivedColumn, ...] = ()
    """Derived columns, after the numeric ones."""
    categorical: tuple[CategoricalColumn, ...] = ()
    """One-hot columns, last."""
    input_dim: int
    """Width of the encoded row; must equal the columns' total width."""

    _slots: tuple[dict[str, int], ...] = PrivateAttr(default=())
    _logged: np.ndarray = PrivateAttr(default_factory=lambda: np.empty(0, dtype=np.int64))
    _means: np.ndarray = PrivateAttr(default_factory=lambda: np.empty((0, 1)))
    _stds: np.ndarray = PrivateAttr(default_factory=lambda: np.empty((0, 1)))

    @model_validator(mode="after")
    def _consistent(self) -> EncoderSpec:
        names = [c.name for c in (*self.numeric, *self.derived, *self.categorical)]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"column names {repeated!r} appear more than once")
        numeric = {c.name for c in self.numeric}
        for d in self.derived:
            if not set(d.args) <= numeric:
                raise ValueError(f"derived column {d.name!r} reads {list(d.args)!r}; only numeric columns "
                                 f"{sorted(numeric)!r} can be its arguments")
        for c in self.categorical:
            if len(set(c.vocab)) != len(c.vocab):
                raise ValueError(f"categorical column {c.name!r} has repeated vocabulary values")
        width = len(self.numeric) + len(self.derived) + sum(len(c.vocab) + 1 for c in self.categorical)
        if self.input_dim != width:
            raise ValueError(f"input_dim {self.input_dim!r} != {width}, the width of the columns listed")
        return self

    def model_post_init(self, context: Any) -> None:
        self._slots = tuple({v: i for i, v in enumerate(c.vocab)} for c in self.categorical)
        # the numeric columns' parameters as column vectors: the kernel scales all of them in one array operation
        self._logged = np.array([i for i, c in enumerate(self.numeric) if c.log], dtype=np.int64)
        self._means = np.array([[c.mean] for c in self.numeric], dtype=np.float64).reshape(-1, 1)
        self._stds = np.array([[c.std] for c in self.numeric], dtype=np.float64).reshape(-1, 1)

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "encoder spec") -> EncoderSpec:
        """Validate a spec read from JSON (``model.json``'s ``features.encoder``); errors name the bad field."""
        if isinstance(data, EncoderSpec):
            return data
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg']} (got {e.get('input')!r:.80})"
                                 for e in exc.errors())
            raise EncoderSpecError(f"{source} is not a valid encoder spec (version {ENCODER_VERSION}): "
                                   f"{problems}") from None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form written into ``model.json``."""
        return self.model_dump(mode="json")

    @property
    def input_columns(self) -> list[str]:
        """The row columns the spec reads, in spec order (derived columns read numeric ones)."""
        return [c.name for c in self.numeric] + [c.name for c in self.categorical]

    @classmethod
    def fit(cls, df: pd.DataFrame, numeric: Sequence[str] | None = None,
            categorical: Sequence[str] | None = None, *, contract: ContractConfig) -> EncoderSpec:
        """Fit means, standard deviations and vocabularies on ``df`` (the training split only).

        Args:
            df: Training rows: request-time fields and feature columns.
            numeric: Numeric columns; default: the request's numeric fields, then every other numeric column of
                ``df`` in its order (the FeatureService's features in a training set), less the label.
            categorical: Categorical columns; default: the request-time categoricals present in ``df``.
            contract: The model's contract: its request fields, label, log-scaled prefixes and derived columns.
        """
        if len(df) == 0:
            raise EncoderSpecError("cannot fit an encoder on an empty DataFrame: expected training rows")
        numeric = list(numeric) if numeric is not None else default_numeric(df, contract=contract)
        categorical = (list(categorical) if categorical is not None
                       else [c for c in contract.categorical_fields if c in df.columns])
        missing = [c for c in (*numeric, *categorical) if c not in df.columns]
        if missing:
            raise EncoderSpecError(f"columns {missing!r} are not in the DataFrame; it has {sorted(df.columns)!r}")
        raw = {name: _frame_numeric(df, name) for name in numeric}
        logs = {n: n.startswith(contract.log_prefixes) for n in numeric}
        num = [NumericColumn(name=n, log=logs[n], **_moments(_log(raw[n], logs[n]))) for n in numeric]
        derived = [DerivedColumn(name=d.name, op=d.op, args=d.args,
                                 **_moments(_OPS[d.op](raw[d.args[0]], raw[d.args[1]])))
                   for d in contract.derived if all(a in raw for a in d.args)]
        cats = [CategoricalColumn(name=n, vocab=tuple(sorted(df[n].dropna().astype(str).unique().tolist())))
                for n in categorical]
        width = len(num) + len(derived) + sum(len(c.vocab) + 1 for c in cats)
        return cls(numeric=tuple(num), derived=tuple(derived), categorical=tuple(cats), input_dim=width)

    def encode_frame(self, df: pd.DataFrame) -> np.ndarray:
        """Encode DataFrame rows; returns ``float32`` of shape ``(len(df), input_dim)``."""
        missing = [c for c in self.input_columns if c not in df.columns]
        if missing:
            raise EncoderSpecError(f"cannot encode: columns {missing!r} are missing; the encoder expects "
                                   f"{self.input_columns!r}")

        def categorical(name: str) -> Any:
            return df[name].astype(object).where(df[name].notna(), None)

        def numeric() -> np.ndarray:
            return np.array([_frame_numeric(df, c.name) for c in self.numeric], dtype=np.float64)

        return self._encode(len(df), numeric, categorical)

    def encode_records(self, records: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Encode row dicts (a missing key counts as a missing value); same bytes as :meth:`encode_frame`."""

        def numeric() -> np.ndarray:
            return self._numeric_block([[r.get(c.name) for r in records] for c in self.numeric])

        def categorical(name: str) -> list[Any]:
            return [None if (x := r.get(name)) is None or (isinstance(x, float) and x != x) else x for r in records]

        return self._encode(len(records), numeric, categorical)

    def encode_columns(self, columns: Mapping[str, Sequence[Any]]) -> np.ndarray:
        """Encode columns (name → one value per row; None or NaN: missing); same bytes as :meth:`encode_frame`.

        Every input column must be there, all of one length (the frame's contract: a missing column is an
        error, not a column of missing values). Extra columns are ignored.
        """
        missing = [c for c in self.input_columns if c not in columns]
        if missing:
            raise EncoderSpecError(f"cannot encode: columns {missing!r} are missing; the encoder expects "
                                   f"{self.input_columns!r}")
        lengths = {name: len(columns[name]) for name in self.input_columns}
        if len(set(lengths.values())) > 1:
            raise EncoderSpecError(f"cannot encode: the columns differ in length: {lengths!r}")
        n = next(iter(lengths.values()), 0)

        def numeric() -> np.ndarray:
            return self._numeric_block([columns[c.name] for c in self.numeric])

        def categorical(name: str) -> list[Any]:
            return [None if x is None or (isinstance(x, float) and x != x) else x for x in columns[name]]

        return self._encode(n, numeric, categorical)

    def _numeric_block(self, values: list[Sequence[Any]]) -> np.ndarray:
        """The numeric columns' raw values as one float64 array (None → NaN, as the frame's to_numeric does)."""
        try:
            return np.array(values, dtype=np.float64)
        except (TypeError, ValueError):
            for c, column in zip(self.numeric, values, strict=True):  # name the column at fault
                try:
                    np.array(column, dtype=np.float64)
                except (TypeError, ValueError) as exc:
                    raise EncoderSpecError(f"column {c.name!r} must be numeric for the encoder: {exc}") from None
            raise

    def _encode(self, n: int, numeric: Callable[[], np.ndarray], categorical: Callable[[str], Any]) -> np.ndarray:
        """The column kernel: ``numeric()`` gives the numeric columns' raw float64 values, one row per column in
        spec order (NaN = missing); ``categorical(name)`` a column's raw values (None = missing).

        The numeric columns are log-scaled and standardised as one ``(columns, rows)`` array: elementwise the same
        operations as column by column (same bytes), without numpy's fixed cost per column and operation.
        """
        out = np.zeros((n, self.input_dim), dtype=np.float32)
        raw = numeric().reshape(len(self.numeric), n)
        logged = raw.copy()
        if self._logged.size:
            picked = raw[self._logged]
            logged[self._logged] = np.sign(picked) * np.log1p(np.abs(picked))
        with np.errstate(invalid="ignore"):
            scaled = (logged - self._means) / self._stds
        out[:, : len(self.numeric)] = np.where(np.isfinite(scaled), scaled, 0.0).T
        position = {c.name: i for i, c in enumerate(self.numeric)}
        col = len(self.numeric)
        for der in self.derived:
            out[:, col] = _scale(_OPS[der.op](raw[position[der.args[0]]], raw[position[der.args[1]]]), der)
            col += 1
        rows = np.arange(n)
        for cat, index in zip(self.categorical, self._slots, strict=True):
            other = len(index)
            slots = np.fromiter((other if v is None else index.get(str(v), other) for v in categorical(cat.name)),
                                dtype=np.int64, count=n)
            out[rows, col + slots] = 1.0
            col += other + 1
        return out


def _log_ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log((np.abs(a) + 1.0) / (np.abs(b) + 1.0))


_OPS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {"log_ratio": _log_ratio}


def _frame_numeric(df: pd.DataFrame, name: str) -> np.ndarray:
    import pandas as pd

    try:
        return pd.to_numeric(df[name], errors="raise").to_numpy(dtype=np.float64, na_value=np.nan)
    except (ValueError, TypeError) as exc:
        raise EncoderSpecError(f"column {name!r} must be numeric for the encoder: {exc}") from None


def _log(values: np.ndarray, log: bool) -> np.ndarray:
    return np.sign(values) * np.log1p(np.abs(values)) if log else values


def _moments(values: np.ndarray) -> dict[str, float]:
    finite = values[np.isfinite(values)]
    mean = float(finite.mean()) if finite.size else 0.0
    std = float(finite.std()) if finite.size else 1.0
    return {"mean": mean, "std": std if std > 1e-12 else 1.0}


def _scale(values: np.ndarray, spec: _Scaled) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        scaled = (values - spec.mean) / spec.std
    return np.where(np.isfinite(scaled), scaled, 0.0)
