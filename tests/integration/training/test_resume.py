"""Exact resume after SIGKILL of one rank (torchrun --max-restarts), resume at another world size,
FSDP ≡ DDP with clipping active, and the planner's model-state estimate against what the ranks hold."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mlops_config import PlatformConfig
from mlops_training import ShardPlan, TrainResult, launch
from mlops_training.planner import estimate, shape_for

from .conftest import STRAIGHT_STEPS, copy_straight, history

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS = STRAIGHT_STEPS


@pytest.fixture(scope="module")
def straight(straight_tiny_lm: TrainResult, tiny_lm: Callable[..., PlatformConfig], root: Path) -> TrainResult:
    """The uninterrupted run (trained once per test run, conftest), its checkpoints in this module's root."""
    return copy_straight(straight_tiny_lm, tiny_lm(*STEPS), root)


@pytest.fixture(scope="module")
def ddp(tiny_lm: Callable[..., PlatformConfig], root: Path) -> TrainResult:
    result = launch(tiny_lm(*STEPS, "training.fsdp.parallelism=ddp"), root, run_name="ddp", track=False)
    assert result is not None
    return result


def _worker_pid(tag: str, rank: int) -> int | None:
    """PID of the first-attempt worker of ``rank`` in the job tagged ``tag`` (read from /proc)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = dict(kv.split("=", 1) for kv in (proc / "environ").read_bytes().decode().split("\0") if "=" in kv)
        except (OSError, ValueError):
            continue
        if (env.get("MLOPS_TEST_TAG") == tag and env.get("RANK") == str(rank)
                and env.get("TORCHELASTIC_RESTART_COUNT") == "0"):
            return int(proc.name)
    return None


def test_sigkill_of_one_rank_then_restart_ends_bit_identical(tiny_lm, root: Path, straight: TrainResult) -> None:
    tag = uuid.uuid4().hex
    killed_cfg = tiny_lm(*STEPS, "training.max_restarts=1")
    out: dict[str, TrainResult | None] = {}
    job = threading.Thread(target=lambda: out.update(r=launch(killed_cfg, root, run_name="killed", track=False,
                                                             env={"MLOPS_TEST_TAG": tag})))
    job.start()
    first = root / ".mlops/checkpoints/killed/step_00000008/manifest.json"
    deadline = time.monotonic() + 240
    while not first.is_file():
        assert time.monotonic() < deadline and job.is_alive(), "no checkpoint at step 8 appeared"
        time.sleep(0.02)
    pid = _worker_pid(tag, rank=1)
    assert pid is not None, "rank 1 worker not found"
    os.kill(pid, signal.SIGKILL)
    job.join(timeout=300)
    killed = out.get("r")
    assert killed is not None, "the restarted run did not finish"
    # It really restarted from a checkpoint taken before the end, then finished the same 40 steps.
    assert killed.resumed_from_step is not None and 8 <= killed.resumed_from_step < 40
    assert killed.steps == straight.steps == 40
    assert killed.weights_sha256 == straight.weights_sha256
    # keep_last=2: older checkpoints were deleted once newer ones were complete.
    assert sorted(p.name for p in straight.run_dir.glob("step_*")) == ["step_00000032", "step_00000040"]
    a, b = load_file(straight.export_dir / "model.safetensors"), load_file(killed.export_dir / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _copy_checkpoint(root: Path, src_run: str, step: int, dst_run: str) -> None:
    src = root / f".mlops/checkpoints/{src_run}/step_{step:08d}"
    shutil.copytree(src, root / f".mlops/checkpoints/{dst_run}/step_{step:08d}")


def test_resume_two_to_one_and_one_to_two_ranks(tiny_lm, root: Path, straight: TrainResult) -> None:
    # 2 -> 1: continue straight's step-32 checkpoint on one rank; the same global batches give the same
    # weights up to reduction order.
    assert json.loads((root / ".mlops/checkpoints/straight/step_00000032/manifest.json").read_text())["world_size"] == 2
    _copy_checkpoint(root, "straight", 32, "to_one")
    one = launch(tiny_lm(*STEPS, "training.nproc=1"), root, run_name="to_one", track=False)
    assert one is not None and one.resumed_from_step == 32 and one.system["world_size"] == 1
    a, b = load_file(straight.export_dir / "model.safetensors"), load_file(one.export_dir / "model.safetensors")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5)
    # 1 -> 2: load the one-rank run's final checkpoint on two ranks; zero steps left, so loading alone
    # must reproduce its weights bit for bit.
    _copy_checkpoint(root, "to_one", 40, "to_two")
    two = launch(tiny_lm(*STEPS), root, run_name="to_two", track=False)
    assert two is not None and two.resumed_from_step == 40 and two.system["world_size"] == 2
    assert two.weights_sha256 == one.weights_sha256


def test_fsdp_matches_ddp_with_clipping_active(root: Path, straight: TrainResult, ddp: TrainResult) -> None:
    norms = history(root / ".mlops/checkpoints/straight", "grad_norm")
    assert max(norms) > 1.0, "max_grad_norm=1.0 never clipped; the test would not cover clipping"
    ddp_norms = history(root / ".mlops/checkpoints/ddp", "grad_norm")
    assert norms == pytest.approx(ddp_norms, rel=1e-4)
    losses = history(root / ".mlops/checkpoints/straight", "train_loss")
    assert losses == pytest.approx(history(root / ".mlops/checkpoints/ddp", "train_loss"), rel=1e-5)
    a, b = load_file(straight.export_dir / "model.safetensors"), load_file(ddp.export_dir / "model.safetensors")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)


def test_hybrid_shard_with_checkpointing_accumulation_prefetch_and_async_save_matches(
    tiny_lm, root: Path, straight: TrainResult
) -> None:
    knobs = ("training.fsdp.sharding_strategy=HYBRID_SHARD", "training.fsdp.hybrid_shard_group_size=1",
             "training.fsdp.activation_checkpointing=true", "training.fsdp.forward_prefetch=true",
             "training.fsdp.backward_prefetch=NONE", "training.grad_accum_steps=2",
             "training.checkpoint.async_save=true")
    result = launch(tiny_lm(*STEPS, *knobs), root, run_name="knobs", track=False)
    assert result is not None
    manifest = json.loads((result.run_dir / "step_00000040/manifest.json").read_text())
    assert manifest["mesh"] == [2, 1] and manifest["sharding_strategy"] == "HYBRID_SHARD"
    # Two micro-batches of 8 average to the same gradient as one of 16; recomputation is exact.
    a, b = load_file(straight.export_dir / "model.safetensors"), load_file(result.export_dir / "model.safetensors")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5)


def test_planner_model_state_within_15_percent_of_what_ranks_hold(
    tiny_lm, straight: TrainResult, ddp: TrainResult
) -> None:
    training = tiny_lm(*STEPS).training
    shape = shape_for(training)
    for result, parallelism in ((straight, "fsdp"), (ddp, "ddp")):
        fsdp = training.fsdp.model_copy(update={"parallelism": parallelism})
        layout = ShardPlan.from_fsdp(fsdp, world_size=2, ranks_per_node=2)
        est = estimate(shape, layout, micro_batch=8, seq_len=64).model_state_bytes
        measured = result.system["model_state_bytes_max_rank"]
        assert abs(est - measured) <= 0.15 * measured, (parallelism, est, measured)
    # Sharding really halves what each rank holds.
    assert straight.system["model_state_bytes_max_rank"] <= 0.55 * ddp.system["model_state_bytes_max_rank"]


def test_a_checkpoint_past_the_runs_steps_is_refused_naming_both(tiny_lm, root: Path, straight: TrainResult,
                                                                 capfd: pytest.CaptureFixture[str]) -> None:
    """The straight run's 40-step checkpoints under a run name launched again with max_steps 20 (the demo's first
    champion after its step count changed): refused, naming the checkpoint's step and the run's steps, instead of a
    crash in the progress line (or the 40-step weights exported as a 20-step run's)."""
    from mlops_training import TrainingError

    shutil.copytree(straight.run_dir, root / ".mlops/checkpoints/past")
    with pytest.raises(TrainingError, match="torchrun exited"):
        launch(tiny_lm("training.max_steps=20", "training.checkpoint.every_steps=8"), root, run_name="past",
               track=False)
    err = capfd.readouterr().err
    assert "holds a checkpoint at step 40, past this run's 20 steps" in err, err[-3000:]
    assert not (root / ".mlops/checkpoints/past/result.json").exists() or json.loads(
        (root / ".mlops/checkpoints/past/result.json").read_text())["steps"] == 40  # nothing of this launch
