"""Our Prometheus rules are valid (`promtool check rules`) and fire when, and only when, they should
(`promtool test rules` over tests/gitops/promtool/*.test.yaml). promtool is Debian's `prometheus` package."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mlops_monitoring.rules import RULES_MANIFEST, write_rule_file

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
TESTS = Path(__file__).with_name("promtool")


@pytest.fixture
def rules(tmp_path: Path, repo_root: Path) -> Path:
    assert Path(PROMTOOL).exists(), "promtool is missing: `make prometheus` installs Debian's prometheus"
    for test in TESTS.glob("*.test.yaml"):
        shutil.copy(test, tmp_path / test.name)
    return write_rule_file(repo_root / RULES_MANIFEST, tmp_path / "fraud-rules.yaml")


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False)


def test_rules_pass_promtool_check(rules: Path) -> None:
    proc = _promtool("check", "rules", str(rules))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 11 rules found" in proc.stdout + proc.stderr


def test_rule_unit_tests_pass(rules: Path) -> None:
    tests = sorted(str(p) for p in rules.parent.glob("*.test.yaml"))
    assert tests, f"no *.test.yaml in {TESTS}"
    proc = _promtool("test", "rules", *tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_broken_threshold_is_caught(rules: Path) -> None:
    """The unit tests can fail: a rule whose threshold drifted from the config makes them fail."""
    text = rules.read_text().replace("> 0.01", "> 0.1")
    assert text != rules.read_text()
    rules.write_text(text)
    proc = _promtool("test", "rules", str(rules.parent / "fraud-rules.test.yaml"))
    assert proc.returncode != 0 and "FraudModelErrorRateHigh" in proc.stdout + proc.stderr


def test_the_freshness_alert_threshold_is_the_configured_slo(repo_root: Path) -> None:
    import yaml

    from mlops_config import load_config

    slo = load_config(config_dir=repo_root / "configs", environ={}).config.features.freshness_slo_s
    doc = yaml.safe_load((repo_root / RULES_MANIFEST).read_text())
    rule = next(r for g in doc["spec"]["groups"] for r in g["rules"] if r.get("alert") == "FeatureViewStale")
    assert rule["expr"].rstrip().endswith(f"> {slo}"), rule["expr"]


def test_the_realized_drop_alert_uses_the_configured_limits(repo_root: Path) -> None:
    import yaml

    from mlops_config import load_config

    m = load_config(config_dir=repo_root / "configs", environ={}).config.monitoring
    doc = yaml.safe_load((repo_root / RULES_MANIFEST).read_text())
    rules = [r for g in doc["spec"]["groups"] for r in g["rules"]]
    rule = next(r for r in rules if r.get("alert") == "FraudRealizedPerformanceDrop")
    assert f"> {m.max_f1_drop}" in rule["expr"] and rule["expr"].rstrip().endswith(f">= {m.performance_min_labelled}")
