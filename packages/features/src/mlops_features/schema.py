"""The raw batch schema: columns, Arrow types and allowed values, read from the model's contract.

A raw batch holds the contract's record id, entity keys, the two timestamps, its request fields and its label
(:attr:`mlops_config.ContractConfig.raw_columns`); the generator writes it and the gate checks it. Every caller
passes its model's contract: there is no module-level default schema.
"""

from __future__ import annotations

import pyarrow as pa

from mlops_config import TIMESTAMP_COLUMNS, ContractConfig

TIMESTAMP = pa.timestamp("us", tz="UTC")

_ARROW_TYPES = {"float": pa.float64(), "int": pa.int64(), "string": pa.string()}
"""Arrow type of each request-field type a contract may declare."""


def raw_schema(contract: ContractConfig) -> pa.Schema:
    """Exact Arrow schema of a raw batch under ``contract``; ``created`` is when the row reached the platform."""
    return pa.schema([
        (contract.record_id, pa.string()),
        *((key, pa.string()) for key in contract.entity_keys),
        *((column, TIMESTAMP) for column in TIMESTAMP_COLUMNS),
        *((name, _ARROW_TYPES[kind]) for name, kind in contract.fields.items()),
        (contract.label, pa.int8()),
    ])

