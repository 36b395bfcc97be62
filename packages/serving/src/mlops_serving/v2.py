"""The Open Inference Protocol (V2) side: decoding a raw infer body safely and mapping inputs to columns.

KServe's own V2 decoder lets some malformed bodies through as ``KeyError``/``ValueError`` (a 500); the server
routes ``/v2/models/{name}/infer`` here first, so every malformed body becomes a 400 that names the problem,
then hands a well-formed ``InferRequest`` to KServe's DataPlane as usual.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferRequest

from mlops_config import ContractConfig
from mlops_serving.errors import BadRequestError

BINARY_HEADER = "inference-header-content-length"
NUMERIC_DTYPES = frozenset({"FP32", "FP64", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"})
KNOWN_DTYPES = NUMERIC_DTYPES | {"BYTES", "BOOL", "FP16"}
V2_OUTPUTS = (
    {"name": "score", "datatype": "FP32", "shape": [-1]},
    {"name": "degraded", "datatype": "BOOL", "shape": [-1]},
    {"name": "unknown_entity", "datatype": "BOOL", "shape": [-1]},
)


def input_metadata(contract: ContractConfig) -> list[dict[str, Any]]:
    """The served model's V2 inputs under its ``contract``: one column per field a request may carry."""
    numeric = set(contract.numeric_fields)
    return [{"name": name, "datatype": "FP64" if name in numeric else "BYTES", "shape": [-1]}
            for name in (*contract.required_fields, contract.record_id)]


def decode_infer_body(body: bytes, headers: Mapping[str, str], model_name: str) -> InferRequest:
    """A checked ``InferRequest`` from a JSON or binary (tritonclient) V2 body."""
    if not body:
        raise BadRequestError("the body is empty; a V2 request is a JSON object with 'inputs'")
    json_len_raw = headers.get(BINARY_HEADER)
    if json_len_raw is None:
        json_part, binary_len = body, 0
    else:
        try:
            json_len = int(json_len_raw)
        except ValueError:
            raise BadRequestError(f"Inference-Header-Content-Length {json_len_raw!r} is not an integer") from None
        if not 0 < json_len <= len(body):
            raise BadRequestError(f"header Inference-Header-Content-Length {json_len} is outside 1..{len(body)}")
        json_part, binary_len = body[:json_len], len(body) - json_len
    try:
        doc = orjson.loads(json_part)
    except orjson.JSONDecodeError as exc:
        raise BadRequestError(f"the body is not valid JSON: {exc}") from None
    _check_document(doc, binary_len, model_name)
    try:
        if json_len_raw is None:
            return InferRequest.from_bytes(body, len(body), model_name)
        return InferRequest.from_bytes(body, int(json_len_raw), model_name)
    except (InvalidInput, KeyError, ValueError, TypeError) as exc:
        raise BadRequestError(f"malformed V2 request: {exc}") from None


def _check_document(doc: Any, binary_len: int, model_name: str) -> None:
    if not isinstance(doc, dict):
        raise BadRequestError(f"a V2 request must be a JSON object with 'inputs', got {type(doc).__name__}")
    # ``model_name``: KServe's own client (a KServe transformer's default ``predict``) writes it into every body
    unknown = sorted(set(doc) - {"id", "parameters", "inputs", "outputs", "model_name"})
    if unknown:
        raise BadRequestError(f"unknown top-level key(s) {unknown!r}; expected id, parameters, inputs, outputs "
                              "(and model_name)")
    if "model_name" in doc and doc["model_name"] != model_name:
        raise BadRequestError(f"the body's model_name {doc['model_name']!r:.60} is not the model of the route, "
                              f"{model_name!r}")
    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise BadRequestError("'inputs' must be a non-empty list of tensors")
    if "id" in doc and not isinstance(doc["id"], str):
        raise BadRequestError(f"'id' must be a string, got {type(doc['id']).__name__}")
    binary_total = 0
    for i, inp in enumerate(inputs):
        if not isinstance(inp, dict):
            raise BadRequestError(f"inputs[{i}] must be an object, got {type(inp).__name__}")
        for key in ("name", "shape", "datatype"):
            if key not in inp:
                raise BadRequestError(f"inputs[{i}] has no {key!r}")
        name, shape, dtype = inp["name"], inp["shape"], inp["datatype"]
        if not isinstance(name, str):
            raise BadRequestError(f"inputs[{i}].name must be a string, got {name!r:.40}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise BadRequestError(f"input {name!r}: shape {shape!r:.60} must be a list of non-negative integers")
        if dtype not in KNOWN_DTYPES:
            raise BadRequestError(f"input {name!r}: datatype {dtype!r:.40} is not a V2 datatype")
        params = inp.get("parameters") or {}
        if not isinstance(params, dict):
            raise BadRequestError(f"input {name!r}: parameters must be an object")
        if "data" in inp:
            if not isinstance(inp["data"], list):
                raise BadRequestError(f"input {name!r}: data must be a list")
        elif "binary_data_size" in params:
            size = params["binary_data_size"]
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise BadRequestError(f"input {name!r}: binary_data_size {size!r} must be a non-negative integer")
            binary_total += size
        else:
            raise BadRequestError(f"input {name!r} has neither 'data' nor parameters.binary_data_size")
    if binary_total != binary_len:
        raise BadRequestError(f"binary inputs declare {binary_total} bytes but the body carries {binary_len}")


def _flatten(data: Any) -> list[Any]:
    if isinstance(data, list | tuple):
        return [x for item in data for x in _flatten(item)]
    return [data]


def columns_from_infer_request(request: InferRequest, contract: ContractConfig) -> dict[str, list[Any]]:
    """One column per input, checked against the served model's ``contract`` (name, datatype, shape, element
    types)."""
    allowed = frozenset((*contract.required_fields, contract.record_id))
    strings = frozenset((*contract.entity_keys, *contract.categorical_fields, contract.record_id))
    columns: dict[str, list[Any]] = {}
    for inp in request.inputs:
        name, dtype, shape = inp.name, inp.datatype, list(inp.shape)
        if name not in allowed:
            raise BadRequestError(f"unknown input {name!r}; expected inputs {sorted(allowed)!r}")
        if name in columns:
            raise BadRequestError(f"input {name!r} appears twice")
        if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1):
            raise BadRequestError(f"input {name!r}: shape {shape!r} must be [n] or [n, 1]")
        values = _flatten(inp.data)
        if math.prod(shape) != len(values):
            raise BadRequestError(f"input {name!r}: shape {shape!r} holds {math.prod(shape)} values but data has "
                             f"{len(values)}")
        if name in strings:
            if dtype != "BYTES":
                raise BadRequestError(f"input {name!r} must have datatype BYTES, got {dtype!r}")
            columns[name] = [_as_text(name, v) for v in values]
        else:
            if dtype not in NUMERIC_DTYPES:
                raise BadRequestError(f"input {name!r} must have a numeric datatype (FP32, FP64, INT*), got {dtype!r}")
            columns[name] = values
    missing = [f for f in contract.required_fields if f not in columns]
    if missing:
        raise BadRequestError(f"missing input(s) {missing!r}")
    return columns


def _as_text(name: str, value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequestError(f"input {name!r}: value {value[:40]!r} is not UTF-8") from None
    return value  # non-strings are refused by the schema with the field's name
