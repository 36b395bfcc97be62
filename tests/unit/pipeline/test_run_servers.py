"""``run_servers``' arguments are checked before any process starts (hand-built paths and ports; the servers
themselves start side by side in the demo's shadow step and the LM canary, tests/e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_pipeline.errors import PipelineError
from mlops_pipeline.local_server import run_servers, serving_ports


def test_serving_ports_are_distinct() -> None:
    ports = serving_ports(6)
    assert len(ports) == len(set(ports)) == 6
    assert all(1024 <= p <= 65535 for p in ports)


def test_logs_in_two_folders_are_refused_naming_both(tmp_path: Path) -> None:
    servers = [(tmp_path / "a" / "one.log", []), (tmp_path / "b" / "two.log", [])]
    with pytest.raises(PipelineError) as caught, run_servers(tmp_path, "fraud", servers):
        pass
    assert str(tmp_path / "a") in str(caught.value) and str(tmp_path / "b") in str(caught.value)


@pytest.mark.parametrize("ports", [[8001], [8001, 8001], [8001, 8002, 8003]])
def test_ports_must_be_one_distinct_port_per_server(tmp_path: Path, ports: list[int]) -> None:
    servers = [(tmp_path / "one.log", []), (tmp_path / "two.log", [])]
    with pytest.raises(PipelineError, match=r"ports \[.*\] must be 2 distinct ports, one per server"), \
            run_servers(tmp_path, "fraud", servers, ports=ports):
        pass
    assert list(tmp_path.iterdir()) == []  # nothing was launched (a launch writes its log)
