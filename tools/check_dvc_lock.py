"""Fail when the committed ``dvc.lock`` is not what the pipeline's stages write from the committed code.

``dvc repro`` records, per stage, its command, the md5 of every dependency, the values of its params and the md5
of its outputs. This checks, without running a stage, every part of that record a clean clone determines:

- every stage of ``dvc.yaml`` has a record in the lock, and the lock has no stage ``dvc.yaml`` lacks;
- each record's command is the stage's command (DVC's own comparison);
- each *source* dependency (one no stage writes: committed code and config) hashes, by DVC's own hashing and
  ``.dvcignore``, to the md5 the lock holds;
- each params file that a stage writes with ``--out`` (the ``config`` stage's resolved config): the stage's
  command is run with its ``--out`` sent to a temporary file (without ``MLOPS__*`` overrides and
  ``MLOPS_CONFIG_DIR``: the committed config, not this shell's), and its md5 and size must be the lock's
  record of that output, and each stage's params read from it the lock's values.

It cannot check, and says so, what only running the stages gives: data outputs and the dependencies on them
(``data/raw`` … ``data/features``: seeded and deterministic, but absent from a clean clone) and what training
writes (``reports/train.json``: the run's hashes, steps and metrics, the same for the same code, config and data,
but only a run of the train stage makes it). Run by ``make test`` (``make dvc-lock-check``):
``python tools/check_dvc_lock.py [--root DIR] [--dvcfile dvc.yaml]``. Exit 0 current, 1 stale, 2 unusable.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MISSING = object()


@dataclass
class Report:
    """What was checked and found current, what is stale, and what cannot be checked here."""

    ok: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return ([f"stale: {s}" for s in self.stale] + [f"ok: {s}" for s in self.ok]
                + [f"not checked: {s}" for s in self.unchecked])


def _lookup(doc: Any, dotted: str) -> Any:
    node = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MLOPS__") and k != "MLOPS_CONFIG_DIR"}


def _redirected_argv(cmd: str, out: str, tmp: Path) -> list[str] | None:
    """The stage's ``mlops`` command with ``--out <out>`` replaced by ``tmp``, run by this interpreter."""
    argv = shlex.split(cmd)
    if not argv or Path(argv[0]).name != "mlops" or "--out" not in argv:
        return None
    i = argv.index("--out")
    if i + 1 >= len(argv) or argv[i + 1] != out:
        return None
    return [sys.executable, "-m", "mlops_cli", *argv[1:i + 1], str(tmp), *argv[i + 2:]]


def _write_params_file(root: Path, stage: Any, out: str, tmp: Path) -> str | None:
    """Run ``stage``'s command with its output ``out`` redirected to ``tmp``; an error message, or None."""
    argv = _redirected_argv(stage.cmd, out, tmp)
    if argv is None:
        return f"{stage.addressing}'s command is not `mlops … --out {out}`; cannot write {out} apart"
    proc = subprocess.run(argv, cwd=root, env=_clean_env(), capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return f"`{shlex.join(argv)}` exited {proc.returncode}: {proc.stderr.strip()[-2000:]}"
    return None


def check(root: Path, dvcfile: str = "dvc.yaml") -> Report:
    """Compare ``root``'s lock of ``dvcfile`` with what its committed files determine (see the module doc)."""
    from dvc.dependency.param import ParamsDependency
    from dvc.dvcfile import load_file
    from dvc.repo import Repo
    from dvc_data.hashfile.hash import file_md5

    report = Report()
    with Repo(str(root)) as repo:
        project = load_file(repo, os.path.join(repo.root_dir, dvcfile))
        stages = dict(project.stages)
        lock_path = Path(project._lockfile.path)
        if not lock_path.is_file():
            report.stale.append(f"{lock_path.name}: missing (run the stages: `dvc repro`)")
            return report
        locked = (project._lockfile.load() or {}).get("stages", {})
        for name in stages:
            if name not in locked:
                report.stale.append(f"{name}: in {dvcfile}, no record in {lock_path.name}")
        for name in locked:
            if name not in stages:
                report.stale.append(f"{name}: recorded in {lock_path.name}, no such stage in {dvcfile}")
        produced = {str(o.def_path): s for s in stages.values() for o in s.outs}
        params_files: dict[str, Path | None] = {}
        for path in sorted({str(d.def_path) for s in stages.values() for d in s.deps
                            if isinstance(d, ParamsDependency)}):
            producer = produced.get(path)
            if producer is None:  # a committed params file: read as it is
                params_files[path] = root / path
                continue
            tmp = Path(tempfile.mkdtemp(prefix="check-dvc-lock-")) / Path(path).name
            error = _write_params_file(root, producer, path, tmp)
            if error:
                report.unchecked.append(f"{path}: {error}")
            params_files[path] = None if error else tmp

        for name, stage in stages.items():
            if name not in locked:
                continue
            if stage.cmd_changed:
                report.stale.append(f"{name}: cmd is {stage.cmd!r}, the lock has {locked[name].get('cmd')!r}")
            for dep in stage.deps:
                path = str(dep.def_path)
                if isinstance(dep, ParamsDependency):
                    _check_params(report, name, dep, params_files[path], locked[name])
                elif path in produced:
                    report.unchecked.append(f"{name}: dep {path} (written by {produced[path].addressing}; "
                                            "data, not in a clean clone)")
                else:
                    status = dep.status()
                    if status:
                        report.stale.append(f"{name}: dep {path} is {status.get(path, status)} "
                                            f"(lock md5 {dep.hash_info.value if dep.hash_info else None})")
                    else:
                        report.ok.append(f"{name}: dep {path}")
            for out in stage.outs:
                path = str(out.def_path)
                if path in params_files and params_files[path] is not None and not stage.deps:
                    written = params_files[path]
                    assert written is not None
                    md5, size = file_md5(str(written)), written.stat().st_size
                    lock_md5 = out.hash_info.value if out.hash_info else None
                    lock_size = out.meta.size if out.meta else None
                    if (md5, size) != (lock_md5, lock_size):
                        report.stale.append(f"{name}: out {path} is md5 {md5} size {size} from the committed "
                                            f"config, the lock has md5 {lock_md5} size {lock_size}")
                    else:
                        report.ok.append(f"{name}: out {path} (md5 {md5}, {size} bytes)")
                else:
                    report.unchecked.append(f"{name}: out {path} (made by running the stage)")
    return report


def _check_params(report: Report, name: str, dep: Any, written: Path | None, record: dict[str, Any]) -> None:
    path = str(dep.def_path)
    if written is None:
        report.unchecked.append(f"{name}: params from {path}")
        return
    if not written.is_file():
        report.stale.append(f"{name}: params file {path} is missing")
        return
    doc = json.loads(written.read_text(encoding="utf-8")) if path.endswith(".json") else None
    if doc is None:
        report.unchecked.append(f"{name}: params from {path} (only JSON params files are read here)")
        return
    recorded = (record.get("params") or {}).get(path, {})
    for key in dep.params or sorted(recorded):
        now, then = _lookup(doc, key), recorded.get(key, MISSING)
        if then is MISSING:
            report.stale.append(f"{name}: param {key} is not in the lock")
        elif now is MISSING:
            report.stale.append(f"{name}: param {key} is in the lock but not in {path}")
        elif now != then:
            report.stale.append(f"{name}: param {key} is {json.dumps(now)[:200]}, the lock has "
                                f"{json.dumps(then, default=str)[:200]}")
        else:
            report.ok.append(f"{name}: param {key}")
    for key in sorted(set(recorded) - set(dep.params or [])):
        report.stale.append(f"{name}: param {key} is in the lock but the stage no longer reads it")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the repository (default: this tool's)")
    parser.add_argument("--dvcfile", default="dvc.yaml", help="the pipeline file, relative to --root")
    parser.add_argument("-v", "--verbose", action="store_true", help="also list what is current")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not (root / args.dvcfile).is_file():
        parser.error(f"--root {root}: no {args.dvcfile} there (expected a DVC project)")
    report = check(root, args.dvcfile)
    for line in report.lines():
        if args.verbose or not line.startswith("ok: "):
            sys.stdout.write(f"{line}\n")
    if report.stale:
        sys.stderr.write(f"check_dvc_lock: {len(report.stale)} stale: dvc.lock is not what the stages write from "
                         "this code; rerun them (`make repro`, or `dvc repro <stage>`) and commit dvc.lock\n")
        return 1
    sys.stdout.write(f"check_dvc_lock: dvc.lock is current: {len(report.ok)} records checked, "
                     f"{len(report.unchecked)} left to running the stages\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
