"""One torchrun worker of the load-memory test: build on meta, shard (FSDP2), load the checkpoint, and report the
rank's peak resident-set growth over the load and a fingerprint of its shards.

Run: ``python -m torch.distributed.run --standalone --nproc-per-node=2 load_probe.py CKPT dcp,broadcast OUT``.
The peak is the kernel's own high-water mark (``VmHWM``), reset just before the load by writing ``5`` to
``/proc/self/clear_refs``; the growth is that peak minus the resident set right before the load. Its split into
private memory (``RssAnon``: the shards themselves) and mapped file pages (``RssFile``: the memory-mapped
safetensors file) is sampled every 2 ms.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def main() -> None:
    import torch.distributed as dist

    from mlops_config import FSDPConfig
    from mlops_training import ShardPlan
    from mlops_training.parallelize import apply_parallelism, init_distributed
    from mlops_training.pretrained import build_on_meta, load_hf_config, load_into_shards, materialize

    folder, out = Path(sys.argv[1]), Path(sys.argv[3])
    info = init_distributed("gloo")
    fsdp = FSDPConfig()
    plan = ShardPlan.from_fsdp(fsdp, world_size=info.world_size, ranks_per_node=info.local_world_size)
    # Warm-up: the code paths of both loaders run once (their shared libraries and lazily imported modules are
    # mapped by then), so the measured loads count the model and the file only.
    for method in sys.argv[2].split(","):
        model = apply_parallelism(build_on_meta(load_hf_config(folder)), plan, fsdp, info)
        materialize(model, info.device)
        load_into_shards(model, folder, method=method)
        del model
        _release()
    for method in sys.argv[2].split(","):
        model = apply_parallelism(build_on_meta(load_hf_config(folder)), plan, fsdp, info)
        _release()
        dist.barrier()
        doc = _measure(model, folder, method, info)
        (out / f"{method}-rank{info.rank}.json").write_text(json.dumps(doc))
        del model
        _release()
    dist.barrier()
    dist.destroy_process_group()


def _release() -> None:
    """Free what the previous model held and hand glibc's cached heap back to the kernel, so the next load's
    allocations show up as growth instead of reusing freed pages."""
    import ctypes

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def _measure(model: Any, folder: Path, method: str, info: Any) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    from mlops_training.pretrained import load_into_shards, materialize

    Path("/proc/self/clear_refs").write_text("5")
    before = {field: _status(field) for field in ("VmRSS", "RssAnon", "RssFile")}
    peaks = dict(before)
    stop = threading.Event()

    def sample() -> None:  # the kernel keeps no per-kind high-water mark: sample the split every 2 ms
        while not stop.is_set():
            for field in ("RssAnon", "RssFile"):
                peaks[field] = max(peaks[field], _status(field))
            stop.wait(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    materialize(model, info.device)
    load_into_shards(model, folder, method=method)
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    peak = _status("VmHWM")
    local = {}
    for name, value in get_model_state_dict(model).items():
        shard = value.to_local() if hasattr(value, "to_local") else value
        local[name] = {"offset": _offset(value), "sum": float(shard.double().sum()), "numel": shard.numel(),
                       "head": shard.reshape(-1)[:4].tolist()}
    shard_bytes = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    full_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"rank": info.rank, "method": method, "seconds": seconds, "growth": peak - before["VmRSS"],
            "anon_growth": peaks["RssAnon"] - before["RssAnon"], "file_growth": peaks["RssFile"] - before["RssFile"],
            "shard_bytes": shard_bytes, "full_bytes": full_bytes, "tensors": local,
            "rotary": model.model.rotary_emb.inv_freq.tolist()}


def _offset(value: object) -> int:
    """Row offset of this rank's shard (FSDP2 shards dim 0 evenly, the last shard may be short)."""
    import torch.distributed as dist

    if not hasattr(value, "to_local"):
        return 0
    rows = value.shape[0]  # type: ignore[attr-defined]
    per = -(-rows // dist.get_world_size())
    return min(per * dist.get_rank(), rows)


if __name__ == "__main__":
    main()
