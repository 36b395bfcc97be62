"""``mlops registry verify``: walk one registry version's provenance end to end, link by link.

data area hash and DVC lock → FeatureService → resolved config → git commit → recorded trajectory (replayed
on request) → exported weights → signature → gate report → ledger chain → every alias move and the overlay
commit that deployed it → SBOM. Each link is ``verified``, ``not verifiable`` (with why) or ``broken`` (with
what differs); the trajectory link is ``recorded, not replayed`` unless ``--rerun`` replayed it: a recorded hash
chain ending at the exported weights shows the record is consistent, not that training produces it, so it is
neither verified nor broken. The walk composes the packages below the pipeline; it changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from mlops_config import PlatformConfig

log = logging.getLogger(__name__)

Status = Literal["verified", "recorded, not replayed", "not verifiable", "broken"]
STATUSES: tuple[Status, ...] = ("verified", "recorded, not replayed", "not verifiable", "broken")
"""Every status, in the order a summary lists them."""


@dataclass(frozen=True)
class Link:
    """One link of the chain: what it is, its status, and the evidence or the reason."""

    name: str
    status: Status
    detail: str


@dataclass
class VersionAudit:
    """Every link of one version; ``ok`` when none is broken (``verified`` only when every link is)."""

    model: str
    version: str
    links: list[Link] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(link.status != "broken" for link in self.links)

    @property
    def verified(self) -> bool:
        """Every link verified: nothing merely recorded, unverifiable or broken."""
        return bool(self.links) and all(link.status == "verified" for link in self.links)

    def counts(self) -> dict[str, int]:
        """How many links have each status (every status present, zeros included)."""
        return {s: sum(1 for link in self.links if link.status == s) for s in STATUSES}

    def add(self, name: str, status: Status, detail: str) -> None:
        self.links.append(Link(name, status, detail))

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for ``--json`` and the pipeline report."""
        return {"model": self.model, "version": self.version, "ok": self.ok, "verified": self.verified,
                "counts": self.counts(), "links": [asdict(link) for link in self.links]}


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)


def _eq(name: str, want: Any, got: Any, what: str) -> tuple[Status, str]:
    if not want:
        return "not verifiable", f"no {name} was recorded"
    if want == got:
        return "verified", f"{what} {str(want)[:16]}…"
    return "broken", f"{name} recorded {str(want)[:16]}…, found {str(got)[:16]}…"


def verify_version(config: PlatformConfig, root: Path, version: str | int, *, rerun: bool = False) -> VersionAudit:
    """Walk ``version`` of ``config.project.model``; with ``rerun``, replay its trajectory (a short training).

    Raises:
        LifecycleError: the model or version does not exist.
    """
    from mlflow.exceptions import MlflowException

    from mlops_core import LifecycleError, mlflow_client, registered_model_name

    model = config.project.model
    client = mlflow_client(config.tracking, root)
    name = registered_model_name(config.tracking, model)
    try:
        mv = client.get_model_version(name, str(version))
    except MlflowException as exc:
        raise LifecycleError(f"{name!r} has no version {str(version)!r}: {exc.message}") from None
    audit = VersionAudit(model, str(mv.version))
    tags = dict(mv.tags or {})
    run_tags = dict(client.get_run(mv.run_id).data.tags) if mv.run_id else {}
    with tempfile.TemporaryDirectory() as tmp:
        folder, recorded = _download(client, mv.run_id, Path(tmp), audit)
        meta = _read_meta(folder)
        lineage = dict(meta.get("lineage") or {})
        _data_links(audit, config, root, lineage, run_tags)
        _feature_link(audit, config, meta, tags)
        _config_link(audit, lineage, recorded, run_tags)
        _code_link(audit, root, lineage)
        _trajectory_link(audit, config, root, lineage, meta, recorded, rerun)
        _weights_link(audit, folder, meta, tags)
        _signature_link(audit, config, root, folder, tags)
        gate_digest = _gate_link(audit, client, mv)
    _ledger_links(audit, config, root, tags, gate_digest)
    _sbom_link(audit, root, tags)
    return audit


def _download(client: Any, run_id: str | None, tmp: Path, audit: VersionAudit) -> tuple[Path | None, dict | None]:
    if not run_id:
        audit.add("artifacts", "not verifiable", "the version has no run: nothing recorded to check")
        return None, None
    folder = recorded = None
    try:
        folder = Path(client.download_artifacts(run_id, "model", str(tmp)))
    except Exception as exc:  # artifact stores raise many types
        audit.add("artifacts", "broken", f"the exported model of run {run_id} cannot be fetched: {exc}")
    try:
        recorded = json.loads(Path(client.download_artifacts(run_id, "config.json", str(tmp))).read_text())
    except Exception as exc:
        log.debug("no config.json on run %s: %s", run_id, exc)
    return folder, recorded


def _read_meta(folder: Path | None) -> dict[str, Any]:
    if folder is None or not (folder / "model.json").is_file():
        return {}
    return dict(json.loads((folder / "model.json").read_text(encoding="utf-8")))


def _data_links(audit: VersionAudit, config: PlatformConfig, root: Path, lineage: dict, run_tags: dict) -> None:
    from mlops_features import data_version

    recorded = run_tags.get("mlops.data_version")
    try:
        current = data_version(config.data, root)
    except Exception as exc:
        audit.add("data area", "not verifiable", f"the validated data area cannot be hashed here: {exc}")
    else:
        status, detail = _eq("data version", recorded, current, "the validated data area hashes to")
        audit.add("data area", status, detail if status != "broken" else
                  f"{detail}: the data area changed since training (dvc checkout the recorded version)")
    if lineage.get("data_lineage"):  # recorded at training: checked against the DVC cache and the data
        from mlops_features import check_data_lineage

        verdict = check_data_lineage(root, lineage["data_lineage"])
        audit.add("DVC lock", verdict.status, verdict.detail)
        return
    lock = root / "dvc.lock"
    commit = str(lineage.get("git_commit") or "")
    if not lock.is_file():
        audit.add("DVC lock", "not verifiable", "no dvc.lock in this checkout")
        return
    then = _git(root, "show", f"{commit}:dvc.lock") if commit and commit != "unknown" else None
    if then is None or then.returncode != 0:
        audit.add("DVC lock", "not verifiable", f"dvc.lock is not in git at the recorded commit {commit[:12] or '-'}")
    elif then.stdout == lock.read_text(encoding="utf-8"):
        audit.add("DVC lock", "verified", f"dvc.lock equals the one committed at {commit[:12]}")
    else:  # a run trained before data lineage was recorded: only the lock at its commit can be compared
        audit.add("DVC lock", "not verifiable", f"dvc.lock changed since {commit[:12]} and the run recorded no "
                                                "data lineage (trained before it was)")


def _feature_link(audit: VersionAudit, config: PlatformConfig, meta: dict, tags: dict) -> None:
    in_model = (meta.get("features") or {}).get("feature_service")
    if in_model is None:
        audit.add("FeatureService", "not verifiable", "the model records no FeatureService (not a tabular model?)")
        return
    audit.add("FeatureService", *_eq("FeatureService", tags.get("mlops.feature_service"), in_model,
                                     "model.json and the registry version name"))


def _config_link(audit: VersionAudit, lineage: dict, recorded: dict | None, run_tags: dict) -> None:
    from mlops_config import PlatformConfig as Platform
    from mlops_training import config_hash

    if recorded is None:
        audit.add("resolved config", "not verifiable", "the run has no config.json")
        return
    got = config_hash(Platform.model_validate(recorded))
    want = lineage.get("config_sha256") or run_tags.get("mlops.config_sha256")
    audit.add("resolved config", *_eq("config_sha256", want, got, "config.json hashes to the recorded"))


def _code_link(audit: VersionAudit, root: Path, lineage: dict) -> None:
    commit = str(lineage.get("git_commit") or "unknown")
    dirty = lineage.get("code_dirty_files") or []
    if commit == "unknown":
        audit.add("git commit", "not verifiable", "trained outside a git checkout")
    elif dirty:
        audit.add("git commit", "broken", f"trained at {commit[:12]} with uncommitted code changes: {dirty}")
    elif _git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        audit.add("git commit", "not verifiable", f"commit {commit[:12]} is not in this clone")
    else:
        audit.add("git commit", "verified", f"trained from a clean tree at {commit[:12]}, present in this clone")


def _trajectory_link(audit: VersionAudit, config: PlatformConfig, root: Path, lineage: dict, meta: dict,
                     recorded: dict | None, rerun: bool) -> None:
    trajectory = dict(lineage.get("trajectory") or {})
    if not trajectory:
        audit.add("trajectory", "not verifiable", "no weights trajectory recorded (trained before it was)")
        return
    from mlops_evaluation import export_transform

    last = str(lineage.get("steps"))
    transform = export_transform(meta)
    if not transform and trajectory.get(last) != meta.get("weights_sha256"):
        audit.add("trajectory", "broken", f"the hash recorded at the last step {last} is not the exported weights'")
        return
    steps = ", ".join(f"{k}: {v[:12]}…" for k, v in sorted(trajectory.items(), key=lambda kv: int(kv[0])))
    end = (f"the exported weights are {transform}: only a whole re-run ties them to the run" if transform else
           "ending at the exported weights")
    if not rerun:  # a consistent record is not a reproduced one: only a replay verifies the link
        audit.add("trajectory", "recorded, not replayed", f"recorded at steps {{{steps}}}; {end}; not replayed "
                                                          "(verify it with --rerun)")
        return
    from mlops_evaluation import check_trajectory
    from mlops_training import reproduce

    step = config.evaluation.repro_steps
    if transform:
        _whole_rerun(audit, root, recorded, meta, int(last), step, transform)
        return
    if recorded is None or str(step) not in trajectory:
        audit.add("trajectory", "not verifiable", f"no recorded config or no hash at step {step} to replay")
        return
    import torch

    gate = check_trajectory(audit.version, lineage, recorded, root, step,
                            lambda doc, where, n: reproduce(doc, where, max_steps=n),
                            device="cuda" if torch.cuda.is_available() else "cpu",
                            rtol=config.evaluation.repro_gpu_rtol)
    audit.add("trajectory", "verified" if gate.passed else "broken", gate.reason)


def _whole_rerun(audit: VersionAudit, root: Path, recorded: dict | None, meta: dict, steps: int, repro_steps: int,
                 transform: str) -> None:
    """A LoRA export's link: re-run the whole recorded run (when no longer than ``repro_steps``) and compare its
    exported weights with these."""
    from mlops_training import reproduce

    if recorded is None or steps > repro_steps:
        audit.add("trajectory", "not verifiable", f"the exported weights are {transform}; a whole re-run ties them to "
                                                  f"the run, and its {steps} steps exceed evaluation.repro_steps "
                                                  f"{repro_steps} (or no config was recorded)")
        return
    got = reproduce(recorded, root).weights_sha256
    want = str(meta.get("weights_sha256"))
    if got == want:
        audit.add("trajectory", "verified", f"a whole {steps}-step re-run exported the same weights ({want[:12]}…)")
    else:
        audit.add("trajectory", "broken", f"a whole {steps}-step re-run exported {got[:12]}…, the version has "
                                          f"{want[:12]}…")


def _weights_link(audit: VersionAudit, folder: Path | None, meta: dict, tags: dict) -> None:
    from mlops_model import ExportedModelError, load_exported, weights_hash

    if folder is None:
        audit.add("weights", "not verifiable", "no exported model")
        return
    try:
        tensors, _ = load_exported(folder, verify=False)
    except ExportedModelError as exc:
        audit.add("weights", "broken", str(exc))
        return
    got = weights_hash(tensors)
    if got != meta.get("weights_sha256"):
        audit.add("weights", "broken", f"weights hash to {got[:16]}…, model.json says "
                                       f"{str(meta.get('weights_sha256'))[:16]}…")
        return
    audit.add("weights", *_eq("registry weights_sha256", tags.get("mlops.weights_sha256"), got,
                              "weights, model.json and the registry version agree on"))


def _signature_link(audit: VersionAudit, config: PlatformConfig, root: Path, folder: Path | None,
                    tags: dict) -> None:
    from mlops_model import ModelSignatureError, model_verifier

    if folder is None:
        audit.add("signature", "not verifiable", "no exported model")
        return
    try:
        digest = model_verifier(config.provenance, root)(folder)
    except ModelSignatureError as exc:
        audit.add("signature", "broken", str(exc))
        return
    if digest is None:
        audit.add("signature", "not verifiable", "the model is unsigned (provenance.require_signature is off)")
        return
    audit.add("signature", *_eq("registry model_digest", tags.get("mlops.model_digest"), digest,
                                "signature verifies; model digest"))


def _gate_link(audit: VersionAudit, client: Any, mv: Any) -> str | None:
    """The gate report on the version's run; returns its digest (what the ledger's staging move recorded)."""
    from mlops_core import fetch_gate_report, report_hash

    report = fetch_gate_report(client, mv)
    if report is None:
        audit.add("gate report", "not verifiable", "no gate report on the version's run (not evaluated)")
        return None
    failed = [g.get("name") for g in report.get("gates", []) if g.get("passed") is not True]
    digest = report_hash(report)
    audit.add("gate report", "broken" if failed else "verified",
              f"gates failed: {failed}" if failed else f"every gate passed; report sha256 {digest[:16]}…")
    return digest


def _ledger_links(audit: VersionAudit, config: PlatformConfig, root: Path, tags: dict,
                  gate_digest: str | None) -> None:
    from mlops_core import history, verify_ledger

    verdict = verify_ledger(config.tracking, root, config.project.model)
    if not verdict.ok:
        audit.add("ledger chain", "broken", f"entry #{verdict.first_bad_seq}: {verdict.problem}")
    elif verdict.unchained:
        audit.add("ledger chain", "not verifiable", f"entries {verdict.unchained} predate the hash chain")
    else:
        audit.add("ledger chain", "verified",
                  f"{verdict.checked} entries chain to head {str(verdict.head_sha256)[:16]}…")
    moves = [e for e in history(config.tracking, root, config.project.model) if e.version == audit.version]
    if not any(e.action != "deploy" for e in moves):
        audit.add("alias moves", "not verifiable", "the ledger records no move of this version")
    for e in moves:
        problems = []
        if e.model_digest and tags.get("mlops.model_digest") and e.model_digest != tags["mlops.model_digest"]:
            problems.append("its model digest is not the version's")
        if e.to_alias == "staging" and e.action == "promote" and gate_digest and e.gate_report_sha256 != gate_digest:
            problems.append("its gate report digest is not the report on the run")
        overlay = e.overlay_commit or e.extra.get("gitops_commit")
        label = f"#{e.seq} {e.action} → {e.to_alias} by {e.actor} at {e.ts[:19]}"
        name = "overlay commit" if e.action == "deploy" else "alias move"
        if problems:
            audit.add(name, "broken", f"{label}: {'; '.join(problems)}")
        elif overlay is None:
            audit.add(name, "verified", f"{label} (registry only: no overlay commit recorded)")
        else:
            status, why = _overlay(config, overlay, e, audit.version)
            audit.add(name, status, f"{label}; overlay commit {overlay[:12]} {why}")


def _overlay(config: PlatformConfig, commit: str, entry: Any, version: str) -> tuple[Status, str]:
    """Is ``commit`` in the GitOps repo, and does the manifest it wrote name ``version``?"""
    repo = config.delivery.gitops_repo
    if not repo or "://" in repo:
        return "not verifiable", "(delivery.gitops_repo is not a local repository to check it in)"
    if _git(Path(repo), "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        if entry.extra.get("pushed") is False:
            return "not verifiable", f"(not pushed: not in {repo})"
        return "broken", f"is not in the GitOps repository {repo}"
    path, env = entry.extra.get("path"), entry.extra.get("env")
    if entry.action != "deploy" or not path or not env:
        return "verified", f"is in {repo}"
    shown = _git(Path(repo), "show", f"{commit}:{path}")
    if shown.returncode != 0:
        return "broken", f"does not hold {path}"
    from mlops_delivery import ModelManifest

    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / Path(path).name
        file.write_text(shown.stdout, encoding="utf-8")
        try:
            placed = ModelManifest(file, env, config.project.model).placement()
        except Exception as exc:  # a manifest that no longer parses is a finding, not a crash
            return "broken", f"holds an unreadable {path}: {exc}"
    if version not in {str(placed.stable_version), str(placed.canary_version)}:
        return "broken", (f"sets {path} to stable v{placed.stable_version}, canary v{placed.canary_version}: "
                          f"not v{version}")
    role = "stable" if str(placed.stable_version) == version else f"canary at {placed.canary_percent}%"
    return "verified", f"is in {repo} and its {path} serves v{version} ({role})"


SBOM_DEFAULT = "reports/sbom/serving.cdx.json"
"""Where ``make sbom`` (tools/sbom.py) writes the serving image's SBOM."""


def attach_sbom(config: PlatformConfig, root: Path, version: str | int, sbom: Path | None = None) -> dict[str, str]:
    """Reference a CycloneDX SBOM from a registry version (tags ``mlops.sbom`` and ``mlops.sbom_sha256``).

    Raises:
        PipelineError: the file is missing or is not a CycloneDX document.
    """
    from mlops_core import mlflow_client, registered_model_name
    from mlops_pipeline.errors import PipelineError

    path = sbom or root / SBOM_DEFAULT
    try:
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text)
    except (OSError, json.JSONDecodeError) as exc:
        raise PipelineError(f"SBOM {str(path)!r} is not a readable JSON file ({exc}); run `make sbom`") from None
    if doc.get("bomFormat") != "CycloneDX":
        raise PipelineError(f"{str(path)!r} has bomFormat {doc.get('bomFormat')!r}; expected 'CycloneDX'")
    where = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    tags = {"mlops.sbom": where, "mlops.sbom_sha256": hashlib.sha256(text.encode()).hexdigest()}
    client = mlflow_client(config.tracking, root)
    name = registered_model_name(config.tracking, config.project.model)
    for key, value in tags.items():
        client.set_model_version_tag(name, str(version), key, value)
    return tags


def _sbom_link(audit: VersionAudit, root: Path, tags: dict) -> None:
    want = tags.get("mlops.sbom_sha256")
    path = root / str(tags.get("mlops.sbom", SBOM_DEFAULT))
    if not want:
        audit.add("SBOM", "not verifiable", "the version names no SBOM (make sbom; the release attaches it)")
    elif not path.is_file():
        audit.add("SBOM", "not verifiable", f"{str(path)!r} is not here to check")
    else:
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        audit.add("SBOM", *_eq("SBOM sha256", want, got, f"{path.name} sha256"))
