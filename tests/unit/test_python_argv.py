"""tests.support.python_module reads a command line as the interpreter does."""

from __future__ import annotations

import pytest

from tests.support import python_module

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("argv", "module"), [
    (["python", "-u", "-m", "mlops_training.worker", "--config-json", "c.json"], "mlops_training.worker"),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node=2", "-m", "mlops_training.worker"],
     "torch.distributed.run"),
    # torchrun's agent as the launcher starts it: its arguments carry torchrun's -m for the workers
    (["python", "-c", "import sys; from mlops_training.lifeline import main; main(sys.argv[1:])",
      "--nproc-per-node=2", "-m", "mlops_training.worker"], None),
    (["python", "-W", "ignore", "-X", "dev", "-m", "mlops_cli", "serve"], "mlops_cli"),
    (["python", "script.py", "-m", "x"], None),
    (["python"], None),
    (["python", "-m"], None),
])
def test_the_module_is_the_interpreters_own_option(argv: list[str], module: str | None) -> None:
    assert python_module(argv) == module
