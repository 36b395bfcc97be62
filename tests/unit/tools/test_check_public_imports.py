"""tools/check_public_imports.py: a sibling's modules are off limits, its ``__all__`` is the way in."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).resolve().parents[3] / "tools" / "check_public_imports.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_public_imports", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while building the class
    spec.loader.exec_module(module)
    return module


def _package(root: Path, name: str, init: str, **modules: str) -> None:
    folder = root / name.removeprefix("mlops_") / "src" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(init)
    for module, text in modules.items():
        (folder / f"{module}.py").write_text(text)


def test_deep_imports_and_names_outside_all_are_reported(tmp_path: Path) -> None:
    _package(tmp_path, "mlops_low", '__all__ = ["good"]\nfrom mlops_low.impl import good\n',
             impl="def good(): ...\ndef hidden(): ...\n")
    _package(tmp_path, "mlops_high", "__all__ = []\n", user=(
        "from mlops_low import good\n"           # fine: public
        "from mlops_low.impl import hidden\n"    # line 2: a module of the sibling
        "from mlops_low import hidden\n"         # line 3: not in __all__
        "import mlops_low.impl\n"                # line 4: a module again
        "from mlops_high.other import x\n"       # own package: fine
        "def f():\n    from mlops_low.impl import good\n"  # line 7: inside a function too
    ))
    found = _tool().check(tmp_path)
    assert sorted((v.path.name, v.line) for v in found) == [("user.py", 2), ("user.py", 3), ("user.py", 4),
                                                           ("user.py", 7)]
    assert any("['hidden'] not in mlops_low.__all__" in str(v) for v in found)


def test_the_repository_keeps_to_public_names(repo_root: Path) -> None:
    proc = subprocess.run([sys.executable, str(TOOL), "packages"], cwd=repo_root, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
