"""Fail when a package imports another package's module instead of its public names.

import-linter checks which package may import which (pyproject.toml, ``[tool.importlinter]``); it cannot say
*how*: ``from mlops_core.lifecycle import promote`` reaches past ``mlops_core``'s ``__init__``. Here a package
may import a sibling only as ``from mlops_x import name`` (``import mlops_x``), where ``name`` is in
``mlops_x.__all__``. Run by ``make lint``: ``python tools/check_public_imports.py [packages]``.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Violation:
    """One import that bypasses a sibling's public names."""

    path: Path
    line: int
    statement: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.statement}: {self.reason}"


def find_packages(packages_dir: Path) -> dict[str, Path]:
    """``mlops_x`` → its folder, for every ``packages/*/src/mlops_x/__init__.py``."""
    return {init.parent.name: init.parent for init in sorted(packages_dir.glob("*/src/*/__init__.py"))}


def public_names(init: Path) -> set[str] | None:
    """The literal ``__all__`` of a package's ``__init__.py`` (``None`` when it has none)."""
    tree = ast.parse(init.read_text(encoding="utf-8"), filename=str(init))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            return {str(v) for v in ast.literal_eval(node.value)}
    return None


def check_file(path: Path, own: str, exports: dict[str, set[str] | None]) -> list[Violation]:
    """Every import in ``path`` (part of package ``own``) that reaches into a sibling's modules."""
    found: list[Violation] = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top, _, rest = alias.name.partition(".")
                if top in exports and top != own and rest:
                    found.append(Violation(path, node.lineno, f"import {alias.name}",
                                           f"import {top!r} and use its public names"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top, _, rest = node.module.partition(".")
            if top not in exports or top == own:
                continue
            names = ", ".join(a.name for a in node.names)
            if rest:
                found.append(Violation(path, node.lineno, f"from {node.module} import {names}",
                                       f"import from {top!r} itself, not its module {node.module!r}"))
                continue
            public = exports[top]
            missing = [a.name for a in node.names if public is not None and a.name not in public]
            if missing:
                found.append(Violation(path, node.lineno, f"from {top} import {names}",
                                       f"{missing!r} not in {top}.__all__"))
    return found


def check(packages_dir: Path) -> list[Violation]:
    """Every violation under ``packages_dir``."""
    packages = find_packages(packages_dir)
    exports = {name: public_names(folder / "__init__.py") for name, folder in packages.items()}
    found: list[Violation] = []
    for name, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            found.extend(check_file(path, name, exports))
    return found


def main(argv: list[str]) -> int:
    packages_dir = Path(argv[0]) if argv else Path("packages")
    if not packages_dir.is_dir():
        sys.stderr.write(f"check_public_imports: {str(packages_dir)!r} is not a folder; expected packages/\n")
        return 2
    found = check(packages_dir)
    for v in found:
        sys.stderr.write(f"{v}\n")
    if found:
        sys.stderr.write(f"check_public_imports: {len(found)} import(s) bypass a package's public names\n")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
