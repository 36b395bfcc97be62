"""The shadow sender's pick is exact arithmetic; its settings are checked where they are read."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from mlops_config import ServingConfig
from mlops_serving import ServingError
from mlops_serving.shadow import ShadowMetrics, ShadowSender


def offer_many(fraction: float, n: int) -> list[bool]:
    # a port nobody listens on: the sender thread fails every call, which the live side never sees
    sender = ShadowSender("fraud", url="127.0.0.1:9", fraction=fraction, queue_size=100_000, timeout_s=0.2,
                          metrics=ShadowMetrics(CollectorRegistry()), log_writer=None)
    try:
        return [sender.offer(request_id=str(i), ts=0.0, live_version="1", live_variant="stable", rows=[{}],
                             features=[{}], live_scores=[0.5], live_predict_ms=1.0) for i in range(n)]
    finally:
        sender.close(timeout=1.0)


@pytest.mark.parametrize(("fraction", "per_ten"), [(0.3, 3), (0.5, 5), (1.0, 10), (0.0, 0)])
def test_exactly_the_fraction_is_mirrored_spread_evenly(fraction: float, per_ten: int) -> None:
    picked = offer_many(fraction, 1000)
    assert sum(picked) == per_ten * 100
    # request i is mirrored iff floor((i + 1) f) > floor(i f): every run of 10 holds exactly f * 10
    assert all(sum(picked[k : k + 10]) == per_ten for k in range(0, 1000, 10))


@pytest.mark.parametrize(("shadow", "message"), [
    ({"fraction": 0.5}, "shadow.fraction=0.5 needs shadow.url"),
    ({"fraction": 1.5, "url": "h:1"}, "less than or equal to 1"),
    ({"fraction": 0.5, "url": "a b"}, "shadow.url='a b' is not a host[:port]"),
    ({"queue_size": 0}, "greater than or equal to 1"),
    ({"timeout_s": 0}, "greater than 0"),
    ({"fractoin": 0.5}, "Extra inputs are not permitted"),
])
def test_bad_settings_are_named(shadow: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        ServingConfig(shadow=shadow)
    assert message in str(err.value)


def test_a_predictor_refuses_to_shadow(tmp_path: Path) -> None:
    from mlops_config import FeaturesConfig, TrackingConfig
    from mlops_serving import serve

    cfg = ServingConfig(role="predictor", shadow={"fraction": 1.0, "url": "candidate:80"})
    with pytest.raises(ServingError, match="cannot be used with role 'predictor'"):
        serve(cfg, FeaturesConfig(), TrackingConfig(), tmp_path, "fraud", model_dir=tmp_path)
