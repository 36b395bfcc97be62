"""Shared fixtures: the repo root, real Redis and PostgreSQL with per-test isolation."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import shared_redis_url
from tests.support.file_order import longest_files_first
from tests.support.shared_redis import REDIS_URL  # noqa: F401 - tests import it from here

# The servers tests start (redis-server, mlflow server, databases, free ports) and the fixtures over them; the
# timeout's message; --file-durations (seconds per test file, the record tests/durations.json is made from).
pytest_plugins = ["tests.support.fixtures", "tests.support.timeouts", "tests.support.file_seconds"]

REPO_ROOT = Path(__file__).resolve().parents[1]
POSTGRES_URL = os.environ.get("MLOPS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests under tests/unit are `unit` unless marked otherwise; `gpu` tests skip without CUDA."""
    has_cuda = False
    if any("gpu" in item.keywords for item in items):
        try:
            import torch

            has_cuda = torch.cuda.is_available()
        except ImportError:
            has_cuda = False
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "unit" in parts and not any(m in item.keywords for m in ("integration", "e2e")):
            item.add_marker(pytest.mark.unit)
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device; this machine has none"))
    longest_files_first(items)  # by tests/durations.json, else by heaviest marker (tests/support/file_order)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def redis_url() -> str:
    """URL of the real Redis server (fails, not skips, when it is down: CI must start it)."""
    return shared_redis_url()


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    import redis

    prefix = f"mlops-test:{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        client.delete(key)
    client.close()


@pytest.fixture
def postgres_url() -> str:
    """URL of the real PostgreSQL server (fails, not skips, when it is down)."""
    import psycopg2

    try:
        psycopg2.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg2.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {POSTGRES_URL} is not reachable ({exc}); start it (see .ci/run)")
    return POSTGRES_URL


@pytest.fixture
def postgres_schema(postgres_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A schema of this test's own, dropped afterwards."""
    import psycopg2

    name = "t_" + re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40] + "_" + uuid.uuid4().hex[:8]
    conn = psycopg2.connect(postgres_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{name}"')
    yield name
    with conn.cursor() as cur:
        cur.execute(f'DROP SCHEMA "{name}" CASCADE')
    conn.close()


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    """A copy of the repo's configs/ in a temp repo root, safe to edit."""
    import shutil

    target = tmp_path / "repo" / "configs"
    shutil.copytree(REPO_ROOT / "configs", target)
    return target


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def render_in_chromium():
    """Open a local HTML file in Debian's headless Chromium; return (plot ids with their boxes, problems seen).

    Problems are console errors/warnings, page errors and any request that leaves the file itself.
    """
    import shutil

    def render(path: Path) -> tuple[dict[str, dict[str, float] | None], list[str]]:
        from playwright.sync_api import sync_playwright

        chromium = shutil.which("chromium") or "/usr/bin/chromium"
        assert Path(chromium).exists(), "Debian's chromium is missing: `make browser` installs it"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = browser.new_page()
            problems: list[str] = []
            page.on("console", lambda m: problems.append(m.text) if m.type in {"error", "warning"} else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("request", lambda r: problems.append(f"network: {r.url}") if r.url != path.as_uri() else None)
            page.goto(path.as_uri())
            ids = page.eval_on_selector_all("svg[data-plot]", "els => els.map(e => e.dataset.plot)")
            boxes = {i: page.locator(f'svg[data-plot="{i}"]').bounding_box() for i in ids}
            browser.close()
        return boxes, problems

    return render
