"""tests/support/session_world.build_once: one build per run whatever the number of processes asking at once,
the waiters get the built folder, and a build that raised is built again by the next asker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.session_world import build_once

REPO = Path(__file__).resolve().parents[3]

# A process standing in for an xdist worker: its basetemp is <run>/popen-gwN, as xdist makes it.
WORKER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from tests.support.session_world import build_once

class Factory:
    def getbasetemp(self):
        return Path({run!r}) / "popen-{worker}"

def build(folder):
    with open(Path({run!r}) / "builds.txt", "a") as f:
        f.write("{worker}\\n")
    time.sleep(1.0)  # long enough that the other process asks while this one builds
    (folder / "world.txt").write_text("built")

print(build_once(Factory(), "w", build))
"""


def test_two_workers_asking_at_once_get_one_build(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER.format(repo=str(REPO), run=str(tmp_path), worker=w)],
            env={"PYTEST_XDIST_WORKER": w, "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in ("gw0", "gw1")
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0] == outs[1] == str(tmp_path / "shared-worlds" / "w")
    assert len((tmp_path / "builds.txt").read_text().split()) == 1
    assert (tmp_path / "shared-worlds" / "w" / "world.txt").read_text() == "built"


class _Factory:
    def __init__(self, base: Path) -> None:
        self.base = base

    def getbasetemp(self) -> Path:
        return self.base


def test_a_failed_build_is_built_again_by_the_next_asker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # no xdist: the run's folder is the basetemp itself
    factory = _Factory(tmp_path)

    def broken(folder: Path) -> None:
        (folder / "half").write_text("x")
        raise RuntimeError("build failed")

    with pytest.raises(RuntimeError, match="build failed"):
        build_once(factory, "w", broken)  # type: ignore[arg-type]
    calls: list[Path] = []
    folder = build_once(factory, "w", calls.append)  # type: ignore[arg-type]
    assert calls == [folder] and not (folder / "half").exists()
    assert build_once(factory, "w", calls.append) == folder and len(calls) == 1  # type: ignore[arg-type]
