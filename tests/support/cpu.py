"""Work that burns CPU on the calling thread, for tests that need a call slower in compute (``time.sleep`` burns
none: on a CPU clock a sleeping call is not slower)."""

from __future__ import annotations


def burn(iterations: int) -> int:
    """``iterations`` steps of integer arithmetic on the calling thread: CPU time grows in proportion to them."""
    total = 0
    for i in range(iterations):
        total += i * i
    return total
