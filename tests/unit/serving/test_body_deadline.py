"""Who is late when a request body's deadline passes: the client (408) or the server (503 + Retry-After).

CI once saw a 408 among 96 clients hammering a server whose event loop was starved: every client had sent its small
body at once, but the loop's turn ran the deadline's timer together with the socket's read, and the timer's cancel
won over a body that had arrived. These tests build that turn deterministically on a real event loop and a real
socket pair: a callback holds the loop past the deadline while the body lands in the socket, so on the next turn the
socket's reader (which sets the body, as uvicorn's ``data_received`` does) and the deadline's timer run together.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from prometheus_client import CollectorRegistry

from mlops_serving.admission import Admission, AdmissionGuard, AdmissionLimits, DeadlineExceededError
from mlops_serving.errors import RequestTimeoutError

DEADLINE_MS = 100.0
BODY = b'{"instances": [{"card_id": 1}]}'


class Answers:
    """The errors the guard answered (the server's error map is tested with the servers)."""

    def __init__(self) -> None:
        self.errors: list[Exception] = []

    async def send(self, send: Any, exc: Exception, path: str = "") -> None:
        self.errors.append(exc)


def _run(body_lands_during_stall: bool) -> tuple[Answers, Admission, list[bytes]]:
    """One POST through the guard; the loop is held 250 ms (past the 100 ms deadline) 20 ms after it arrives."""
    adm = Admission(AdmissionLimits(max_inflight=4, deadline_ms=DEADLINE_MS), CollectorRegistry(), "fraud")
    answers = Answers()
    scored: list[bytes] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scored.append((await receive())["body"])

    async def main() -> None:
        loop = asyncio.get_running_loop()
        here, there = socket.socketpair()
        here.setblocking(False)
        arrived = asyncio.Event()
        got: list[bytes] = []

        def readable() -> None:  # the server's protocol: bytes in, the waiting request woken
            got.append(here.recv(65536))
            arrived.set()

        async def receive() -> dict[str, Any]:  # uvicorn's RequestResponseCycle.receive, in short
            await arrived.wait()
            arrived.clear()
            return {"type": "http.request", "body": b"".join(got), "more_body": False}

        def stall() -> None:  # a starved loop: the body lands while the loop is busy elsewhere
            if body_lands_during_stall:
                there.sendall(BODY)
            time.sleep(0.25)

        loop.add_reader(here, readable)
        try:
            loop.call_later(0.02, stall)
            scope = {"type": "http", "method": "POST", "path": "/v1/models/fraud:predict", "headers": []}

            async def send(message: dict[str, Any]) -> None:
                raise AssertionError(f"the guard answered past the error map: {message}")

            await AdmissionGuard(app, admission=adm, errors=answers)(scope, receive, send)
        finally:
            loop.remove_reader(here)
            here.close()
            there.close()

    asyncio.run(main())
    return answers, adm, scored


def _count(adm: Admission, reason: str) -> float:
    return adm.shed[reason]._value.get()


def test_a_body_that_arrived_but_was_taken_late_is_the_servers_overload_not_a_slow_client() -> None:
    answers, adm, scored = _run(body_lands_during_stall=True)
    assert scored == []  # past its deadline: not scored
    assert [type(e) for e in answers.errors] == [DeadlineExceededError]  # 503 + Retry-After, not 408
    assert answers.errors[0].retry_after_s == 1  # type: ignore[attr-defined]
    assert _count(adm, "deadline") == 1 and _count(adm, "body_timeout") == 0
    assert adm.inflight == 0 and adm.reading_bytes == 0


def test_a_body_that_never_arrived_is_still_the_clients_408() -> None:
    answers, adm, scored = _run(body_lands_during_stall=False)
    assert scored == []
    assert [type(e) for e in answers.errors] == [RequestTimeoutError]
    assert RequestTimeoutError.http_status == 408
    assert f"{DEADLINE_MS:g} ms" in str(answers.errors[0])
    assert _count(adm, "body_timeout") == 1 and _count(adm, "deadline") == 0
