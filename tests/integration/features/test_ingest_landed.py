"""The cluster's data path with real DVC and a folder standing in for each bucket: batches land, the ingestion
validates and versions them (dvc add + push to the remote), and a fresh workspace pulls exactly that version.
A later ingestion in another fresh workspace builds on the published version instead of replacing it."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mlops_config import DataConfig
from mlops_features import DataError, generate_transactions
from mlops_features.landing import ingest_landed, pull_accepted
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.parquet"))}


def _workspace(tmp_path: Path, name: str) -> Path:
    """A fresh, empty working folder (a new pod or a runner's fresh checkout)."""
    root = tmp_path / name
    root.mkdir()
    return root


@pytest.mark.timeout(1200)  # ~1 min alone: a dozen dvc processes; far longer when the cores are shared
def test_landed_batches_round_trip_through_the_dvc_remote(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    landing, remote = tmp_path / "landing", tmp_path / "dvc-remote"
    data = DataConfig(raw_dir="data/landed", validated_dir="data/accepted", landing_uri=landing.as_uri(),
                      dvc_remote=str(remote))
    days = generate_transactions(tmp_path / "gen", rows=900, days=3, seed=7)
    landing.mkdir()
    for p in days[:2]:
        shutil.copy(p, landing / p.name)
    # One bad batch lands too: a truncated file is quarantined whole, never versioned.
    (landing / "broken.parquet").write_bytes(days[2].read_bytes()[:200])

    pod = _workspace(tmp_path, "pod-1")
    first = ingest_landed(data, pod, contract=FRAUD_CONTRACT)
    assert sorted(Path(p).name for p in first.new) == sorted([*(p.name for p in days[:2]), "broken.parquet"])
    assert first.pushed and first.validation is not None
    # progress off a terminal (`mlops data ingest` in a CronJob's log): a line per batch fetched, then validated
    err = capfd.readouterr().err.splitlines()
    assert [line.split()[1] for line in err if line.startswith("fetched ")] == ["1/3", "2/3", "3/3"], err
    assert [line.split()[1] for line in err if line.startswith("batch ")] == ["1/3", "2/3", "3/3"], err
    accepted = pod / "data/accepted"
    assert set(_digests(accepted)) == {p.name for p in days[:2]}
    rows = sum(pq.read_metadata(p).num_rows for p in accepted.glob("*.parquet"))
    assert rows == first.validation.accepted_rows == sum(pq.read_metadata(p).num_rows for p in days[:2])
    assert (remote / "pointers" / "latest.dvc").is_file()

    # A fresh checkout (the training runner) pulls exactly what was accepted.
    runner = _workspace(tmp_path, "runner-1")
    assert pull_accepted(data, runner) == first.data_md5
    assert _digests(runner / "data/accepted") == _digests(accepted)

    # The next day lands; a new pod (empty again) adds it to the published version.
    shutil.copy(days[2], landing / days[2].name)
    (landing / "broken.parquet").unlink()
    second = ingest_landed(data, _workspace(tmp_path, "pod-2"), contract=FRAUD_CONTRACT)
    assert [Path(p).name for p in second.new] == [days[2].name]
    assert len(second.skipped) == 2 and second.data_md5 != first.data_md5
    latest = _workspace(tmp_path, "runner-2")
    assert pull_accepted(data, latest) == second.data_md5
    assert set(_digests(latest / "data/accepted")) == {p.name for p in days}
    # The first version stays pullable by its md5.
    old = _workspace(tmp_path, "runner-3")
    assert pull_accepted(data, old, first.data_md5 or "") == first.data_md5
    assert _digests(old / "data/accepted") == _digests(accepted)


def test_missing_landing_area_or_version_is_a_clear_error(tmp_path: Path) -> None:
    data = DataConfig(validated_dir="data/accepted", landing_uri=(tmp_path / "nowhere").as_uri(),
                      dvc_remote=str(tmp_path / "remote"))
    with pytest.raises(DataError, match="does not exist; expected a folder of parquet batches"):
        ingest_landed(data, _workspace(tmp_path, "a"), contract=FRAUD_CONTRACT)
    with pytest.raises(DataError, match="data version 'latest' is not published"):
        pull_accepted(data, _workspace(tmp_path, "b"))
    with pytest.raises(DataError, match=r"data\.landing_uri is not set"):
        ingest_landed(DataConfig(), _workspace(tmp_path, "c"), contract=FRAUD_CONTRACT)


@pytest.mark.timeout(1200)
def test_data_pull_takes_the_models_pin_over_the_newest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mlops data pull` in a checkout whose pin names the first version pulls the first, though a second one is
    the newest; without the pin (or with --data-version latest) it pulls the newest."""
    import json

    from typer.testing import CliRunner

    from mlops_cli.app import app

    landing, remote = tmp_path / "landing", tmp_path / "dvc-remote"
    data = DataConfig(raw_dir="data/landed", validated_dir="data/accepted", landing_uri=landing.as_uri(),
                      dvc_remote=str(remote))
    days = generate_transactions(tmp_path / "gen", rows=600, days=2, seed=11)
    landing.mkdir()
    shutil.copy(days[0], landing / days[0].name)
    first = ingest_landed(data, _workspace(tmp_path, "pod-1"), contract=FRAUD_CONTRACT)
    shutil.copy(days[1], landing / days[1].name)
    second = ingest_landed(data, _workspace(tmp_path, "pod-2"), contract=FRAUD_CONTRACT)
    assert first.data_md5 and second.data_md5 and first.data_md5 != second.data_md5
    sets = ["--set", "data.raw_dir=data/landed", "--set", "data.validated_dir=data/accepted",
            "--set", f"data.landing_uri={landing.as_uri()}", "--set", f"data.dvc_remote={remote}"]

    def pull(name: str, *extra: str, pin: str | None = None) -> dict:
        checkout = _workspace(tmp_path, name)
        shutil.copytree(Path(__file__).resolve().parents[3] / "configs", checkout / "configs")
        if pin is not None:
            (checkout / "configs/models/fraud.data_version").write_text(pin + "\n")
        monkeypatch.chdir(checkout)
        monkeypatch.delenv("MLOPS_CONFIG_DIR", raising=False)
        res = CliRunner().invoke(app, ["data", "pull", *sets, "--json", *extra])
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)

    pinned = pull("runner-pinned", pin=first.data_md5)
    assert pinned == {"data_md5": first.data_md5, "asked": first.data_md5, "from": "configs/models/fraud.data_version"}
    assert pull("runner-unpinned") == {"data_md5": second.data_md5, "asked": "latest", "from": "latest"}
    overridden = pull("runner-flag", "--data-version", "latest", pin=first.data_md5)
    assert overridden["data_md5"] == second.data_md5 and overridden["from"] == "--data-version"
