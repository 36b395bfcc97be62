"""Bad input: every kind gets a clear 4xx naming the problem; no 500, no reset connection, no traceback.

All cases go over ONE keep-alive connection, each followed by a good request on it: a reset or a wedged
connection would fail the good request.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

V1 = "/v1/models/fraud:predict"
V2 = "/v2/models/fraud/infer"
JSON = {"content-type": "application/json"}
MAX_INSTANCES = 8
MAX_BYTES = 4096


def good(i: int = 0) -> dict[str, Any]:
    return {"user_id": f"u{i}", "merchant_id": "m1", "amount": 12.5, "currency": "EUR", "category": "grocery",
            "country": "DE", "device": "ios", "channel": "online"}


def v1(*instances: Any, **top: Any) -> bytes:
    return json.dumps({"instances": list(instances), **top}).encode()


def v2_inputs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": k, "shape": [len(rows)], "datatype": "FP64" if k == "amount" else "BYTES",
             "data": [r[k] for r in rows]} for k in rows[0]]


def v2(inputs: list[dict[str, Any]], **top: Any) -> bytes:
    return json.dumps({"inputs": inputs, **top}).encode()


def with_(**over: Any) -> dict[str, Any]:
    return {**good(), **over}


def without(field: str) -> dict[str, Any]:
    row = good()
    del row[field]
    return row


def v2_binary_nan() -> tuple[bytes, dict[str, str]]:
    """A tritonclient-style binary body whose FP64 amount is NaN (JSON cannot carry NaN, binary can)."""
    inputs = [i for i in v2_inputs([good()]) if i["name"] != "amount"]
    raw = struct.pack("<d", float("nan"))
    inputs.append({"name": "amount", "shape": [1], "datatype": "FP64", "parameters": {"binary_data_size": len(raw)}})
    header = json.dumps({"inputs": inputs}).encode()
    return header + raw, {"inference-header-content-length": str(len(header)),
                          "content-type": "application/octet-stream"}


def _v2_mutated(**changes: Any) -> bytes:
    inputs = v2_inputs([good(), good(1)])
    name = changes.pop("name")
    for inp in inputs:
        if inp["name"] == name:
            inp.update(changes)
    return v2(inputs)


nan_body, nan_headers = v2_binary_nan()
CASES: list[tuple[str, str, str, bytes, dict[str, str], int]] = [
    # id, method, path, body, headers, expected status
    ("malformed-json", "POST", V1, b'{"instances": [', JSON, 400),
    ("empty-body", "POST", V1, b"", JSON, 400),
    ("body-is-a-list", "POST", V1, b"[1, 2]", JSON, 400),
    ("no-instances", "POST", V1, b'{"rows": []}', JSON, 400),
    ("instances-not-a-list", "POST", V1, b'{"instances": {"a": 1}}', JSON, 400),
    ("empty-instances", "POST", V1, b'{"instances": []}', JSON, 400),
    ("too-many-instances", "POST", V1, v1(*[good(i) for i in range(MAX_INSTANCES + 1)]), JSON, 422),
    ("instance-not-an-object", "POST", V1, v1(42), JSON, 400),
    ("missing-field", "POST", V1, v1(without("amount")), JSON, 400),
    ("missing-entity-key", "POST", V1, v1(without("user_id")), JSON, 400),
    ("extra-field", "POST", V1, v1(with_(is_fraud=1)), JSON, 400),
    ("extra-top-level-key", "POST", V1, v1(good(), parameters={}), JSON, 400),
    ("amount-is-a-string", "POST", V1, v1(with_(amount="12.5")), JSON, 400),
    ("amount-is-bool", "POST", V1, v1(with_(amount=True)), JSON, 400),
    ("amount-NaN", "POST", V1, b'{"instances": [{"amount": NaN}]}', JSON, 400),
    ("amount-Infinity", "POST", V1, v1(with_(amount=0)).replace(b'"amount": 0', b'"amount": Infinity'), JSON, 400),
    ("amount-overflows-to-inf", "POST", V1, v1(with_(amount=0)).replace(b'"amount": 0', b'"amount": 1e999'),
     JSON, 400),
    ("amount-negative", "POST", V1, v1(with_(amount=-5)), JSON, 400),
    ("user-id-empty", "POST", V1, v1(with_(user_id="")), JSON, 400),
    ("user-id-a-list", "POST", V1, v1(with_(user_id=["u1"])), JSON, 400),
    ("user-id-null", "POST", V1, v1(with_(user_id=None)), JSON, 400),
    ("user-id-too-long", "POST", V1, v1(with_(user_id="u" * 500)), JSON, 400),
    ("category-a-number", "POST", V1, v1(with_(category=3)), JSON, 400),
    ("invalid-utf8", "POST", V1, b'{"instances": [{"user_id": "\xff\xfe"}]}', JSON, 400),
    ("deeply-nested", "POST", V1, b'{"instances": ' + b"[" * 1500 + b"]" * 1500 + b"}", JSON, 400),
    ("oversize-payload", "POST", V1, v1(with_(transaction_id="x" * 100)) + b" " * MAX_BYTES, JSON, 413),
    ("text-plain", "POST", V1, v1(good()), {"content-type": "text/plain"}, 415),
    ("no-content-type", "POST", V1, v1(good()), {}, 415),
    ("form-encoded", "POST", V1, b"user_id=u1", {"content-type": "application/x-www-form-urlencoded"}, 415),
    ("unknown-model", "POST", "/v1/models/nope:predict", v1(good()), JSON, 404),
    ("get-on-predict", "GET", V1, b"", {}, 404),  # KServe routes GET /v1/models/{name} to model health
    ("v2-malformed-json", "POST", V2, b'{"inputs": [', JSON, 400),
    ("v2-no-inputs", "POST", V2, b'{"id": "1"}', JSON, 400),
    ("v2-inputs-not-objects", "POST", V2, b'{"inputs": [1, 2]}', JSON, 400),
    ("v2-missing-input", "POST", V2, v2([i for i in v2_inputs([good()]) if i["name"] != "amount"]), JSON, 400),
    ("v2-unknown-input", "POST", V2, v2([*v2_inputs([good()]), {"name": "x", "shape": [1], "datatype": "FP32",
                                                                "data": [1.0]}]), JSON, 400),
    ("v2-amount-as-bytes", "POST", V2, _v2_mutated(name="amount", datatype="BYTES", data=["1", "2"]), JSON, 400),
    ("v2-user-id-as-fp32", "POST", V2, _v2_mutated(name="user_id", datatype="FP32", data=[1.0, 2.0]), JSON, 400),
    ("v2-shape-mismatch", "POST", V2, _v2_mutated(name="amount", shape=[3]), JSON, 400),
    ("v2-shape-3d", "POST", V2, _v2_mutated(name="amount", shape=[1, 2, 1]), JSON, 400),
    ("v2-unknown-datatype", "POST", V2, _v2_mutated(name="amount", datatype="FLOAT"), JSON, 400),
    ("v2-lengths-differ", "POST", V2, v2([*v2_inputs([good()])[:-1], {"name": "channel", "shape": [2],
                                                                      "datatype": "BYTES",
                                                                      "data": ["a", "b"]}]), JSON, 400),
    ("v2-amount-string-data", "POST", V2, _v2_mutated(name="amount", data=["x", "y"]), JSON, 400),
    ("v2-binary-nan", "POST", V2, nan_body, nan_headers, 400),
    ("v2-binary-size-mismatch", "POST", V2, nan_body + b"\0\0", nan_headers, 400),
    ("v2-binary-header-not-a-number", "POST", V2, nan_body,
     {**nan_headers, "inference-header-content-length": "abc"}, 400),
    ("v2-binary-header-too-long", "POST", V2, nan_body,
     {**nan_headers, "inference-header-content-length": "99999"}, 400),
]


@pytest.fixture
def strict_server(tmp_path: Path, kit: Any, redis_features: Any) -> Iterator[Any]:
    from mlops_serving.service import create_app, folder_loader

    folder = kit.export_model(tmp_path / "models" / "1", seed=1)
    cfg = kit.serving_config(tabular={"max_instances": MAX_INSTANCES}, max_payload_bytes=MAX_BYTES)
    app = create_app(cfg, model_name="fraud", loader=folder_loader("fraud", folder), source=redis_features,
                     log_dir=tmp_path / "predlog")
    srv = kit.start_server(app, tmp_path / "predlog")
    yield srv
    srv.stop()


def test_at_least_twenty_kinds() -> None:
    assert len({c[0] for c in CASES}) == len(CASES) >= 20


def test_bad_inputs_get_clear_4xx_on_a_live_connection(strict_server: Any) -> None:
    failures = []
    with httpx.Client(base_url=strict_server.url, timeout=10) as client:
        for case_id, method, path, body, headers, status in CASES:
            r = client.request(method, path, content=body or None, headers=headers)
            text = r.text
            if r.status_code != status:
                failures.append(f"{case_id}: {r.status_code} (want {status}): {text[:200]}")
            if "Traceback" in text or 'File "' in text:
                failures.append(f"{case_id}: leaked a traceback")
            if method == "POST":
                err = r.json().get("error", "")
                if not err:
                    failures.append(f"{case_id}: no error message")
            after = client.post(V1, json={"instances": [good()]})
            if after.status_code != 200:
                failures.append(f"{case_id}: the next good request on the connection got {after.status_code}")
    assert not failures, "\n".join(failures)
    metrics = httpx.get(f"{strict_server.url}/metrics").text
    assert 'status="500"' not in metrics
    assert 'type="TooManyInstancesError"' in metrics and 'type="UnsupportedMediaTypeError"' in metrics


def test_chunked_oversize_body_without_content_length(strict_server: Any) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"instances": ['
        for _ in range(100):
            yield json.dumps(good()).encode() + b","
        yield b"{}]}"

    with httpx.Client(base_url=strict_server.url, timeout=10) as client:
        r = client.post(V1, content=chunks(), headers=JSON)
        assert r.status_code == 413, r.text
        assert "4096" in r.json()["error"]
    assert httpx.post(f"{strict_server.url}{V1}", json={"instances": [good()]}).status_code == 200


def test_messages_name_the_bad_value(strict_server: Any) -> None:
    r = httpx.post(f"{strict_server.url}{V1}", json={"instances": [good(), with_(amount="12.5")]})
    assert r.status_code == 400
    assert "instance 1" in r.json()["error"] and "'amount'" in r.json()["error"]
    r = httpx.post(f"{strict_server.url}{V1}", json={"instances": [with_(colour="red")]})
    assert "colour" in r.json()["error"]
