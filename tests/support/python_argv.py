"""Which module a Python command line runs, read the way the interpreter reads it."""

from __future__ import annotations

from collections.abc import Sequence

# interpreter options that take the next argument as their value (python --help)
_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})


def python_module(argv: Sequence[str]) -> str | None:
    """The module ``python [options] -m MODULE ...`` runs, or None for ``-c``, a script or an interactive start.

    Only the interpreter's own options count: ``python -c "..." ... -m mlops_training.worker`` (torchrun's agent,
    whose arguments carry torchrun's ``-m`` for the workers) runs no module of its own.
    """
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None)
        if arg == "-c" or arg == "-" or not arg.startswith("-"):
            return None
        if arg in _WITH_VALUE:
            next(args, None)
    return None
