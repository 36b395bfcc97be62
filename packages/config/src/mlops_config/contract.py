"""``contract``: a tabular model's contract, declared with the model (its ``configs/models/<m>.yaml``).

What a request carries and with which types, which columns are entity keys and which the label, what the data
gate expects of a raw batch, which columns the encoder log-scales or derives, and which features' drift rolls the
model back. The platform reads these names from here; it knows no use case of its own.

A raw batch holds, in this order: ``record_id``, the entity keys, ``event_timestamp`` and ``created`` (when the
row happened, when it reached the platform), the request fields, the label.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, field_validator, model_validator

from mlops_config._base import Section

FieldType = Literal["float", "int", "string"]
"""Types a request field may declare: ``float`` and ``int`` are numeric, ``string`` is categorical."""
FIELD_TYPES: tuple[str, ...] = get_args(FieldType)

TIMESTAMP_COLUMNS = ("event_timestamp", "created")
"""Columns every raw batch has beside the declared ones: when the row happened, when it reached the platform."""


class DerivedColumnSpec(Section):
    name: str = Field(min_length=1)
    """Name of the encoder column computed from ``args``."""

    op: Literal["log_ratio"]
    """How it is computed: ``log_ratio`` is ``log((|a| + 1) / (|b| + 1))``."""

    args: tuple[str, str]
    """The two numeric columns it reads (raw values); the column is left out where either is absent."""


class RangeSpec(Section):
    min: float | None = None
    """Smallest valid value (inclusive); ``None``: unbounded below."""

    max: float | None = None
    """Largest valid value (inclusive); ``None``: unbounded above."""


class ExpectationsSpec(Section):
    ranges: dict[str, RangeSpec] = Field(default_factory=dict)
    """Numeric request field → the range its values must lie in; rows outside are quarantined."""

    allowed_values: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """String request field → the values it may take; anything else is quarantined."""

    not_null: tuple[str, ...] = ()
    """Raw-batch columns that must never be null."""


class ContractConfig(Section):
    record_id: str = Field(min_length=1)
    """Column naming one record (unique across raw batches; delayed labels join on it); a request may carry it,
    only logged."""

    entity_keys: tuple[str, ...] = Field(min_length=1)
    """Join keys of the feature store's entities (strings), in lookup order."""

    unknown_flags: dict[str, str] = Field(default_factory=dict)
    """Entity key → the flag column an online-store row gets (True when the store had no value for it)."""

    fields: dict[str, FieldType] = Field(min_length=1)
    """Request-time fields in order, name → type (``float``, ``int``, ``string``); they travel with the
    request, not through the feature store."""

    label: str = Field(min_length=1)
    """The training label column (0/1)."""

    log_prefixes: tuple[str, ...] = ()
    """Numeric columns whose names start with one of these are heavy-tailed: the encoder log-scales them."""

    derived: tuple[DerivedColumnSpec, ...] = ()
    """Columns the encoder computes from numeric ones, after the numeric columns."""

    expectations: ExpectationsSpec = ExpectationsSpec()
    """What the data gate checks of every raw row."""

    key_features: tuple[str, ...] = ()
    """Features whose critical drift (or the prediction score's) rolls the model back: request fields, derived
    columns or the FeatureService's features; never ids or the label. ``monitoring.key_features`` defaults to it."""

    @field_validator("fields", mode="before")
    @classmethod
    def _known_types(cls, fields: Any) -> Any:
        if isinstance(fields, dict):
            bad = {name: kind for name, kind in fields.items() if kind not in FIELD_TYPES}
            if bad:
                raise ValueError(f"request field(s) {bad!r} declare an unknown type; expected one of "
                                 f"{list(FIELD_TYPES)!r}")
        return fields

    @property
    def numeric_fields(self) -> tuple[str, ...]:
        """Request fields of type ``float`` or ``int``, in declared order."""
        return tuple(name for name, kind in self.fields.items() if kind != "string")

    @property
    def categorical_fields(self) -> tuple[str, ...]:
        """Request fields of type ``string``, in declared order."""
        return tuple(name for name, kind in self.fields.items() if kind == "string")

    @property
    def request_fields(self) -> tuple[str, ...]:
        """Numeric request fields, then categorical ones (the encoder's and the request check's order)."""
        return self.numeric_fields + self.categorical_fields

    @property
    def required_fields(self) -> tuple[str, ...]:
        """What every request instance must hold: the entity keys, then the request fields."""
        return self.entity_keys + self.request_fields

    @property
    def raw_columns(self) -> tuple[str, ...]:
        """The columns of a raw batch, in order (see the module doc)."""
        return (self.record_id, *self.entity_keys, *TIMESTAMP_COLUMNS, *self.fields, self.label)

    @model_validator(mode="after")
    def _consistent(self) -> ContractConfig:
        ids = (self.record_id, *self.entity_keys)
        _no_repeats("the record id and entity keys", ids)
        for what, names in (("a request field", self.fields), ("a derived column", [d.name for d in self.derived])):
            clash = [n for n in names if n in (*ids, *TIMESTAMP_COLUMNS, self.label)]
            if clash:
                raise ValueError(f"{clash!r} declared as {what} but also an id, timestamp or the label "
                                 f"({[*ids, *TIMESTAMP_COLUMNS, self.label]!r}); each column has one role")
        if self.label in ids or self.label in TIMESTAMP_COLUMNS:
            raise ValueError(f"label {self.label!r} is also an id or timestamp column; expected its own column")
        extra = sorted(set(self.unknown_flags) - set(self.entity_keys))
        if extra:
            raise ValueError(f"unknown_flags name {extra!r}, which are not entity keys {list(self.entity_keys)!r}")
        _subset("expectations.ranges", self.expectations.ranges, self.numeric_fields, "numeric request fields")
        _subset("expectations.allowed_values", self.expectations.allowed_values, self.categorical_fields,
                "string request fields")
        _subset("expectations.not_null", self.expectations.not_null, self.raw_columns, "raw-batch columns")
        for column, bounds in self.expectations.ranges.items():
            if bounds.min is not None and bounds.max is not None and bounds.min > bounds.max:
                raise ValueError(f"expectations.ranges.{column}: min {bounds.min!r} > max {bounds.max!r}")
        not_features = [k for k in self.key_features if k in (*ids, *TIMESTAMP_COLUMNS, self.label)]
        if not_features:
            raise ValueError(f"key_features {not_features!r} are ids, timestamps or the label; expected features "
                             f"(request fields {list(self.fields)!r}, derived columns or the FeatureService's)")
        _no_repeats("key_features", self.key_features)
        return self


def _no_repeats(what: str, names: tuple[str, ...]) -> None:
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{what} name {repeated!r} more than once; expected each once")


def _subset(what: str, names: Any, allowed: tuple[str, ...], kind: str) -> None:
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise ValueError(f"{what} names {unknown!r}, which are not {kind} {list(allowed)!r}")
