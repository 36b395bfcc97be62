"""The direct reader's sampled comparison with Feast's reaches the server's ``/metrics``.

``OnlineFeatures.parity`` (mlops_features) counts, off the request path, how often a re-read through Feast
differed from what the direct reader served; serving exports those counts next to its own metrics. The source here
serves the Redis rows of the serving fixtures and samples every lookup into a real ``ParitySampler`` whose "Feast"
read returns ``merchant_risk`` + 1 for merchant ``m1``: the one kind of difference the server must then show.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration


def _metric(text: str, name: str, **labels: str) -> float:
    """The value of ``name{labels…}`` in a Prometheus text page (0 when absent)."""
    for line in text.splitlines():
        match = re.match(rf"{re.escape(name)}\{{(.*)\}} (\S+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            return float(match.group(2))
    return 0.0


def test_parity_counts_of_the_source_are_served_on_metrics(tmp_path: Path, kit: Any, redis_url: str,
                                                            redis_prefix: str) -> None:
    from mlops_features.online_parity import ParitySampler

    RedisHashFeatures = kit.RedisHashFeatures  # noqa: N806 - the fixture's class, subclassed below

    class SampledSource(RedisHashFeatures):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__(redis_url, redis_prefix)
            self.parity = ParitySampler(1.0, self._feast, self._direct, service="fraud_v1", seed=0)

        def _direct(self, rows: list[dict[str, Any]], _as_of: Any) -> list[dict[str, Any]]:
            return RedisHashFeatures.get(self, rows)

        def _feast(self, rows: list[dict[str, Any]], _as_of: Any) -> list[dict[str, Any]]:
            got = RedisHashFeatures.get(self, rows)
            for row, item in zip(rows, got, strict=True):
                if row["merchant_id"] == "m1":
                    item["merchant_risk"] += 1.0
            return got

        def get(self, entity_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
            rows = [dict(r) for r in entity_rows]
            served = self._direct(rows, None)
            self.parity.offer(rows, None, served)
            self.parity.wait(5)  # one comparison at a time: each request's sample is taken, none skipped
            return served

    source = SampledSource()
    source.write()
    server = kit.start_server(kit.make_app(tmp_path, source), tmp_path / "predlog")
    try:
        for i in (0, 1, 11):  # merchants m0, m1, m1
            r = httpx.post(f"{server.url}/v1/models/fraud:predict", json={"instances": [kit.instance(i)]}, timeout=10)
            assert r.status_code == 200, r.text
        page = httpx.get(f"{server.url}/metrics", timeout=10).text
    finally:
        server.stop()
    prefix = "mlops_serving_feature_parity"
    assert _metric(page, f"{prefix}_samples_total", outcome="compared", model="fraud", service="fraud_v1") == 3
    assert _metric(page, f"{prefix}_samples_total", outcome="differing", model="fraud") == 2
    assert _metric(page, f"{prefix}_differences_total", kind="value:merchant_risk", model="fraud") == 2
    assert f'{prefix}_differences_total{{' in page and "value:user_txn_count_1h" not in page
