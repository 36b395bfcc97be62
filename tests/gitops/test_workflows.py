"""The GitHub Actions workflows and service images: actionlint, least privilege, pinned actions, and every
`run:` step (and every image entrypoint) calling a make target or an `mlops` command that exists."""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from mlops_cli.app import app as mlops_app

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
DOCKERFILES = sorted((REPO / "services").glob("*/Dockerfile"))
SHA_PIN = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
SECRET_NAME = re.compile(r"(PASSWORD|TOKEN|SECRET|ACCESS_KEY|CREDENTIAL)", re.IGNORECASE)
MLOPS = ("mlops", ".venv/bin/mlops", "$(BIN)/mlops")


def load(path: Path) -> dict[Any, Any]:
    doc = yaml.safe_load(path.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as True
    return doc


def make_targets() -> set[str]:
    return {m.group(1) for m in re.finditer(r"^([A-Za-z0-9_.-]+):(?!=)", (REPO / "Makefile").read_text(), re.M)}


def commands(script: str) -> list[list[str]]:
    """The simple commands of a shell snippet (split on newlines, &&, ||, ;, |), env assignments and
    redirections removed."""
    out = []
    for line in script.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|\|\||;|\|", line):
            tokens = shlex.split(part, comments=True)
            while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):
                tokens.pop(0)
            cleaned, skip = [], False
            for tok in tokens:
                if skip:
                    skip = False
                elif re.fullmatch(r"\d?>>?|<", tok):
                    skip = True
                elif not re.match(r"^\d?>>?", tok):
                    cleaned.append(tok)
            if cleaned:
                out.append(cleaned)
    return out


def check_command(tokens: list[str], targets: set[str], cli: Any) -> str | None:
    """``None`` when ``tokens`` call an existing make target or mlops command (with known options)."""
    if tokens[0] == "exec":
        tokens = tokens[1:]
    if tokens[0] == "make":
        wanted = [t for t in tokens[1:] if not t.startswith("-") and "=" not in t]
        missing = [t for t in wanted if t not in targets]
        return f"make target(s) {missing} do not exist in the Makefile" if missing or not wanted else None
    if tokens[0] not in MLOPS:
        return f"{tokens[0]!r} is neither make nor mlops"
    node: Any = cli
    path = ["mlops"]
    rest = tokens[1:]
    rest = [t for t in rest if t not in ('"$@"', "$@", "$*")]
    while hasattr(node, "commands"):  # a group (typer vendors click, so no isinstance)
        runs_itself = node.invoke_without_command or not node.commands
        if runs_itself and (not rest or rest[0].startswith("-")):
            break  # a group with a callback of its own, e.g. `mlops serve --port 8080`
        if not rest or rest[0].startswith("-"):
            return f"`{' '.join(path)}` is a group; name one of its commands {sorted(node.commands)}"
        name, rest = rest[0], rest[1:]
        if name not in node.commands:
            return f"`{' '.join([*path, name])}` does not exist (`{' '.join(path)}` has {sorted(node.commands)})"
        node, path = node.commands[name], [*path, name]
    known = {opt for p in node.params for opt in (*p.opts, *p.secondary_opts)}
    given = {t.split("=", 1)[0] for t in rest if t.startswith("-")}
    unknown = sorted(o for o in given if o.startswith("--") and o not in known)
    if unknown:
        return f"`{' '.join(path)}` has no option(s) {unknown}"
    missing = [p.opts[0] for p in node.params if getattr(p, "required", False) and p.opts[0].startswith("-")
               and not given & set(p.opts)]
    return f"`{' '.join(path)}` needs {missing}" if missing else None


@pytest.fixture(scope="module")
def cli() -> Any:
    """The live `mlops` command tree (what `mlops --help` shows, level by level)."""
    group = typer.main.get_command(mlops_app)
    assert hasattr(group, "commands")
    return group


def test_there_are_three_workflows() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "train.yml", "promote.yml"}


def test_actionlint_passes_on_every_workflow(kit: Any) -> None:
    proc = subprocess.run([kit.tool("actionlint"), *map(str, WORKFLOWS)], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_security(path: Path) -> None:
    doc = load(path)
    on = doc["on"]
    triggers = set(on) if isinstance(on, dict | list) else {on}
    assert "pull_request_target" not in triggers
    assert "permissions" in doc, "workflow-level permissions missing (default would be broad)"
    assert doc["permissions"] in ({}, {"contents": "read"}), doc["permissions"]
    assert "concurrency" in doc
    for name, job in doc["jobs"].items():
        assert "permissions" in job, f"job {name} has no permissions block"
        writes = {k for k, v in job["permissions"].items() if v == "write"}
        if writes:
            assert "environment" in job, f"job {name} writes ({writes}) outside a protected environment"
        for step in job.get("steps", []):
            if "uses" in step:
                assert SHA_PIN.match(step["uses"]), f"{name}: {step['uses']!r} is not pinned to a full commit SHA"
            run = step.get("run", "")
            # step and job outputs too: a version string or a branch name spliced into the script is code
            assert not re.search(r"\$\{\{\s*(secrets\.|github\.event|inputs\.|steps\.|needs\.)", run), \
                f"{name}: run step interpolates secrets, outputs or untrusted input directly: {run!r}"
        for scope in (job.get("env", {}), doc.get("env", {}), *(s.get("env", {}) for s in job.get("steps", []))):
            for key, value in scope.items():
                if key.endswith("_ENV") and value == "null":
                    continue  # unsets a secret's *name* in the config layer: this step does not hold that secret
                if SECRET_NAME.search(key):
                    assert re.fullmatch(r"\$\{\{\s*secrets\.\w+\s*\}\}", str(value)), f"{key} is not from secrets.*"
    text = path.read_text()
    for m in re.finditer(r"secrets\.(\w+)", text):
        assert m.group(1).isupper(), m.group(0)


def test_training_secrets_are_step_scoped() -> None:
    """No train.yml job holds a secret job-wide; the signing private key reaches the training step only, with the
    runner's per-job temp dir as TMPDIR (the PEM's copy goes there and the runner empties it)."""
    train = load(REPO / ".github/workflows/train.yml")["jobs"]["train"]
    assert not [k for k, v in (train.get("env") or {}).items() if "secrets." in str(v)], train.get("env")
    holders = [s.get("name") for s in train["steps"] if "MLOPS_SIGNING_KEY" in (s.get("env") or {})]
    assert holders == ["FSDP training on this runner (small models; every profile but production)"], holders
    step = next(s for s in train["steps"] if s.get("name") == holders[0])
    assert step["env"]["TMPDIR"] == "${{ runner.temp }}"


def test_a_rollout_starts_only_from_main() -> None:
    """promote.yml can be dispatched from any branch: its first job refuses every ref but main, and every other
    job depends on it (directly or through the chain), so nothing of another branch's workflow touches production."""
    jobs = load(REPO / ".github/workflows/promote.yml")["jobs"]
    roots = [n for n, j in jobs.items() if not j.get("needs")]
    assert roots == ["shadow"], roots
    assert jobs["shadow"]["if"] == "github.ref == 'refs/heads/main'"

    def reaches_root(name: str) -> bool:
        needs = jobs[name].get("needs") or []
        needs = [needs] if isinstance(needs, str) else needs
        return name in roots or any(reaches_root(n) for n in needs)

    assert all(reaches_root(n) for n in jobs)


def test_promotion_jobs_never_run_two_at_once() -> None:
    promote = load(REPO / ".github/workflows/promote.yml")
    assert promote["concurrency"] == {"group": "promote-production", "cancel-in-progress": False}
    assert all(job.get("environment") == "production" for job in promote["jobs"].values()
               if job["permissions"].get("contents") == "write")
    steps = [s.get("run", "") for job in promote["jobs"].values() for s in job["steps"]]
    percents = [int(m) for s in steps for m in re.findall(r"--to canary --percent (\d+)", s)]
    assert percents == [10, 50]
    assert any("--to production" in s for s in steps) and any("gitops rollback" in s for s in steps)


def test_every_run_step_calls_an_existing_make_target_or_mlops_command(cli: Any) -> None:
    targets, problems, seen = make_targets(), [], 0
    for path in WORKFLOWS:
        for name, job in load(path)["jobs"].items():
            for step in job.get("steps", []):
                if "run" not in step:
                    continue
                for tokens in commands(step["run"]):
                    seen += 1
                    if (why := check_command(tokens, targets, cli)) is not None:
                        problems.append(f"{path.name}:{name}: `{' '.join(tokens)}`: {why}")
    assert seen >= 15
    assert not problems, "\n".join(problems)


def test_the_step_checker_rejects_what_it_should(cli: Any) -> None:
    targets = make_targets()
    assert check_command(["make", "test"], targets, cli) is None
    assert check_command([".venv/bin/mlops", "gitops", "promote", "--to", "staging", "--commit"], targets, cli) is None
    assert "do not exist" in (check_command(["make", "deploy-everything"], targets, cli) or "")
    assert "neither make nor mlops" in (check_command(["curl", "-X", "POST", "x"], targets, cli) or "")
    assert "does not exist" in (check_command(["mlops", "gitops", "yolo"], targets, cli) or "")
    assert "no option(s) ['--force']" in (check_command(["mlops", "gitops", "status", "--force"], targets, cli) or "")
    assert "is a group" in (check_command(["mlops", "gitops"], targets, cli) or "")
    assert "needs ['--to']" in (check_command(["mlops", "gitops", "promote", "--commit"], targets, cli) or "")
    assert commands('A=1 mlops gitops summary "r/*.md" >> "$GITHUB_STEP_SUMMARY" && make lint') == [
        ["mlops", "gitops", "summary", "r/*.md"], ["make", "lint"]]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_service_images_are_multi_stage_non_root_digest_pinned(path: Path, cli: Any) -> None:
    lines = [ln.strip() for ln in path.read_text().splitlines()]
    froms = [ln for ln in lines if ln.upper().startswith("FROM ")]
    assert len(froms) >= 2, "not multi-stage"
    for ln in froms:
        image = ln.split()[1]
        assert re.search(r"@sha256:[0-9a-f]{64}$", image) or image in {ln.split()[-1] for ln in froms[:-1]}, ln
    last_stage = lines[lines.index(froms[-1]):]
    users = [ln.split()[1] for ln in last_stage if ln.upper().startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root"), "final stage does not switch to a non-root user"
    assert any(ln.startswith("ENTRYPOINT [") for ln in last_stage), "entrypoint is not exec form"
    entry = path.parent / "entrypoint.sh"
    execs = [c for c in commands(entry.read_text()) if c[0] == "exec"]
    assert len(execs) == 1, "the entrypoint must exec exactly one command"
    assert (why := check_command(execs[0], make_targets(), cli)) is None, f"{entry}: {why}"


# --- the model as an input (issue #32): train.yml and promote.yml run for any served model -------------------------

MODEL_WORKFLOWS = ("train.yml", "promote.yml")
FAMILY_IF = re.compile(r"outputs\.family\s*==\s*'(\w+)'")


def served_models() -> list[str]:
    """The models configs/models/ defines that both overlays serve (a model-<model>.yaml each): read off the files,
    not the workflows."""
    overlays = [p for p in (REPO / "infra" / "overlays").iterdir() if p.is_dir()]
    return sorted(p.stem for p in (REPO / "configs" / "models").glob("*.yaml")
                  if all((o / f"model-{p.stem}.yaml").is_file() for o in overlays))


def _mlops_calls(path: Path) -> list[tuple[str, dict[str, Any], dict[str, Any], list[str]]]:
    """(job name, job, step, tokens) of every `mlops` call in the workflow's run steps."""
    out = []
    for name, job in load(path)["jobs"].items():
        for step in job.get("steps", []):
            for tokens in commands(step.get("run", "")):
                if tokens[0] in MLOPS:
                    out.append((name, job, step, tokens))
    return out


def _runs_for(family: str, *conditions: Any) -> bool:
    """Whether a job / step runs for a model of ``family``: only the family conditions are read (the others, e.g.
    the profile, are true for some run of every model)."""
    return all(m.group(1) == family for c in conditions if c for m in FAMILY_IF.finditer(str(c)))


def test_train_and_promote_take_a_served_model_as_input() -> None:
    """A dispatch input `model`, default fraud, one of the served models; pushes, the schedule and dispatches with no
    input fall back to fraud; every model offered loads (each step's config is that model's)."""
    from mlops_config import load_config

    models = served_models()
    assert models == ["fraud", "llm-sft"]
    for name in MODEL_WORKFLOWS:
        doc = load(REPO / ".github" / "workflows" / name)
        spec = doc["on"]["workflow_dispatch"]["inputs"]["model"]
        assert (spec["type"], spec["default"], sorted(spec["options"])) == ("choice", "fraud", models), name
        assert re.fullmatch(r"\$\{\{ inputs\.model \|\|( github\.event\.client_payload\.model \|\|)? 'fraud' \}\}",
                            doc["env"]["MODEL"]), doc["env"]["MODEL"]
        for model in spec["options"]:
            assert load_config(model=model, config_dir=REPO / "configs", environ={},
                               check_secrets=False).config.project.model == model


@pytest.mark.parametrize("name", MODEL_WORKFLOWS)
def test_every_mlops_call_names_the_model(name: str) -> None:
    calls = _mlops_calls(REPO / ".github" / "workflows" / name)
    assert len(calls) >= 6
    unnamed = [" ".join(t) for _, _, _, t in calls
               if not any(a == "--model" and b == "$MODEL" for a, b in itertools.pairwise(t))]
    assert not unnamed, f"{name}: `mlops` calls without --model \"$MODEL\":\n" + "\n".join(unnamed)


@pytest.mark.parametrize("model", served_models())
def test_what_a_models_run_names_is_what_the_platform_makes(model: str, kit: Any, tmp_path: Path) -> None:
    """For each model, the calls that run for its family (`mlops config family`) name what exists: the overlay files
    the promotions and shadows edit, the production training template the cluster step submits (the model's overlay
    switched on), the instruction set the language model's gate reads, and the pretrained checkpoint as a registry
    alias that promote.yml itself moves (the one the cluster's fine-tune reads too)."""
    from mlops_config import load_config
    from mlops_delivery.promotion import stage_env
    from mlops_model import kind_of
    from mlops_training import job_from_overlay

    from .test_llm_overlays import SWITCH_OFF, flipped

    cfg = load_config(model=model, config_dir=REPO / "configs", environ={}, check_secrets=False).config
    family = kind_of(cfg.training).value
    ran: list[str] = []
    for name in MODEL_WORKFLOWS:
        for job_name, job, step, tokens in _mlops_calls(REPO / ".github" / "workflows" / name):
            if not _runs_for(family, job.get("if"), step.get("if")):
                continue
            ran.append(" ".join(tokens[1:3]))
            opts = dict(zip(tokens, [*tokens[1:], ""], strict=True))
            if tokens[1:3] == ["gitops", "promote"]:
                env = stage_env(cfg.delivery, opts["--to"])
                assert (REPO / "infra" / "overlays" / env / f"model-{model}.yaml").is_file(), (name, job_name)
            elif tokens[1:3] == ["gitops", "rollback"]:
                assert (REPO / "infra" / "overlays" / opts["--env"] / f"model-{model}.yaml").is_file()
            elif tokens[1:3] == ["gitops", "shadow"]:
                assert (REPO / "infra" / "overlays" / "production" / f"shadow-{model}.yaml").is_file(), job_name
            elif tokens[1:3] == ["train", "submit"]:
                overlay = REPO / opts["--overlay"]
                if SWITCH_OFF in (overlay / "kustomization.yaml").read_text() and not any(
                        model in str(d.get("metadata", {}).get("annotations"))
                        for d in yaml.safe_load_all(kit.render(overlay)) if d):
                    overlay = flipped(tmp_path, overlay.name)  # the model's part of the overlay, switched on
                job = job_from_overlay(kit.render(overlay), "gh1-1", model=model)
                assert job["metadata"]["annotations"]["mlops.platform/model"] == model
            elif tokens[1:3] == ["data", "validate-instructions"]:
                assert cfg.training.causal_lm.dataset and (REPO / cfg.training.causal_lm.dataset).is_file()
    assert {"train run", "train submit", "evaluate run", "gitops promote", "canary analyze"} <= set(ran), ran
    assert ("gitops shadow" in ran) == (family == "tabular_mlp")
    train = load(REPO / ".github" / "workflows" / "train.yml")
    checkpoint = train["env"]["MLOPS__TRAINING__CAUSAL_LM__CHECKPOINT"].replace("${{ inputs.model || 'fraud' }}", model)
    assert checkpoint == f"models:/{model}@champion"
    assert any(t[1:3] == ["registry", "promote"] and "champion" in t for _, _, _, t in _mlops_calls(
        REPO / ".github" / "workflows" / "promote.yml"))
    if family == "hf_causal_lm":
        env_map = next(d for d in yaml.safe_load_all(kit.render("infra/base/training-llm"))
                       if d and d["kind"] == "ConfigMap")
        assert env_map["data"]["MLOPS__TRAINING__CAUSAL_LM__CHECKPOINT"] == checkpoint
