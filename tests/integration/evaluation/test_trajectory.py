"""The reproducibility gate proves the candidate's own trajectory: a real torchrun training records the weights
hash at ``repro_steps`` and at its end; the gate replays ``repro_steps`` of the recorded recipe and must hit the
recorded hash bit for bit on CPU. A modified config, modified data, a dirty tree with a code change or a moved
checkout are each caught, and the reason names which."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlops_config import load_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
# 4,000 rows leave the calibrator's half of the validation split without a fraud: these tests replay trajectories,
# they need no calibration (training.calibration: none, the default before it was on)
SETS = ["data.rows=4000", "training.nproc=1", "training.eval_every=0", "training.max_steps=12",
        "training.checkpoint.every_steps=0", "evaluation.repro_steps=5", "training.calibration=none"]


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A git checkout with configs, the feature repo and one code file; data prepared; one candidate trained."""
    from mlops_features import prepare_local_data
    from mlops_training import train_model

    root = tmp_path_factory.mktemp("trajectory") / "repo"
    shutil.copytree(REPO / "configs", root / "configs")
    shutil.copytree(REPO / "feature_repo", root / "feature_repo")
    (root / "packages").mkdir()
    (root / "packages" / "recipe.py").write_text("LEARNING = 'as committed'\n")
    (root / ".gitignore").write_text(".mlops/\ndata/\nreports/\n")
    _git(root, "init", "-q")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "recorded code")
    loaded = load_config(config_dir=root / "configs", overrides=SETS, environ={})
    prepare_local_data(loaded.config.data, loaded.config.features, root,
                       contract=loaded.config.declared_contract("the test's data"), seed=loaded.config.project.seed)
    assert _git(root, "status", "--porcelain", "--untracked-files=no") == "", "data preparation dirtied the tree"
    result = train_model(loaded.config, root, run_name="honest")
    return {"root": root, "loaded": loaded, "honest": result}


def _scorer(world: dict[str, Any], version: str) -> Any:
    """The registered version as the gate loads it (nothing replayed)."""
    from mlops_core import mlflow_client
    from mlops_evaluation.scorer import load_version

    client = mlflow_client(world["loaded"].config.tracking, world["root"])
    return load_version(client, "fraud", version, world["root"] / ".mlops" / f"gate-{version}")


def _gate(world: dict[str, Any], version: str) -> Any:
    from mlops_core import mlflow_client
    from mlops_evaluation.runner import check_reproducibility
    from mlops_training import reproduce

    cfg = world["loaded"].config
    client = mlflow_client(cfg.tracking, world["root"])
    scorer = _scorer(world, version)
    rerun = lambda recorded, root, max_steps: reproduce(recorded, root, max_steps=max_steps)  # noqa: E731
    return check_reproducibility(scorer, world["root"], cfg.evaluation, rerun, client=client), scorer


def test_honest_candidate_reproduces_its_own_step_5_weights(world: dict[str, Any]) -> None:
    from mlops_model import load_exported, weights_hash

    honest = world["honest"]
    gate, scorer = _gate(world, str(honest.model_version))
    trajectory = scorer.meta["lineage"]["trajectory"]
    assert sorted(trajectory, key=int) == ["5", "12"]
    tensors, _ = load_exported(scorer.folder)
    assert trajectory["12"] == weights_hash(tensors) == honest.weights_sha256  # the end of the trajectory is the model
    assert trajectory["5"] != trajectory["12"]
    assert gate.passed, gate.reason
    assert "own trajectory reproduced" in gate.reason
    assert gate.evidence["replay"]["weights_sha256"] == trajectory["5"]
    assert gate.evidence["replay"]["steps"] == 5
    # the sketch (GPU comparison) is recorded at the same steps; the last one is the exported weights' own
    from mlops_evaluation import check_trajectory
    from mlops_model import weights_sketch
    from mlops_training import reproduce

    lineage = scorer.meta["lineage"]
    assert sorted(lineage["trajectory_sketch"], key=int) == ["5", "12"]
    assert lineage["trajectory_sketch"]["12"] == weights_sketch(tensors)
    recorded = world["loaded"].config.model_dump(mode="json")
    as_gpu = check_trajectory(str(honest.model_version), lineage, recorded, world["root"], 5,
                              lambda doc, root, n: reproduce(doc, root, max_steps=n), device="cuda", rtol=1e-3)
    assert as_gpu.passed and "within rtol 0.001" in as_gpu.reason, as_gpu.reason


def test_a_replay_gets_the_passwords_its_recorded_config_lost(world: dict[str, Any]) -> None:
    """config.json is recorded without URL passwords; the replay must read through the live URLs, not through
    ``redis://:***@...`` (a rehearsal's first champion failed its gate on ``role "***"`` that way)."""
    from mlops_core import mlflow_client
    from mlops_evaluation.runner import check_reproducibility
    from mlops_evaluation.scorer import load_version
    from mlops_training import reproduce, train_model

    url = "redis://:pw-r%40nd@127.0.0.1:6379/0"
    cfg = world["loaded"].config
    cfg = cfg.model_copy(update={"features": cfg.features.model_copy(update={"redis_url": url})})
    result = train_model(cfg, world["root"], run_name="with-password")
    client = mlflow_client(cfg.tracking, world["root"])
    version = str(result.model_version)
    scorer = load_version(client, "fraud", version, world["root"] / ".mlops" / f"gate-{version}")
    seen: list[str] = []

    def rerun(recorded: dict[str, Any], root: Path, max_steps: int | None) -> Any:
        seen.append(recorded["features"]["redis_url"])
        return reproduce(recorded, root, max_steps=max_steps)

    live = {"features": cfg.features.model_dump(mode="json"), "data": cfg.data.model_dump(mode="json")}
    gate = check_reproducibility(scorer, world["root"], cfg.evaluation, rerun, client=client, live=live)
    assert gate.passed, gate.reason
    assert seen == [url]
    # another store under the same field: the replay would read elsewhere, so the gate refuses, naming the place
    other = {"features": {**live["features"], "redis_url": "redis://:pw@10.0.0.9:6379/0"}}
    refused = check_reproducibility(scorer, world["root"], cfg.evaluation, rerun, client=client, live=other)
    assert not refused.passed and "features.redis_url" in refused.reason and "10.0.0.9" in refused.reason
    assert seen == [url]


def test_modified_config_is_caught(world: dict[str, Any]) -> None:
    import json

    run_id = world["honest"].run_id
    (path,) = [p for p in (world["root"] / ".mlops").rglob("config.json") if run_id in p.parts]
    original = path.read_text()
    doc = json.loads(original)
    doc["training"]["lr"] = doc["training"]["lr"] * 2
    path.write_text(json.dumps(doc))
    try:
        gate, _ = _gate(world, str(world["honest"].model_version))
    finally:
        path.write_text(original)
    assert not gate.passed
    assert "config differs" in gate.reason and "code differs" not in gate.reason


def test_dirty_tree_with_a_code_change_is_caught(world: dict[str, Any]) -> None:
    from mlops_training import train_model

    code = world["root"] / "packages" / "recipe.py"
    code.write_text("LEARNING = 'changed, never committed'\n")
    try:
        dirty = train_model(world["loaded"].config, world["root"], run_name="dirty")
    finally:
        _git(world["root"], "checkout", "--", "packages/recipe.py")
    gate, _ = _gate(world, str(dirty.model_version))
    assert not gate.passed
    assert "code differs" in gate.reason and "uncommitted code changes (packages/recipe.py)" in gate.reason


def test_a_moved_checkout_is_caught(world: dict[str, Any]) -> None:
    root = world["root"]
    recorded = _git(root, "rev-parse", "HEAD")
    (root / "packages" / "recipe.py").write_text("LEARNING = 'a later commit'\n")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "later code")
    try:
        gate, _ = _gate(world, str(world["honest"].model_version))
    finally:
        _git(root, "reset", "-q", "--hard", recorded)
    assert not gate.passed
    assert f"trained at commit {recorded[:12]}" in gate.reason


def _gate_under(world: dict[str, Any], scorer: Any, **section: Any) -> Any:
    """The gate on ``scorer`` with ``evaluation`` fields overridden (the candidate was trained with repro_steps=5)."""
    from mlops_core import mlflow_client
    from mlops_evaluation.runner import check_reproducibility
    from mlops_training import reproduce

    cfg = world["loaded"].config
    rerun = lambda recorded, root, max_steps: reproduce(recorded, root, max_steps=max_steps)  # noqa: E731
    return check_reproducibility(scorer, world["root"], cfg.evaluation.model_copy(update=section), rerun,
                                 client=mlflow_client(cfg.tracking, world["root"]))


def test_no_hash_at_repro_steps_is_not_verifiable_unless_determinism_only_is_chosen(world: dict[str, Any]) -> None:
    """Evaluated with repro_steps=7, the 12-step candidate recorded no hash at step 7. The old gate re-ran 7 steps
    twice, compared the two re-runs with each other and passed "bit-identical weights" without the candidate."""
    scorer = _scorer(world, str(world["honest"].model_version))
    refused = _gate_under(world, scorer, repro_steps=7)
    assert not refused.passed and refused.reason.startswith("not verifiable"), refused.reason
    assert "no weights hash at step 7 (recorded at steps ['5', '12'])" in refused.reason
    assert "bit-identical" not in refused.reason
    opted = _gate_under(world, scorer, repro_steps=7, reproducibility="determinism_only")
    assert opted.passed, opted.reason
    assert "determinism only (evaluation.reproducibility: determinism_only)" in opted.reason
    assert "own weights were not re-derived" in opted.reason
    assert opted.evidence["reruns"][0]["steps"] == 7 and opted.evidence["mode"] == "determinism_only"


def test_determinism_only_still_checks_config_and_code(world: dict[str, Any]) -> None:
    """The old two-re-runs path skipped the config and code checks: a moved checkout passed."""
    root = world["root"]
    scorer = _scorer(world, str(world["honest"].model_version))
    recorded = _git(root, "rev-parse", "HEAD")
    (root / "packages" / "recipe.py").write_text("LEARNING = 'a later commit'\n")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "later code")
    try:
        gate = _gate_under(world, scorer, repro_steps=7, reproducibility="determinism_only")
    finally:
        _git(root, "reset", "-q", "--hard", recorded)
    assert not gate.passed and f"trained at commit {recorded[:12]}" in gate.reason, gate.reason


def test_weights_that_are_not_the_end_of_the_trajectory_fail(world: dict[str, Any], tmp_path: Path) -> None:
    """The honest lineage beside other weights: the step-5 replay still matches its record, so the old gate
    passed; the weights are not what step 12 recorded, and the gate now says so before replaying."""
    import dataclasses

    from mlops_model import load_exported, save_exported, weights_hash

    scorer = _scorer(world, str(world["honest"].model_version))
    tensors, meta = load_exported(scorer.folder)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1e-3  # weights from some other recipe
    folder = save_exported(tmp_path / "swapped", tensors, {k: v for k, v in meta.items() if k != "weights_sha256"})
    _, swapped_meta = load_exported(folder)
    swapped = dataclasses.replace(scorer, meta=swapped_meta, folder=folder)
    assert swapped_meta["lineage"] == meta["lineage"] and swapped_meta["weights_sha256"] == weights_hash(tensors)
    gate = _gate_under(world, swapped)
    assert not gate.passed, gate.reason
    assert (f"exported weights (sha256 {weights_hash(tensors)[:12]}…) are not the end of its recorded trajectory "
            f"(step 12: {meta['lineage']['trajectory']['12'][:12]}…)") in gate.reason


def test_verify_walks_an_honest_version_and_names_a_swapped_weights_file(world: dict[str, Any]) -> None:
    import json

    from typer.testing import CliRunner

    from mlops_cli.app import app

    version = str(world["honest"].model_version)
    env = {"MLOPS_CONFIG_DIR": str(world["root"] / "configs")}
    sets = [a for s in SETS for a in ("--set", s)]
    result = CliRunner().invoke(app, ["registry", "verify", "--version", version, "--json", *sets], env=env)
    assert result.exit_code == 0, result.stdout + result.stderr
    links = {link["name"]: link for link in json.loads(result.stdout)["links"]}
    for name in ("data area", "DVC lock", "FeatureService", "resolved config", "git commit", "weights", "signature"):
        assert links[name]["status"] == "verified", links[name]
    assert links["gate report"]["status"] == "not verifiable"  # never evaluated in this world
    assert world["honest"].weights_sha256[:16] in links["weights"]["detail"]
    # without --rerun the trajectory is a consistent record, not a reproduced one: neither verified nor broken
    # (the old walk called it verified without replaying anything)
    assert links["trajectory"]["status"] == "recorded, not replayed", links["trajectory"]
    assert "not replayed" in links["trajectory"]["detail"] and "--rerun" in links["trajectory"]["detail"]
    doc = json.loads(result.stdout)
    assert doc["ok"] is True and doc["verified"] is False
    assert doc["counts"]["recorded, not replayed"] == 1 and doc["counts"]["broken"] == 0

    run_id = world["honest"].run_id
    (weights,) = [p for p in (world["root"] / ".mlops").rglob("model.safetensors") if run_id in p.parts]
    original = weights.read_bytes()
    data = bytearray(original)
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    try:
        result = CliRunner().invoke(app, ["registry", "verify", "--version", version, "--json", *sets], env=env)
    finally:
        weights.write_bytes(original)
    assert result.exit_code == 1
    links = {link["name"]: link for link in json.loads(result.stdout)["links"]}
    assert links["weights"]["status"] == "broken"
    assert links["signature"]["status"] == "broken" and "changed model.safetensors" in links["signature"]["detail"]


def test_verify_rerun_replays_the_trajectory_before_calling_it_verified(world: dict[str, Any]) -> None:
    """``--rerun`` replays ``repro_steps`` of the recorded recipe; only then is the link "verified", and a record
    the replay does not reproduce is "broken"."""
    from mlops_pipeline import provenance, verify_version

    cfg, root = world["loaded"].config, world["root"]
    version = str(world["honest"].model_version)
    links = {link.name: link for link in verify_version(cfg, root, version, rerun=True).links}
    assert links["trajectory"].status == "verified", links["trajectory"]
    assert "own trajectory reproduced" in links["trajectory"].detail
    # the same walk over a record whose step-5 hash is not what the recipe gives: the replay says so
    audit = provenance.VersionAudit("fraud", version)
    lineage = {"trajectory": {"5": "0" * 64, "12": "f" * 64}, "steps": 12}
    recorded = cfg.model_dump(mode="json")
    provenance._trajectory_link(audit, cfg, root, {**_honest_lineage(world), **lineage}, {"weights_sha256": "f" * 64},
                                recorded, True)
    (link,) = audit.links
    assert link.status == "broken" and "weights differ at step 5" in link.detail, link


def _honest_lineage(world: dict[str, Any]) -> dict[str, Any]:
    from mlops_model import read_meta

    return dict(read_meta(Path(world["honest"].export_dir))["lineage"])


def test_sbom_reference_is_verified_and_an_edit_is_named(world: dict[str, Any]) -> None:
    import hashlib
    import json

    from mlops_pipeline import attach_sbom, verify_version

    root, cfg = world["root"], world["loaded"].config
    version = str(world["honest"].model_version)
    sbom = root / "reports" / "sbom" / "serving.cdx.json"
    sbom.parent.mkdir(parents=True, exist_ok=True)
    sbom.write_text(json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6", "components": []}))
    tags = attach_sbom(cfg, root, version)
    assert tags == {"mlops.sbom": "reports/sbom/serving.cdx.json",
                    "mlops.sbom_sha256": hashlib.sha256(sbom.read_bytes()).hexdigest()}
    links = {link.name: link for link in verify_version(cfg, root, version).links}
    assert links["SBOM"].status == "verified"
    sbom.write_text(sbom.read_text().replace('"components": []', '"components": [{"name": "x"}]'))
    links = {link.name: link for link in verify_version(cfg, root, version).links}
    assert links["SBOM"].status == "broken"


def test_modified_data_is_caught(world: dict[str, Any]) -> None:
    from mlops_features import prepare_local_data

    cfg = world["loaded"].config
    prepare_local_data(cfg.data, cfg.features, world["root"], contract=cfg.declared_contract("the test's data"),
                       seed=cfg.project.seed + 1)  # the data area changed
    gate, _ = _gate(world, str(world["honest"].model_version))
    assert not gate.passed
    assert "data differs" in gate.reason
    assert gate.evidence["replay"]["data_hash"] != gate.evidence["recorded_data_hash"]
    from mlops_pipeline import verify_version

    links = {link.name: link for link in verify_version(cfg, world["root"], str(world["honest"].model_version)).links}
    assert links["DVC lock"].status == "broken", links["DVC lock"]
    assert "data/validated/" in links["DVC lock"].detail  # names the file whose bytes differ from the record
