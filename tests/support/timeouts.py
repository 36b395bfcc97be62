"""A test that runs past its limit fails with a message saying which limit, where it is set and in which phase.

pytest-timeout (``timeout`` in pyproject.toml's ``[tool.pytest.ini_options]``, or ``@pytest.mark.timeout(N)``
on a file or test) raises ``Failed: Timeout (>Ns) from pytest-timeout.`` and dumps every thread's stack; this
adds one line at the top of the report that a reader of a CI log can act on without reading the stacks.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

TIMEOUT_MARK = "from pytest-timeout"
# pytest-timeout's limit covers a test's setup, call and teardown together: the first test of a file pays for its
# module-scoped world inside its own limit. The setup's seconds are kept to say so when the call runs out.
SETUP_SECONDS = pytest.StashKey[float]()


def timeout_message(item: pytest.Item, when: str, setup_s: float | None = None) -> str:
    """One line: the test, the phase, the limit and where that limit comes from."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and (marker.args or "timeout" in marker.kwargs):
        limit = marker.args[0] if marker.args else marker.kwargs["timeout"]
        source = f"@pytest.mark.timeout({limit}) on the test or its file"
    else:
        limit = item.config.getini("timeout")
        source = "[tool.pytest.ini_options] timeout in pyproject.toml"
    # module- and session-scoped fixtures are built in the setup of the first test that asks for them
    where = {"setup": "setting up its fixtures", "call": "running", "teardown": "tearing down"}.get(when, when)
    spent = ""
    if when != "setup" and setup_s is not None and setup_s >= 1.0:
        spent = (f" The limit counts setup and call together: its setup took {setup_s:.1f} s of it "
                 "(module- and session-scoped fixtures are built in the setup of the first test that asks).")
    return (f"TIMEOUT: {item.nodeid} was still {where} after {limit} s, its limit ({source}).{spent} "
            "The stacks below show where it waited; `--durations` in the CI log shows what else was slow.")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if call.when == "setup":
        item.stash[SETUP_SECONDS] = report.duration
    if report.failed and call.excinfo is not None and TIMEOUT_MARK in str(call.excinfo.value):
        message = timeout_message(item, call.when, item.stash.get(SETUP_SECONDS, None))
        report.longrepr = f"{message}\n{report.longrepr}"
