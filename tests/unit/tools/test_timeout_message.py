"""A test past its limit fails naming itself, the phase, the limit and where the limit is set (tests/support)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PROBE = '''
import time
import pytest

@pytest.mark.timeout(1)
def test_slow_call():
    time.sleep(5)

@pytest.fixture
def slow_fixture():
    time.sleep(5)

def test_slow_setup(slow_fixture):
    pass

@pytest.fixture(scope="module")
def world():
    time.sleep(1.5)

@pytest.mark.timeout(3)
def test_slow_world_then_call(world):
    time.sleep(5)
'''


def test_a_timeout_names_the_test_its_phase_and_where_its_limit_comes_from(
        pytester: pytest.Pytester, repo_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the inner pytest runs in a temp folder: it finds tests.support through the repo root on its path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(repo_root), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(test_probe=PROBE)
    result = pytester.runpytest_subprocess("-p", "tests.support.timeouts", "-o", "timeout=2", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2, errors=1)
    out = result.stdout.str()
    assert ("TIMEOUT: test_probe.py::test_slow_call was still running after 1 s, its limit "
            "(@pytest.mark.timeout(1) on the test or its file)") in out
    assert ("TIMEOUT: test_probe.py::test_slow_setup was still setting up its fixtures after 2 s, its limit "
            "([tool.pytest.ini_options] timeout in pyproject.toml)") in out
    # a call that ran out after a slow setup says the setup's seconds counted against the same limit
    assert re.search(r"TIMEOUT: test_probe.py::test_slow_world_then_call was still running after 3 s, its limit "
                     r"\(@pytest.mark.timeout\(3\) on the test or its file\)\. The limit counts setup and call "
                     r"together: its setup took 1\.\d s of it", out), out
    assert "test_slow_call was still running after 1 s, its limit (@pytest.mark.timeout(1) on the test or its " \
           "file). The stacks" in out  # a quick setup is not mentioned
