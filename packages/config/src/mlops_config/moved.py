"""Keys that moved or were replaced: the loader refuses them with their new place instead of a generic error.

A file, an ``MLOPS__…`` variable or a ``--set`` that still names an old key fails at load, naming where it was set
and where the value lives now, so an old profile or deployment manifest cannot silently lose its setting.
"""

from __future__ import annotations

MOVED: dict[str, str] = {}
"""Old dotted path → new dotted path, for keys whose value carries over unchanged (a whole subsection moves with
everything under it)."""

REPLACED: dict[str, str] = {
    "data.max_amount": "replaced by the model's declared contract: set contract.expectations.ranges.<field>.max "
                       "(e.g. contract.expectations.ranges.amount.max in configs/models/<model>.yaml)",
}
"""Old dotted path → what replaced it, for keys whose value does not carry over as is."""


def moved_message(path: str, leaf: str, where: str) -> str | None:
    """Why ``path`` (set as ``leaf``, a key at or under it, in ``where``) is refused, or ``None`` if it never moved.

    ``leaf`` names the key as it was written: setting ``serving.llm.max_tokens`` reads "serving.llm.max_tokens has
    moved to serving.lm.max_tokens", not only the subsection's move.
    """
    if path in MOVED:
        new = MOVED[path] + leaf[len(path):]
        return f"{leaf} has moved to {new} (set in {where})"
    if path in REPLACED:
        return f"{leaf} is no longer a key: {REPLACED[path]} (set in {where})"
    return None
