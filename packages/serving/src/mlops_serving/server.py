"""The HTTP server: KServe's DataPlane and V1/V2 endpoints on a FastAPI app of our own, under our uvicorn config.

Why not ``kserve.ModelServer.start``: it parses ``sys.argv`` at import, binds 0.0.0.0 with no host option,
and refuses to start when no model is ready. Here the same KServe pieces (``ModelRepository``, ``DataPlane``
with its decode → ``Model.__call__`` → encode path, ``register_v1_endpoints``/``register_v2_endpoints`` for
model lists, metadata and readiness) are mounted on an app bound to ``serving.host`` (127.0.0.1 by default),
and a model that fails to load leaves the server up and not ready. The two predict routes
(``/v1/models/{name}:predict``, ``/v2/models/{name}/infer``) are registered ahead of KServe's own so that
every body goes through the checked decoders of :mod:`mlops_serving.v2` / :mod:`mlops_serving.schema`.

Errors map to HTTP codes in one place, :class:`ErrorReplies`: the app's exception handlers, the admission guard
(:mod:`mlops_serving.admission`) and the request guard (which refuses oversize bodies and foreign content types
before anything is parsed, and turns any unexpected exception into a clean JSON 500 instead of a reset connection)
all answer through it, for both families. The status, ``Retry-After`` and the count are the map's; only the body's
shape is the protocol's (``{"error": message}`` for KServe's V1/V2, OpenAI's error object on the language model's
routes: :data:`ErrorFormat`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from kserve.errors import InvalidInput, ModelNotFound, ModelNotReady
from kserve.model_repository import ModelRepository
from kserve.protocol.dataplane import DataPlane
from kserve.protocol.model_repository_extension import ModelRepositoryExtension
from kserve.protocol.rest.v1_endpoints import register_v1_endpoints
from kserve.protocol.rest.v2_endpoints import register_v2_endpoints

from mlops_serving.admission import Admission, AdmissionGuard, is_inference
from mlops_serving.errors import (
    BadRequestError,
    InternalError,
    PayloadTooLargeError,
    ServingError,
    UnsupportedMediaTypeError,
)
from mlops_serving.lookup import FeatureLookup
from mlops_serving.metrics import ServingMetrics
from mlops_serving.prediction_log import PredictionLogWriter
from mlops_serving.transformer import single_threaded_torch
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
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""What a caller's ``X-Request-Id`` may be (a UUID, a ULID, a trace id); anything else is refused with 400."""


class HostedModel(Protocol):
    """What the app hosts: a :class:`~mlops_serving.transformer.TabularModel` (transformer, with or without the
    predictor in process) or a :class:`~mlops_serving.predictor.PredictorModel`; both are ``kserve.Model``."""

    name: str
    ready: bool
    reason: str

    @property
    def stable_version(self) -> str: ...

    def load(self) -> bool: ...

    def close(self) -> None: ...

    def describe(self) -> dict[str, Any]: ...


class ModelReadiness:
    """Predictor readiness: the model loaded."""

    def __init__(self, model: HostedModel) -> None:
        self._model = model

    def __call__(self) -> tuple[bool, str]:
        if self._model.ready:
            return True, ""
        return False, f"model {self._model.name!r} not ready: {self._model.reason}"

    def status(self) -> dict[str, Any]:
        return {}


class StoreReadiness(ModelReadiness):
    """Transformer readiness: the model loaded and the online store reachable (pinged at most once a second).

    After the store has answered once, an outage keeps the server ready under the ``degraded`` policy (it still
    answers, flagged) and makes it not ready under ``unavailable``.
    """

    def __init__(self, model: HostedModel, lookup: FeatureLookup, outage: str) -> None:
        super().__init__(model)
        self._lookup = lookup
        self._outage = outage
        self._store_seen = False
        self._checked_at = 0.0
        self._cached: tuple[bool, str] = (False, "starting")

    def __call__(self) -> tuple[bool, str]:
        model_ok, reason = super().__call__()
        if not model_ok:
            return False, reason
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


class ServingDataPlane(DataPlane):
    """KServe's DataPlane whose server readiness is ours (model loaded, and for the transformer the store)."""

    def __init__(self, registry: ModelRepository, readiness: ModelReadiness) -> None:
        super().__init__(model_registry=registry)
        self.readiness = readiness

    async def ready(self) -> bool:
        return self.readiness()[0]


KSERVE_STATUS: dict[type[Exception], int] = {InvalidInput: 400, ModelNotFound: 404, ModelNotReady: 503,
                                             RequestValidationError: 400}
"""KServe's and FastAPI's client errors, answered without their handlers' server-side tracebacks."""


ErrorFormat = Callable[[Exception, int, str], dict[str, Any]]
"""A protocol's error body from the error, its status and its message."""


def kserve_error_body(_: Exception, __: int, message: str) -> dict[str, Any]:
    """KServe's V1/V2 error body."""
    return {"error": message}


class ErrorReplies:
    """The one map from an error to its HTTP answer; every error answered is counted in the errors metric.

    Ours carry their status (:attr:`ServingError.http_status`); KServe's and FastAPI's come from
    :data:`KSERVE_STATUS`; anything else is a 500 with no details (the log has the traceback). A 503 that says when
    to come back (overload, a missed deadline, the store's outage, a model not ready) carries ``Retry-After``; a
    model not ready is answered the same by both families (``serving.not_ready_retry_after_s``). ``formats`` picks
    the body's shape by the request's path (``None``: KServe's).
    """

    def __init__(self, model: HostedModel, metrics: ServingMetrics,
                 formats: Callable[[str], ErrorFormat | None] | None = None, *,
                 not_ready_retry_after_s: int = 5) -> None:
        self._model = model
        self._metrics = metrics
        self._formats = formats
        self._not_ready_retry_after_s = not_ready_retry_after_s

    def reply(self, exc: Exception, path: str = "") -> tuple[int, dict[str, Any], dict[str, str] | None]:
        """Status, JSON body and extra headers for ``exc`` raised on ``path``."""
        if isinstance(exc, ServingError):
            status = exc.http_status
        else:
            status = next((code for kind, code in KSERVE_STATUS.items() if isinstance(exc, kind)), 500)
            if status == 500:
                exc = InternalError("internal error; see the server log")
        prefix = "malformed request: " if isinstance(exc, RequestValidationError) else ""
        retry_after = getattr(exc, "retry_after_s", None)  # 503s: the store's outage, overload shedding
        if isinstance(exc, ModelNotReady):  # loading, or refused at load: come back when it may have loaded
            retry_after = self._not_ready_retry_after_s
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        self._metrics.errors.labels(self._model.name, self._model.stable_version, type(exc).__name__,
                                    str(status)).inc()
        message = f"{prefix}{exc}"[:2000]
        fmt = self._formats(path) if self._formats is not None else None
        return status, (fmt or kserve_error_body)(exc, status, message), headers

    async def handle(self, request: Request, exc: Exception) -> Response:
        """A FastAPI exception handler."""
        status, body, headers = self.reply(exc, request.scope.get("path", ""))
        return _json(body, status_code=status, headers=headers)

    async def send(self, send: Any, exc: Exception, path: str = "") -> None:
        """Answer ``exc`` on a raw ASGI ``send`` (the guards, outside FastAPI)."""
        status, body, headers = self.reply(exc, path)
        raw = orjson.dumps(body)
        extra = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode()),
                                *extra]})
        await send({"type": "http.response.body", "body": raw})


_GUARDED_HEADERS = frozenset((b"content-length", b"content-type", b"x-request-id", b"inference-header-content-length"))


class RequestGuard:
    """ASGI middleware: size and content-type limits on inference POSTs; unexpected errors become a JSON 500."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, errors: ErrorReplies) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.errors = errors

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
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            # the size limit holds on every route with a body (KServe's :explain, the repository routes, ...), not
            # only on the ones we parse: one unbounded body is enough to exhaust a replica's memory
            # only the four it reads, not every header decoded (a repeated one: the last wins, as in a dict)
            headers: dict[str, str] = {}
            for k, v in scope.get("headers", []):
                name = k.lower()
                if name in _GUARDED_HEADERS:
                    headers[name.decode("latin-1")] = v.decode("latin-1")
            refusal = self._refuse(headers, check_type=is_inference(path))
            if refusal is not None:
                await self.errors.send(send, refusal, path)
                return
            receive = self._limited(receive)
        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if not isinstance(exc, PayloadTooLargeError):
                log.exception("unhandled error on %s", path)
            if not started:
                await self.errors.send(send, exc, path)

    def _refuse(self, headers: dict[str, str], *, check_type: bool) -> ServingError | None:
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return BadRequestError(f"Content-Length {length!r:.40} is not a number")
            if int(length) > self.max_bytes:
                return PayloadTooLargeError(f"the body has {length} bytes; the limit is {self.max_bytes}")
        if not check_type:
            return None
        rid = headers.get("x-request-id")
        if rid is not None and not REQUEST_ID.fullmatch(rid):
            # the id joins the prediction log, the shadow rows and the labels: bounded, printable, no separators
            return BadRequestError(f"X-Request-Id {rid!r:.60} is invalid: expected 1-128 characters of "
                                   "letters, digits and . _ : -")
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        binary_v2 = "inference-header-content-length" in headers
        if ctype in JSON_TYPES or (binary_v2 and ctype in ("", "application/octet-stream")):
            return None
        return UnsupportedMediaTypeError(
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
                    raise PayloadTooLargeError(f"the body is larger than {self.max_bytes} bytes")
            return message

        return limited_receive


def _json(payload: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status_code,
                    headers=headers, media_type="application/json")


class Routes:
    """The app's own endpoints over one hosted model and KServe's DataPlane."""

    def __init__(self, model: HostedModel, metrics: ServingMetrics, dataplane: ServingDataPlane,
                 export_meta: Callable[[], dict[str, Any]] | None) -> None:
        self.model = model
        self.metrics = metrics
        self.dataplane = dataplane
        self._export_meta = export_meta
        self.status_detail = True

    async def live(self) -> dict[str, str]:
        return {"status": "alive"}

    async def ready(self) -> Response:
        ok, reason = self.dataplane.readiness()
        return _json({"ready": ok, "reason": reason or None}, status_code=200 if ok else 503)

    async def status(self) -> dict[str, Any]:
        ok, reason = self.dataplane.readiness()
        if not self.status_detail:  # no error text, URL or model internals: ready or not, and the version
            return {"ready": ok, "model": self.model.name, "version": self.model.stable_version}
        return {"ready": ok, "reason": reason or None, "model": self.model.describe(),
                **self.dataplane.readiness.status()}

    async def metrics_text(self) -> Response:
        return Response(self.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def exported_meta(self, model_name: str) -> Response:
        if model_name != self.model.name or self._export_meta is None:
            raise ModelNotFound(model_name)
        if not self.model.ready:
            raise ModelNotReady(model_name, self.model.reason)
        return _json(self._export_meta())

    async def predict_v1(self, request: Request) -> Response:
        model_name, headers = await self._ready_request(request)
        body, attributes = self.dataplane.decode(await request.body(), headers)
        response, response_headers = await self.dataplane.infer(model_name, body, headers)
        payload, res_headers = self.dataplane.encode(model_name, response, headers, attributes)
        return _json(payload, headers=_merged(response_headers, res_headers))

    async def infer_v2(self, request: Request) -> Response:
        model_name, headers = await self._ready_request(request)
        infer_request = decode_infer_body(await request.body(), headers, model_name)
        response, response_headers = await self.dataplane.infer(model_name, infer_request, headers)
        body, res_headers = self.dataplane.encode(model_name, response, headers, {})
        if isinstance(body, bytes):
            return Response(body, headers=_merged(response_headers, res_headers),
                            media_type="application/octet-stream")
        return _json(body, headers=_merged(response_headers, res_headers))

    async def _ready_request(self, request: Request) -> tuple[str, dict[str, str]]:
        model_name = request.path_params["model_name"]
        if not await self.dataplane.model_ready(model_name, True):
            raise ModelNotReady(model_name, self.model.reason)
        return model_name, dict(request.headers.items())  # Starlette gives lower-case names


def _merged(response_headers: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """KServe's response headers without the length and type it set for its own body."""
    merged = {**response_headers, **extra}
    merged.pop("content-length", None)
    merged.pop("content-type", None)
    return merged


@asynccontextmanager
async def _lifespan(model: HostedModel, prediction_log: PredictionLogWriter | None,
                    load_in_background: bool) -> Any:
    """Start the log writer and the model load (in a thread, so liveness answers at once); stop both."""
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


def build_app(
    model: HostedModel,
    metrics: ServingMetrics,
    *,
    readiness: ModelReadiness,
    max_payload_bytes: int,
    prediction_log: PredictionLogWriter | None = None,
    load_in_background: bool = True,
    export_meta: Callable[[], dict[str, Any]] | None = None,
    admission: Admission | None = None,
    mount: Callable[[FastAPI], None] | None = None,
    error_formats: Callable[[str], ErrorFormat | None] | None = None,
    status_detail: bool = True,
    not_ready_retry_after_s: int = 5,
) -> FastAPI:
    """The server's ASGI app for one hosted model; ``export_meta`` (a predictor's) serves :data:`META_ROUTE`;
    ``admission`` bounds the inference requests in flight and gives each a deadline (:mod:`mlops_serving.admission`);
    ``mount`` adds routes of the model's own (the language model's OpenAI routes) ahead of KServe's, and
    ``error_formats`` the error body of their protocol (:class:`ErrorReplies`)."""
    registry = ModelRepository()
    registry.update(model)
    dataplane = ServingDataPlane(registry, readiness)
    routes = Routes(model, metrics, dataplane, export_meta)
    routes.status_detail = status_detail
    errors = ErrorReplies(model, metrics, error_formats, not_ready_retry_after_s=not_ready_retry_after_s)

    # no OpenAPI document: the routes are fixed by the V1/V2 protocols, and the schema is a map for whoever
    # probes the server (issue 31); docs and redoc are off for the same reason
    app = FastAPI(title="mlops serving", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lambda _: _lifespan(model, prediction_log, load_in_background))
    app.state.model = model
    app.state.dataplane = dataplane
    # plain Starlette routes, first: the router tries routes in order, so the hot path matches at once (behind the
    # health and status routes it paid a failed match of each, every request), and skips FastAPI's dependency
    # solving; ahead of KServe's, which they replace
    app.add_route("/v1/models/{model_name}:predict", routes.predict_v1, methods=["POST"])
    app.add_route("/v2/models/{model_name}/infer", routes.infer_v2, methods=["POST"])
    app.add_api_route("/", routes.live, methods=["GET"])
    app.add_api_route("/v2/health/live", routes.live, methods=["GET"])
    app.add_api_route("/v2/health/ready", routes.ready, methods=["GET"])
    app.add_api_route("/status", routes.status, methods=["GET"])
    app.add_api_route("/metrics", routes.metrics_text, methods=["GET"])
    if export_meta is not None:
        app.add_api_route(META_ROUTE, routes.exported_meta, methods=["GET"])
    # ahead of KServe's routes (the first match wins): its model-repository routes are never reached
    app.add_route(f"{MODEL_REPOSITORY_PREFIX}/{{path:path}}", refuse_model_repository,
                  methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    if mount is not None:
        mount(app)
    extension = ModelRepositoryExtension(model_registry=registry)
    register_v1_endpoints(app, dataplane, extension)
    register_v2_endpoints(app, dataplane, extension)

    handled: list[type[Exception]] = [ServingError, *KSERVE_STATUS]
    for error_type in handled:
        app.add_exception_handler(error_type, errors.handle)
    app.add_middleware(RequestGuard, max_bytes=max_payload_bytes, errors=errors)
    if admission is not None:  # outermost: a refusal costs no parsing
        app.add_middleware(AdmissionGuard, admission=admission, errors=errors)
    return app


async def refuse_model_repository(request: Request) -> Response:
    """404 for KServe's model-repository routes (``/v2/repository/index``, ``.../models/{name}/load|unload``).

    KServe mounts them on the serving port with no protection: anyone who reaches it could unload the model,
    after which predict answers 404 and readiness 503 while liveness stays 200, so nothing restarts the
    replica. What a server serves is decided by its manifest and the registry, never over HTTP.
    """
    return _json({"error": f"{request.url.path} is not served: models are not loaded or unloaded over HTTP"},
                 status_code=404)


def _load_until_ready(model: HostedModel, stop: threading.Event) -> None:
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
