"""V2 bodies as KServe's own client writes them: a KServe transformer's default ``predict`` reaches our predictor."""

from __future__ import annotations

import orjson
import pytest
from kserve.protocol.infer_type import InferInput, InferRequest

from mlops_serving.errors import BadRequestError
from mlops_serving.v2 import decode_infer_body


def _kserve_body(model_name: str) -> bytes:
    """The body KServe's InferenceRESTClient sends for a V2 JSON request (``InferRequest.to_rest``)."""
    request = InferRequest(model_name=model_name, infer_inputs=[
        InferInput("input", [2, 3], "FP32", [0.5, 1.0, 1.5, 2.0, 2.5, 3.0])])
    doc, binary_len = request.to_rest()
    assert binary_len is None and doc["model_name"] == model_name  # what makes this body differ from the spec's
    return orjson.dumps(doc)


def test_kserve_clients_body_is_accepted() -> None:
    decoded = decode_infer_body(_kserve_body("fraud"), {}, "fraud")
    assert [i.name for i in decoded.inputs] == ["input"]
    assert decoded.inputs[0].shape == [2, 3]
    assert list(decoded.inputs[0].data) == [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]


def test_a_model_name_of_another_model_is_refused_naming_both() -> None:
    with pytest.raises(BadRequestError, match="model_name 'other' is not the model of the route, 'fraud'"):
        decode_infer_body(_kserve_body("other"), {}, "fraud")


def test_other_unknown_keys_are_still_refused() -> None:
    body = orjson.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "FP32", "data": [1.0]}],
                         "rows": []})
    with pytest.raises(BadRequestError, match=r"unknown top-level key\(s\) \['rows'\]"):
        decode_infer_body(body, {}, "fraud")
