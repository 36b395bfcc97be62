"""Local canary routing: a stable and an optional canary version, with an exact traffic split.

Request ``i`` (counting from 0) goes to the canary iff ``floor((i + 1) * p / 100) > floor(i * p / 100)``
for canary percent ``p``: over any 100 consecutive requests exactly ``p`` go to the canary, spread evenly
(no randomness, so the split is testable by arithmetic). On Kubernetes KServe's own canary does this.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

STABLE = "stable"
CANARY = "canary"


@dataclass(frozen=True)
class Variant(Generic[T]):
    name: str
    """``stable`` or ``canary``."""
    target: T


class CanaryRouter(Generic[T]):
    """Picks the variant for each request."""

    def __init__(self, stable: T, canary: T | None = None, canary_percent: int = 0) -> None:
        if not 0 <= canary_percent <= 100:
            raise ValueError(f"canary_percent {canary_percent!r} must be in 0..100")
        self.stable = Variant(STABLE, stable)
        self.canary = Variant(CANARY, canary) if canary is not None else None
        self.percent = canary_percent if canary is not None else 0
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def pick(self) -> Variant[T]:
        """The variant of the next request."""
        if self.canary is None or self.percent == 0:
            return self.stable
        with self._lock:
            i = next(self._counter)
        if (i + 1) * self.percent // 100 > i * self.percent // 100:
            return self.canary
        return self.stable

    def variants(self) -> list[Variant[T]]:
        return [self.stable] + ([self.canary] if self.canary is not None else [])
