"""The demo's shadow phase (before the canary): the candidate as a predictor of its own gets a copy of live
traffic served by the champion; the shadow analysis compares the two answers request by request."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from mlops_pipeline import plots
from mlops_pipeline.context import PipelineContext
from mlops_pipeline.local_server import loopback_url, request_rows, run_servers, send_traffic, serving_ports
from mlops_pipeline.report import Section


def step_shadow(ctx: PipelineContext) -> dict[str, Any]:
    """Champion serves, the candidate (alias ``staging``) shadows every request; nothing it answers is returned."""
    from mlops_core import aliases
    from mlops_delivery import analyze_shadow
    from mlops_model import LEGACY_THRESHOLD
    from mlops_serving import version_thresholds

    version = ctx.facts["candidate_version"]
    stable = aliases(ctx.cfg.tracking, ctx.root, ctx.model).get("champion")
    log_dir = ctx.work_dir / "shadow_log"
    n = 1_000 if ctx.fast else 3_000
    rows = request_rows(ctx.validated(), n, ctx.cfg.project.seed + 2, ctx.cfg.declared_contract("the demo's traffic"))
    started = time.time()
    ports = serving_ports(2)  # the live server names the candidate's URL: both start side by side
    live_args = ["--alias", "champion", "--set", f"serving.prediction_log_uri={log_dir}",
                 "--set", "serving.prediction_log_flush_s=0.2", "--set", "serving.tabular.shadow.fraction=1.0",
                 "--set", f"serving.tabular.shadow.url={loopback_url(ports[0])}",
                 "--set", "serving.tabular.shadow.timeout_s=2"]
    with run_servers(ctx.root, ctx.model, [
            (ctx.work_dir / "serve-shadow-candidate.log", ["--role", "predictor", "--alias", "staging"]),
            (ctx.work_dir / "serve-shadow.log", live_args)], ports=ports) as (_, server):
        traffic = send_traffic(server, rows)
        time.sleep(1.0)  # the sender's last call answers before the server stops (and flushes the log)
        metrics = server.metrics_text()
    override = ctx.cfg.evaluation.tabular.decision_threshold
    threshold_of = version_thresholds(ctx.cfg.tracking, ctx.root, ctx.model, override,
                                      override_key="evaluation.tabular.decision_threshold")
    analysis = analyze_shadow(log_dir, ctx.model, threshold=override or LEGACY_THRESHOLD,
                              since=datetime.fromtimestamp(started, UTC), versions=[version],
                              threshold_of=lambda v: threshold_of(v).value)
    counters = {name: _counter(metrics, f"mlops_serving_shadow_{name}_total") for name in
                ("mirrored", "dropped", "answered", "errors")}
    ctx.facts["shadow"] = {"analysis": analysis.to_dict(), "counters": counters, "stable": stable,
                           "candidate": version, "traffic": traffic["statuses"]}
    return {"stable": stable, "candidate": version, "requests": traffic["requests"], "statuses": traffic["statuses"],
            "mirrored": analysis.requests, "pearson": analysis.pearson, "spearman": analysis.spearman,
            "flipped": analysis.flipped, "flip_rate": analysis.flip_rate, "errors": analysis.errors,
            "latency": analysis.latency, "counters": counters}


def _counter(text: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def summarize_shadow_step(o: dict[str, Any]) -> str:
    """The summary table's line."""
    lat = o["latency"]
    return (f"v{o['candidate']} shadowed v{o['stable']} on {o['mirrored']} requests: pearson {_f(o['pearson'])}, "
            f"{o['flipped']} decisions flipped, {o['errors']} errors, candidate p99 {_f(lat['shadow_p99_ms'])} ms")


def shadow_section(ctx: PipelineContext) -> Section | None:
    shadow = ctx.facts.get("shadow")
    if not shadow:
        return None
    a, lat = shadow["analysis"], shadow["analysis"]["latency"]
    rows = [["mirrored requests (instances answered)", f"{a['requests']} ({a['answered_rows']})"],
            ["Pearson / Spearman of the scores", f"{_f(a['pearson'])} / {_f(a['spearman'])}"],
            ["mean |candidate − live|", _f(a["mean_abs_diff"])],
            [f"decisions flipped at {a['threshold']}",
             f"{a['flipped']} (to flagged {a['flipped_to_flag']}, to passed {a['flipped_to_pass']}; "
             f"rate {_f(a['flip_rate'])})"],
            ["candidate errors", f"{a['errors']} {a['errors_by_status'] or ''}"],
            ["p50 / p99 ms: candidate call vs live model step",
             f"{_f(lat['shadow_p50_ms'])} / {_f(lat['shadow_p99_ms'])} vs {_f(lat['live_p50_ms'])} / "
             f"{_f(lat['live_p99_ms'])}"],
            ["sender: mirrored / dropped (queue full)",
             f"{shadow['counters']['mirrored']:.0f} / {shadow['counters']['dropped']:.0f}"]]
    groups = {"p50 ms": {"candidate": lat["shadow_p50_ms"] or 0.0, "live": lat["live_p50_ms"] or 0.0},
              "p99 ms": {"candidate": lat["shadow_p99_ms"] or 0.0, "live": lat["live_p99_ms"] or 0.0}}
    return Section("shadow", f"Shadow: candidate v{shadow['candidate']} beside champion v{shadow['stable']}",
                   text="every live request was also sent to the candidate's own predictor, off the request path; "
                        "callers only ever saw the champion's answer",
                   table={"header": ["figure", "value"], "rows": rows},
                   plots=[plots.grouped_bar_chart("shadow-latency", groups, title="candidate call vs live model step")])


def _f(value: Any) -> str:
    return "" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
