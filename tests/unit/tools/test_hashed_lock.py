"""The hashed lock: tools/hash_lock.py writes it, tools/check_lock.py keeps it equal to constraints.txt, and every
install (``make setup``, the service images) goes through ``--require-hashes``."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def _tool(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"tool_{name}", REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_hash_lock_hashes_the_pinned_files_and_takes_torch_cpu_for_its_pin(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    files = {"Foo_Bar-1.2.0-py3-none-any.whl": b"foo", "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": b"t",
             "baz-0.1.tar.gz": b"baz", "foo_bar-1.1.0-py3-none-any.whl": b"old version, not pinned"}
    for name, data in files.items():
        (wheels / name).write_bytes(data)
    (tmp_path / "constraints.txt").write_text("# header\nfoo-bar==1.2.0\ntorch==2.13.0\nbaz==0.1\n")
    out = tmp_path / "requirements.lock"
    assert _tool("hash_lock").main(str(tmp_path / "constraints.txt"), str(wheels), str(out)) == 0
    text = out.read_text()
    for pin, data in (("foo-bar==1.2.0", b"foo"), ("torch==2.13.0", b"t"), ("baz==0.1", b"baz")):
        assert f"{pin} \\\n    --hash=sha256:{hashlib.sha256(data).hexdigest()}" in text
    assert hashlib.sha256(b"old version, not pinned").hexdigest() not in text
    check = _tool("check_lock")
    assert check.check_hashed(check.read_pins(str(tmp_path / "constraints.txt")), "constraints.txt", str(out)) == []
    (wheels / "baz-0.1.tar.gz").unlink()
    assert _tool("hash_lock").main(str(tmp_path / "constraints.txt"), str(wheels), str(out)) == 1


def test_check_lock_names_each_way_the_hashed_lock_can_drift(tmp_path: Path) -> None:
    check = _tool("check_lock")
    (tmp_path / "c.txt").write_text("a==1.0\nb==2.0\nnew-pin==3.0\n")
    (tmp_path / "r.lock").write_text(
        "# hashed\n"
        f"a==1.0 \\\n    --hash=sha256:{'1' * 64}\n"
        "b==2.1 \\\n"
        f"    --hash=sha256:{'2' * 64}\n"
        "stale==0.1 \\\n"
        f"    --hash=sha256:{'3' * 64}\n"
        "nohash==1.0\n")
    problems = check.check_hashed(check.read_pins(str(tmp_path / "c.txt")), "c.txt", str(tmp_path / "r.lock"))
    text = "\n".join(problems)
    assert "b: " in text and "has 2.1" in text and "has 2.0" in text
    assert "new-pin==3.0 is in c.txt but not in" in text
    assert "stale is in" in text and "nohash" in text and "nohash==1.0 has no --hash" in text
    assert not any(p.startswith("a") for p in problems)


def test_the_repositorys_hashed_lock_matches_constraints() -> None:
    check = _tool("check_lock")
    pins = check.read_pins(str(REPO / "constraints.txt"))
    assert check.check_hashed(pins, "constraints.txt", str(REPO / "requirements.lock")) == []
    entries, _ = check.read_hashed(str(REPO / "requirements.lock"))
    torch_wheels = sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl"))
    if torch_wheels:  # this machine's local CPU wheel is what the lock's torch entry hashes
        assert hashlib.sha256(torch_wheels[0].read_bytes()).hexdigest() in entries["torch"][1]


def test_lock_subset_takes_what_pip_resolved_and_refuses_the_unlocked(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                                       ) -> None:
    subset = _tool("lock_subset")
    lock = tmp_path / "r.lock"
    lock.write_text(f"# x\nFoo.Bar==1.0 \\\n    --hash=sha256:{'a' * 64} \\\n    --hash=sha256:{'b' * 64}\n"
                    f"other==2.0 \\\n    --hash=sha256:{'c' * 64}\n")
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"install": [
        {"metadata": {"name": "foo_bar"}, "download_info": {"url": "https://x/foo.whl", "archive_info": {}}},
        {"metadata": {"name": "mlops-core"}, "download_info": {"url": "file:///src/core", "dir_info": {}}}]}))
    assert subset.main([str(lock), "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"Foo.Bar==1.0 \\\n    --hash=sha256:{'a' * 64} \\\n    --hash=sha256:{'b' * 64}"
    assert subset.main([str(lock), "unlocked-thing"]) == 1
    assert "unlocked-thing" in capsys.readouterr().err


def test_lock_subset_except_leaves_out_the_named_and_refuses_an_unknown_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``make setup`` installs torch and uv with pip and everything else with uv: the three parts are the lock."""
    subset = _tool("lock_subset")
    lock = tmp_path / "r.lock"
    lock.write_text(f"# x\nFoo.Bar==1.0 \\\n    --hash=sha256:{'a' * 64}\n"
                    f"torch==2.13.0 \\\n    --hash=sha256:{'b' * 64}\n"
                    f"uv==0.1 \\\n    --hash=sha256:{'c' * 64}\n")
    assert subset.main([str(lock), "--except", "torch", "UV"]) == 0
    assert capsys.readouterr().out.strip() == f"Foo.Bar==1.0 \\\n    --hash=sha256:{'a' * 64}"
    assert subset.main([str(lock), "--except", "torch", "uvx"]) == 1
    assert "['uvx']" in capsys.readouterr().err


def test_setup_installs_every_entry_of_the_lock_once() -> None:
    """The three parts ``make setup`` installs (torch, uv, the rest) are disjoint and together the whole lock."""
    subset = _tool("lock_subset")
    setup = (REPO / "Makefile").read_text().split("$(STAMP):", 1)[1].split("\n\n", 1)[0]
    parts = re.findall(r"lock_subset\.py requirements\.lock ([^>]+)>", setup)
    locked = set(subset.entries(str(REPO / "requirements.lock")))
    named = [set(subset.canonical(n) for n in p.split()) for p in parts if not p.startswith("--")]
    excepted = [set(subset.canonical(n) for n in p.split()[1:]) for p in parts if p.startswith("--except")]
    assert len(named) == 2 and len(excepted) == 1, parts
    assert named[0] | named[1] == excepted[0] and not named[0] & named[1]
    assert excepted[0] <= locked


def test_setup_compiles_the_bytecode_of_what_uv_installs() -> None:
    """pip compiles at install; uv only when asked. Where PYTHONDONTWRITEBYTECODE is set (this machine and CI)
    Python never writes bytecode, so without it every process compiles every module it imports again."""
    makefile = (REPO / "Makefile").read_text().replace("\\\n", " ")
    uv_installs = [line for line in makefile.splitlines() if "uv pip install" in line]
    assert len(uv_installs) == 3, uv_installs  # the lock's rest, our own packages (editable), and checkov's venv
    for line in uv_installs:
        assert "--compile-bytecode" in line, line
    for module in ("mlflow", "pandas", "feast"):  # installed by uv here: every module's bytecode is in the venv,
        spec = importlib.util.find_spec(module)   # imported by some test or not
        assert spec is not None and spec.origin is not None
        sources = sorted(Path(spec.origin).parent.glob("*.py"))
        missing = [s.name for s in sources if not Path(importlib.util.cache_from_source(str(s))).is_file()]
        assert sources and not missing, f"{module}: no bytecode for {missing[:5]} (of {len(sources)})"


def test_setup_compiles_our_own_packages_which_the_editable_install_does_not() -> None:
    """Our packages are installed editable (no bytecode); ``make setup`` compiles every package's sources, and
    every module of ``mlops_config`` (the first package every ``mlops`` process imports) has its bytecode."""
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\nsetup: $(STAMP)\n", 1)[1].split("\n\n", 1)[0]
    assert "-m compileall" in recipe and "$(addsuffix src,$(PACKAGES))" in recipe, recipe
    sources = sorted((REPO / "packages/config/src/mlops_config").glob("*.py"))
    missing = [s.name for s in sources if not Path(importlib.util.cache_from_source(str(s))).is_file()]
    assert sources and not missing, f"mlops_config: no bytecode for {missing[:5]} (run `make setup`)"


def _pip_installs(script: str) -> list[str]:
    return [c for c in re.split(r"&&|\n(?!\s)", script.replace("\\\n", " ")) if "pip install" in c]


def test_every_install_of_third_party_packages_requires_hashes() -> None:
    setup = (REPO / "Makefile").read_text().split("$(STAMP):", 1)[1].split("\n\n", 1)[0]
    images = sorted((REPO / "services").glob("*/Dockerfile"))
    assert images
    for where, text in [("Makefile setup", setup), *((str(p), p.read_text()) for p in images)]:
        installs = [c for c in _pip_installs(text) if "--dry-run" not in c]
        assert installs, where
        for command in installs:
            local_only = "--no-deps" in command and ("-e " in command or "packages/*/" in command)
            assert "--require-hashes" in command or local_only, f"{where}: {command.strip()}"
            assert "-c constraints.txt" not in command or "--require-hashes" in command, f"{where}: {command}"


def test_write_lock_leaves_out_what_it_names_and_the_venv_does_not_hold_it(tmp_path: Path) -> None:
    """rfc3987-syntax built an Earley grammar at every jsonschema import: 1.5-2.5 s of CPU per model server."""
    write_lock = _tool("write_lock")
    pip = tmp_path / "pip"
    pip.write_text("#!/bin/sh\nprintf '%s\\n' 'jsonschema==4.25.1' 'rfc3987_syntax==1.1.0' 'Rfc3987-Syntax==1.1.0' "
                   "'-e git+https://x/y@z#egg=mlops' 'pip==24.0' 'torch==2.13.0+cpu' 'lark==1.3.1'\n")
    pip.chmod(0o755)
    out = tmp_path / "constraints.txt"
    write_lock.main(str(pip), str(out))
    assert [ln for ln in out.read_text().splitlines() if not ln.startswith("#")] == [
        "jsonschema==4.25.1", "lark==1.3.1", "torch==2.13.0"]
    pinned = (REPO / "constraints.txt").read_text().lower() + (REPO / "requirements.lock").read_text().lower()
    for name in write_lock.LEFT_OUT:
        assert not re.search(rf"^{re.escape(name)}==", pinned, re.MULTILINE), name
        assert importlib.util.find_spec(name.replace("-", "_")) is None, f"{name} is installed: run make setup"
