"""CycloneDX SBOM of the serving image's Python dependencies, from the lock; validated offline.

The predictor and transformer images install every workspace package with ``pip install -c constraints.txt``
(services/*/Dockerfile). Their dependency set is the closure of the packages' declared requirements (markers
evaluated for the image's Linux / CPython 3.11), each at its version in constraints.txt. This script walks that
closure through the installed distributions' metadata (the venv was installed from the same lock and the
versions are checked against it), writes it as pinned requirements, has ``cyclonedx-py`` turn them into a
CycloneDX 1.6 JSON document, and validates that against the schema bundled with ``cyclonedx-python-lib``:
nothing is fetched.

    python tools/sbom.py [--out reports/sbom/serving.cdx.json]

Prints one JSON line: the path, its SHA-256 and the component count.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
IMAGE_EXTRAS = ("setuptools",)
"""Installed into the image besides the packages (the Dockerfile's first pip call)."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonical(name)] = version.strip()
    return pins


def workspace() -> tuple[set[str], list[Requirement]]:
    """Names of the workspace packages and their declared requirements."""
    names: set[str] = set()
    reqs: list[Requirement] = []
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        names.add(canonical(project["name"]))
        reqs += [Requirement(r) for r in project.get("dependencies", [])]
    return names, reqs


def closure(roots: list[Requirement], local: set[str], pins: dict[str, str]) -> dict[str, str]:
    """Every distribution the roots pull in on the image's platform, name → locked version."""
    env = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}
    todo = [(r, "") for r in roots] + [(Requirement(n), "") for n in IMAGE_EXTRAS]
    seen: dict[str, set[str]] = {}
    found: dict[str, str] = {}
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
            continue
        name = canonical(req.name)
        extras = set(req.extras)
        if name in local or (name in seen and extras <= seen[name]):
            continue
        seen.setdefault(name, set()).update(extras)
        if name not in pins:
            raise SystemExit(f"{req.name!r} is required but not pinned in constraints.txt: run `make lock`")
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{req.name!r} is not installed in this venv: run `make setup`") from None
        if Version(dist.version).public != Version(pins[name]).public:  # torch's +cpu local tag is a build detail
            raise SystemExit(f"{req.name} is installed at {dist.version} but locked at {pins[name]}: run `make setup`")
        found[name] = pins[name]
        for sub in dist.requires or []:
            child = Requirement(sub)
            for ex in {""} | extras:
                todo.append((child, ex))
    return dict(sorted(found.items()))


def validate(text: str) -> None:
    """Raise SystemExit unless ``text`` is a valid CycloneDX 1.6 JSON document (schema bundled: offline)."""
    from cyclonedx.schema import OutputFormat, SchemaVersion
    from cyclonedx.validation import make_schemabased_validator

    error = make_schemabased_validator(OutputFormat.JSON, SchemaVersion.V1_6).validate_str(text)
    if error is not None:
        raise SystemExit(f"the SBOM is not valid CycloneDX 1.6: {error}")


# cyclonedx's notice that a requirements file names no root component: true of every BOM made this way, and
# nothing a reader of `make demo` can act on. Only that message, that category, from that module.
_QUIET = "ignore:The Component this BOM is describing:UserWarning:cyclonedx.model.bom"


def build(out: Path) -> dict[str, object]:
    local, roots = workspace()
    pins = closure(roots, local, read_lock(ROOT / "constraints.txt"))
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write("".join(f"{name}=={version}\n" for name, version in pins.items()))
        reqs = fh.name
    try:
        subprocess.run([sys.executable, "-m", "cyclonedx_py", "requirements", reqs, "--pyproject",
                        str(ROOT / "pyproject.toml"), "--sv", "1.6", "--of", "JSON", "--output-reproducible",
                        "-o", str(out)], check=True, env={**os.environ, "PYTHONWARNINGS": _QUIET})
    finally:
        Path(reqs).unlink(missing_ok=True)
    text = out.read_text(encoding="utf-8")
    validate(text)
    components = json.loads(text).get("components", [])
    return {"sbom": str(out), "sha256": hashlib.sha256(text.encode()).hexdigest(), "components": len(components),
            "locked": len(pins)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "sbom" / "serving.cdx.json")
    parser.add_argument("--json", action="store_true", help="Print the summary as one JSON line.")
    args = parser.parse_args()
    summary = build(args.out)
    if args.json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        sys.stdout.write(f"SBOM: {summary['sbom']} ({summary['components']} components, sha256 "
                         f"{str(summary['sha256'])[:16]}…)\n")


if __name__ == "__main__":
    main()
