"""Transcribe a CRD's ``openAPIV3Schema`` into a strict JSON Schema (test data; nothing runs at test time).

Descriptions are dropped; an object with ``properties`` and no ``additionalProperties`` gets
``additionalProperties: false`` (unknown fields are errors, as ``kubectl apply --validate=strict``);
``x-kubernetes-int-or-string`` becomes ``anyOf: [integer, string]``; ``x-kubernetes-*`` and CEL rules go.
Sub-schemas at the ``--opaque`` JSON-pointer-like paths (``spec/template/spec/replicatedJobs/*/template``)
become ``{"type": "object"}``: the tests check those Kubernetes types with the installed client's models.

Used for the Kubeflow Trainer CRDs (kubeflow/trainer, tag v2.3.0)::

    git show v2.3.0:manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml > trainjobs.yaml
    python extract_crd_schema.py trainjobs.yaml --opaque spec/runtimePatches/*/trainingRuntimeSpec \\
        > trainer.kubeflow.org_v1alpha1_trainjob.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

DROP = {"description", "x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
        "default", "format"}


def convert(node: Any, path: str, opaque: set[str]) -> Any:
    if path in opaque:
        return {"type": "object"}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROP:
            continue
        if key == "x-kubernetes-int-or-string":
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            continue
        if key == "properties":
            out[key] = {k: convert(v, f"{path}/{k}".lstrip("/"), opaque) for k, v in value.items()}
        elif key == "items":
            out[key] = convert(value, f"{path}/*", opaque)
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = convert(value, f"{path}/+", opaque)
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            out[key] = [convert(v, path, opaque) if "properties" in v or "type" in v else v for v in value]
        else:
            out[key] = value
    if "anyOf" in out and out.get("type") is None:
        out.pop("type", None)
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("crd", type=Path)
    parser.add_argument("--version", default="v1alpha1")
    parser.add_argument("--opaque", action="append", default=[])
    args = parser.parse_args()
    crd = yaml.safe_load(args.crd.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == args.version)
    schema = version["schema"]["openAPIV3Schema"]
    schema["properties"].pop("status", None)
    out = {"$schema": "https://json-schema.org/draft/2020-12/schema", **convert(schema, "", set(args.opaque))}
    out["properties"]["metadata"] = {"type": "object"}
    json.dump(out, sys.stdout, sort_keys=True, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
