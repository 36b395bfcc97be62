"""Two torchrun agents (two "nodes", one process each) meet at a c10d rendezvous and train one model."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mlops_training import TrainResult, launch
from mlops_training.launcher import default_run_name
from tests.support import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_nodes_rendezvous_and_train_like_one_node_with_two_processes(tiny_lm, root: Path) -> None:
    sets = ("training.max_steps=4", "training.nproc=1", "training.nnodes=2",
            f"training.rdzv_endpoint=127.0.0.1:{free_port()}")
    config = tiny_lm(*sets)
    from mlops_training.zoo import llama_config

    llama_config("llama-tiny")  # import transformers here: its lazy import is not thread-safe (doctor in threads)
    name = default_run_name(config)
    assert name == default_run_name(tiny_lm(*sets))  # every node derives the same rendezvous id
    results: list[TrainResult | None] = []
    errors: list[BaseException] = []

    def node() -> None:
        try:
            results.append(launch(config, root, track=False, timeout_s=240))
        except BaseException as exc:
            errors.append(exc)

    nodes = [threading.Thread(target=node) for _ in range(2)]
    for t in nodes:
        t.start()
    for t in nodes:
        t.join(timeout=300)
    assert not errors, errors
    # Both "nodes" share this machine's run folder, so both read rank 0's result.json.
    done = [r for r in results if r is not None]
    assert len(results) == 2 and done and len({r.weights_sha256 for r in done}) == 1
    assert done[0].system["world_size"] == 2 and done[0].run_name == name
    single = launch(tiny_lm("training.max_steps=4", "training.nproc=2"), root, run_name="one-node", track=False)
    assert single is not None and single.weights_sha256 == done[0].weights_sha256
