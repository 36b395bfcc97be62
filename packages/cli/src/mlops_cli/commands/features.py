"""``mlops features``: ingest, apply, materialize and read the Feast repository in feature_repo/."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json

app = typer.Typer(help="Features as code: the Feast repository, its offline and online stores.", no_args_is_help=True)

EntityOpt = Annotated[list[str], typer.Option("--entity", "-e", help="Entity key=value, e.g. user_id=U000001 "
                                              "(repeat for merchant_id).")]


@app.command("ingest")
def ingest(profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Lay the validated area down as the feature repository's raw source (transactions.parquet)."""
    from mlops_features import ingest as run_ingest

    loaded = load(profile, model, sets)
    contract = loaded.config.declared_contract("mlops features ingest (ties in event time go by its record id)")
    rows = run_ingest(loaded.resolve_path(loaded.config.data.validated_dir),
                      loaded.resolve_path(loaded.config.features.source_dir), record_id=contract.record_id)
    print_json(rows) if as_json else console.print(rows)


@app.command("apply")
def apply(profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Register entities, feature views and services in the Feast registry (``feast apply``)."""
    from mlops_features import apply_repo

    loaded = load(profile, model, sets)
    applied = apply_repo(loaded.config.features, loaded.root)
    print_json(applied) if as_json else console.print(applied)


@app.command("materialize")
def materialize(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
    incremental: Annotated[bool, typer.Option("--incremental", help="Only since the last materialization.")] = False,
    end: Annotated[datetime | None, typer.Option("--end", help="Window end (UTC); default now.")] = None,
    ingest_first: Annotated[bool, typer.Option("--ingest/--no-ingest", help="Lay the validated area down as the "
                                               "raw source first.")] = True,
) -> None:
    """Ingest, backfill the views' offline tables (their udfs), then load the online store (Feast's engine)."""
    from mlops_features import refresh_online

    loaded = load(profile, model, sets)
    cfg = loaded.config
    done = refresh_online(cfg.features, cfg.data, loaded.root, incremental=incremental, end=_utc(end),
                          ingest_first=ingest_first, contract=cfg.declared_contract("mlops features materialize"))
    if as_json:
        print_json(done)
        return
    console.print(f"materialized {', '.join(done['views'])} up to {done['end']} in {done['seconds']:.2f} s")


@app.command("build")
def build(profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Ingest + apply + materialize: the ``features`` stage of dvc.yaml."""
    from mlops_features import build_features

    loaded = load(profile, model, sets)
    result = build_features(loaded.config.features, loaded.config.data, loaded.root,
                            contract=loaded.config.declared_contract("mlops features build"))
    print_json(result) if as_json else console.print(result)


@app.command("get")
def get(
    entity: EntityOpt, profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read one entity row of the FeatureService from the online store."""
    from mlops_features import DataError, OnlineFeatures

    loaded = load(profile, model, sets)
    keys = loaded.config.declared_contract("mlops features get (an entity row is keyed by its entity keys)").entity_keys
    row = {}
    for item in entity:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise DataError(f"--entity {item!r} is invalid: expected key=value, e.g. {keys[0]}=U000001")
        if key.strip() not in keys:
            raise DataError(f"--entity {item!r}: unknown key {key.strip()!r}; expected one of {list(keys)}")
        row[key.strip()] = value.strip()
    result = OnlineFeatures(loaded.config.features, loaded.root,
                            contract=loaded.config.declared_contract("mlops features get")).get([row])[0]
    if as_json:
        print_json({"entity": row, "features": result})
        return
    table = Table(title=f"{loaded.config.features.feature_service} for {row}")
    table.add_column("feature")
    table.add_column("value")
    for k, v in result.items():
        table.add_row(k, str(v))
    console.print(table)


@app.command("render")
def render(
    profiles: Annotated[list[str] | None, typer.Option("--profile", "-p", help="Profiles to render (repeatable); "
                                                        "default local, staging, production.")] = None,
    sets: SetOpt = None,
) -> None:
    """Write feature_repo/feature_store[.<profile>].yaml from each profile's config (for the ``feast`` CLI)."""
    from mlops_core import atomic_write_text
    from mlops_features import render_feature_store_yaml

    for name in profiles or ["local", "staging", "production"]:
        loaded = load(name, None, sets, check_secrets=False)
        target = loaded.resolve_path(loaded.config.features.repo_path) / (
            "feature_store.yaml" if name == "local" else f"feature_store.{name}.yaml")
        atomic_write_text(target, render_feature_store_yaml(loaded.config.features, loaded.root, name))
        console.print(f"wrote {target}")


def _utc(value: datetime | None) -> datetime | None:
    """Typer parses naive datetimes; the command's times are UTC."""
    return value if value is None or value.tzinfo else value.replace(tzinfo=UTC)


@app.command("stream")
def stream(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None,
    consumer: Annotated[str, typer.Option("--consumer", help="Consumer name in the group.")] = "updater-0",
    metrics_port: Annotated[int, typer.Option("--metrics-port", help="Serve feast_feature_freshness_seconds on "
                                              "this port (0: off).")] = 9108,
    seconds: Annotated[float | None, typer.Option("--seconds", help="Stop after this long; default: run.")] = None,
) -> None:
    """Keep streamable views fresh per transaction from ``features.stream_key``; serve the freshness gauge."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from mlops_features import StreamUpdater, freshness_metrics_text

    loaded = load(profile, model, sets)
    cfg, root = loaded.config.features, loaded.root
    if metrics_port:
        class Metrics(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = freshness_metrics_text(cfg, root).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("0.0.0.0", metrics_port), Metrics)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    StreamUpdater(cfg, root, consumer=consumer).run(stop_after_s=seconds)


@app.command("freshness")
def freshness_cmd(profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None,
                  as_json: JsonOpt = False) -> None:
    """Seconds since the newest event each feature view's online values reflect, against the SLO."""
    from mlops_features import freshness

    loaded = load(profile, model, sets)
    cfg = loaded.config.features
    ages = freshness(cfg, loaded.root)
    doc = {"slo_s": cfg.freshness_slo_s, "views": ages, "breached": sorted(v for v, a in ages.items()
                                                                         if a > cfg.freshness_slo_s)}
    if as_json:
        print_json(doc)
        return
    for name, age in sorted(ages.items()):
        console.print(f"{name}: {age:.0f} s {'[red]> SLO' if age > cfg.freshness_slo_s else '[green]ok'}")


@app.command("plan")
def plan(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
    base_ref: Annotated[str | None, typer.Option("--base-ref", help="Compare with feature_repo/ at this git ref "
                                                 "(e.g. origin/main); default: the configured registry.")] = None,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="Also write the report as Markdown here "
                                                  "(CI writes it to $GITHUB_STEP_SUMMARY).")] = None,
    skip_unchanged: Annotated[bool, typer.Option("--skip-unchanged", help="With --base-ref: report nothing "
                                                 "when feature_repo/ did not change.")] = False,
) -> None:
    """Review report of a feature change: registry diff, schema, breaking changes, statistics, leakage."""
    from mlops_features import base_repo_from_git, plan_features

    loaded = load(profile, model, sets)
    cfg = loaded.config
    base = None
    if base_ref and skip_unchanged:
        import subprocess

        same = subprocess.run(["git", "-C", str(loaded.root), "diff", "--quiet", base_ref, "--",
                               cfg.features.repo_path], check=False).returncode == 0
        if same:
            text = f"## Feature plan\n\nNo change to `{cfg.features.repo_path}/` against `{base_ref}`.\n"
            if markdown is not None:
                markdown.write_text(text, encoding="utf-8")
            console.print(text, markup=False)
            return
    if base_ref:
        base = base_repo_from_git(loaded.root, base_ref, cfg.features.repo_path,
                                  loaded.root / ".mlops" / "plan-base")
    report = plan_features(cfg.features, loaded.root, contract=cfg.declared_contract("mlops features plan"),
                           tracking=cfg.tracking, base_repo=base, model=cfg.project.model)
    text = report.to_markdown()
    if markdown is not None:
        markdown.write_text(text, encoding="utf-8")
    print_json(report.to_dict()) if as_json else console.print(text, markup=False)
    if not report.ok:
        raise typer.Exit(1)
