"""Serving holds one admission controller and one error map: no class is defined twice in ``mlops_serving``, the
language model's routes build no error answer of their own, and the controller's two modes take their bounds from
their config keys. (The behaviour, the same overload answered alike by both families' routes on real servers, is
``tests/integration/serving/test_admission_families.py``.)"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from mlops_config import ServingConfig
from mlops_serving.admission import Admission, AdmissionLimits, OverloadedError

SRC = Path(__file__).resolve().parents[3] / "packages" / "serving" / "src" / "mlops_serving"


def _trees() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(SRC.glob("*.py"))}


def test_no_class_is_defined_twice_in_serving() -> None:
    """Before: ``OverloadedError`` in admission.py and lm_api.py, then ``Admission`` beside ``AdmissionGuard``."""
    names = Counter(n.name for tree in _trees().values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef))
    assert [name for name, count in names.items() if count > 1] == []
    assert names["OverloadedError"] == 1


def test_only_the_server_answers_errors() -> None:
    """The error map is ``server.ErrorReplies``: no other module builds a ``Response`` from a ``ServingError``'s
    ``http_status`` (before: ``LMRoutes._refuse`` and ``_openai_error``)."""
    readers = sorted(
        name
        for name, tree in _trees().items()
        if any(
            isinstance(n, ast.Attribute) and n.attr == "http_status" and isinstance(n.ctx, ast.Load)
            for n in ast.walk(tree)
        )
    )
    assert readers == ["server.py"]


def test_each_family_takes_its_bounds_from_its_keys() -> None:
    cfg = ServingConfig(
        tabular={"max_inflight": 40, "shed_retry_after_s": 2},
        request_deadline_ms=300.0,
        max_payload_bytes=4096,
        lm={"max_concurrent": 3, "max_queue": 5, "retry_after_s": 7},
    )
    tabular = AdmissionLimits.from_config(cfg)
    assert (
        tabular.max_inflight,
        tabular.max_running,
        tabular.retry_after_s,
        tabular.deadline_ms,
        tabular.max_body_bytes,
    ) == (40, None, 2, 300.0, 4096)
    lm = AdmissionLimits.for_generation(cfg)
    assert (lm.max_inflight, lm.max_running, lm.retry_after_s, lm.deadline_ms, lm.max_body_bytes) == (
        8,
        3,
        7,
        300.0,
        4096,
    )


@pytest.mark.parametrize(
    ("family", "words"),
    [
        ("tabular", ["0 predict requests are in flight", "at most serving.tabular.max_inflight=40"]),
        ("lm", ["server busy: 3 running + 5 queued", "serving.lm.max_concurrent + serving.lm.max_queue"]),
    ],
)
def test_a_refusal_names_the_bound_and_is_one_overloaded_error(family: str, words: list[str]) -> None:
    cfg = ServingConfig(tabular={"max_inflight": 40}, lm={"max_concurrent": 3, "max_queue": 5, "retry_after_s": 7})
    limits = AdmissionLimits.from_config(cfg) if family == "tabular" else AdmissionLimits.for_generation(cfg)
    exc = Admission(limits, CollectorRegistry(), "m").overloaded()
    assert type(exc) is OverloadedError and exc.http_status == 503
    assert exc.retry_after_s == (1 if family == "tabular" else 7)
    for w in words:
        assert w in str(exc)


def test_the_concurrency_mode_keeps_its_limit_and_the_adaptive_one_moves() -> None:
    cfg = ServingConfig(tabular={"max_inflight": 40}, request_deadline_ms=100.0,
                        lm={"max_concurrent": 3, "max_queue": 5})
    adaptive = Admission(AdmissionLimits.from_config(cfg), CollectorRegistry(), "m")
    fixed = Admission(AdmissionLimits.for_generation(cfg), CollectorRegistry(), "m")
    for adm in (adaptive, fixed):
        adm.adapt(now=10.0, took_s=5.0)  # far past half the 100 ms deadline
    assert adaptive.limit == pytest.approx(40 * 0.8)  # cut by a fifth
    assert fixed.limit == 8  # a generation's seconds are no sign of overload
