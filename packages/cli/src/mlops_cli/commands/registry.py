"""``mlops registry``: list versions, promote along candidate → staging → canary → champion, roll back, history.

Every alias move goes through :mod:`mlops_core.lifecycle` (gates checked, ledger appended).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json

app = typer.Typer(help="Model registry lifecycle on MLflow aliases, with the promotion ledger.",
                  no_args_is_help=True)

ReasonOpt = Annotated[str, typer.Option("--reason", "-r", help="Why (recorded in the ledger).")]
ActorOpt = Annotated[str | None, typer.Option("--actor", help="Who (default $GITHUB_ACTOR or the login name).")]


def _entry_line(e: dict[str, Any]) -> str:
    src = e["from_alias"] or "-"
    return f"#{e['seq']} {e['ts']} {e['action']} v{e['version']} {src} → {e['to_alias']} by {e['actor']}: {e['reason']}"


@app.command("list")
def list_versions(profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None,
                  as_json: JsonOpt = False) -> None:
    """Versions of the model with their lifecycle aliases."""
    from mlops_core import aliases, versions

    loaded = load(profile, model, sets)
    cfg = loaded.config
    rows = versions(cfg.tracking, loaded.root, cfg.project.model)
    if as_json:
        print_json({"model": cfg.project.model, "aliases": aliases(cfg.tracking, loaded.root, cfg.project.model),
                    "versions": rows})
        return
    table = Table(title=f"{cfg.project.model}: registered versions")
    for col in ("version", "aliases", "status", "created", "run_id"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["version"], ", ".join(r["aliases"]), r["status"], r["created"], r["run_id"] or "")
    console.print(table)


@app.command("promote")
def promote(
    version: Annotated[str, typer.Option("--version", "-v", help="Registry version to move.")],
    to: Annotated[str, typer.Option("--to", help="candidate, staging, canary or champion.")],
    reason: ReasonOpt,
    actor: ActorOpt = None,
    gate_report: Annotated[Path | None, typer.Option(
        "--gate-report", help="evaluation.json to check; default: the one logged on the version's run.")] = None,
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Move a version one step along the lifecycle, after the gates that step requires (exit 1 if blocked)."""
    from mlops_core import LifecycleError, default_actor
    from mlops_core import promote as do_promote

    loaded = load(profile, model, sets)
    cfg = loaded.config
    report = None
    if gate_report is not None:
        try:
            report = json.loads(gate_report.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise LifecycleError(f"--gate-report {str(gate_report)!r} is not a readable JSON file: {exc}") from None
    entry = do_promote(cfg.tracking, loaded.root, cfg.project.model, version, to, reason=reason,
                       actor=actor or default_actor(), gate_report=report,
                       required_gates={"staging": cfg.evaluation.required_gates})
    if as_json:
        print_json(entry.as_dict())
        return
    console.print(_entry_line(entry.as_dict()))
    console.print(f"aliases now: {entry.aliases_after}")


@app.command("rollback")
def rollback(reason: ReasonOpt, actor: ActorOpt = None, profile: ProfileOpt = None, model: ModelOpt = None,
             sets: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Restore the champion, in the registry only: the fallback version becomes champion again (recorded in the
    ledger). No overlay is edited, so the cluster serves what it served (reverting an overlay is `mlops gitops
    rollback`)."""
    from mlops_core import default_actor, restore_champion

    loaded = load(profile, model, sets)
    cfg = loaded.config
    entry = restore_champion(cfg.tracking, loaded.root, cfg.project.model, reason=reason,
                             actor=actor or default_actor())
    if as_json:
        print_json(entry.as_dict())
        return
    console.print(_entry_line(entry.as_dict()))
    console.print(f"champion is v{entry.version} again (replaced v{entry.extra.get('replaced')})")


@app.command("history")
def history(
    at: Annotated[str | None, typer.Option("--at", help="ISO time (UTC if no zone): aliases as they were then.")
                  ] = None,
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """The promotion ledger; with --at, also which version held each alias (e.g. champion) at that time."""
    from mlops_core import aliases
    from mlops_core import history as read_history

    loaded = load(profile, model, sets)
    cfg = loaded.config
    entries = [e.as_dict() for e in read_history(cfg.tracking, loaded.root, cfg.project.model, at=at)]
    state = aliases(cfg.tracking, loaded.root, cfg.project.model, at=at) if at else None
    if as_json:
        print_json({"model": cfg.project.model, "at": at, "aliases_at": state, "entries": entries})
        return
    for e in entries:
        console.print(_entry_line(e))
    if at is not None:
        champion = (state or {}).get("champion")
        console.print(f"at {at}: champion = {('v' + champion) if champion else 'none'}; aliases {state}")


@app.command("verify-ledger")
def verify_ledger(profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None,
                  as_json: JsonOpt = False) -> None:
    """Walk the ledger's hash chain; exit 1 naming the first entry that does not match."""
    from mlops_core import verify_ledger as do_verify

    loaded = load(profile, model, sets)
    cfg = loaded.config
    verdict = do_verify(cfg.tracking, loaded.root, cfg.project.model)
    if as_json:
        print_json({"model": cfg.project.model, **verdict.as_dict()})
    elif verdict.ok:
        note = f"; entries {verdict.unchained} predate the chain (not verifiable)" if verdict.unchained else ""
        console.print(f"ledger of {cfg.project.model}: {verdict.checked} entries verified, head "
                      f"{(verdict.head_sha256 or '-')[:16]}{note}")
    else:
        typer.echo(f"ledger of {cfg.project.model} is broken at entry #{verdict.first_bad_seq}: {verdict.problem}",
                   err=True)
    if not verdict.ok:
        raise typer.Exit(1)


@app.command("verify")
def verify(
    version: Annotated[str, typer.Option("--version", "-v", help="Registry version to audit.")],
    rerun: Annotated[bool, typer.Option("--rerun", help="Also replay the recorded trajectory (a short training).")
                     ] = False,
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Walk a version's provenance: data, FeatureService, config, commit, trajectory, weights, signature, gates,
    ledger, alias moves, overlay commits, SBOM. Exit 1 when a link is broken; 0 otherwise, which is not "all
    verified": the summary counts links recorded but not replayed (the trajectory without --rerun) and not
    verifiable apart from verified ones (``verified`` in --json is true only when every link is)."""
    from mlops_pipeline import verify_version

    loaded = load(profile, model, sets, check_secrets=False)
    audit = verify_version(loaded.config, loaded.root, version, rerun=rerun)
    if as_json:
        print_json(audit.as_dict())
    else:
        table = Table(title=f"{audit.model} v{audit.version}: provenance")
        for col in ("link", "status", "detail"):
            table.add_column(col)
        style = {"verified": "green", "recorded, not replayed": "cyan", "not verifiable": "yellow",
                 "broken": "bold red"}
        for link in audit.links:
            table.add_row(link.name, f"[{style[link.status]}]{link.status}[/]", link.detail)
        console.print(table)
        console.print(", ".join(f"{n} {s}" for s, n in audit.counts().items() if n))
    if not audit.ok:
        raise typer.Exit(1)


@app.command("attach-sbom")
def attach_sbom(
    version: Annotated[str, typer.Option("--version", "-v", help="Registry version the SBOM's image serves.")],
    sbom: Annotated[Path | None, typer.Option("--sbom", help="CycloneDX JSON; default reports/sbom/serving.cdx.json "
                                              "(make sbom).")] = None,
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Reference the serving image's SBOM from a registry version (path and SHA-256 in its tags)."""
    from mlops_pipeline import attach_sbom as do_attach

    loaded = load(profile, model, sets, check_secrets=False)
    tags = do_attach(loaded.config, loaded.root, version, sbom)
    if as_json:
        print_json(tags)
    else:
        console.print(f"v{version}: {tags['mlops.sbom']} (sha256 {tags['mlops.sbom_sha256'][:16]}…)")


@app.command("signing-keys")
def signing_keys(
    out: Annotated[Path, typer.Option("--out", help="New folder for the key pair (refused when it exists).")],
    as_json: JsonOpt = False,
) -> None:
    """Generate the model-signing key pair a cluster's Secrets hold (mlops-signing-key, mlops-signing-public-key)."""
    from mlops_model import ensure_local_keys

    if out.exists():
        console.print(f"[red]error:[/red] --out {str(out)!r} exists; give a new folder (a key is never overwritten)")
        raise typer.Exit(2)
    private, public = ensure_local_keys(out)
    # the names infra/ mounts: the trainer reads the private key, serving and the gates the public one
    secrets = {"mlops-signing-key": "kubectl create secret generic mlops-signing-key "
                                    f"--from-file={private.name}={private}",
               "mlops-signing-public-key": "kubectl create secret generic mlops-signing-public-key "
                                           f"--from-file={public.name}={public}"}
    if as_json:
        print_json({"private_key": str(private), "public_key": str(public), "secrets": secrets})
        return
    console.print(f"private key {private} (trainer only), public key {public} (serving, gates); create the Secrets:")
    for command in secrets.values():
        console.print(f"  {command}")


roles_app = typer.Typer(help="MLflow users per role and environment (the admin applies them).", no_args_is_help=True)
app.add_typer(roles_app, name="roles")


@roles_app.command("apply")
def roles_apply(
    namespace: Annotated[str, typer.Option(
        "--environment", "-e",
        help="The environment's namespace (mlops-staging); its users are <namespace>.<model>-<role>.")],
    admin_username_env: Annotated[str, typer.Option(
        "--admin-username-env", help="Env var holding the tracking server admin's name.",
    )] = "MLFLOW_AUTH_ADMIN_USERNAME",
    admin_password_env: Annotated[str, typer.Option(
        "--admin-password-env", help="Env var holding the admin's password.")] = "MLFLOW_AUTH_ADMIN_PASSWORD",
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create the environment's experiment, registered model and one MLflow user per role with exactly its grants.

    Passwords come from the environment, never from argv: MLFLOW_ROLE_<ROLE>_PASSWORD for each of trainer,
    delivery, monitor and reader (MLFLOW_ROLE_<ROLE>_USERNAME, when set, must name that role's user). Re-running
    changes nothing; a password that no longer authenticates is set again.
    """
    import os

    from mlops_core import TrackingError, apply_roles, registered_model_name, role_passwords

    loaded = load(profile, model, sets, check_secrets=False)
    cfg = loaded.config
    admin = (os.environ.get(admin_username_env, ""), os.environ.get(admin_password_env, ""))
    if not all(admin):
        raise TrackingError(f"set {admin_username_env} and {admin_password_env} to the tracking server admin's "
                            "name and password")
    name = cfg.project.model
    applied = apply_roles(cfg.tracking.uri, admin, namespace=namespace, experiment=cfg.tracking.experiment,
                          registered_model=registered_model_name(cfg.tracking, name), model=name,
                          passwords=role_passwords(os.environ, namespace=namespace, model=name),
                          artifact_location=cfg.tracking.artifact_location if "://" in cfg.tracking.artifact_location
                          else None)
    if as_json:
        print_json(applied.as_dict())
        return
    for user, grant in applied.grants.items():
        console.print(f"{user}: experiment {grant['experiment']}, registered model {grant['registered_model']}")
    console.print("\n".join(applied.changes) or "nothing to change")
