"""The HTTP server: KServe's DataPlane and V1/V2 endpoints on a FastAPI app of our own, under our uvicorn config.

Why not ``kserve.ModelServer.start``: it parses ``sys.argv`` at import, binds 0.0.0.0 with no host option,
and refuses to start when no model is ready. Here the same KServe pieces (``ModelRepository``, ``DataPlane``
with its decode → ``Model.__call__`` → encode path, ``register_v1_endpoints``/``register_v2_endpoints`` for
model lists, metadata and readiness) are mounted on an app bound to ``serving.host`` (127.0.0.1 by default),
and a model that fails to load leaves the server up and not ready. The two predict routes
(``/v1/models/{name}:predict``, ``/v2/models/{name}/infer``) are registered ahead of KServe's own so that
every body goes through the checked decoders of :mod:`mlops_serving.v2` / :mod:`mlops_serving.schema`.

Domain errors map to HTTP codes in one place (the handlers in :func:`build_app`). A guard in front of the routes refuses
oversize bodies (413) and foreign content types (415) before anything is parsed, and turns any unexpected
exception into a clean JSON 500 instead of a reset connection.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from kserve.errors import InvalidInput, ModelNotFound, ModelNotReady
from kserve.model_repository import ModelRepository
from kserve.protocol.dataplane import DataPlane
from kserve.protocol.model_repository_extension import ModelRepositoryExtension
from kserve.protocol.rest.v1_endpoints import register_v1_endpoints
from kserve.protocol.rest.v2_endpoints import register_v2_endpoints

from mlops_serving.errors import FeatureStoreUnavailableError, ServingError
from mlops_serving.lookup import FeatureLookup
from mlops_serving.metrics import ServingMetrics
from mlops_serving.model import single_threaded_torch
from mlops_serving.prediction_log import PredictionLogWriter
from mlops_serving.v2 import decode_infer_body

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
                   Awaitable[None]]
JSON_TYPES = ("application/json", "application/cloudevents+json")
META_ROUTE = "/mlops/models/{model_name}/meta"
"""A predictor's model.json (version, encoder, FeatureService): what its transformer encodes for."""
READY_CACHE_S = 1.0
MODEL_REPOSITORY_PREFIX = "/v2/repository"


class StoreReadiness:
    """Transformer readiness: the model loaded and the online store reachable (pinged at most once a second).

    After the store has answered once, an outage keeps the server ready under the ``degraded`` policy (it still
    answers, flagged) and makes it not ready under ``unavailable``.
    """

    def __init__(self, model: Any, lookup: FeatureLookup, outage: str) -> None:
        self._model = model
        self._lookup = lookup
        self._outage = outage
        self._store_seen = False
        self._checked_at = 0.0
        self._cached: tuple[bool, str] = (False, "starting")

    def __call__(self) -> tuple[bool, str]:
        if not self._model.ready:
            return False, f"model {self._model.name!r} not ready: {self._model.reason}"
        now = time.monotonic()
        if now - self._checked_at < READY_CACHE_S:
            return self._cached
        up = self._lookup.ping()
        self._checked_at = now
        if up:
            self._store_seen = True
            self._cached = (True, "")
        elif not self._store_seen:
            self._cached = (False, f"online feature store not reachable yet: {self._lookup.last_error}")
        elif self._outage == "degraded":
            self._cached = (True, "online feature store unreachable: serving degraded predictions")
        else:
            self._cached = (False, f"online feature store unreachable: {self._lookup.last_error}")
        return self._cached

    def status(self) -> dict[str, Any]:
        return {"feature_store": {"down": self._lookup.down, "last_error": self._lookup.last_error or None,
                                  "policy": self._outage}}


def model_readiness(model: Any) -> Callable[[], tuple[bool, str]]:
    """Predictor readiness: the model loaded."""

    def check() -> tuple[bool, str]:
        if model.ready:
            return True, ""
        return False, f"model {model.name!r} not ready: {model.reason}"

    return check


class ServingDataPlane(DataPlane):
    """KServe's DataPlane whose server readiness is ours (model loaded, and for the transformer the store)."""

    def __init__(self, registry: ModelRepository, readiness: Callable[[], tuple[bool, str]]) -> None:
        super().__init__(model_registry=registry)
        self.readiness = readiness

    async def ready(self) -> bool:
        return self.readiness()[0]


class RequestGuard:
    """ASGI middleware: size and content-type limits on inference POSTs; unexpected errors become a JSON 500."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, on_error: Callable[[str, int], None]) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        path: str = scope.get("path", "")
        if scope.get("method") == "POST" and (path.endswith(":predict") or path.endswith("/infer")):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            refusal = self._refuse(headers)
            if refusal is not None:
                status, kind, message = refusal
                self.on_error(kind, status)
                await _send_json(send, status, {"error": message})
                return
            receive = self._limited(receive)
        try:
            await self.app(scope, receive, tracking_send)
        except _TooLargeError:
            self.on_error("payload_too_large", 413)
            if not started:
                await _send_json(send, 413, {"error": f"the body is larger than {self.max_bytes} bytes"})
        except Exception:
            log.exception("unhandled error on %s", path)
            self.on_error("internal", 500)
            if not started:
                await _send_json(send, 500, {"error": "internal error; see the server log"})

    def _refuse(self, headers: dict[str, str]) -> tuple[int, str, str] | None:
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return 400, "bad_request", f"Content-Length {length!r:.40} is not a number"
            if int(length) > self.max_bytes:
                return 413, "payload_too_large", f"the body has {length} bytes; the limit is {self.max_bytes}"
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        binary_v2 = "inference-header-content-length" in headers
        if ctype in JSON_TYPES or (binary_v2 and ctype in ("", "application/octet-stream")):
            return None
        return 415, "unsupported_media_type", (
            f"Content-Type {ctype or '(none)'!r} is not supported; send application/json "
            "(or a V2 binary body with Inference-Header-Content-Length)"
        )

    def _limited(self, receive: Any) -> Any:
        seen = 0

        async def limited_receive() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLargeError
            return message

        return limited_receive


class _TooLargeError(Exception):
    pass


def _json(payload: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status_code,
                    headers=headers, media_type="application/json")


async def _send_json(send: Any, status: int, payload: dict[str, Any]) -> None:
    body = orjson.dumps(payload)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def build_app(
    model: Any,
    metrics: ServingMetrics,
    *,
    readiness: Callable[[], tuple[bool, str]],
    max_payload_bytes: int,
    prediction_log: PredictionLogWriter | None = None,
    load_in_background: bool = True,
) -> FastAPI:
    """The server's ASGI app for a :class:`FraudModel` (transformer + predictor, or transformer) or a
    :class:`~mlops_serving.predictor_model.PredictorModel`; loading starts with the app, in a thread, so
    liveness answers at once."""
    registry = ModelRepository()
    registry.update(model)
    dataplane = ServingDataPlane(registry, readiness)
    extension = ModelRepositoryExtension(model_registry=registry)

    def count_error(kind: str, status: int) -> None:
        metrics.errors.labels(model.name, model.stable_version, kind, str(status)).inc()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> Any:
        single_threaded_torch()  # this is the thread that runs the forward passes
        if prediction_log is not None:
            prediction_log.start()
        stop = threading.Event()
        if load_in_background:
            threading.Thread(target=_load_until_ready, args=(model, stop), name="model-load", daemon=True).start()
        else:
            await asyncio.get_running_loop().run_in_executor(None, model.load)
        yield
        stop.set()
        model.close()
        if prediction_log is not None:
            prediction_log.stop()

    app = FastAPI(title="mlops serving", docs_url=None, redoc_url=None,
                  lifespan=lifespan)
    app.state.model = model
    app.state.dataplane = dataplane

    async def live() -> dict[str, str]:
        return {"status": "alive"}

    async def ready() -> Response:
        ok, reason = dataplane.readiness()
        return _json({"ready": ok, "reason": reason or None}, status_code=200 if ok else 503)

    async def status() -> dict[str, Any]:
        ok, reason = dataplane.readiness()
        extra = readiness.status() if hasattr(readiness, "status") else {}
        return {"ready": ok, "reason": reason or None, "model": model.describe(), **extra}

    async def exported_meta(model_name: str) -> Response:
        if model_name != model.name:
            raise ModelNotFound(model_name)
        if not model.ready:
            raise ModelNotReady(model_name, model.reason)
        return _json(model.export_meta())

    async def metrics_endpoint() -> Response:
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def infer_v2(request: Request) -> Response:
        model_name = request.path_params["model_name"]
        if not await dataplane.model_ready(model_name, True):
            raise ModelNotReady(model_name, model.reason)
        headers = dict(request.headers.items())  # Starlette gives lower-case names
        infer_request = decode_infer_body(await request.body(), headers, model_name)
        response, response_headers = await dataplane.infer(model_name, infer_request, headers)
        body, res_headers = dataplane.encode(model_name, response, headers, {})
        response_headers.update(res_headers)
        response_headers.pop("content-length", None)
        response_headers.pop("content-type", None)
        if isinstance(body, bytes):
            return Response(body, headers=response_headers, media_type="application/octet-stream")
        return _json(body, headers=response_headers)

    app.add_api_route("/", live, methods=["GET"])
    app.add_api_route("/v2/health/live", live, methods=["GET"])
    app.add_api_route("/v2/health/ready", ready, methods=["GET"])
    app.add_api_route("/status", status, methods=["GET"])
    app.add_api_route("/metrics", metrics_endpoint, methods=["GET"])
    if hasattr(model, "export_meta"):
        app.add_api_route(META_ROUTE, exported_meta, methods=["GET"])
    async def predict_v1(request: Request) -> Response:
        model_name = request.path_params["model_name"]
        if not await dataplane.model_ready(model_name, True):
            raise ModelNotReady(model_name, model.reason)
        headers = dict(request.headers.items())  # Starlette gives lower-case names
        body, attributes = dataplane.decode(await request.body(), headers)
        response, response_headers = await dataplane.infer(model_name, body, headers)
        payload, res_headers = dataplane.encode(model_name, response, headers, attributes)
        response_headers.update(res_headers)
        response_headers.pop("content-length", None)
        response_headers.pop("content-type", None)
        return _json(payload, headers=response_headers)

    # plain Starlette routes: the hot path skips FastAPI's dependency solving (nothing to inject here)
    app.add_route("/v1/models/{model_name}:predict", predict_v1, methods=["POST"])
    app.add_route("/v2/models/{model_name}/infer", infer_v2, methods=["POST"])
    # ahead of KServe's routes (the first match wins): its model-repository routes are never reached
    app.add_route(f"{MODEL_REPOSITORY_PREFIX}/{{path:path}}", refuse_model_repository,
                  methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    register_v1_endpoints(app, dataplane, extension)
    register_v2_endpoints(app, dataplane, extension)

    async def serving_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ServingError)
        count_error(type(exc).__name__, exc.http_status)
        headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, FeatureStoreUnavailableError) else None
        return _json({"error": str(exc)}, status_code=exc.http_status, headers=headers)

    def plain(status: int, prefix: str = "") -> Any:
        """KServe's error types answered without its handlers' server-side tracebacks (client errors)."""

        async def handler(_: Request, exc: Exception) -> Response:
            count_error(type(exc).__name__, status)
            return _json({"error": f"{prefix}{exc}"[:2000]}, status_code=status)

        return handler

    app.add_exception_handler(ServingError, serving_error)
    app.add_exception_handler(InvalidInput, plain(400))
    app.add_exception_handler(ModelNotFound, plain(404))
    app.add_exception_handler(ModelNotReady, plain(503))
    app.add_exception_handler(RequestValidationError, plain(400, "malformed request: "))
    app.add_middleware(RequestGuard, max_bytes=max_payload_bytes, on_error=count_error)
    return app


async def refuse_model_repository(request: Request) -> Response:
    """404 for KServe's model-repository routes (``/v2/repository/index``, ``.../models/{name}/load|unload``).

    KServe mounts them on the serving port with no protection: anyone who reaches it could unload the model,
    after which predict answers 404 and readiness 503 while liveness stays 200, so nothing restarts the
    replica. What a server serves is decided by its manifest and the registry, never over HTTP.
    """
    return _json({"error": f"{request.url.path} is not served: models are not loaded or unloaded over HTTP"},
                 status_code=404)


def _load_until_ready(model: Any, stop: threading.Event) -> None:
    """Try ``model.load()`` until it succeeds or the server stops; back-off 1 s doubling to 30 s."""
    wait = 1.0
    while not stop.is_set() and not model.load():
        stop.wait(wait)
        wait = min(30.0, wait * 2)


def run_app(app: FastAPI, host: str, port: int, *, access_log: bool = False) -> None:
    """Serve ``app`` on ``host:port`` until SIGINT/SIGTERM (uvloop + httptools when installed)."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=access_log, lifespan="on",
                            timeout_keep_alive=65, timeout_graceful_shutdown=10)
    log.info("serving on http://%s:%d", host, port)
    uvicorn.Server(config).run()
