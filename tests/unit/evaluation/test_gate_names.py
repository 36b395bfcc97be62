"""No gate function name is defined twice across :mod:`mlops_evaluation`.

Two families' gates under one name (``contract_gate`` was the tabular one in ``gates.py`` and the HF LM's in
``lm_gates.py``) leave a reader, and an import, to guess which family it judges. Read from source with ``ast``:
nothing is imported.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from collections import defaultdict
from pathlib import Path


def gate_definitions(sources: dict[str, str]) -> dict[str, list[str]]:
    """Top-level function name ending in ``_gate`` → the modules (of ``sources``: module → text) defining it."""
    found: dict[str, list[str]] = defaultdict(list)
    for module, text in sorted(sources.items()):
        for node in ast.parse(text, module).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.endswith("_gate"):
                found[node.name].append(module)
    return dict(found)


def _evaluation_sources() -> dict[str, str]:
    spec = importlib.util.find_spec("mlops_evaluation")
    assert spec is not None and spec.submodule_search_locations, "mlops_evaluation is not importable"
    sources = {}
    for info in pkgutil.walk_packages(list(spec.submodule_search_locations), "mlops_evaluation."):
        folder = Path(info.module_finder.path)  # type: ignore[union-attr]
        leaf = info.name.rsplit(".", 1)[1]
        path = folder / leaf / "__init__.py" if info.ispkg else folder / f"{leaf}.py"
        sources[info.name] = path.read_text(encoding="utf-8")
    return sources


def test_the_scan_sees_a_name_defined_in_two_modules() -> None:
    found = gate_definitions({"a": "def contract_gate(): pass\ndef quality_gate(): pass\n",
                              "b": "def contract_gate(): pass\nclass S:\n    def quality_gate(self): pass\n"})
    assert found == {"contract_gate": ["a", "b"], "quality_gate": ["a"]}


def test_no_gate_function_name_is_defined_twice() -> None:
    sources = _evaluation_sources()
    assert {"mlops_evaluation.gates", "mlops_evaluation.runner"} <= set(sources), sorted(sources)
    twice = {name: modules for name, modules in gate_definitions(sources).items() if len(modules) > 1}
    assert not twice, f"gate functions defined in more than one module (give each family's its own name): {twice}"
