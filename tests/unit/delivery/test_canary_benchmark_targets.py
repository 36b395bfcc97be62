"""benchmarks/canary_sequential.py judges its claims fairly: an error rate is within alpha only when the upper end
of its Wilson CI is, and the sequential test's requests are compared with the fixed-sample n over A/A canaries only.

The figures are hand-built: the CIs are scipy's Wilson intervals of counts chosen so that the lower end is below
alpha and the upper end above it; the medians are chosen so that the mixed median is below the fixed n and the A/A
one above it. The old targets said "met" for both."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from scipy import stats

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "canary_sequential.py"


def _targets() -> Any:
    spec = importlib.util.spec_from_file_location("canary_sequential_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.targets_met


def _wilson(k: int, n: int) -> list[float]:
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return [ci.low, ci.high]


def _out(fp: list[float], fr: list[float], median_aa: float, median_all: float, fixed: int) -> dict[str, Any]:
    return {"sequential": {"false_promotion_ci95": fp, "false_rollback_ci95": fr, "median_requests_aa": median_aa,
                           "median_requests": median_all},
            "at_margin": {"false_promotion_ci95": fp}, "fixed_sample": {"requests": fixed}}


def test_a_rate_whose_ci_straddles_alpha_is_not_within_it() -> None:
    straddling = _wilson(25, 500)  # 5 % observed: the CI runs from ~3.4 % to ~7.3 %
    assert straddling[0] < 0.05 < straddling[1]
    clearly = _wilson(5, 500)  # 1 %: the CI's upper end ~2.3 %
    assert clearly[1] < 0.05
    targets = _targets()
    met = targets(_out(straddling, straddling, 100, 100, 1000), 0.05)
    assert not met["false_promotion_within_alpha"] and not met["false_rollback_within_alpha"]
    met = targets(_out(clearly, clearly, 100, 100, 1000), 0.05)
    assert met["false_promotion_within_alpha"] and met["false_rollback_within_alpha"]


def test_requests_are_compared_with_the_fixed_n_over_a_a_canaries_only() -> None:
    ok = _wilson(1, 500)
    # worse canaries roll back within a look or two and pull the mixed median down to 300; A/A ones take 2,400
    met = _targets()(_out(ok, ok, median_aa=2400, median_all=300, fixed=1500), 0.05)
    assert not met["fewer_requests_than_fixed"]
    assert _targets()(_out(ok, ok, median_aa=900, median_all=300, fixed=1500), 0.05)["fewer_requests_than_fixed"]
