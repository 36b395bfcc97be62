"""Feast's argument checks, instrumented when a method is first called instead of when feast is imported.

Feast decorates its classes (``FeatureView``, ``Entity``, ``FeatureService``, the data sources, ...) with typeguard's
``@typechecked``, which instruments a class at import: for **each** method it reads, parses and compiles the
method's whole module again (typeguard#468). Importing feast 0.x did that 242 times: about 3.5 of the 5.5 s of CPU
the import costs, paid by every process that reads features (each pipeline step and DVC stage, the transformer,
the stream updater, the CronJobs) whether it constructs a feature view or not.

:func:`install` (run by ``mlops_features``) arranges for ``typeguard.typechecked`` to be replaced by
:func:`deferred_typechecked` just before feast is imported (an import hook: a process that never imports feast
loads nothing, typeguard included): the same decorator, except that each method is instrumented by typeguard's
own ``instrument`` on its first call, once per process. The checks are typeguard's, unchanged; a process pays for
the methods it calls.

One case the deferral cannot instrument as typeguard would: a function whose annotations name variables of an
enclosing *function* (typeguard reads them from the decorating frame, which is gone by the first call). It is left
unchecked, with typeguard's ``InstrumentationWarning`` naming it; none of feast's checked methods is one
(``tests/unit/features/test_lazy_typecheck.py`` instruments every one both ways and compares the code).
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from inspect import isclass
from typing import Any

MARK = "__mlops_deferred_typecheck__"
_EAGER: list[Callable[..., Any]] = []  # typeguard's own decorator, once the hook has replaced it


class _BeforeFeast(importlib.abc.MetaPathFinder):
    """Replaces typeguard's decorator as feast's import starts (feast binds the name then); finds nothing itself."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        if fullname == "feast":
            sys.meta_path.remove(self)
            import typeguard

            _EAGER.append(typeguard.typechecked)
            typeguard.typechecked = deferred_typechecked


def install() -> None:
    """Defer the instrumentation of feast's checks; idempotent. Feast imported earlier keeps its eager classes."""
    if "feast" not in sys.modules and not any(isinstance(f, _BeforeFeast) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeFeast())


def deferred_typechecked(target: Any = None, **options: Any) -> Any:
    """``typeguard.typechecked`` with each function's instrumentation deferred to its first call.

    Classes get what typeguard gives them: their own methods, class- and static methods and property accessors are
    checked; options (``forward_ref_policy``, ...) go to the eager decorator, as feast passes none.
    """
    if target is None:
        return functools.partial(deferred_typechecked, **options)
    if options or not __debug__:
        return _EAGER[0](target, **options)
    if isclass(target):
        for key, attr in list(target.__dict__.items()):
            if _own(attr, target):
                setattr(target, key, _deferred(attr))
            elif isinstance(attr, (classmethod, staticmethod)) and _own(attr.__func__, target):
                setattr(target, key, attr.__class__(_deferred(attr.__func__)))
            elif isinstance(attr, property):
                kwargs: dict[str, Any] = {"doc": attr.__doc__}
                for name in ("fset", "fget", "fdel"):
                    func = getattr(attr, name)
                    kwargs[name] = _deferred(func) if _own(func, target) else func
                setattr(target, key, attr.__class__(**kwargs))
        return target
    if isinstance(target, (classmethod, staticmethod)):
        return target.__class__(_deferred(target.__func__))
    return _deferred(target)


def _own(attr: Any, cls: type) -> bool:
    from typeguard._utils import is_method_of

    return is_method_of(attr, cls) and not getattr(attr, MARK, False)


def _deferred(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` behind a wrapper that instruments it on the first call (under a lock) and calls the result."""
    lock = threading.Lock()
    impl: list[Callable[..., Any]] = []

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not impl:
            with lock:
                if not impl:
                    impl.append(instrumented(func))
        return impl[0](*args, **kwargs)

    setattr(call, MARK, True)
    return call


def instrumented(func: Callable[..., Any]) -> Callable[..., Any]:
    """typeguard's instrumented copy of ``func``, or ``func`` itself (with typeguard's warning) where it cannot be."""
    from typeguard import InstrumentationWarning
    from typeguard._decorators import instrument  # typeguard's instrumentation of one function

    result = instrument(func)
    if isinstance(result, str):
        reason = result
    elif result.__code__.co_freevars != func.__code__.co_freevars:
        reason = "its annotations name variables of an enclosing function, gone by its first call"
    else:
        return result
    warnings.warn(f"{reason} -- not typechecking {func.__module__}.{func.__qualname__}", InstrumentationWarning,
                  stacklevel=3)
    return func

