"""Overload shedding: a bound on the predict requests a server holds, and a deadline per request.

Without a bound every request is queued: at many times the server's capacity the queue grows, every answer
comes late and memory follows the queue. Here, as in any admission controller:

- at most ``limit`` predict requests are held at once (read, waiting for a micro-batch, or scored); one more
  is refused at the door with 503 + ``Retry-After``, before its body is read, so a refusal costs microseconds
  and the admitted ones keep their latency. ``limit`` adapts (AIMD, as TCP's window): by Little's law the time a
  request spends inside is ``inflight / throughput``, so a fixed bound breaks the objective whenever throughput
  drops (a busy node, a slow store). An admitted request that took longer than half its deadline cuts ``limit``
  by a fifth (at most every 100 ms); a faster one raises it by ``1/limit`` (one per round of requests), between
  a quarter of ``serving.max_inflight`` and ``serving.max_inflight``. The floor keeps throughput when the slowness
  is not the in-flight work's doing (a retry storm saturating the event loop with refusals);
- each admitted request carries a deadline (``serving.request_deadline_ms``, shortened by the client's
  ``X-Request-Deadline-Ms``): a request whose deadline passed while it waited for a batch is refused with 503
  instead of being scored, and the batch's feature lookup is abandoned at the latest deadline of its requests
  (:meth:`mlops_serving.lookup.FeatureLookup.get`), so a slow online store cannot hold answers past the objective.

- the body is read **before** admission, under the request's deadline (counted from its arrival): a client that
  trickles its body holds no in-flight place (160 such clients once left 0 of 13,906 ordinary requests
  answered, every place taken by a body still arriving) and is answered 408 when the deadline passes. The bodies
  being read hold at most ``serving.max_inflight`` × ``serving.max_payload_bytes`` together (what the admitted
  requests may hold; a request arriving past it is refused, 503 ``reason="reading"``): a bound on bytes, not on
  readers, so a burst of small requests, which all wait on ``receive`` at once for an instant, is not shed (a cap
  of 4 readers per place shed 64 of 96 clients' bursts). No more than ``serving.max_payload_bytes`` of one body is
  held here: past it the body streams on to the size limit of :class:`mlops_serving.server.RequestGuard`, which
  answers 413.

The deadline reaches the model through a :class:`Ticket` in a context variable: the request's task runs the
middleware and KServe's ``Model.__call__``, so :func:`current_ticket` in ``preprocess`` sees it.
Shed requests are counted in ``mlops_serving_shed_requests{reason}`` (``inflight`` | ``deadline`` | ``reading``
| ``body_timeout``),
abandoned lookups in ``mlops_serving_feature_lookups_abandoned``; ``mlops_serving_inflight`` is the gauge.
"""

from __future__ import annotations

import asyncio
import time
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
    """The server cannot take the request now (predict requests past ``serving.max_inflight``, every generation
    slot and queue place of an LM server taken, a model not ready): 503 + Retry-After."""

    http_status = 503

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class DeadlineExceededError(OverloadedError):
    """The request's deadline passed before it could be scored: 503 + Retry-After."""


@dataclass(frozen=True)
class AdmissionLimits:
    """The bounds of one server (from the ``serving`` section)."""

    max_inflight: int
    deadline_ms: float
    retry_after_s: int = 1
    max_body_bytes: int = 1 << 20
    """What one body may hold here before it streams on to the size limit (``serving.max_payload_bytes``)."""

    @classmethod
    def from_config(cls, serving: Any) -> AdmissionLimits:
        return cls(serving.max_inflight, serving.request_deadline_ms, serving.shed_retry_after_s,
                   serving.max_payload_bytes)


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
        self.shed = Counter("mlops_serving_shed_requests", "Predict requests refused for overload, by reason "
                            "(inflight: over serving.max_inflight; deadline: not scored in time; reading: the "
                            "bodies being read hold too many bytes, 503; body_timeout: the body not in by the "
                            "deadline, 408).",
                            ["model", "reason"], registry=registry)
        self.inflight = Gauge("mlops_serving_inflight", "Predict requests held now (read, queued or scored).",
                              ["model"], registry=registry)
        self.abandoned = Counter("mlops_serving_feature_lookups_abandoned",
                                 "Requests whose batch's feature lookup was abandoned at its deadline.", ["model"],
                                 registry=registry)
        self.limit = Gauge("mlops_serving_inflight_limit", "Predict requests admitted at once now (adaptive, at "
                           "most serving.max_inflight).", ["model"], registry=registry)
        self.admitted = Histogram("mlops_serving_admitted_seconds", "Admitted predict requests, from admission to "
                                  "the end of the answer (what the in-flight bound and the deadline control).",
                                  ["model"], buckets=ADMITTED_BUCKETS, registry=registry)


class AdmissionGuard:
    """ASGI middleware on the predict routes: the in-flight bound and the per-request deadline.

    Args:
        app: The wrapped ASGI app.
        limits: The bounds.
        errors: The server's :class:`~mlops_serving.server.ErrorReplies` (answers and counts the refusals).
        metrics: The shedding series.
        model_name: The ``model`` label.
    """

    def __init__(self, app: Any, *, limits: AdmissionLimits, errors: Any, metrics: AdmissionMetrics,
                 model_name: str) -> None:
        self.app = app
        self.limits = limits
        self.errors = errors
        self.inflight = 0
        self.reading_bytes = 0
        self._reading_budget = limits.max_inflight * limits.max_body_bytes
        self.peak = 0
        self.limit = float(limits.max_inflight)
        self._target_s = limits.deadline_ms / 2000.0
        self._floor = float(max(1, limits.max_inflight // 4))
        self._last_decrease = 0.0
        self._shed = {r: metrics.shed.labels(model_name, r) for r in ("inflight", "deadline", "reading",
                                                                      "body_timeout")}
        self._gauge = metrics.inflight.labels(model_name)
        self._abandoned = metrics.abandoned.labels(model_name)
        self._admitted = metrics.admitted.labels(model_name)
        self._limit = metrics.limit.labels(model_name)
        self._limit.set(self.limit)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path: str = scope.get("path", "") if scope["type"] == "http" else ""
        if scope.get("method") != "POST" or not (path.endswith(":predict") or path.endswith("/infer")):
            await self.app(scope, receive, send)
            return
        arrived = time.monotonic()
        try:
            deadline_ms = self._deadline_ms(scope)
        except BadRequestError as exc:
            await self.errors.send(send, exc)
            return
        deadline = arrived + deadline_ms / 1000.0
        if self.reading_bytes >= self._reading_budget:
            self._shed["reading"].inc()
            await self.errors.send(send, OverloadedError(
                f"the bodies being read hold {self.reading_bytes} bytes (at most serving.max_inflight x "
                f"serving.max_payload_bytes = {self._reading_budget}); retry later",
                retry_after_s=self.limits.retry_after_s))
            return
        held = [0]
        try:
            body = await self._read_body(receive, deadline, held)
        finally:
            self.reading_bytes -= held[0]
        if body is None:
            self._shed["body_timeout"].inc()
            await self.errors.send(send, RequestTimeoutError(
                f"the request body did not arrive within its deadline of {deadline_ms:g} ms "
                "(serving.request_deadline_ms, or X-Request-Deadline-Ms)"))
            return
        if body[-1]["type"] == "http.disconnect":  # the client left before its body was in: no one to answer
            return
        if self.inflight >= int(self.limit):
            self._shed["inflight"].inc()
            await self.errors.send(send, OverloadedError(
                f"{self.inflight} predict requests are in flight, the limit now is {int(self.limit)} (at most "
                f"serving.max_inflight={self.limits.max_inflight}); retry later",
                retry_after_s=self.limits.retry_after_s))
            return
        receive = _replay(body, receive)
        admitted = time.monotonic()
        ticket = Ticket(deadline, self.limits.retry_after_s)
        token = _ticket.set(ticket)
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        self._gauge.set(self.inflight)
        try:
            await self.app(scope, receive, send)
        finally:
            self._adapt(time.monotonic(), time.monotonic() - admitted)
            self.inflight -= 1
            self._gauge.set(self.inflight)
            _ticket.reset(token)
            if ticket.expired:
                self._shed["deadline"].inc()
            if ticket.lookup_abandoned:
                self._abandoned.inc()

    async def _read_body(self, receive: Any, deadline: float, held: list[int]) -> list[dict[str, Any]] | None:
        """The body's ``http.request`` messages as they came, read until the last one, the client's disconnect,
        or ``max_body_bytes`` (the rest then streams on); ``None`` when the deadline passed first. ``held[0]``
        counts the bytes held, which are in :attr:`reading_bytes` until the caller takes them out."""
        messages: list[dict[str, Any]] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                message = await asyncio.wait_for(receive(), timeout=remaining)
            except TimeoutError:
                return None
            messages.append(message)
            size = len(message.get("body", b""))
            held[0] += size
            self.reading_bytes += size
            if message["type"] != "http.request" or not message.get("more_body", False):
                return messages
            if held[0] > self.limits.max_body_bytes:
                return messages

    def _adapt(self, now: float, took_s: float) -> None:
        """Record one admitted request's time inside and move the limit (see the module docstring)."""
        self._admitted.observe(took_s)
        if took_s > self._target_s:
            if now - self._last_decrease >= DECREASE_EVERY_S:
                self.limit = max(self._floor, self.limit * 0.8)
                self._last_decrease = now
        else:
            self.limit = min(float(self.limits.max_inflight), self.limit + 1.0 / self.limit)
        self._limit.set(self.limit)

    def _deadline_ms(self, scope: dict[str, Any]) -> float:
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
