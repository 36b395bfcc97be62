"""Loading a pretrained checkpoint into FSDP2 shards: DCP's ``HuggingFaceStorageReader`` vs
``set_model_state_dict(..., full_state_dict=True, broadcast_from_rank0=True)``.

One torchrun job of 2 CPU processes (gloo) builds the model on the meta device, shards it, and loads a
checkpoint made here (``tests/hf_checkpoint.py``, shape ``--shape``) with each method after a warm-up load of
each; per rank it reports the load's wall time and its peak memory growth (the kernel's ``VmHWM`` reset before the
load), split into private memory (``RssAnon``: the shards) and mapped file pages (``RssFile``: the safetensors
file). The probe is the one the test uses (tests/integration/training/load_probe.py).

Prints one JSON object on its last line: ``{"model_bytes", "shard_bytes", "dcp": {...}, "broadcast": {...},
"ratios": {...}}`` with per-method ``seconds_max_rank``, ``anon_growth_max_rank``, ``file_growth_rank0``,
``peak_growth_rank0``; ratios are broadcast / dcp.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests/integration/training/load_probe.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="load", help="tests/hf_checkpoint.py SHAPES key (default: load, 57 M).")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from hf_checkpoint import make_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = make_checkpoint(Path(tmp) / "ckpt", args.shape)
        out = Path(tmp) / "out"
        out.mkdir()
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                               str(PROBE), str(ckpt), "dcp,broadcast", str(out)],
                              env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.exit(proc.stderr[-3000:])
        ranks = {m: [json.loads((out / f"{m}-rank{r}.json").read_text()) for r in (0, 1)]
                 for m in ("dcp", "broadcast")}
    figures = {m: {"seconds_max_rank": max(r["seconds"] for r in rs),
                   "anon_growth_max_rank": max(r["anon_growth"] for r in rs),
                   "file_growth_rank0": rs[0]["file_growth"], "file_growth_rank1": rs[1]["file_growth"],
                   "peak_growth_rank0": rs[0]["growth"], "peak_growth_rank1": rs[1]["growth"]}
               for m, rs in ranks.items()}
    ratios = {k: figures["broadcast"][k] / figures["dcp"][k] for k in ("seconds_max_rank", "peak_growth_rank0")
              if figures["dcp"][k]}
    print(json.dumps({"model_bytes": ranks["dcp"][0]["full_bytes"], "shard_bytes": ranks["dcp"][0]["shard_bytes"],
                      **figures, "ratios_broadcast_over_dcp": ratios}))


if __name__ == "__main__":
    main()
