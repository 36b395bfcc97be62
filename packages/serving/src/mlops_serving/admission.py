"""Admission control: a bound on the inference requests a server holds, and a deadline per request.

One controller for both families (:class:`Admission`, applied by the :class:`AdmissionGuard` middleware to every
inference POST: ``:predict``, ``/infer``, ``/generate``, ``/openai/...``). Without a bound every request is queued:
at many times the server's capacity the queue grows, every answer comes late and memory follows the queue. Here,
as in any admission controller:

- at most ``limit`` inference requests are held at once (read, waiting for a micro-batch or a generation slot,
  scored or generating); one more is refused at the door with 503 + ``Retry-After`` (:class:`OverloadedError`,
  answered by the server's one error map), so a refusal costs microseconds and the admitted ones keep their
  latency. Two modes, set by :class:`AdmissionLimits`:

  - **adaptive** (the tabular model, ``serving.tabular.max_inflight``): ``limit`` adapts (AIMD, as TCP's window): by
    Little's law the time a request spends inside is ``inflight / throughput``, so a fixed bound breaks the
    objective whenever throughput drops (a busy node, a slow store). An admitted request that took longer than
    half its deadline cuts ``limit`` by a fifth (at most every 100 ms); a faster one raises it by ``1/limit`` (one
    per round of requests), between a quarter of ``serving.tabular.max_inflight`` and all of it. The floor keeps
    throughput when the slowness is not the in-flight work's doing (a retry storm saturating the event loop
    with refusals);
  - **concurrency** (the language model, ``serving.lm``): ``limit`` is fixed at ``max_concurrent + max_queue``
    and at most ``max_concurrent`` of the admitted requests generate at once (:meth:`Admission.slot`); the others
    wait for a slot in arrival order. A generation takes seconds, not a fraction of the deadline, so the limit does
    not adapt to it;

- each admitted request carries a deadline (``serving.request_deadline_ms``, shortened by the client's
  ``X-Request-Deadline-Ms``): a tabular request whose deadline passed while it waited for a batch is refused with
  503 instead of being scored, and the batch's feature lookup is abandoned at the latest deadline of its requests
  (:meth:`mlops_serving.lookup.FeatureLookup.get`), so a slow online store cannot hold answers past the objective.

- the body is read **before** admission, under the request's deadline (counted from its arrival): a client that
  trickles its body holds no in-flight place (160 such clients once left 0 of 13,906 ordinary requests
  answered, every place taken by a body still arriving) and is answered 408 when the deadline passes with the body
  not in (a body that is in but was taken past its deadline, on a starved event loop, is the server's lateness:
  503 + ``Retry-After``, counted as ``deadline``). The bodies
  being read hold at most ``limit`` × ``serving.max_payload_bytes`` together (what the admitted requests may
  hold; a request arriving past it is refused, 503 ``reason="reading"``): a bound on bytes, not on readers, so a
  burst of small requests, which all wait on ``receive`` at once for an instant, is not shed (a cap of 4 readers
  per place shed 64 of 96 clients' bursts). No more than ``serving.max_payload_bytes`` of one body is held here:
  past it the body streams on to the size limit of :class:`mlops_serving.server.RequestGuard`, which answers 413.

The deadline reaches the model through a :class:`Ticket` in a context variable: the request's task runs the
middleware and KServe's ``Model.__call__``, so :func:`current_ticket` in ``preprocess`` sees it.
Shed requests are counted in ``mlops_serving_shed_requests{reason}`` (``inflight`` | ``deadline`` | ``reading``
| ``body_timeout``),
abandoned lookups in ``mlops_serving_feature_lookups_abandoned``; ``mlops_serving_inflight`` is the gauge.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from mlops_serving.errors import BadRequestError, RequestTimeoutError, ServingError

DEADLINE_HEADER = "x-request-deadline-ms"
DECREASE_EVERY_S = 0.1
ADMITTED_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_ticket: ContextVar[Ticket | None] = ContextVar("mlops_serving_ticket", default=None)


class OverloadedError(ServingError):
    """The server cannot take the request now (predict requests past ``serving.tabular.max_inflight``, every generation
    slot and queue place of an LM server taken, a model not ready): 503 + Retry-After."""

    http_status = 503

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class DeadlineExceededError(OverloadedError):
    """The request's deadline passed before it could be scored: 503 + Retry-After."""


@dataclass(frozen=True)
class AdmissionLimits:
    """The bounds of one server: :meth:`from_config` (adaptive) or :meth:`for_generation` (concurrency)."""

    max_inflight: int
    """Requests held at once (adaptive: the most the limit rises to)."""
    deadline_ms: float
    retry_after_s: int = 1
    max_body_bytes: int = 1 << 20
    """What one body may hold here before it streams on to the size limit (``serving.max_payload_bytes``)."""
    max_running: int | None = None
    """Concurrency mode: at most this many of the admitted requests run at once (:meth:`Admission.slot`), the
    others wait; the limit stays at ``max_inflight``. ``None``: adaptive mode."""
    bound: str = "serving.tabular.max_inflight"
    """The config keys the bound comes from, named in refusals."""

    @classmethod
    def from_config(cls, serving: Any) -> AdmissionLimits:
        """The tabular servers' bounds (``serving.tabular.max_inflight``, adaptive)."""
        return cls(serving.tabular.max_inflight, serving.request_deadline_ms, serving.tabular.shed_retry_after_s,
                   serving.max_payload_bytes)

    @classmethod
    def for_generation(cls, serving: Any) -> AdmissionLimits:
        """The language model's bounds: ``serving.lm.max_concurrent`` generating and ``serving.lm.max_queue``
        waiting for a slot, ``serving.lm.retry_after_s`` on a refusal; the body's deadline is the server's."""
        llm = serving.lm
        return cls(llm.max_concurrent + llm.max_queue, serving.request_deadline_ms, llm.retry_after_s,
                   serving.max_payload_bytes, max_running=llm.max_concurrent,
                   bound="serving.lm.max_concurrent + serving.lm.max_queue")


@dataclass
class Ticket:
    """One admitted request: its deadline (``time.monotonic()``), and what became of its batch."""

    deadline: float
    retry_after_s: int = 1
    expired: bool = False
    lookup_abandoned: bool = False

    def expired_error(self) -> DeadlineExceededError:
        return DeadlineExceededError("the request's deadline passed before it could be scored (the server is "
                                     "overloaded); retry later", retry_after_s=self.retry_after_s)


def _replay(messages: list[dict[str, Any]], receive: Any) -> Any:
    """A ``receive`` that gives the messages already read, then the connection's own."""
    pending = list(messages)

    async def replay() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


def current_ticket() -> Ticket | None:
    """The ticket of the request this task serves (``None`` outside an admitted predict request)."""
    return _ticket.get()


def is_past(ticket: Ticket | None, now: float) -> bool:
    """Whether ``ticket``'s deadline has passed at ``now`` (``time.monotonic()``); no ticket never expires."""
    return ticket is not None and now >= ticket.deadline


def latest_deadline(tickets: list[Ticket | None]) -> float | None:
    """The deadline a batch's shared work must meet: the latest of its requests' (``None``: one has none)."""
    if not tickets or any(t is None for t in tickets):
        return None
    return max(t.deadline for t in tickets if t is not None)


class AdmissionMetrics:
    """The shedding series, in the server's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.shed = Counter("mlops_serving_shed_requests", "Inference requests refused for overload, by reason "
                            "(inflight: over serving.tabular.max_inflight; deadline: not scored in time; reading: the "
                            "bodies being read hold too many bytes, 503; body_timeout: the body not in by the "
                            "deadline, 408).",
                            ["model", "reason"], registry=registry)
        self.inflight = Gauge("mlops_serving_inflight", "Inference requests held now (read, queued, scored or "
                              "generating).", ["model"], registry=registry)
        self.abandoned = Counter("mlops_serving_feature_lookups_abandoned",
                                 "Requests whose batch's feature lookup was abandoned at its deadline.", ["model"],
                                 registry=registry)
        self.limit = Gauge("mlops_serving_inflight_limit", "Inference requests admitted at once now (adaptive: at "
                           "most serving.tabular.max_inflight; the language model's: fixed).", ["model"],
                           registry=registry)
        self.admitted = Histogram("mlops_serving_admitted_seconds", "Admitted inference requests, from admission to "
                                  "the end of the answer (what the in-flight bound and the deadline control).",
                                  ["model"], buckets=ADMITTED_BUCKETS, registry=registry)


INFERENCE_SUFFIXES = (":predict", "/infer", "/generate")
OPENAI_PREFIX = "/openai/"


def is_inference(path: str) -> bool:
    """Whether a POST to ``path`` asks for a model's answer (V1 predict, V2 infer and generate, OpenAI)."""
    return path.endswith(INFERENCE_SUFFIXES) or path.startswith(OPENAI_PREFIX)


class Admission:
    """The admission controller of one server: the places held, the limit, the bytes being read, the generation
    slots (concurrency mode) and the shedding series. :class:`AdmissionGuard` applies it to the inference routes.

    Args:
        limits: The bounds.
        registry: The server's metrics registry (the shedding series are added to it).
        model_name: The ``model`` label.
    """

    def __init__(self, limits: AdmissionLimits, registry: CollectorRegistry, model_name: str) -> None:
        metrics = AdmissionMetrics(registry)
        self.limits = limits
        self.inflight = 0
        self.reading_bytes = 0
        self.reading_budget = limits.max_inflight * limits.max_body_bytes
        self.peak = 0
        self.limit = float(limits.max_inflight)
        self.adaptive = limits.max_running is None
        self._slots = None if limits.max_running is None else asyncio.Semaphore(limits.max_running)
        self._target_s = limits.deadline_ms / 2000.0
        self._floor = float(max(1, limits.max_inflight // 4))
        self._last_decrease = 0.0
        self.shed = {r: metrics.shed.labels(model_name, r) for r in ("inflight", "deadline", "reading",
                                                                     "body_timeout")}
        self.gauge = metrics.inflight.labels(model_name)
        self.abandoned = metrics.abandoned.labels(model_name)
        self._admitted = metrics.admitted.labels(model_name)
        self._limit = metrics.limit.labels(model_name)
        self._limit.set(self.limit)

    def overloaded(self) -> OverloadedError:
        """The refusal of a request past the limit (counted here)."""
        self.shed["inflight"].inc()
        lim = self.limits
        if lim.max_running is None:
            return OverloadedError(f"{self.inflight} predict requests are in flight, the limit now is "
                                   f"{int(self.limit)} (at most {lim.bound}={lim.max_inflight}); retry later",
                                   retry_after_s=lim.retry_after_s)
        return OverloadedError(f"server busy: {lim.max_running} running + {lim.max_inflight - lim.max_running} "
                               f"queued generations already ({lim.bound}); retry later",
                               retry_after_s=lim.retry_after_s)

    def reading_refused(self) -> OverloadedError:
        """The refusal of a request arriving while the bodies being read hold the byte budget (counted here)."""
        self.shed["reading"].inc()
        return OverloadedError(f"the bodies being read hold {self.reading_bytes} bytes (at most "
                               f"{self.limits.max_inflight} places x serving.max_payload_bytes = "
                               f"{self.reading_budget}); retry later", retry_after_s=self.limits.retry_after_s)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """Hold one of the ``max_running`` slots (concurrency mode; adaptive: at once) for the block; yields the
        seconds waited for it."""
        if self._slots is None:
            yield 0.0
            return
        t0 = time.perf_counter()
        await self._slots.acquire()
        try:
            yield time.perf_counter() - t0
        finally:
            self._slots.release()

    def adapt(self, now: float, took_s: float) -> None:
        """Record one admitted request's time inside and, adaptive, move the limit (see the module docstring)."""
        self._admitted.observe(took_s)
        if not self.adaptive:
            return
        if took_s > self._target_s:
            if now - self._last_decrease >= DECREASE_EVERY_S:
                self.limit = max(self._floor, self.limit * 0.8)
                self._last_decrease = now
        else:
            self.limit = min(float(self.limits.max_inflight), self.limit + 1.0 / self.limit)
        self._limit.set(self.limit)

    def deadline_ms(self, scope: dict[str, Any]) -> float:
        """The configured deadline, or the client's shorter one from :data:`DEADLINE_HEADER`."""
        raw = next((v for k, v in scope.get("headers", []) if k.lower() == DEADLINE_HEADER.encode()), None)
        if raw is None:
            return self.limits.deadline_ms
        text = raw.decode("latin-1").strip()
        try:
            asked = float(text)
        except ValueError:
            asked = -1.0
        if not 0 < asked < float("inf"):
            raise BadRequestError(f"header X-Request-Deadline-Ms={text!r:.40} is invalid: expected a positive "
                                  "number of milliseconds")
        return min(asked, self.limits.deadline_ms)


class AdmissionGuard:
    """ASGI middleware on the inference routes: the :class:`Admission` controller's bound and deadline.

    Args:
        app: The wrapped ASGI app.
        admission: The server's controller.
        errors: The server's :class:`~mlops_serving.server.ErrorReplies` (answers and counts the refusals).
    """

    def __init__(self, app: Any, *, admission: Admission, errors: Any) -> None:
        self.app = app
        self.admission = admission
        self.errors = errors

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path: str = scope.get("path", "") if scope["type"] == "http" else ""
        if scope.get("method") != "POST" or not is_inference(path):
            await self.app(scope, receive, send)
            return
        adm = self.admission
        arrived = time.monotonic()
        try:
            deadline_ms = adm.deadline_ms(scope)
        except BadRequestError as exc:
            await self.errors.send(send, exc, path)
            return
        deadline = arrived + deadline_ms / 1000.0
        if adm.reading_bytes >= adm.reading_budget:
            await self.errors.send(send, adm.reading_refused(), path)
            return
        held = [0]
        try:
            body = await self._read_body(receive, deadline, held)
        finally:
            adm.reading_bytes -= held[0]
        if body is None:
            adm.shed["body_timeout"].inc()
            await self.errors.send(send, RequestTimeoutError(
                f"the request body did not arrive within its deadline of {deadline_ms:g} ms "
                "(serving.request_deadline_ms, or X-Request-Deadline-Ms)"), path)
            return
        if body[-1]["type"] == "http.disconnect":  # the client left before its body was in: no one to answer
            return
        if time.monotonic() >= deadline:  # the body was in, the server too late to take it: overload, not the client
            adm.shed["deadline"].inc()
            await self.errors.send(send, Ticket(deadline, adm.limits.retry_after_s).expired_error(), path)
            return
        if adm.inflight >= int(adm.limit):
            await self.errors.send(send, adm.overloaded(), path)
            return
        receive = _replay(body, receive)
        admitted = time.monotonic()
        ticket = Ticket(deadline, adm.limits.retry_after_s)
        token = _ticket.set(ticket)
        adm.inflight += 1
        adm.peak = max(adm.peak, adm.inflight)
        adm.gauge.set(adm.inflight)
        try:
            await self.app(scope, receive, send)
        finally:
            adm.adapt(time.monotonic(), time.monotonic() - admitted)
            adm.inflight -= 1
            adm.gauge.set(adm.inflight)
            _ticket.reset(token)
            if ticket.expired:
                adm.shed["deadline"].inc()
            if ticket.lookup_abandoned:
                adm.abandoned.inc()

    async def _read_body(self, receive: Any, deadline: float, held: list[int]) -> list[dict[str, Any]] | None:
        """The body's ``http.request`` messages as they came, read until the last one, the client's disconnect,
        or ``max_body_bytes`` (the rest then streams on); ``None`` when the deadline passed first. ``held[0]``
        counts the bytes held, which are in :attr:`Admission.reading_bytes` until the caller takes them out."""
        adm = self.admission
        limit = adm.limits.max_body_bytes
        messages: list[dict[str, Any]] = []
        while True:
            try:
                # a timeout scope, not wait_for: wait_for wraps receive() in a task of its own, which costs a loop
                # turn per message even when the body is already in (the common case). A deadline already past
                # still takes a message that is in: the scope cancels on the loop's next turn, not at once.
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                # On a starved loop the timer and the socket's read come due in the same turn, and the timer's cancel
                # wins over a body that did arrive: take what is in before calling the client late.
                try:
                    async with asyncio.timeout(0):
                        message = await receive()
                except TimeoutError:
                    return None
            messages.append(message)
            size = len(message.get("body", b""))
            held[0] += size
            adm.reading_bytes += size
            if message["type"] != "http.request" or not message.get("more_body", False):
                return messages
            if held[0] > limit:
                return messages
