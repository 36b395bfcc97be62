"""``mlops train``: run (torchrun + FSDP2), submit (a Kubeflow TrainJob), plan (memory planner + doctor),
export-accelerate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json

app = typer.Typer(help="Train with FSDP2 under torchrun, plan memory, export an Accelerate config.",
                  no_args_is_help=True)


@app.command("run")
def run(
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
    nproc: Annotated[int | None, typer.Option("--nproc", min=1, help="Processes per node (training.nproc).")] = None,
    nnodes: Annotated[int | None, typer.Option("--nnodes", min=1, help="Nodes (training.nnodes).")] = None,
    rdzv_endpoint: Annotated[str | None, typer.Option("--rdzv-endpoint", help="host:port of the rendezvous.")] = None,
    max_restarts: Annotated[int | None, typer.Option("--max-restarts", min=0, help="torchrun --max-restarts.")] = None,
    run_name: Annotated[str | None, typer.Option("--run-name", help="Resume this run's checkpoints.")] = None,
    no_track: Annotated[bool, typer.Option("--no-track", help="Export only; no MLflow run or version.")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the result JSON to this file.")] = None,
    record: Annotated[Path | None, typer.Option(
        "--record", help="Also write what the run made of its inputs (hashes, steps, metrics; no run id, version "
        "or timing) to this file: the same bytes for the same code, config and data.")] = None,
) -> None:
    """Check the config (doctor), train under torchrun, export, log to MLflow and register a version."""
    from mlops_training import train_model

    flags = {"nproc": nproc, "nnodes": nnodes, "rdzv_endpoint": rdzv_endpoint, "max_restarts": max_restarts}
    extra = [f"training.{k}={v}" for k, v in flags.items() if v is not None]
    loaded = load(profile, model, [*(sets or []), *extra])
    result = train_model(loaded.config, loaded.root, run_name=run_name, track=not no_track)
    if result is None:
        console.print("this node's workers finished; rank 0's node holds the result")
        return
    for path, doc in ((out, result.to_json()), (record, result.record())):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    if as_json:
        print_json(result.to_json())
        return
    console.print(f"run {result.run_name}: {result.steps} steps, weights {result.weights_sha256[:16]}…")
    console.print(f"metrics: {', '.join(f'{k}={v:.4g}' for k, v in result.metrics.items())}")
    console.print(f"exported to {result.export_dir}")
    if result.model_version:
        console.print(f"registered {result.model_name} version {result.model_version} (run {result.run_id})")


@app.command("submit")
def submit(
    overlay: Annotated[Path, typer.Option("--overlay", help="Kustomize overlay holding the TrainJob template.")] = Path(
        "infra/overlays/production"),
    run_id: Annotated[str, typer.Option("--run-id", help="Names the job <template>-<run id> (its run name).")] = "",
    timeout_s: Annotated[float, typer.Option("--timeout", min=60, help="Seconds to wait for the job.")] = 10800.0,
    poll_s: Annotated[float, typer.Option("--poll", min=1, help="Seconds between status checks.")] = 15.0,
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="The model whose template (annotation mlops.platform/model) to submit; must be in "
        "configs/models/. Default: the overlay's one TrainJob.")] = None,
) -> None:
    """Create the overlay's training job template (the model's: a Kubeflow Trainer TrainJob or a suspended
    PyTorchJob) on the cluster and wait for it (status, logs on failure).

    kubectl's credentials: ``KUBECONFIG``, or the kubeconfig's content in ``KUBECONFIG_DATA`` (a CI secret),
    written to a private temporary file for the duration of the command.
    """
    import os
    import tempfile
    import time

    from mlops_training import submit_trainjob

    if model is not None:  # an unknown model fails here, naming the models configs/models/ defines
        model = load(None, model, None, check_secrets=False).config.project.model
    with tempfile.TemporaryDirectory() as tmp:
        if os.environ.get("KUBECONFIG_DATA"):
            path = Path(tmp) / "kubeconfig"
            path.touch(mode=0o600)
            path.write_text(os.environ["KUBECONFIG_DATA"], encoding="utf-8")
            os.environ["KUBECONFIG"] = str(path)
        result = submit_trainjob(overlay, run_id or time.strftime("%Y%m%d%H%M%S"), timeout_s=timeout_s,
                                 poll_s=poll_s, echo=console.print, model=model)
    console.print(f"job {result.namespace}/{result.name}: {result.state} after {result.seconds:.0f}s")


@app.command("plan")
def plan(
    model: Annotated[str, typer.Option("--model", "-m", help="LLaMA preset (llama2-70b, ...) or model config.")],
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs per node.")],
    gpu_memory_gb: Annotated[float, typer.Option("--gpu-memory-gb", help="Memory of one GPU in GiB.")],
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="Nodes.")] = 1,
    seq_len: Annotated[int | None, typer.Option("--seq-len", min=1, help="Tokens per sequence.")] = None,
    micro_batch: Annotated[int | None, typer.Option("--micro-batch", min=1, help="Sequences per GPU.")] = None,
    profile: ProfileOpt = None,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Estimate per-GPU memory of every strategy × precision × offload × checkpointing; recommend one."""
    from mlops_training import PRESETS, plan_report

    loaded = load(profile, None if model in PRESETS else model, sets)
    report = plan_report(loaded.config.training, model, gpus=gpus, gpu_memory_gb=gpu_memory_gb, nodes=nodes,
                         seq_len=seq_len, micro_batch=micro_batch)
    if as_json:
        print_json(report)
        return
    gib = 1 << 30
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    table = Table(title=f"{report['model']}: {report['parameters']:,} params, {nodes}×{gpus} GPUs × {gpu_memory_gb:g} "
                        f"GiB, seq {report['seq_len']}, micro-batch {report['micro_batch']} (GiB per GPU)")
    for col in ("strategy", "dtype", "offload", "AC", "state", "gathered", "activ.", "total", "fits"):
        table.add_column(col, no_wrap=True)
    for row in report["strategies"]:
        table.add_row(row["sharding_strategy"], short[row["param_dtype"]], "yes" if row["cpu_offload"] else "-",
                      "yes" if row["activation_checkpointing"] else "-", f"{row['model_state_bytes'] / gib:.1f}",
                      f"{row['gathered'] / gib:.1f}", f"{row['activations'] / gib:.1f}",
                      f"{row['per_gpu_bytes'] / gib:.1f}", "yes" if row["fits"] else "no")
    console.print(table)
    rec = report["recommended"]
    if rec:
        console.print(f"recommended: {rec['sharding_strategy']} param_dtype={rec['param_dtype']} "
                      f"cpu_offload={rec['cpu_offload']} activation_checkpointing={rec['activation_checkpointing']} "
                      f"({rec['per_gpu_bytes'] / gib:.1f} GiB per GPU, "
                      f"{rec['host_bytes_per_node'] / gib:.0f} GiB host RAM per node for offloaded state)")
    else:
        console.print("recommended: none fits; add GPUs or nodes")
    for problem in report["doctor"]["problems"]:
        console.print(f"[red]config problem:[/red] {problem}")
    for warning in report["doctor"]["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {warning}")


@app.command("export-accelerate")
def export_accelerate(
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    sets: SetOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="File; default <state_dir>/accelerate/<model>.yaml.")]
    = None,
) -> None:
    """Write an Accelerate config (fsdp_version 2) equivalent to the training.fsdp section."""
    from mlops_training import write_accelerate_config

    loaded = load(profile, model, sets)
    project = loaded.config.project
    target = out or loaded.resolve_path(project.state_dir) / "accelerate" / f"{project.model}.yaml"
    notes = write_accelerate_config(loaded.config.training, target)
    console.print(f"wrote {target}")
    for note in notes:
        console.print(f"note: {note}")
