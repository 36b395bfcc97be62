"""A concurrent writer that pushes in the middle of our push, with real git: the race a second CI job or a second
monitor makes.

git runs a ``pre-push`` hook after it has read the remote's refs and before it sends its update, so a hook that
commits and pushes from another clone moves the ref exactly between our read and our compare-and-swap. The hook
reaches the code under test through git's environment (``core.hooksPath`` as ``GIT_CONFIG_COUNT``/``KEY``/
``VALUE``, which every git the process starts inherits); nothing of the code under test is replaced.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

HOOK = """#!/bin/sh
# another writer pushes to {ref} while our push to it is in flight, the first {times} time(s) only
grep -q " {ref} " || exit 0  # stdin: "<local ref> <local sha> <remote ref> <remote sha>" per pushed ref
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_VALUE_0
count=$(cat {count} 2>/dev/null || echo 0)
[ "$count" -ge {times} ] && exit 0
echo $((count + 1)) > {count}
cd {other} || exit 1
git fetch -q origin {ref} 2>/dev/null && git reset -q --hard FETCH_HEAD
echo "race $count" >> race.txt
git add race.txt
git -c user.name=other -c user.email=other@example.com commit -qm "other writer: race $count" || exit 1
git push -q --no-verify --force origin HEAD:{ref} || exit 1
"""


def racing_writer(monkeypatch: pytest.MonkeyPatch, tmp: Path, remote: str | Path, ref: str, *,
                  times: int = 1) -> Path:
    """Make each of this process's next ``times`` git pushes to ``remote``'s ``ref`` (a full ref) lose the race:
    just before it, another writer commits ``race.txt`` in its own clone and pushes that to ``ref``. Pushes to
    other refs go through untouched.

    Returns the other writer's clone (``git -C it rev-parse HEAD`` is what it pushed last).
    """
    other, hooks = tmp / "other-writer", tmp / "race-hooks"
    subprocess.run(["git", "clone", "-q", str(remote), str(other)], check=True, capture_output=True)
    hooks.mkdir()
    hook = hooks / "pre-push"
    hook.write_text(HOOK.format(ref=ref, times=times, count=tmp / "race-count", other=other))
    hook.chmod(0o755)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.hooksPath")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(hooks))
    return other


def races_run(tmp: Path) -> int:
    """How many pushes the racing writer has raced so far."""
    count = tmp / "race-count"
    return int(count.read_text()) if count.exists() else 0
