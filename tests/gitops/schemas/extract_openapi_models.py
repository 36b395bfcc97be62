"""Extract ``openapi_types`` + ``attribute_map`` of generated OpenAPI model classes into JSON (test data).

Used once to turn the PyTorchJob models of the ``kubeflow-training`` wheel into
``kubeflow-training-1.9.4-models.json``; that wheel cannot be installed next to our pins (it needs
kubernetes<36), so its models are kept as data. Reads the source with ``ast``: nothing is imported.

    pip download --no-deps kubeflow-training==1.9.4 && unzip kubeflow_training-1.9.4-py3-none-any.whl -d w
    python extract_openapi_models.py w/kubeflow/training/models KubeflowOrgV1PyTorchJob > out.json
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path


def read_models(folder: Path) -> dict[str, dict[str, list[str]]]:
    models: dict[str, dict[str, list[str]]] = {}
    for path in folder.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            tables = {}
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)
                        and stmt.targets[0].id in ("openapi_types", "attribute_map")):
                    tables[stmt.targets[0].id] = ast.literal_eval(stmt.value)
            if len(tables) == 2:
                models[node.name] = {attr: [tables["attribute_map"][attr], typ]
                                     for attr, typ in tables["openapi_types"].items()}
    return models


def closure(models: dict[str, dict[str, list[str]]], root: str) -> dict[str, dict[str, list[str]]]:
    keep: dict[str, dict[str, list[str]]] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in keep or name not in models:
            continue
        keep[name] = models[name]
        for _, typ in models[name].values():
            todo += re.findall(r"[A-Z]\w+", typ)
    return keep


if __name__ == "__main__":
    found = read_models(Path(sys.argv[1]))
    json.dump(closure(found, sys.argv[2]), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
