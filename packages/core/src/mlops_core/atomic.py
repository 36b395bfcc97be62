"""Atomic writes: a reader sees the previous version or the new one under a file's name, never a torn one.

Every file (or folder) another step trusts goes through here: the exported model, the evaluation report,
the GitOps manifest edit, the generated sample, the training run's config and result. The recipe is the
POSIX one: write a temporary sibling (same folder, so the same file system), flush and ``fsync`` it,
``os.replace`` it over the final name, then ``fsync`` the folder so the rename itself survives a power cut.
A crash at any point leaves at most a hidden ``.<name>.tmp-*`` sibling, which the next write ignores.

A folder is written the same way into a temporary sibling folder; if the final folder exists it is swapped
in with one ``renameat2(RENAME_EXCHANGE)`` (Linux ≥ 3.15), so readers never see it missing either.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

__all__ = ["atomic_dir", "atomic_path", "atomic_write_bytes", "atomic_write_text"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on a clean exit it replaces ``path`` atomically.

    For writers that take a file name (``DataFrame.to_parquet``, ``safetensors.save_file``). If the block
    raises, the temporary file is removed and ``path`` is untouched.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(final)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, final)
    except BaseException:
        with suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(final.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically. Returns ``path``."""
    final = Path(path)
    with atomic_path(final) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
    return final


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically. Returns ``path``."""
    return atomic_write_bytes(path, text.encode(encoding))


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step; ``False`` where the kernel or file system cannot."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2: Callable[..., int] | None = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a))


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``path``; on a clean exit it becomes ``path`` in one step.

    The previous folder (if any) is replaced as a whole: files of the old version that the new one does
    not write are gone afterwards. If the block raises, ``path`` is untouched.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(final)
    tmp.mkdir()
    try:
        yield tmp
        for f in tmp.rglob("*"):
            if f.is_file():
                _fsync_file(f)
        _fsync_dir(tmp)
        if not final.exists():
            os.rename(tmp, final)
        elif _exchange(tmp, final):
            shutil.rmtree(tmp)  # now holds the previous version
        else:
            # No exchange here (old kernel, some network file systems): move the old one aside first, so a
            # crash in between leaves it under ``.<name>.tmp-*`` rather than half-overwritten.
            old = _tmp_sibling(final)
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(final.parent)
