"""One admission controller and one error map for both families, on real servers: the same overload gets the same
answer (status, ``Retry-After``, message naming its config keys, the same series counting it) from the tabular
model's predict route and from every language-model route; only the body's shape is the protocol's (KServe's
``{"error": message}``, OpenAI's error object on the LM's routes). A body trickling to an LM route is answered 408 at
its deadline and holds no place, as on the predict routes.

Each server is a real uvicorn server over HTTP (``kit.start_server``). The place is held deterministically: the
tabular request's feature lookup, and the LM request's generation, each wait on a gate the test opens (as
``test_overload.SlowSource`` slows a lookup); everything between the socket and that wait is the servers' own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

pytestmark = pytest.mark.integration

LM = "llm-sft"
RETRY_AFTER = "3"  # not the default 1 of either family: the header must come from the configured key
V1 = "/v1/models/fraud:predict"
LM_ROUTES = [
    ("/openai/v1/completions", {"model": LM, "prompt": "The model registry", "max_tokens": 4}),
    ("/openai/v1/chat/completions", {"model": LM, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    (f"/v2/models/{LM}/generate", {"text_input": "The model registry", "parameters": {"max_tokens": 4}}),
]


class GatedSource:
    """A Redis feature source whose lookups wait until :attr:`gate` is set (a hung online store)."""

    service_name = "fraud_v1"
    defaults: ClassVar[dict[str, float]] = {}

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()

    def get(self, entity_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        self.waiting.set()
        self.gate.wait(60)
        return list(self.inner.get(entity_rows))

    def ping(self) -> bool:
        return bool(self.inner.ping())


def gate_generation(app: Any) -> tuple[threading.Event, threading.Event]:
    """Make the LM app's generations wait for a gate before their first token; (gate, a generation is waiting)."""
    model = app.state.model
    real = model.stream
    gate, waiting = threading.Event(), threading.Event()
    gate.set()

    async def stream(*args: Any, **kwargs: Any) -> AsyncIterator[str]:
        waiting.set()
        await asyncio.to_thread(gate.wait, 60)
        async for piece in real(*args, **kwargs):
            yield piece

    model.stream = stream
    return gate, waiting


def metric(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


@pytest.fixture(scope="module")
def checkpoint(base_checkpoint: Path) -> Path:
    return base_checkpoint


@pytest.fixture
def tabular(tmp_path: Path, kit: Any, redis_features: Any) -> Iterator[tuple[Any, GatedSource]]:
    source = GatedSource(redis_features)
    app = kit.make_app(
        tmp_path, source, request_deadline_ms=30_000.0,
        tabular={"max_inflight": 1, "shed_retry_after_s": int(RETRY_AFTER)},
    )
    srv = kit.start_server(app, tmp_path / "predlog")
    yield srv, source
    source.gate.set()
    srv.stop()


def start_lm(kit: Any, tmp_path: Path, checkpoint: Path, **overrides: Any) -> Any:
    from mlops_serving import create_lm_app

    cfg = kit.serving_config(lm={"max_concurrent": 1, "max_queue": 0, "retry_after_s": int(RETRY_AFTER)}, **overrides)
    app = create_lm_app(cfg, model_name=LM, folder=checkpoint, version="7", log_dir=None)
    return kit.start_server(app, tmp_path / "lm-log")


@pytest.fixture
def lm(tmp_path: Path, kit: Any, checkpoint: Path) -> Iterator[tuple[Any, threading.Event, threading.Event]]:
    srv = start_lm(kit, tmp_path, checkpoint, request_deadline_ms=30_000.0)
    gate, waiting = gate_generation(srv.app)
    yield srv, gate, waiting
    gate.set()
    srv.stop()


def test_one_overload_gets_one_answer_from_both_families(kit: Any, tabular: Any, lm: Any) -> None:
    tab, source = tabular
    lm_srv, gate, generating = lm

    async def overload() -> tuple[list[httpx.Response], list[httpx.Response], httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as http:
            source.gate.clear()
            holder_t = asyncio.create_task(http.post(f"{tab.url}{V1}", json={"instances": [kit.instance(1)]}))
            gate.clear()
            holder_l = asyncio.create_task(
                http.post(f"{lm_srv.url}/openai/v1/completions", json={"model": LM, "prompt": "x", "max_tokens": 2})
            )
            # each server's one place is held now: its request is inside, waiting on its gate
            assert await asyncio.to_thread(source.waiting.wait, 30) and await asyncio.to_thread(generating.wait, 30)
            tab_refused = [
                await http.post(f"{tab.url}{V1}", json={"instances": [kit.instance(2)]}),
                await http.post(f"{tab.url}/v2/models/fraud/infer", json={"inputs": []}),
            ]
            lm_refused = [await http.post(f"{lm_srv.url}{route}", json=body) for route, body in LM_ROUTES]
            source.gate.set()
            gate.set()
            return tab_refused, lm_refused, await holder_t, await holder_l

    tab_refused, lm_refused, held_t, held_l = asyncio.run(overload())
    assert held_t.status_code == 200 and held_l.status_code == 200, (held_t.text, held_l.text)

    for r in tab_refused + lm_refused:
        assert r.status_code == 503, (r.request.url, r.text)
        assert r.headers["retry-after"] == RETRY_AFTER, r.request.url
        assert r.headers["content-type"] == "application/json"
    tab_messages = {r.json()["error"] for r in tab_refused}
    assert len(tab_messages) == 1  # KServe's body, the message alone
    (tab_message,) = tab_messages
    assert "1 predict requests are in flight" in tab_message and "serving.tabular.max_inflight=1" in tab_message
    for r in lm_refused:  # OpenAI's error object, the V2 generate route included, one message for the three
        error = r.json()["error"]
        assert error == {"message": error["message"], "type": "server_error", "param": None, "code": 503}
        assert error["message"] == lm_refused[0].json()["error"]["message"]
        assert "server busy: 1 running + 0 queued" in error["message"]
        assert "serving.lm.max_concurrent + serving.lm.max_queue" in error["message"]

    for srv, model, refused in ((tab, "fraud", tab_refused), (lm_srv, LM, lm_refused)):
        text = httpx.get(f"{srv.url}/metrics", timeout=10).text
        # the same series count the refusals on both servers: the shedding counter and the error map's
        assert metric(text, "mlops_serving_shed_requests_total", model=model, reason="inflight") == len(refused)
        assert metric(text, "mlops_serving_errors_total", model=model, type="OverloadedError", status="503") == len(
            refused
        )
        assert metric(text, "mlops_serving_inflight_limit", model=model) == 1
        assert metric(text, "mlops_serving_inflight", model=model) == 0  # the holders left; nothing leaked
        assert metric(text, "mlops_serving_admitted_seconds_count", model=model) >= 1

    # the places are free again on both servers
    assert httpx.post(f"{tab.url}{V1}", json={"instances": [kit.instance(3)]}, timeout=30).status_code == 200
    for route, body in LM_ROUTES:
        assert httpx.post(f"{lm_srv.url}{route}", json=body, timeout=60).status_code == 200, route


def test_a_bad_deadline_header_is_one_400_on_both_families(kit: Any, tabular: Any, lm: Any) -> None:
    tab, _ = tabular
    lm_srv, _, _ = lm
    bad = {"X-Request-Deadline-Ms": "soon"}
    r = httpx.post(f"{tab.url}{V1}", json={"instances": [kit.instance(1)]}, headers=bad, timeout=30)
    assert r.status_code == 400 and "X-Request-Deadline-Ms='soon'" in r.json()["error"], r.text
    for route, body in LM_ROUTES:
        r = httpx.post(f"{lm_srv.url}{route}", json=body, headers=bad, timeout=30)
        assert r.status_code == 400, (route, r.text)
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and "X-Request-Deadline-Ms='soon'" in error["message"]


def test_a_body_trickling_to_an_lm_route_gets_408_and_holds_no_place(
    kit: Any, tmp_path: Path, checkpoint: Path
) -> None:
    """Before, the LM routes read the body inside the route, with no deadline: a trickling client was never
    answered. Now the guard reads it before admission, under ``serving.request_deadline_ms`` (1 s here)."""
    srv = start_lm(kit, tmp_path, checkpoint, request_deadline_ms=1000.0)

    async def trickle_and_ask() -> tuple[bytes, int]:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(
            b"POST /openai/v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 200\r\n\r\n{"
        )
        await writer.drain()
        async with httpx.AsyncClient(timeout=60) as http:
            # the one place (max_concurrent 1, max_queue 0) is free while the slow body arrives
            ok = await http.post(f"{srv.url}/openai/v1/completions", json={"model": LM, "prompt": "x", "max_tokens": 2})
        try:
            answer = await asyncio.wait_for(reader.read(4096), timeout=20)
        finally:
            writer.close()
        return answer, ok.status_code

    try:
        answer, ok = asyncio.run(trickle_and_ask())
        assert ok == 200
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b'"type":"invalid_request_error"' in body and b"within its deadline of 1000 ms" in body
        text = httpx.get(f"{srv.url}/metrics", timeout=10).text
        assert metric(text, "mlops_serving_shed_requests_total", model=LM, reason="body_timeout") == 1
    finally:
        srv.stop()


def _until_loaded(url: str) -> httpx.Response:
    """The readiness answer once the model's load has ended (ready, or refused with its reason)."""
    import time

    deadline = time.monotonic() + 60
    r = httpx.get(f"{url}/v2/health/ready", timeout=10)
    while r.status_code != 200 and "not loaded yet" in r.text and time.monotonic() < deadline:
        time.sleep(0.1)
        r = httpx.get(f"{url}/v2/health/ready", timeout=10)
    return r


def test_a_model_not_ready_gets_one_answer_from_both_families(kit: Any, tmp_path: Path, checkpoint: Path,
                                                               redis_features: Any) -> None:
    """Before, a tabular model not ready was answered 503 with no ``Retry-After`` (KServe's error, unmapped), and
    the language model's with a hard-coded 5 s: now both say ``serving.not_ready_retry_after_s``."""
    import shutil

    from mlops_config import ProvenanceConfig
    from mlops_model import model_signer, model_verifier
    from mlops_serving import create_lm_app
    from mlops_serving.service import create_app, folder_loader

    wait = 7  # the default of neither family before
    cfg = kit.serving_config(not_ready_retry_after_s=wait)
    # tabular: its version's folder is not there; the language model: signed by another key than the one trusted
    tab_app = create_app(cfg, model_name="fraud", loader=folder_loader("fraud", tmp_path / "missing" / "3", None),
                         source=redis_features, log_dir=tmp_path / "predlog", retry_s=0.3)
    folder = tmp_path / "lm"
    shutil.copytree(checkpoint, folder)
    model_signer(ProvenanceConfig(local_key_dir=str(tmp_path / "other-keys")), folder)(folder)
    check = model_verifier(ProvenanceConfig(local_key_dir=str(tmp_path / "keys")), folder)
    lm_app = create_lm_app(cfg, model_name=LM, folder=folder, version="7", log_dir=None, check=check)
    servers = [kit.start_server(tab_app, tmp_path / "t-log", wait_ready=False),
               kit.start_server(lm_app, tmp_path / "l-log", wait_ready=False)]
    try:
        tab, lm_srv = servers
        for srv in servers:
            ready = _until_loaded(srv.url)
            assert ready.status_code == 503 and "not loaded yet" not in ready.text, ready.text
        answers = [httpx.post(f"{tab.url}{V1}", json={"instances": [kit.instance(1)]}, timeout=30),
                   httpx.post(f"{tab.url}/v2/models/fraud/infer", json={"inputs": []}, timeout=30)]
        answers += [httpx.post(f"{lm_srv.url}{route}", json=body, timeout=30) for route, body in LM_ROUTES]
        for r in answers:
            assert r.status_code == 503, (r.request.url, r.text)
            assert r.headers.get("retry-after") == str(wait), (r.request.url, dict(r.headers))
        assert "fraud is not ready" in answers[0].json()["error"] and "missing" in answers[0].json()["error"]
        for r in answers[2:]:
            error = r.json()["error"]
            assert error["type"] == "server_error" and error["code"] == 503
            assert f"{LM} is not ready" in error["message"] and "signed by another key" in error["message"]
    finally:
        for srv in servers:
            srv.stop()
