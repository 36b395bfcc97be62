"""``mlops data``: generate sample batches, run the validation gate, print the data version."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json

app = typer.Typer(help="Raw data: sample generator and the Great Expectations gate with quarantine.",
                  no_args_is_help=True)


@app.command("generate")
def generate(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Batch folder; default data.raw_dir.")] = None,
    rows: Annotated[int | None, typer.Option("--rows", help="Rows across all days; default data.rows.")] = None,
    days: Annotated[int | None, typer.Option("--days", help="Days, one batch each; default data.days.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed; default project.seed.")] = None,
    drift: Annotated[str | None, typer.Option(
        "--drift", help="none | covariate | prior | concept | category; default data.drift.")] = None,
    start_date: Annotated[str | None, typer.Option("--start-date", help="First UTC day, YYYY-MM-DD.")] = None,
) -> None:
    """Write one parquet batch of sample transactions per day (same seed → same bytes)."""
    from mlops_features import generate_transactions

    loaded = load(profile, model, sets, check_secrets=False)
    d = loaded.config.data
    paths = generate_transactions(
        out if out is not None else loaded.resolve_path(d.raw_dir),
        rows=d.rows if rows is None else rows, days=d.days if days is None else days,
        seed=loaded.config.project.seed if seed is None else seed, drift=drift or d.drift,
        start_date=start_date or d.start_date, users=d.users, merchants=d.merchants, fraud_rate=d.fraud_rate,
    )
    if as_json:
        print_json({"batches": [str(p) for p in paths]})
        return
    for p in paths:
        console.print(f"wrote {p}")


@app.command("validate")
def validate(
    batches: Annotated[list[Path] | None, typer.Argument(help="Raw parquet batches; default: data.raw_dir/*.parquet.")
                       ] = None,
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Validate batches: good rows to data.validated_dir, bad rows and broken batches to data.quarantine_dir."""
    from mlops_features import DataError, validate_batches

    loaded = load(profile, model, sets, check_secrets=False)
    d = loaded.config.data
    if not batches:
        batches = sorted(loaded.resolve_path(d.raw_dir).glob("*.parquet"))
        if not batches:
            raise DataError(f"no batches given and none in {d.raw_dir!r}: run `mlops data generate` first")
    contract = loaded.config.declared_contract("mlops data validate (the gate checks batches against it)")
    summary = validate_batches(batches, d, loaded.root, contract=contract)
    if as_json:
        print_json(summary.to_dict())
        return
    table = Table(title="validation gate")
    for name in ("batch", "input", "accepted", "quarantined", "rejected", "reasons"):
        table.add_column(name, overflow="fold")
    for b in summary.batches:
        table.add_row(b.batch, str(b.input_rows), str(b.accepted_rows), str(b.quarantined_rows),
                      "yes" if b.batch_rejected else "", "; ".join(b.reasons))
    console.print(table)


@app.command("validate-instructions")
def validate_instructions(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for accepted.jsonl, quarantine.jsonl, report.json.")
                   ] = Path("data/llm/gate"),
) -> None:
    """Gate a language model's instruction JSONL (training.causal_lm.dataset), counting tokens with its checkpoint's
    tokenizer: accepted examples and quarantined lines with reasons."""
    from mlops_training import gate_instructions

    loaded = load(profile, model, sets, check_secrets=False)
    result = gate_instructions(loaded.config, loaded.root, out if out.is_absolute() else loaded.root / out)
    if as_json:
        print_json(result.to_json())
        return
    console.print(f"{result.input_rows} lines: {result.accepted_rows} accepted, {result.quarantined_rows} quarantined "
                  f"{result.reasons or ''} -> {result.accepted_path}")


@app.command("version")
def version(profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Print the data version: SHA-256 of the validated area (recorded on training runs)."""
    from mlops_features import data_version

    loaded = load(profile, model, sets, check_secrets=False)
    digest = data_version(loaded.config.data, loaded.root)
    if as_json:
        print_json({"data_version": digest})
        return
    console.print(digest)



@app.command("ingest")
def ingest(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
    no_push: Annotated[bool, typer.Option("--no-push", help="Version locally only (no dvc push).")] = False,
) -> None:
    """Validate batches new under data.landing_uri; version the accepted area (dvc add + push to data.dvc_remote).

    A newly published version opens or updates the retraining pull request pinning it when
    delivery.retrain.on_data is set; exits non-zero when that request failed (the version stays published)."""
    from mlops_cli.commands.labels import print_retrain
    from mlops_pipeline import run_ingest

    loaded = load(profile, model, sets, check_secrets=False)
    run = run_ingest(loaded, push=not no_push)
    report = run.report
    if as_json:
        print_json(run.to_dict())
        run.check()
        return
    console.print(f"{len(report.new)} new batch(es) of {len(report.landed)} landed; accepted area "
                  f"{report.data_md5 or '-'}{' pushed' if report.pushed else ''}")
    print_retrain(run.retrain)
    run.check()


@app.command("pull")
def pull(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
    data_version: Annotated[str | None, typer.Option(
        "--data-version", help="md5 of a published version, or latest; default: the model's data-version pin "
        "(delivery.retrain.pin_path) when the checkout has one, else latest.")] = None,
) -> None:
    """Fetch a published version of the accepted area from data.dvc_remote (what training reads): the version
    asked for, else the one the model's pin names (what a merged retraining pull request chose), else the newest."""
    from mlops_config import read_data_pin
    from mlops_features import pull_accepted

    loaded = load(profile, model, sets, check_secrets=False)
    cfg = loaded.config
    pinned = None if data_version else read_data_pin(cfg.delivery.retrain, loaded.root, cfg.project.model)
    version, source = ((data_version, "--data-version") if data_version
                       else (pinned, cfg.delivery.retrain.pin_path.format(model=cfg.project.model)) if pinned
                       else ("latest", "latest"))
    md5 = pull_accepted(cfg.data, loaded.root, version)
    if as_json:
        print_json({"data_md5": md5, "asked": version, "from": source})
        return
    console.print(f"pulled accepted area {md5} ({version} from {source})")
