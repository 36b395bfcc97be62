"""``mlops retrain request|merge``: retraining as a pull request that pins the data version."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlops_cli.common import JsonOpt, ProfileOpt, SetOpt, console, load, print_json

app = typer.Typer(help="Retraining pull requests: one per model, pinning the data version merging trains on.",
                  no_args_is_help=True)

ModelReq = Annotated[str, typer.Option("--model", "-m", help="Model config (configs/models/<M>.yaml).")]


@app.command("request")
def request(
    model: ModelReq,
    reason: Annotated[str, typer.Option("--reason", help="Why: drift, performance or data.")],
    evidence: Annotated[Path, typer.Option("--evidence", help="JSON object with the trigger's figures and links "
                                                              "(summary, figures, links; e.g. a monitor report).")],
    data_version: Annotated[str | None, typer.Option(
        "--data-version", help="Accepted data version (md5) to pin; default the newest published one.")] = None,
    profile: ProfileOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Open, or update, the model's retraining pull request (rate-limited; never merged unless auto_merge)."""
    from mlops_delivery import RetrainTrigger, load_evidence, request_retrain
    from mlops_pipeline import write_retrain_metrics

    loaded = load(profile, model, sets, check_secrets=False)
    cfg = loaded.config
    trigger = RetrainTrigger(model=model, reason=reason, evidence=load_evidence(evidence), data_version=data_version)
    ledger = loaded.root / cfg.project.state_dir / "retrain" / "triggers.jsonl"
    outcome = request_retrain(cfg.delivery, cfg.data, loaded.root, trigger, ledger=ledger)
    write_retrain_metrics(loaded)  # the counters are the ledger's: a request by hand counts as the monitor's do
    if as_json:
        print_json(outcome.to_dict())
        return
    where = f" {outcome.url}" if outcome.url else ""
    console.print(f"retrain {model}: {outcome.status} ({outcome.branch} → data {outcome.data_version}){where}")
    if outcome.detail:
        console.print(outcome.detail)


@app.command("merge")
def merge(model: ModelReq, profile: ProfileOpt = None, sets: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Merge the model's open retraining pull request on a bare git remote: fast-forward the base to it."""
    from mlops_delivery import merge_retrain

    loaded = load(profile, model, sets, check_secrets=False)
    sha = merge_retrain(loaded.config.delivery, loaded.root, model)
    if as_json:
        print_json({"model": model, "merged_sha": sha, "base": loaded.config.delivery.git_branch})
        return
    delivery = loaded.config.delivery
    console.print(f"merged {delivery.retrain.branch.format(model=model)} into {delivery.git_branch} at {sha[:12]}")
