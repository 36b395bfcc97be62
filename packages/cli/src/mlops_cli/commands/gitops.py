"""``mlops gitops``: promotion and rollback as manifest commits; which version runs where."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json

# mlops_delivery (with mlops_model's numpy/pandas/scipy chain) is imported inside the commands that use it: every
# `mlops` process imports this module, most never run a gitops command.
if TYPE_CHECKING:
    from mlops_config import LoadedConfig
    from mlops_delivery import ManifestChange, ShadowChange

app = typer.Typer(help="GitOps: promote and roll back by editing infra/ overlays (each change a commit).",
                  no_args_is_help=True)

CommitOpt = Annotated[bool, typer.Option("--commit", help="Record the edit as a git commit of that one file.")]
PushOpt = Annotated[bool, typer.Option("--push", help="Push the commit (needs --commit).")]


def _load_for_change(push: bool, commit: bool, profile: str | None, model: str | None,
                     sets: list[str] | None) -> LoadedConfig:
    """The config of a manifest-editing command, once its ``--push`` is known to come with ``--commit``."""
    if push and not commit:
        raise typer.BadParameter("--push needs --commit", param_hint="--push")
    return load(profile, model, sets, check_secrets=False)


def _print_change(change: ManifestChange | ShadowChange, as_json: bool) -> None:
    from mlops_delivery import ManifestChange

    if as_json:
        print_json(change.to_dict())
        return
    if not change.changed:
        console.print(f"{change.action}: already in place, nothing changed")
        return
    typer.echo(change.diff, nl=False)
    written = f"wrote {change.path}" if isinstance(change, ManifestChange) else "wrote the files"
    where = f"committed {change.commit[:12]}" if change.commit else written
    if change.branch:
        where += f" on branch {change.branch}"
    where += " and pushed" if change.pushed else ""
    if change.pull_request:
        where += f"; pull request {change.pull_request}"
    console.print(f"{change.action}: {where}")


@app.command("promote")
def promote(
    to: Annotated[str, typer.Option("--to", help="staging, canary or production.")],
    version: Annotated[int | None, typer.Option(
        "--version", "-v", help="Registry version; default: the one holding the stage's registry alias.")] = None,
    percent: Annotated[int | None, typer.Option("--percent", help="Canary share; the next canary step.")] = None,
    commit: CommitOpt = False,
    push: PushOpt = False,
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pin VERSION in the target overlay (gates must have passed; no stage may be skipped) and print the diff."""
    from mlops_delivery import promote_version

    loaded = _load_for_change(push, commit, profile, model, sets)
    cfg = loaded.config
    change = promote_version(cfg.delivery, cfg.tracking, loaded.root, cfg.project.model, version, to,
                             percent=percent, commit=commit, push=push)
    _print_change(change, as_json)


@app.command("rollback")
def rollback(
    env: Annotated[str, typer.Option("--env", "-e", help="Environment (overlay) to revert.")] = "production",
    commit: CommitOpt = False,
    push: PushOpt = False,
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revert ENV's last promotion, in its overlay only: drop a running canary, else serve the overlay's previous
    version again (per delivery.commit_mode with --commit). The registry's aliases do not move (moving the champion back
    is `mlops registry rollback`); the drift rollback to the fallback is `mlops monitor run`'s."""
    from mlops_delivery import revert_promotion

    loaded = _load_for_change(push, commit, profile, model, sets)
    cfg = loaded.config
    change = revert_promotion(cfg.delivery, loaded.root, cfg.project.model, env, commit=commit, push=push)
    _print_change(change, as_json)


@app.command("shadow")
def shadow(
    version: Annotated[int | None, typer.Option(
        "--version", "-v", help="Candidate to shadow; default: the version holding the registry alias staging.")
    ] = None,
    fraction: Annotated[float, typer.Option("--fraction", help="Share of live requests mirrored, in (0, 1].")] = 1.0,
    stop: Annotated[bool, typer.Option("--stop", help="End the running shadow instead.")] = False,
    commit: CommitOpt = False,
    push: PushOpt = False,
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start (or --stop) a shadow of the candidate in production: its own predictor gets a copy of live traffic."""
    from mlops_delivery import start_shadow, stop_shadow

    if stop and version is not None:
        raise typer.BadParameter("--stop ends the running shadow; it takes no --version", param_hint="--stop")
    loaded = _load_for_change(push, commit, profile, model, sets)
    cfg = loaded.config
    if stop:
        change = stop_shadow(cfg.delivery, loaded.root, cfg.project.model, commit=commit, push=push)
    else:
        change = start_shadow(cfg.delivery, cfg.tracking, loaded.root, cfg.project.model, version, fraction=fraction,
                              commit=commit, push=push)
    _print_change(change, as_json)


@app.command("status")
def status(profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Which version runs in each environment, with which traffic split (as git says)."""
    from mlops_delivery import gitops_status

    loaded = load(profile, model, sets, check_secrets=False)
    cfg = loaded.config
    placements = gitops_status(cfg.delivery, loaded.root, cfg.project.model)
    if as_json:
        print_json({"model": cfg.project.model, "environments": {e: p.to_dict() for e, p in placements.items()}})
        return
    table = Table(title=f"{cfg.project.model}: what runs where")
    for col in ("env", "stable", "canary", "traffic (stable/canary)", "previous", "storageUri"):
        table.add_column(col, overflow="fold")
    for env, p in placements.items():
        table.add_row(env, f"v{p.stable_version}", f"v{p.canary_version}" if p.canary_version else "-",
                      f"{p.stable_percent}/{p.canary_percent}", f"v{p.previous_version}" if p.previous_version else "-",
                      p.storage_uri)
    console.print(table)


@app.command("summary")
def summary(
    reports: Annotated[list[str], typer.Argument(help="Markdown files or globs (relative to the repo root).")],
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    sets: SetOpt = None,
) -> None:
    """Append Markdown reports to the CI job summary ($GITHUB_STEP_SUMMARY), or print them without one."""
    from mlops_delivery import write_job_summary

    loaded = load(profile, model, sets, check_secrets=False)
    target = write_job_summary(loaded.root, reports)
    console.print(f"appended {target['files']} report(s) to {target['to']}")


@app.command("resolve")
def resolve(
    alias: Annotated[str | None, typer.Option("--alias", help="Registry alias; default: the newest version.")] = None,
    output: Annotated[str, typer.Option("--output", help="Step output name written to $GITHUB_OUTPUT.")] = "version",
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    sets: SetOpt = None,
) -> None:
    """Print the registry version holding ALIAS (or the newest) and set it as a CI step output."""
    from mlops_delivery import resolve_version, write_step_output

    loaded = load(profile, model, sets, check_secrets=False)
    version = resolve_version(loaded.config.tracking, loaded.root, loaded.config.project.model, alias)
    write_step_output(output, str(version))
    typer.echo(str(version))


@app.command("set-images")
def set_images_cmd(
    images: Annotated[list[str], typer.Option("--image", help="NAME@sha256:<digest> (repeat for each image).")],
    kustomizations: Annotated[list[str] | None, typer.Option(
        "--kustomization", help="Kustomization file to edit (repeatable); default: every overlay's and "
        "infra/platform's.")] = None,
    commit: CommitOpt = False,
    push: PushOpt = False,
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pin images by digest in the kustomizations' ``images:`` (what the release workflow commits), recorded per
    delivery.commit_mode: a commit on the branch, or a branch of its own and a pull request."""
    from mlops_delivery import set_images

    loaded = _load_for_change(push, commit, profile, model, sets)
    delivery = loaded.config.delivery
    infra = loaded.root / delivery.infra_dir
    paths = [loaded.root / k for k in kustomizations] if kustomizations else [
        *(infra / "overlays" / env / "kustomization.yaml" for env in delivery.environments),
        infra / "platform" / "kustomization.yaml"]
    change = set_images(paths, images, root=loaded.root, delivery=delivery, commit=commit, push=push)
    if as_json:
        print_json(change.to_dict())
        return
    if not change.changed:
        console.print("images already pinned at these digests, nothing changed")
        return
    typer.echo(change.diff, nl=False)
    console.print(f"pinned {len(change.images)} image(s)" + (f"; committed {change.commit[:12]}" if change.commit
                                                               else "")
                  + (f" on branch {change.branch}" if change.branch else "") + ("; pushed" if change.pushed else "")
                  + (f"; pull request {change.pull_request}" if change.pull_request else ""))
