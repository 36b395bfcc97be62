"""The candidate's own trajectory: replay the recorded recipe for ``repro_steps`` and match the recorded hash.

Training records the weights' SHA-256 after ``evaluation.repro_steps`` and after its last step in the
run's lineage (``model.json``, which the signature covers). The gate checks, in this order, and stops at the
first difference, naming it:

1. **config**: the recorded ``config.json`` must hash (:func:`mlops_training.lineage.config_hash`) to the
   ``config_sha256`` the candidate was trained with;
2. **code**: the candidate must have been trained from a clean tree (no uncommitted change under
   :data:`mlops_core.CODE_PATHS`), at the commit checked out now, and this checkout must be clean too;
3. **data**: the replay must read data with the recorded hash;
4. **weights**: the replay of the first ``repro_steps`` steps, with the full run's LR schedule, must give
   the recorded hash bit for bit on CPU. On GPU, where reductions run in no fixed order and a hash cannot
   be reproduced, the replay's weights sketch (:func:`mlops_model.weights_sketch`: per tensor its norm and a
   few fixed projections) must match the sketch recorded at that step within ``evaluation.repro_gpu_rtol``
   (scaled by each tensor's norm); the reason names every tensor beyond it. A GPU run recorded before
   sketches existed is compared by hash.

A replay is short whatever the run's length, so the gate proves the candidate's weights came from its
recorded recipe without re-training it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mlops_evaluation.gates import GateResult

Rerun = Callable[[dict[str, Any], Path, int | None], Any]

NAME = "reproducibility"


def export_transform(meta: Mapping[str, Any]) -> str | None:
    """What the exported weights are when they are not the trained state itself (None when they are).

    A LoRA fine-tune trains base + adapters and exports them merged (or the adapters alone), so the trajectory's
    hashes, taken over the trained state, cannot equal the export's ``weights_sha256``: only a whole re-run, whose
    export is compared, ties such weights to their run."""
    if (meta.get("architecture") or {}).get("finetune") == "lora":  # only a fine-tuned HF causal LM has one
        return "the LoRA adapters alone" if meta.get("adapter_only") else "the LoRA adapters merged into the base"
    return None


def recorded_differences(lineage: Mapping[str, Any], recorded: Mapping[str, Any], root: Path) -> list[str]:
    """Config and code checks (1 and 2 above); each difference as one sentence."""
    from mlops_config import PlatformConfig
    from mlops_core import dirty_code_files, git_info
    from mlops_training import config_hash

    problems: list[str] = []
    want = lineage.get("config_sha256")
    got = config_hash(PlatformConfig.model_validate(recorded))
    if want and got != want:
        problems.append(f"config differs: the recorded config.json hashes to {got[:12]}…, but the candidate was "
                        f"trained with config_sha256 {str(want)[:12]}…")
    dirty = list(lineage.get("code_dirty_files") or [])
    if dirty or (lineage.get("git_dirty") and "code_dirty_files" not in lineage):
        problems.append(f"code differs: the candidate was trained from a tree with uncommitted code changes "
                        f"({', '.join(dirty) or 'tracked files'}) at {str(lineage.get('git_commit'))[:12]}: that "
                        "code is recorded nowhere, so it cannot be re-run")
    commit, now = str(lineage.get("git_commit") or "unknown"), git_info(root).commit
    if commit != now:
        problems.append(f"code differs: the candidate was trained at commit {commit[:12]}, this checkout is at "
                        f"{now[:12]}; check out {commit[:12]} to re-run it")
    here = dirty_code_files(root)
    if here:
        problems.append(f"code differs: this checkout has uncommitted code changes ({', '.join(here)}), so the "
                        "replay would not run the recorded code")
    return problems


def check_trajectory(version: str, lineage: Mapping[str, Any], recorded: dict[str, Any], root: Path,
                     repro_steps: int, rerun: Rerun, *, device: str = "cpu", rtol: float | None = None) -> GateResult:
    """Replay ``repro_steps`` steps of the recorded run and compare with what the candidate recorded then: the
    hash bit for bit on CPU; on another device, with ``rtol``, the weights sketch within that tolerance."""
    trajectory = dict(lineage.get("trajectory") or {})
    expected = trajectory.get(str(repro_steps))
    evidence: dict[str, Any] = {"mode": "trajectory", "step": repro_steps, "recorded": trajectory,
                                "recorded_data_hash": lineage.get("data_hash"),
                                "git_commit": lineage.get("git_commit"), "device": device}
    problems = recorded_differences(lineage, recorded, root)
    if problems:
        return GateResult(NAME, False, f"v{version}: " + "; ".join(problems), {**evidence, "differences": problems})
    replay = copy.deepcopy(recorded)
    replay.setdefault("training", {})["stop_after_steps"] = repro_steps
    result = rerun(replay, root, None)
    evidence["replay"] = {"weights_sha256": result.weights_sha256, "data_hash": result.data_hash,
                          "steps": result.steps}
    if lineage.get("data_hash") and result.data_hash != lineage["data_hash"]:
        return GateResult(NAME, False, f"v{version}: data differs: the replay read data with hash "
                          f"{str(result.data_hash)[:12]}…, the candidate was trained on "
                          f"{str(lineage['data_hash'])[:12]}…; restore the recorded data version (dvc checkout) to "
                          "re-run it", evidence)
    sketch = dict(lineage.get("trajectory_sketch") or {}).get(str(repro_steps))
    if device != "cpu" and rtol is not None and sketch:
        return _within_tolerance(version, lineage, repro_steps, result, sketch, device, rtol, evidence)
    if result.weights_sha256 != expected:
        return GateResult(NAME, False, f"v{version}: weights differ at step {repro_steps} on {device}: the replay of "
                          f"the recorded config, data and code gave {str(result.weights_sha256)[:12]}…, the candidate "
                          f"recorded {str(expected)[:12]}…: its weights did not come from this recipe (or training "
                          "is not deterministic)", evidence)
    return GateResult(NAME, True, f"v{version}'s own trajectory reproduced: a replay of {repro_steps} of its "
                      f"{lineage.get('steps')} steps gave the recorded weights bit for bit on {device} "
                      f"(sha256 {str(expected)[:12]}…; config, code at {str(lineage.get('git_commit'))[:12]} and data "
                      "match the record)", evidence)


def _within_tolerance(version: str, lineage: Mapping[str, Any], repro_steps: int, result: Any,
                      sketch: Mapping[str, list[float]], device: str, rtol: float,
                      evidence: dict[str, Any]) -> GateResult:
    """The GPU comparison: the replay's sketch at ``repro_steps`` against the recorded one, within ``rtol``."""
    from mlops_model import compare_sketches

    replayed = dict(getattr(result, "trajectory_sketch", None) or {}).get(str(repro_steps))
    evidence.update(comparison="sketch", rtol=rtol)
    if not replayed:
        return GateResult(NAME, False, f"v{version}: the replay on {device} recorded no weights sketch at step "
                          f"{repro_steps} to compare within rtol {rtol:g}", evidence)
    problems = compare_sketches(sketch, replayed, rtol)
    evidence["differences"] = problems
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return GateResult(NAME, False, f"v{version}: weights differ at step {repro_steps} on {device} beyond rtol "
                          f"{rtol:g}: " + "; ".join(problems[:3]) + more + ": its weights did not come from this "
                          "recipe", evidence)
    return GateResult(NAME, True, f"v{version}'s own trajectory reproduced on {device}: a replay of {repro_steps} "
                      f"of its {lineage.get('steps')} steps matched the recorded weights sketch of {len(sketch)} "
                      f"tensors within rtol {rtol:g} (bit-exact on CPU only; config, code at "
                      f"{str(lineage.get('git_commit'))[:12]} and data match the record)", evidence)
