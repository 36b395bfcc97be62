"""What an LM worker pays at start-up: the module torchrun starts does not import pandas (#27).

Every rank of every ``mlops train run`` imports the worker's entry module; pandas costs about a second of CPU
there, and a causal-LM worker never handles a DataFrame (the tabular task imports it where it loads its data).
"""

from __future__ import annotations

import subprocess
import sys

from mlops_training.launcher import torchrun_command


def test_torchruns_worker_module_imports_without_pandas() -> None:
    cmd = torchrun_command(nproc=2, nnodes=1, rdzv_endpoint=None, max_restarts=0, run_name="probe",
                           worker_args=["--config-json", "x.json"])
    entry = cmd[cmd.index("-m", cmd.index("torch.distributed.run") + 1) + 1]  # the module each rank runs
    assert entry == "mlops_training.worker"
    probe = (f"import sys, importlib\nimportlib.import_module({entry!r})\n"
             "print(sorted(m for m in sys.modules if m == 'pandas' or m.startswith('pandas.')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    assert done.stdout.strip() == "[]", f"{entry} imports pandas: {done.stdout.strip()[:200]}"
