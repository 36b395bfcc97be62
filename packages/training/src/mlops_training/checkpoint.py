"""Sharded checkpoints (torch.distributed.checkpoint) with a manifest, keep-last-K and exact resume.

Layout of one checkpoint, ``<run_dir>/step_<N>/``: DCP's shard files and ``.metadata`` (model + optimizer,
each rank writes its own shards), ``rng_rank<R>.safetensors`` (each rank's RNG state), ``trainer_state.json``
(step, LR scheduler, metric history) and, written last by rank 0, ``manifest.json`` (world size, mesh,
strategy, torch version, SHA-256 per file) with ``manifest.sig``, its seal. A folder without a manifest is
incomplete and is never loaded.

``.metadata`` is a pickle that DCP unpickles on load: with a seal (:func:`mlops_model.manifest_seal`, the run's
signing key) the manifest's signature is checked first, so a ``.metadata`` swapped together with a rewritten
manifest is refused before anything is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlops_training.errors import CheckpointError

if TYPE_CHECKING:
    import torch

    from mlops_model import ManifestSeal
    from mlops_training.parallelize import Dist

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
SEAL = "manifest.sig"
TRAINER_STATE = "trainer_state.json"
_PREFIX = "step_"


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Complete checkpoints (those with a manifest), oldest first."""
    if not run_dir.is_dir():
        return []
    found = [p for p in run_dir.glob(f"{_PREFIX}*") if (p / MANIFEST).is_file()]
    return sorted(found, key=lambda p: int(p.name.removeprefix(_PREFIX)))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run, or ``None``."""
    dirs = checkpoint_dirs(run_dir)
    return dirs[-1] if dirs else None


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def verify_checkpoint(path: Path, seal: ManifestSeal | None = None) -> dict[str, Any]:
    """The manifest of a checkpoint after checking its seal (when ``seal`` is given) and every listed file's SHA-256.

    Raises:
        CheckpointError: no manifest, no seal or one that does not verify, a listed file is missing, or its
            checksum differs.
    """
    try:
        raw = (path / MANIFEST).read_bytes()
        manifest = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {str(path)!r} has no readable {MANIFEST} ({exc}); it is incomplete"
        ) from None
    if seal is not None:
        from mlops_model import ModelSignatureError

        if not (path / SEAL).is_file():
            raise CheckpointError(f"checkpoint {str(path)!r} has no {SEAL}: its manifest is not sealed by the run's "
                                  "signing key; refusing to unpickle its .metadata")
        try:
            seal.verify(raw, (path / SEAL).read_bytes(), what=f"checkpoint {str(path)!r} {MANIFEST}")
        except ModelSignatureError as exc:
            raise CheckpointError(f"{exc}; refusing to unpickle its .metadata") from None
    if MANIFEST in manifest["files"] or SEAL in manifest["files"] or ".metadata" not in manifest["files"]:
        raise CheckpointError(f"checkpoint {str(path)!r}: {MANIFEST} must list .metadata and not itself or its seal")
    for name, expected in manifest["files"].items():
        f = path / name
        if not f.is_file():
            raise CheckpointError(f"checkpoint {str(path)!r} lacks {name!r} listed in its manifest")
        if _sha256(f) != expected:
            raise CheckpointError(f"checkpoint file {str(f)!r} does not match its manifest checksum: corrupt")
    return manifest


class Checkpointer:
    """Saves and loads one run's checkpoints; at most one asynchronous save is in flight."""

    def __init__(self, run_dir: Path, dist_info: Dist, *, keep_last: int, async_save: bool,
                 describe: Mapping[str, Any], seal: ManifestSeal | None = None) -> None:
        """``seal`` (rank 0's; other ranks pass ``None``) signs each manifest and is checked before a load."""
        self.run_dir = run_dir
        self.seal = seal
        self.dist = dist_info
        self.keep_last = keep_last
        self.async_save = async_save
        self.describe = dict(describe)
        self._pending: tuple[Any, Path, int] | None = None
        self._pg: Any = None
        if async_save:
            import torch.distributed as dist

            # The background writer must not share a communicator with training's collectives.
            self._pg = dist.new_group(backend="gloo")

    def save(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             trainer_state: Mapping[str, Any]) -> Path:
        """Write checkpoint ``step`` (collective: every rank calls it)."""
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from safetensors.torch import save_file
        from torch.distributed.checkpoint.state_dict import get_state_dict

        self.wait()
        path = self.run_dir / f"{_PREFIX}{step:08d}"
        if self.dist.is_main:
            if path.exists():  # a leftover of a crashed save of the same step
                shutil.rmtree(path)
            path.mkdir(parents=True)
        dist.barrier()
        started = time.perf_counter()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state()
        save_file(rng, str(path / f"rng_rank{self.dist.rank}.safetensors"))
        if self.dist.is_main:
            (path / TRAINER_STATE).write_text(json.dumps(dict(trainer_state), sort_keys=True), encoding="utf-8")
        if self.async_save:
            future = dcp.async_save(state, checkpoint_id=str(path), process_group=self._pg)
            self._pending = (future, path, step)
        else:
            dcp.save(state, checkpoint_id=str(path))
            self._finish(path, step)
        log.debug("checkpoint step %d staged in %.2fs", step, time.perf_counter() - started)
        return path

    def wait(self) -> None:
        """Complete a pending asynchronous save (collective)."""
        if self._pending is None:
            return
        future, path, step = self._pending
        self._pending = None
        future.result()
        self._finish(path, step)

    def _finish(self, path: Path, step: int) -> None:
        import torch
        import torch.distributed as dist

        dist.barrier()
        if self.dist.is_main:
            files = {p.name: _sha256(p) for p in sorted(path.iterdir())
                     if p.is_file() and p.name not in (MANIFEST, SEAL)}
            manifest = {**self.describe, "step": step, "world_size": self.dist.world_size,
                        "torch_version": torch.__version__, "created_unix": time.time(), "files": files}
            raw = json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8")
            if self.seal is not None:
                (path / SEAL).write_bytes(self.seal.sign(raw))
            tmp = path / (MANIFEST + ".tmp")
            tmp.write_bytes(raw)
            tmp.replace(path / MANIFEST)
            for old in checkpoint_dirs(self.run_dir)[: -self.keep_last]:
                shutil.rmtree(old, ignore_errors=True)
        dist.barrier()

    def load(self, path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Restore model, optimizer and (same world size) RNG state; returns the trainer state.

        A different world size is resharded by DCP; RNG streams then restart from the seed.
        """
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from safetensors.torch import load_file
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        verdict: list[Any] = [None]
        if self.dist.is_main:
            try:
                verdict[0] = verify_checkpoint(path, self.seal)
            except CheckpointError as exc:
                verdict[0] = str(exc)
        dist.broadcast_object_list(verdict, src=0)
        if isinstance(verdict[0], str):
            raise CheckpointError(verdict[0])
        manifest: dict[str, Any] = verdict[0]
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        rng_file = path / f"rng_rank{self.dist.rank}.safetensors"
        if manifest["world_size"] == self.dist.world_size and rng_file.is_file():
            rng = load_file(str(rng_file))
            torch.set_rng_state(rng["cpu"])
            if "cuda" in rng and torch.cuda.is_available():
                torch.cuda.set_rng_state(rng["cuda"])
        else:
            log.info("world size %s -> %s: resharded by DCP; RNG streams restart from the seed",
                     manifest["world_size"], self.dist.world_size)
        state_json: dict[str, Any] = json.loads((path / TRAINER_STATE).read_text(encoding="utf-8"))
        state_json["manifest"] = manifest
        return state_json
