"""The request schema: what one prediction request may contain, checked field by field.

A request carries, per instance, the entity keys the transformer looks features up with and the request-time
fields the model reads as they are. Anything else is refused with a message naming the field and the
instance: nothing sent is silently dropped. The fields themselves are the model contract's
(:class:`mlops_config.ContractConfig`), which every caller passes: the served model's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from mlops_config import ContractConfig
from mlops_serving.errors import BadRequestError, TooManyInstancesError

MAX_STRING_CHARS = 128
MAX_NUMBER = 1e9


def check_count(n: int, max_instances: int) -> None:
    """Refuse an empty request or one with more than ``max_instances`` instances."""
    if n == 0:
        raise BadRequestError("the request has no instances; send at least one")
    if n > max_instances:
        raise TooManyInstancesError(f"the request has {n} instances; at most {max_instances} per request (split it)")


def _check_string(field: str, value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise BadRequestError(f"{where}: {field!r} must be a string, got {type(value).__name__} {value!r:.60}")
    if not value or len(value) > MAX_STRING_CHARS:
        raise BadRequestError(f"{where}: {field!r} must have 1..{MAX_STRING_CHARS} characters, got {len(value)}")
    return value


def _check_number(field: str, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequestError(f"{where}: {field!r} must be a number, got {type(value).__name__} {value!r:.60}")
    number = float(value)
    if not math.isfinite(number):
        raise BadRequestError(f"{where}: {field!r} must be finite, got {value!r}")
    if not 0.0 <= number <= MAX_NUMBER:
        raise BadRequestError(f"{where}: {field!r} must be in [0, {MAX_NUMBER:g}], got {value!r}")
    return number


def validate_instance(instance: Any, index: int, *, contract: ContractConfig) -> dict[str, Any]:
    """One instance as a plain row under ``contract``; every problem names the instance and the field."""
    where = f"instance {index}"
    if not isinstance(instance, Mapping):
        raise BadRequestError(f"{where} must be an object of named fields, got {type(instance).__name__}")
    allowed = {*contract.required_fields, contract.record_id}
    unknown = sorted(set(instance) - allowed)
    if unknown:
        raise BadRequestError(f"{where} has unknown field(s) {unknown!r}; expected only {sorted(allowed)!r}")
    missing = [f for f in contract.required_fields if f not in instance]
    if missing:
        raise BadRequestError(f"{where} is missing field(s) {missing!r}")
    row: dict[str, Any] = {}
    for field in contract.entity_keys + contract.categorical_fields:
        row[field] = _check_string(field, instance[field], where)
    for field in contract.numeric_fields:
        row[field] = _check_number(field, instance[field], where)
    rid = instance.get(contract.record_id)
    row[contract.record_id] = None if rid is None else _check_string(contract.record_id, rid, where)
    return row


def parse_v1(body: Any, max_instances: int, *, contract: ContractConfig) -> list[dict[str, Any]]:
    """Rows of a V1 body ``{"instances": [{field: value, ...}, ...]}``."""
    if not isinstance(body, Mapping):
        raise BadRequestError(f'the body must be a JSON object {{"instances": [...]}}, got {type(body).__name__}')
    extra = sorted(set(body) - {"instances"})
    if extra:
        raise BadRequestError(f"unknown top-level key(s) {extra!r}; a V1 request has only 'instances'")
    if "instances" not in body:
        raise BadRequestError("the body has no 'instances' list")
    instances = body["instances"]
    if not isinstance(instances, list):
        raise BadRequestError(f"'instances' must be a list, got {type(instances).__name__}")
    check_count(len(instances), max_instances)
    return [validate_instance(inst, i, contract=contract) for i, inst in enumerate(instances)]


def parse_columns(columns: Mapping[str, Sequence[Any]], max_instances: int,
                  *, contract: ContractConfig) -> list[dict[str, Any]]:
    """Rows of a columnar request (V2 inputs by name); all columns must have the same length."""
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise BadRequestError(f"inputs have different lengths {lengths!r}; every input needs one value per instance")
    n = next(iter(lengths.values()), 0)
    check_count(n, max_instances)
    names = list(columns)
    return [validate_instance({name: columns[name][i] for name in names}, i, contract=contract) for i in range(n)]
