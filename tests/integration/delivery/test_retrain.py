"""Retraining pull requests against a real bare git remote (the rehearsal's backend) and a local GitHub stand-in.

The remote is ``git init --bare`` in ``tmp_path``, seeded from a clone with one commit that pins data version
``V0``; the published data versions are DVC pointers written to a folder remote by ingestion's own
``publish_pointer``. Every assertion reads the remote back with plain git, never the code under test.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from mlops_config import DataConfig, DeliveryConfig
from mlops_config.delivery import RetrainConfig
from mlops_delivery.errors import GitError
from mlops_delivery.retrain import RetrainTrigger, merge_retrain, request_retrain

pytestmark = pytest.mark.integration

V0, V1, V2 = "0" * 31 + "a.dir", "1" * 31 + "b.dir", "2" * 31 + "c.dir"
PIN = "configs/models/fraud.data_version"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
EVIDENCE = {"summary": "3 of 12 columns CRITICAL", "level": "CRITICAL", "max_psi": 0.41,
            "links": {"drift report": "https://ci.example/runs/7/drift.html"}}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Any]:
    """A bare remote whose main pins V0, and a DVC folder remote where ingestion published V1 then V2."""
    from mlops_features.landing import publish_pointer

    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    work = tmp_path / "work"
    (work / "configs" / "models").mkdir(parents=True)
    (work / PIN).write_text(V0 + "\n")
    (work / "README.md").write_text("platform\n")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", ".")
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "origin", "main")
    data = DataConfig(dvc_remote=str(tmp_path / "dvc"), validated_dir="data/accepted")
    for md5 in (V1, V2):
        pointer = tmp_path / "accepted.dvc"
        pointer.write_text(f"outs:\n- md5: {md5}\n  nfiles: 3\n  path: accepted\n")
        publish_pointer(data, tmp_path, pointer)
    return {"remote": remote, "data": data, "root": tmp_path, "main0": git(remote, "rev-parse", "main")}


def delivery(world: dict[str, Any], **retrain: Any) -> DeliveryConfig:
    return DeliveryConfig(retrain=RetrainConfig(repo=str(world["remote"]), min_interval_hours=24, **retrain))


def request(world: dict[str, Any], cfg: DeliveryConfig, at: datetime, reason: str = "drift",
            version: str | None = None, **kwargs: Any) -> Any:
    trigger = RetrainTrigger(model="fraud", reason=reason, evidence=EVIDENCE, data_version=version)
    return request_retrain(cfg, world["data"], world["root"], trigger, now=at, **kwargs)


def record(remote: Path) -> dict[str, Any]:
    return json.loads(git(remote, "show", "refs/retrain-prs/fraud:record.json"))


def refs(remote: Path) -> str:
    return git(remote, "for-each-ref", "--format=%(refname) %(objectname)")


def test_first_trigger_pushes_the_branch_the_pin_and_an_open_record(world: dict[str, Any]) -> None:
    remote = world["remote"]
    out = request(world, delivery(world), T0)  # no --data-version: the newest published one (V2, published last)
    assert (out.status, out.pushed, out.data_version) == ("opened", True, V2)
    head = git(remote, "rev-parse", "refs/heads/retrain/fraud")
    assert out.head_sha == head
    assert git(remote, "show", f"{head}:{PIN}") == V2
    assert git(remote, "rev-parse", f"{head}^") == world["main0"]  # one commit on top of main
    assert git(remote, "diff", "--name-only", "main", head) == PIN  # the pin is all it changes
    assert git(remote, "log", "-1", "--format=%ct", head) == str(int(T0.timestamp()))
    rec = record(remote)
    assert (rec["state"], rec["head"], rec["base"], rec["head_sha"]) == ("open", "retrain/fraud", "main", head)
    assert (rec["data_version"], rec["previous"], rec["reason"]) == (V2, V0, "drift")
    assert f"`{V0}` → `{V2}`" in rec["body"] and "| max_psi | 0.41 |" in rec["body"]
    assert "[drift report](https://ci.example/runs/7/drift.html)" in rec["body"]
    # auto_merge is off: main still pins V0
    assert git(remote, "rev-parse", "main") == world["main0"] and git(remote, "show", f"main:{PIN}") == V0


def test_second_trigger_updates_the_same_pull_request(world: dict[str, Any]) -> None:
    remote, cfg = world["remote"], delivery(world)
    first = request(world, cfg, T0, version=V1)
    second = request(world, cfg, T0 + timedelta(hours=25), reason="performance", version=V2)
    assert (first.status, second.status) == ("opened", "updated")
    assert git(remote, "for-each-ref", "--format=%(refname)", "refs/heads/retrain/") == "refs/heads/retrain/fraud"
    head = git(remote, "rev-parse", "refs/heads/retrain/fraud")
    assert head == second.head_sha != first.head_sha
    assert git(remote, "show", f"{head}:{PIN}") == V2
    assert git(remote, "rev-parse", f"{head}^") == world["main0"]  # rebuilt on main, still a fast-forward
    rec = record(remote)
    assert (rec["state"], rec["updates"], rec["reason"], rec["data_version"]) == ("open", 1, "performance", V2)
    assert rec["opened_at"] == "2026-03-02T09:00:00Z"
    assert git(remote, "rev-list", "--count", "refs/retrain-prs/fraud") == "2"  # the record keeps its history
    assert git(remote, "rev-parse", "main") == world["main0"]  # never merged: auto_merge is off


def test_a_trigger_inside_the_rate_limit_pushes_nothing(world: dict[str, Any], tmp_path: Path) -> None:
    remote, cfg, ledger = world["remote"], delivery(world), tmp_path / "triggers.jsonl"
    request(world, cfg, T0, version=V1, ledger=ledger)
    before = refs(remote)
    out = request(world, cfg, T0 + timedelta(hours=23), reason="data", version=V2, ledger=ledger)
    assert (out.status, out.pushed) == ("rate-limited", False)
    assert "2026-03-03T09:00:00Z" in out.detail  # when the next trigger is allowed: T0 + 24 h
    assert refs(remote) == before
    assert git(remote, "show", f"refs/heads/retrain/fraud:{PIN}") == V1
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(x["status"], x["data_version"]) for x in lines] == [("opened", V1), ("rate-limited", V2)]


def test_merge_fast_forwards_main_to_the_pin(world: dict[str, Any]) -> None:
    remote, cfg = world["remote"], delivery(world)
    opened = request(world, cfg, T0, version=V1)
    merged = merge_retrain(cfg, world["root"], "fraud")
    assert merged == opened.head_sha == git(remote, "rev-parse", "main")
    assert git(remote, "show", f"main:{PIN}") == V1
    assert record(remote)["state"] == "merged"
    with pytest.raises(GitError, match=r"no open retraining pull request .* state 'merged'"):
        merge_retrain(cfg, world["root"], "fraud")
    later = request(world, cfg, T0 + timedelta(days=2), version=V1)
    assert (later.status, later.pushed) == ("up_to_date", False)  # main trained on V1 already
    newer = request(world, cfg, T0 + timedelta(days=3), version=V2)  # after a merge: a new pull request
    assert newer.status == "opened"
    assert git(remote, "rev-parse", "refs/heads/retrain/fraud^") == merged  # built on the merged main
    rec = record(remote)
    assert (rec["state"], rec["updates"], rec["previous"], rec["opened_at"]) == ("open", 0, V1, "2026-03-05T09:00:00Z")


def test_merge_refuses_when_main_moved_on(world: dict[str, Any], tmp_path: Path) -> None:
    remote, cfg = world["remote"], delivery(world)
    request(world, cfg, T0, version=V1)
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(remote), str(other))
    (other / "README.md").write_text("changed\n")
    git(other, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "docs")
    git(other, "push", "-q", "origin", "main")
    moved = git(remote, "rev-parse", "main")
    with pytest.raises(GitError, match=r"'main' moved on since 'retrain/fraud' was built"):
        merge_retrain(cfg, world["root"], "fraud")
    assert git(remote, "rev-parse", "main") == moved
    again = request(world, cfg, T0 + timedelta(hours=25), version=V1)  # a new trigger rebuilds it on the new main
    assert again.status == "updated"
    assert merge_retrain(cfg, world["root"], "fraud") == git(remote, "rev-parse", "main")
    assert git(remote, "show", "main:README.md") == "changed" and git(remote, "show", f"main:{PIN}") == V1


def test_auto_merge_merges_and_only_then(world: dict[str, Any]) -> None:
    remote = world["remote"]
    out = request(world, delivery(world, auto_merge=True), T0, version=V1)
    assert out.merged_sha == out.head_sha == git(remote, "rev-parse", "main")
    assert git(remote, "show", f"main:{PIN}") == V1 and record(remote)["state"] == "merged"


def test_merge_is_the_bare_remotes_only(world: dict[str, Any]) -> None:
    from mlops_delivery.errors import DeliveryError

    with pytest.raises(DeliveryError, match=r"backend is 'github': merge the pull request there"):
        merge_retrain(delivery(world, backend="github"), world["root"], "fraud")


# --- the GitHub backend, against a local server that answers like the three pulls endpoints -----------------


@pytest.fixture
def github() -> Iterator[tuple[str, list[tuple[str, str, Any]]]]:
    calls: list[tuple[str, str, Any]] = []
    pulls: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            calls.append(("GET", url.path, query))
            if self.headers["Authorization"] != "Bearer t0ken":
                return self._reply(401, {"message": "Bad credentials"})
            owner, _, branch = query["head"].partition(":")
            self._reply(200, [p for p in pulls if owner == "o" and p["head"]["ref"] == branch
                              and p["state"] == query.get("state", "open")])

        def do_POST(self) -> None:
            body = self._body()
            calls.append(("POST", self.path, body))
            pr = {"number": len(pulls) + 1, "state": "open", "head": {"ref": body["head"]}, **body,
                  "html_url": f"https://github.example/o/r/pull/{len(pulls) + 1}"}
            pr["head"] = {"ref": body["head"]}
            pulls.append(pr)
            self._reply(201, pr)

        def do_PATCH(self) -> None:
            body = self._body()
            calls.append(("PATCH", self.path, body))
            number = int(self.path.rsplit("/", 1)[1])
            pulls[number - 1].update(body)
            self._reply(200, pulls[number - 1])

        def do_PUT(self) -> None:
            body = self._body()
            calls.append(("PUT", self.path, body))
            number = int(self.path.rsplit("/", 2)[1])
            pulls[number - 1]["state"] = "closed"
            self._reply(200, {"sha": "f" * 40, "merged": True})

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", calls
    server.shutdown()
    thread.join(5)


def test_github_backend_opens_then_updates_with_patch(world: dict[str, Any],
                                                     github: tuple[str, list[tuple[str, str, Any]]]) -> None:
    api, calls = github
    env = {"GITHUB_REPOSITORY": "o/r", "GITHUB_API_URL": api, "GITHUB_TOKEN": "t0ken"}
    cfg = delivery(world, backend="github")
    first = request(world, cfg, T0, version=V1, environ=env)
    assert (first.status, first.url) == ("opened", "https://github.example/o/r/pull/1")
    second = request(world, cfg, T0 + timedelta(hours=25), reason="performance", version=V2, environ=env)
    assert (second.status, second.url) == ("updated", "https://github.example/o/r/pull/1")
    methods = [(m, p) for m, p, _ in calls]
    assert methods == [("GET", "/repos/o/r/pulls"), ("POST", "/repos/o/r/pulls"),
                       ("GET", "/repos/o/r/pulls"), ("PATCH", "/repos/o/r/pulls/1")]
    assert calls[0][2] == calls[2][2] == {"head": "o:retrain/fraud", "state": "open"}
    post, patch = calls[1][2], calls[3][2]
    assert (post["head"], post["base"]) == ("retrain/fraud", "main")
    assert f"`{V0}` → `{V1}`" in post["body"]
    assert f"`{V0}` → `{V2}`" in patch["body"] and "performance" in patch["title"]
    assert git(world["remote"], "show", f"refs/heads/retrain/fraud:{PIN}") == V2
    assert git(world["remote"], "rev-parse", "main") == world["main0"]  # not merged
    # a GitHub pull request needs no record on the remote
    assert git(world["remote"], "for-each-ref", "refs/retrain-prs/") == ""


def test_github_backend_auto_merge_merges_the_pull_request(world: dict[str, Any],
                                                          github: tuple[str, list[tuple[str, str, Any]]]) -> None:
    api, calls = github
    env = {"GITHUB_REPOSITORY": "o/r", "GITHUB_API_URL": api, "GITHUB_TOKEN": "t0ken"}
    out = request(world, delivery(world, backend="github", auto_merge=True), T0, version=V1, environ=env)
    assert out.merged_sha == "f" * 40
    assert [(m, p) for m, p, _ in calls][-1] == ("PUT", "/repos/o/r/pulls/1/merge")


def test_github_backend_without_a_token_pushes_nothing(world: dict[str, Any]) -> None:
    env = {"GITHUB_REPOSITORY": "o/r"}
    with pytest.raises(GitError, match=r"env var 'GITHUB_TOKEN' \(delivery.github_token_var\) is not set"):
        request(world, delivery(world, backend="github"), T0, version=V1, environ=env)
    assert git(world["remote"], "for-each-ref", "--format=%(refname)") == "refs/heads/main"


def test_cli_request_then_merge(world: dict[str, Any], config_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mlops_cli.app import app

    remote = world["remote"]
    evidence = tmp_path / "ev.json"
    evidence.write_text(json.dumps(EVIDENCE))
    env = {"MLOPS_CONFIG_DIR": str(config_dir), "MLOPS_PROFILE": "local"}
    sets = ["--set", f"delivery.retrain.repo={remote}"]
    result = CliRunner().invoke(app, ["retrain", "request", "--model", "fraud", "--reason", "data", "--evidence",
                                      str(evidence), "--data-version", V1, "--json", *sets], env=env)
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["status"], out["data_version"], out["branch"]) == ("opened", V1, "retrain/fraud")
    assert git(remote, "rev-parse", "main") == world["main0"]
    again = CliRunner().invoke(app, ["retrain", "request", "--model", "fraud", "--reason", "drift", "--evidence",
                                     str(evidence), "--data-version", V2, "--json", *sets], env=env)
    assert json.loads(again.stdout)["status"] == "rate-limited"  # seconds later, inside the default 24 h
    ledger = config_dir.parent / ".mlops" / "retrain" / "triggers.jsonl"
    assert [json.loads(x)["status"] for x in ledger.read_text().splitlines()] == ["opened", "rate-limited"]
    merged = CliRunner().invoke(app, ["retrain", "merge", "--model", "fraud", "--json", *sets], env=env)
    assert merged.exit_code == 0, merged.stderr
    assert json.loads(merged.stdout)["merged_sha"] == git(remote, "rev-parse", "main") == out["head_sha"]
    assert git(remote, "show", f"main:{PIN}") == V1
