"""The LM corpus: the Python standard library's own source, read as bytes (a byte-level tokenizer).

It is on every machine, so nothing is downloaded; its SHA-256 is the run's data hash.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlops_training.errors import TrainingError

_SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "__pycache__", "lib2to3", "turtledemo"}


@dataclass(frozen=True)
class Corpus:
    """Train and validation byte arrays (tokens are bytes 0..255) and the hash of the whole text."""

    train: np.ndarray
    val: np.ndarray
    sha256: str
    files: int


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's ``.py`` files in a fixed (sorted relative path) order, tests excluded."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    files = [p for p in base.rglob("*.py") if not (set(p.relative_to(base).parts[:-1]) & _SKIP_DIRS)]
    return sorted(files, key=lambda p: p.relative_to(base).as_posix())


def load_corpus(max_bytes: int, *, val_fraction: float = 0.1, root: Path | None = None) -> Corpus:
    """Read up to ``max_bytes`` of standard-library source; the last ``val_fraction`` is the validation split.

    Raises:
        TrainingError: the standard library's source is not there (a stripped Python install).
    """
    if not 0 < val_fraction < 1:
        raise TrainingError(f"val_fraction {val_fraction!r} must be between 0 and 1 (exclusive)")
    chunks: list[bytes] = []
    size = 0
    files = stdlib_files(root)
    used = 0
    for path in files:
        if size >= max_bytes:
            break
        data = path.read_bytes()
        chunks.append(data)
        size += len(data)
        used += 1
    text = b"".join(chunks)[:max_bytes]
    if len(text) < 4096:
        raise TrainingError(
            f"only {len(text)} bytes of Python source under {str(root or sysconfig.get_paths()['stdlib'])!r}; "
            "expected the standard library's .py files (is this a stripped Python?)"
        )
    arr = np.frombuffer(text, dtype=np.uint8)
    cut = int(len(arr) * (1 - val_fraction))
    return Corpus(train=arr[:cut], val=arr[cut:], sha256=hashlib.sha256(text).hexdigest(), files=used)
