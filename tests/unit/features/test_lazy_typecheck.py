"""Feast's typeguard checks, instrumented on first call (mlops_features.lazy_typecheck), are typeguard's own.

Each case runs in a fresh interpreter, once importing feast alone (typeguard instruments every method at import,
the independent reference) and once importing mlops_features first (instrumentation deferred): the same bad
argument must fail with the same TypeCheckError, and every deferred method, once instrumented, must be the same
code typeguard's eager decorator produced.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

CHECKED_MODULES = ("data_source", "entity", "feature_service", "feature_view", "field", "on_demand_feature_view",
                   "project", "project_metadata", "stream_feature_view")


def _run(script: str, *, lazy: bool) -> Any:
    head = "import mlops_features\n" if lazy else ""
    res = subprocess.run([sys.executable, "-W", "error::typeguard.InstrumentationWarning", "-c",
                          head + textwrap.dedent(script)], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


BAD_CALLS = """
    import json
    import feast
    from datetime import timedelta
    from feast import Entity, FeatureView, Field
    from feast.types import Float64
    out = {}
    for name, call in {
        "entity name": lambda: Entity(name=5, join_keys=["user_id"]),
        "view ttl": lambda: FeatureView(name="v", entities=[], schema=[Field(name="x", dtype=Float64)],
                                        ttl="1 day"),
        "field name": lambda: Field(name=None, dtype=Float64),
    }.items():
        try:
            call()
            out[name] = None
        except Exception as exc:
            out[name] = [type(exc).__name__, str(exc)]
    ok = Entity(name="user", join_keys=["user_id"])
    out["ok"] = [ok.name, ok.join_key]
    print(json.dumps(out))
"""


def test_a_bad_argument_fails_as_typeguard_fails_it_eagerly() -> None:
    eager, lazy = _run(BAD_CALLS, lazy=False), _run(BAD_CALLS, lazy=True)
    assert eager["ok"] == lazy["ok"] == ["user", "user_id"]
    for name in ("entity name", "view ttl", "field name"):
        assert eager[name] is not None and eager[name][0] == "TypeCheckError", (name, eager[name])
        assert lazy[name] == eager[name], name


CODE = """
    import hashlib, importlib, inspect, json, sys
    lazy = "mlops_features" in sys.modules
    if lazy:
        from mlops_features.lazy_typecheck import MARK, instrumented

    def deferred_functions(cls):  # the deferred wrappers among cls's own attributes, property accessors as name.fget
        out = {}
        for key, attr in cls.__dict__.items():
            attr = getattr(attr, "__func__", attr)
            parts = [(f"{key}.{n}", getattr(attr, n)) for n in ("fget", "fset", "fdel")] \\
                if isinstance(attr, property) else [(key, attr)]
            out.update({k: f for k, f in parts if getattr(f, MARK, False)})
        return out

    out = {}
    for short in CHECKED_MODULES:
        module = importlib.import_module("feast." + short)
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            if lazy:
                funcs = {k: instrumented(f.__wrapped__) for k, f in deferred_functions(cls).items()}
            else:
                funcs = {}
                for key, attr in cls.__dict__.items():
                    attr = getattr(attr, "__func__", attr)
                    parts = [(f"{key}.{n}", getattr(attr, n)) for n in ("fget", "fset", "fdel")] \\
                        if isinstance(attr, property) else [(key, attr)]
                    funcs.update({k: f for k, f in parts if inspect.isfunction(f)
                                  and "TypeCheckMemo" in f.__code__.co_names})
            for key, f in funcs.items():
                c = f.__code__
                out[f"{cls.__qualname__}.{key}"] = [hashlib.sha256(c.co_code).hexdigest(), list(c.co_names),
                                                     list(c.co_freevars), "TypeCheckMemo" in c.co_names]
    print(json.dumps(out))
""".replace("CHECKED_MODULES", repr(CHECKED_MODULES))


@pytest.mark.timeout(600)
def test_every_deferred_method_instruments_to_the_code_typeguard_makes_eagerly() -> None:
    eager, lazy = _run(CODE, lazy=False), _run(CODE, lazy=True)
    checked = {k for k, v in lazy.items() if v[3]}
    assert len(checked) >= 100  # feast 0.67: 118 of the 242 methods it instruments have annotations to check
    assert {k for k, v in eager.items() if v[3]} == checked
    assert {k: eager[k] for k in checked} == {k: lazy[k] for k in checked}


def test_a_process_that_never_imports_feast_loads_no_typeguard() -> None:
    assert _run("import json, sys\nprint(json.dumps('typeguard' in sys.modules))", lazy=True) is False
    assert _run("import json, sys, feast, typeguard\nprint(json.dumps(typeguard.typechecked.__module__))",
                lazy=True) == "mlops_features.lazy_typecheck"
