"""The direct reader's pieces against Feast's own code, without Redis: entity keys, event times, value decoding,
the on-demand inputs and outputs, and the sampled comparison's bookkeeping.

Real Redis, every FeatureService and every type end to end: tests/integration/features/test_online_direct.py.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from feast.infra.online_stores.helpers import _redis_key
from feast.infra.online_stores.redis import RedisOnlineStore
from feast.protos.feast.types.EntityKey_pb2 import EntityKey
from feast.protos.feast.types.Value_pb2 import (
    BoolList,
    BytesList,
    DoubleList,
    FloatList,
    Int32List,
    Int64List,
    Int64Set,
    Map,
    StringList,
    Value,
)
from feast.type_map import NULL_TIMESTAMP_INT_VALUE, feast_value_type_to_python_type, python_values_to_proto_values
from feast.value_type import ValueType
from google.protobuf.timestamp_pb2 import Timestamp
from pydantic import ValidationError

from mlops_config import FeaturesConfig
from mlops_features.online_direct import (
    _column_decoder,
    _decoder,
    _event_ns,
    _event_ns_column,
    entity_keys,
    key_group,
)
from mlops_features.online_parity import ParitySampler, differences, same
from mlops_features.online_plan import _arrow_as_feast, _as_feast_request_values

STRING = ValueType.STRING


def test_the_config_defaults_to_the_direct_reader_with_a_small_sample() -> None:
    cfg = FeaturesConfig()
    assert cfg.online_reader == "direct" and cfg.online_parity_sample == 0.001
    assert FeaturesConfig(online_reader="feast", online_parity_sample=0).online_parity_sample == 0
    for bad in ({"online_reader": "redis"}, {"online_parity_sample": 1.5}, {"online_parity_sample": -0.1}):
        with pytest.raises(ValidationError):
            FeaturesConfig(**bad)


@pytest.mark.parametrize("value", ["U000001", "", "ü€𝄞", "a" * 300, "with\r\nnewline", "0"])
def test_a_string_key_is_feasts_serialization_byte_for_byte(value: str) -> None:
    group = key_group(["user_id"], ["user_id"], [STRING], 3)
    expected = _redis_key("proj_1", EntityKey(join_keys=["user_id"], entity_values=[Value(string_val=value)]), 3)
    assert entity_keys(group, [{"user_id": value}], b"proj_1", 3) == [expected]


def test_a_compound_key_sorts_its_join_keys_as_feast_does() -> None:
    group = key_group(["user_id", "merchant_id"], ["user_id", "mid"], [STRING, STRING], 3)
    rows = [{"user_id": "U1", "mid": "M9"}, {"user_id": "Ü2", "mid": ""}]
    expected = [_redis_key("p", EntityKey(join_keys=["user_id", "merchant_id"],
                                          entity_values=[Value(string_val=r["user_id"]), Value(string_val=r["mid"])]))
                for r in rows]
    assert entity_keys(group, rows, b"p", 3) == expected


def test_keys_other_than_strings_go_through_feasts_own_code() -> None:
    group = key_group(["account"], ["account"], [ValueType.INT64], 3)
    assert group.head == b""
    expected = _redis_key("p", EntityKey(join_keys=["account"], entity_values=[Value(int64_val=-42)]))
    assert entity_keys(group, [{"account": -42}], b"p", 3) == [expected]
    strings = key_group(["user_id"], ["user_id"], [STRING], 3)  # a non-str value in a string column: Feast's way
    assert entity_keys(strings, [{"user_id": "U1"}, {"user_id": 7}], b"p", 3)[0] == entity_keys(
        strings, [{"user_id": "U1"}], b"p", 3)[0]


def _feast_event_ns(raw: bytes | None) -> int:
    """What Feast's Redis read and response give for a ``_ts`` field (its own code)."""
    ts, _ = RedisOnlineStore()._get_features_for_entity([b"", raw], "v", ["f", "_ts:v"])
    out = Timestamp()
    if ts is not None:
        out.FromDatetime(ts)
    return out.seconds * 1_000_000_000 + out.nanos


def test_event_times_are_feasts_to_the_nanosecond() -> None:
    rng = random.Random(29)
    stamps = [(0, 0), (1, 0), (-1, 999_999_000), (1_793_750_400, 123_456_000), (2**32 - 1, 999_999_000),
              (-(2**32) + 1, 1000), (1_793_750_400, 1), (1_793_750_400, 999_999_999), (2**33, 500), (2**34, 7_000)]
    stamps += [(rng.randint(-(2**34), 2**34), rng.randint(0, 999_999) * 1000) for _ in range(300)]
    stamps += [(rng.randint(0, 2**32), rng.randint(0, 999_999_999)) for _ in range(300)]
    raws = [Timestamp(seconds=s, nanos=n).SerializeToString() for s, n in stamps]
    expected = [_feast_event_ns(raw) for raw in raws]
    assert [_event_ns(raw) for raw in raws] == expected
    assert _event_ns_column(raws) == expected
    assert _event_ns_column([raws[3], None, b""]) == [expected[3], 0, 0] == [_feast_event_ns(r) for r in
                                                                              (raws[3], None, b"")]


VALUES: list[tuple[ValueType, Value]] = [
    (ValueType.INT32, Value(int32_val=-7)), (ValueType.INT64, Value(int64_val=2**62)),
    (ValueType.FLOAT, Value(float_val=0.1)), (ValueType.DOUBLE, Value(double_val=math.pi)),
    (ValueType.DOUBLE, Value(double_val=float("nan"))), (ValueType.STRING, Value(string_val="ü€")),
    (ValueType.BOOL, Value(bool_val=False)), (ValueType.BYTES, Value(bytes_val=b"\x00\xff")),
    (ValueType.UNIX_TIMESTAMP, Value(unix_timestamp_val=1_793_750_400)),
    (ValueType.UNIX_TIMESTAMP, Value(unix_timestamp_val=NULL_TIMESTAMP_INT_VALUE)),
    (ValueType.INT32_LIST, Value(int32_list_val=Int32List(val=[1, -2]))),
    (ValueType.INT64_LIST, Value(int64_list_val=Int64List(val=[]))),
    (ValueType.FLOAT_LIST, Value(float_list_val=FloatList(val=[0.5, 0.1]))),
    (ValueType.DOUBLE_LIST, Value(double_list_val=DoubleList(val=[1e-300]))),
    (ValueType.STRING_LIST, Value(string_list_val=StringList(val=["", "ß"]))),
    (ValueType.BOOL_LIST, Value(bool_list_val=BoolList(val=[True]))),
    (ValueType.BYTES_LIST, Value(bytes_list_val=BytesList(val=[b"a", b""]))),
    (ValueType.UNIX_TIMESTAMP_LIST, Value(unix_timestamp_list_val=Int64List(val=[0, NULL_TIMESTAMP_INT_VALUE]))),
    (ValueType.INT64_SET, Value(int64_set_val=Int64Set(val=[3, 1]))),
    (ValueType.MAP, Value(map_val=Map(val={"k": Value(int64_val=1)}))),
    (ValueType.JSON, Value(json_val='{"a": [1, 2]}')),
    (ValueType.UUID, Value(string_val=str(uuid.UUID(int=5)))),
    (ValueType.UUID, Value(uuid_val=str(uuid.UUID(int=6)))),
    (ValueType.DOUBLE, Value(int64_val=3)),  # written as another kind than its type: converted as Feast does
    (ValueType.INT64, Value()),
]


@pytest.mark.parametrize(("value_type", "value"), VALUES, ids=[f"{t.name}-{v.WhichOneof('val')}" for t, v in VALUES])
def test_a_value_decodes_to_what_to_dict_gives(value_type: ValueType, value: Value) -> None:
    raw = value.SerializeToString()
    _, found = RedisOnlineStore()._get_features_for_entity([raw, None], "v", ["f", "_ts:v"])
    assert found is not None
    expected = feast_value_type_to_python_type(found["f"], value_type)  # OnlineResponse.to_dict's conversion
    assert same(_decoder(value_type)(raw), expected)
    assert all(same(a, expected) for a in _column_decoder(value_type)([raw, raw]))
    if value_type not in (ValueType.UUID,):
        assert same(_column_decoder(value_type)([raw, None, b""])[0], expected)


def test_absent_and_empty_fields_decode_to_none() -> None:
    for value_type in (ValueType.INT64, ValueType.DOUBLE_LIST, ValueType.UUID, ValueType.MAP):
        assert _column_decoder(value_type)([None, b"", Value().SerializeToString()]) == [None, None, None]


def test_a_request_field_reaches_an_on_demand_view_as_feasts_to_dict_gives_it() -> None:
    columns: list[list[Any]] = [[1.5, 900.0], [5, 1.5], [900, 2], [True, False], ["a", "b"], [1.0, float("nan")],
                                [np.float64(2.5), 1.0], [2**63 - 1, -(2**63)]]
    for values in columns:
        expected = [feast_value_type_to_python_type(p)
                    for p in python_values_to_proto_values(values, ValueType.UNKNOWN)]
        assert all(same(a, b) for a, b in zip(_as_feast_request_values(list(values)), expected, strict=True)), \
            values
    with pytest.raises(ValueError, match="out of range"):  # as Feast's get_online_features raises
        _as_feast_request_values([2**70, 1])


def test_an_on_demand_output_comes_back_as_feast_converts_it() -> None:
    cases = [(pa.array([1.0, 2.5]), ValueType.DOUBLE), (pa.array([1.0, float("nan")]), ValueType.DOUBLE),
             (pa.array([1.0, None]), ValueType.DOUBLE), (pa.array([1, 2]), ValueType.DOUBLE),
             (pa.array([1, 2]), ValueType.INT64), (pa.array([0.5], pa.float32()), ValueType.FLOAT),
             (pa.array(["a", "b"]), ValueType.STRING), (pa.array([True]), ValueType.BOOL),
             (pa.array([1.5, 2.5]), ValueType.INT64)]
    for array, value_type in cases:
        column = pa.chunked_array([array])
        expected = [feast_value_type_to_python_type(p)
                    for p in python_values_to_proto_values(column.to_numpy(), value_type)]
        got = _arrow_as_feast(column, value_type)
        assert all(same(a, b) for a, b in zip(got, expected, strict=True)), (array, value_type, got, expected)


def test_same_compares_values_and_types() -> None:
    assert same(1.0, 1.0) and same(float("nan"), float("nan")) and same([1, [2.0]], [1, [2.0]])
    assert not same(1, 1.0) and not same(True, 1) and not same([1], [1.0]) and not same(None, 0)
    assert same({"a": b"x"}, {"a": b"x"}) and not same({"a": 1}, {"b": 1})
    ts = datetime(2026, 11, 4, tzinfo=UTC)
    assert same(ts, ts) and not same(ts, ts.replace(tzinfo=None))


def test_differences_name_each_kind() -> None:
    direct = [{"unknown_user": False, "a": 1, "b": 2.0, "c": "x"}]
    feast = [{"unknown_user": True, "a": 1.0, "b": 2.5, "d": 0}]
    found = {kind for kind, *_ in differences(direct, feast)}
    assert found == {"flag:unknown_user", "type:a", "value:b", "missing:c", "missing:d"}
    assert differences(direct, direct) == []
    assert differences(direct, []) == [("rows", -1, 1, 0)]


def _readers(feast_answers: list[Any], direct_answers: list[Any]) -> tuple[Any, Any]:
    def feast(rows: list[dict[str, Any]], as_of: datetime | None) -> list[dict[str, Any]]:
        answer = feast_answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    def direct(rows: list[dict[str, Any]], as_of: datetime | None) -> list[dict[str, Any]]:
        return direct_answers.pop(0)  # type: ignore[no-any-return]

    return feast, direct


def test_the_sampler_counts_outcomes_and_logs_each_kind_once(caplog: pytest.LogCaptureFixture) -> None:
    served = [{"unknown_user": False, "x": 1.0}]
    other = [{"unknown_user": False, "x": 2.0}]
    feast, direct = _readers([served, other, other, served, ConnectionError("down")],
                             [served, served, served, other, served])
    sampler = ParitySampler(1.0, feast, direct, service="svc")
    rows = [{"user_id": "U1"}]
    with caplog.at_level(logging.WARNING, logger="mlops_features.online_parity"):
        assert sampler.compare(rows, None, served) == []
        assert [k for k, *_ in sampler.compare(rows, None, served)] == ["value:x"]
        sampler.compare(rows, None, served)
        assert sampler.compare(rows, None, served) == []  # the store changed between the reads: not compared
        sampler.compare(rows, None, served)
    assert sampler.snapshot() == {"samples": {"compared": 3, "differing": 2, "changed": 1, "failed": 1},
                                  "differences": {"value:x": 2}}
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "value:x" in m]) == 1 and len([m for m in messages if "failed" in m]) == 1


def test_the_sampler_samples_at_its_rate_one_at_a_time() -> None:
    gate = threading.Event()
    served = [{"x": 1}]

    def slow(rows: list[dict[str, Any]], as_of: datetime | None) -> list[dict[str, Any]]:
        gate.wait(10)
        return served

    sampler = ParitySampler(1.0, slow, lambda rows, as_of: served, seed=1)
    assert sampler.offer([{}], None, served) is True
    assert sampler.offer([{}], None, served) is False  # one comparison at a time: counted as skipped
    gate.set()
    sampler.wait(10)
    assert sampler.snapshot()["samples"] == {"skipped": 1, "compared": 1}
    off = ParitySampler(0.0, slow, slow)
    assert off.offer([{}], None, served) is False and off.snapshot()["samples"] == {}
    rate = ParitySampler(0.25, lambda rows, as_of: served, lambda rows, as_of: served, seed=3)
    taken = 0
    for _ in range(400):
        taken += rate.offer([{}], None, served)
        rate.wait(10)
    assert 60 < taken < 140


def test_the_collector_exports_the_counts() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    served = [{"x": 1}]
    sampler = ParitySampler(1.0, lambda rows, as_of: [{"x": 2}], lambda rows, as_of: served, service="fraud_v1")
    sampler.compare([{}], None, served)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(sampler.collector(model="fraud"))
    text = generate_latest(registry).decode()
    prefix = "mlops_serving_feature_parity"
    assert f'{prefix}_samples_total{{model="fraud",outcome="differing",service="fraud_v1"}} 1.0' in text
    assert f'{prefix}_differences_total{{kind="value:x",model="fraud",service="fraud_v1"}} 1.0' in text
