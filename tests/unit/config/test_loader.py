"""The layered loader: precedence, provenance and every kind of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_config import ConfigError, PlatformConfig, load_config


def _load(config_dir: Path, **kw):
    kw.setdefault("environ", {})
    return load_config(config_dir=config_dir, **kw)


def test_local_profile_is_the_embedded_default(config_dir: Path) -> None:
    loaded = _load(config_dir)
    cfg = loaded.config
    assert cfg.project.profile == "local"
    assert cfg.project.model == "fraud"
    assert cfg.tracking.uri.startswith("sqlite:///.mlops/")
    assert cfg.features.online_store == "sqlite"
    assert cfg.training.backend == "auto"
    assert loaded.root == config_dir.parent
    assert loaded.resolve_path(cfg.project.state_dir) == config_dir.parent / ".mlops"


def test_every_section_is_present(config_dir: Path) -> None:
    dumped = _load(config_dir).config.model_dump()
    assert set(dumped) == {
        "project", "tracking", "data", "features", "training", "evaluation", "serving", "monitoring", "delivery",
        "provenance", "contract",
    }


def test_precedence_base_profile_model_env_set(config_dir: Path) -> None:
    (config_dir / "base.yaml").write_text(
        "project:\n  model: fraud\ntraining:\n  max_steps: 1\n  lr: 0.5\n  eval_every: 3\n  warmup_steps: 4\n")
    (config_dir / "profiles" / "local.yaml").write_text("training:\n  max_steps: 2\n  lr: 0.25\n  eval_every: 5\n")
    (config_dir / "models" / "fraud.yaml").write_text("training:\n  max_steps: 3\n  lr: 0.125\n")
    env = {"MLOPS__TRAINING__MAX_STEPS": "4"}
    loaded = _load(config_dir, environ=env, overrides=["training.max_steps=5"])
    t = loaded.config.training
    assert (t.max_steps, t.lr, t.eval_every, t.warmup_steps) == (5, 0.125, 5, 4)
    assert loaded.sources["training.max_steps"] == "--set"
    assert loaded.sources["training.lr"] == "configs/models/fraud.yaml"
    assert loaded.sources["training.eval_every"] == "configs/profiles/local.yaml"
    assert loaded.sources["training.warmup_steps"] == "configs/base.yaml"
    assert loaded.sources["training.batch_size"] == "default"

    loaded = _load(config_dir, environ=env)
    assert loaded.config.training.max_steps == 4
    assert loaded.sources["training.max_steps"] == "env:MLOPS__TRAINING__MAX_STEPS"


def test_env_var_reaches_nested_fsdp_knob(config_dir: Path) -> None:
    env = {"MLOPS__TRAINING__FSDP__SHARDING_STRATEGY": "HYBRID_SHARD", "MLOPS__TRAINING__FSDP__CPU_OFFLOAD": "true"}
    fsdp = _load(config_dir, environ=env).config.training.fsdp
    assert fsdp.sharding_strategy == "HYBRID_SHARD"
    assert fsdp.cpu_offload is True


def test_set_parses_lists_and_model_file_selects(config_dir: Path) -> None:
    loaded = _load(config_dir, model="llm-tiny", overrides=["training.fsdp.wrap_policy.transformer_layer_cls=[A, B]"])
    assert loaded.config.project.model == "llm-tiny"
    assert loaded.config.training.model == "causal_lm"
    assert loaded.config.training.fsdp.wrap_policy.transformer_layer_cls == ("A", "B")


def test_staging_profile_names_remote_services_and_secrets_by_env_name(config_dir: Path) -> None:
    env = {v: "x" for v in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_S3_ENDPOINT_URL",
                            "REDIS_PASSWORD", "REDIS_USERNAME", "FEAST_REGISTRY_PASSWORD")}
    cfg = _load(config_dir, profile="staging", environ=env).config
    assert cfg.features.online_store == "redis"
    assert cfg.features.registry.startswith("postgresql")
    assert cfg.training.backend == "nccl"
    assert cfg.tracking.artifact_location.startswith("s3://")
    assert cfg.tracking.password_env == "MLFLOW_TRACKING_PASSWORD"


def test_frozen_sections(config_dir: Path) -> None:
    cfg = _load(config_dir).config
    with pytest.raises(Exception, match="frozen"):
        cfg.training.lr = 1.0  # type: ignore[misc]


# --- bad input: each names the file, the key path, the bad value and what was expected ---------------------


def test_malformed_yaml_names_file_and_line(config_dir: Path) -> None:
    (config_dir / "models" / "fraud.yaml").write_text("training:\n  max_steps: [1, 2\n  lr: 3\n")
    with pytest.raises(ConfigError, match=r"configs/models/fraud\.yaml:\d+:\d+: malformed YAML"):
        _load(config_dir)


def test_top_level_not_a_mapping(config_dir: Path) -> None:
    (config_dir / "base.yaml").write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match=r"configs/base\.yaml: top level is list"):
        _load(config_dir)


def test_unknown_key_suggests_closest(config_dir: Path) -> None:
    (config_dir / "profiles" / "local.yaml").write_text("training:\n  fsdp:\n    sharding_stratgy: FULL_SHARD\n")
    with pytest.raises(ConfigError) as info:
        _load(config_dir)
    msg = str(info.value)
    assert "configs/profiles/local.yaml" in msg
    assert "'training.fsdp.sharding_stratgy'" in msg
    assert "did you mean 'training.fsdp.sharding_strategy'?" in msg


def test_unknown_section(config_dir: Path) -> None:
    (config_dir / "base.yaml").write_text("trainig:\n  lr: 1\n")
    with pytest.raises(ConfigError, match=r"unknown key 'trainig'.*did you mean 'training'\?"):
        _load(config_dir)


def test_unknown_key_from_env_names_the_variable(config_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"env:MLOPS__TRAINING__MAX_STEP: unknown key 'training.max_step'"):
        _load(config_dir, environ={"MLOPS__TRAINING__MAX_STEP": "3"})


def test_wrong_type_names_source_path_value_and_expectation(config_dir: Path) -> None:
    (config_dir / "models" / "fraud.yaml").write_text("training:\n  max_steps: many\n")
    with pytest.raises(ConfigError) as info:
        _load(config_dir)
    msg = str(info.value)
    assert msg.startswith("configs/models/fraud.yaml: training.max_steps = 'many'; expected:")
    assert "integer" in msg


def test_out_of_range_value(config_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"--set: serving\.port = 70000; expected: .*less than or equal to 65535"):
        _load(config_dir, overrides=["serving.port=70000"])


def test_bad_literal_lists_the_choices(config_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"training\.fsdp\.sharding_strategy = 'FULL'.*'FULL_SHARD'"):
        _load(config_dir, environ={"MLOPS__TRAINING__FSDP__SHARDING_STRATEGY": "FULL"})


def test_cross_field_rule(config_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"batch_size=10 must be a multiple of grad_accum_steps=3"):
        _load(config_dir, overrides=["training.batch_size=10", "training.grad_accum_steps=3"])


def test_section_given_a_scalar(config_dir: Path) -> None:
    (config_dir / "base.yaml").write_text("training: fast\n")
    with pytest.raises(ConfigError, match=r"configs/base\.yaml: training = 'fast'; expected a mapping"):
        _load(config_dir)


def test_missing_secret_env_var(config_dir: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load(config_dir, profile="staging", environ={})
    msg = str(info.value)
    assert "configs/profiles/staging.yaml" in msg
    assert "'MLFLOW_TRACKING_USERNAME'" in msg and "not set" in msg


def test_unknown_profile_and_model(config_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown profile 'stagng'.*did you mean 'staging'\?"):
        _load(config_dir, profile="stagng")
    with pytest.raises(ConfigError, match=r"unknown model 'frad'.*did you mean 'fraud'\?"):
        _load(config_dir, model="frad")


def test_malformed_set(config_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"--set 'training\.lr': expected section\.key=value"):
        _load(config_dir, overrides=["training.lr"])


def test_defaults_alone_validate() -> None:
    cfg = PlatformConfig()
    assert cfg.training.fsdp.sharding_strategy == "FULL_SHARD"
    assert cfg.monitoring.psi_warning < cfg.monitoring.psi_critical


def test_spark_settings_take_numbers_from_yaml_and_env(config_dir: Path) -> None:
    # Spark reads every setting as a string; YAML's 4 and an env override's "2" are numbers to the config layer
    (config_dir / "profiles" / "sparky.yaml").write_text(
        "features:\n  batch_engine: spark\n  spark_conf:\n    spark.executor.cores: 4\n"
        "    spark.dynamicAllocation.enabled: true\nmonitoring:\n  spark_conf:\n    spark.memory.fraction: 0.5\n")
    env = {"MLOPS__FEATURES__SPARK_CONF__SPARK.EXECUTOR.INSTANCES": "2"}
    cfg = load_config(profile="sparky", config_dir=config_dir, environ=env).config
    assert cfg.features.spark_conf == {"spark.executor.cores": "4", "spark.dynamicAllocation.enabled": "true",
                                       "spark.executor.instances": "2"}
    assert cfg.monitoring.spark_conf == {"spark.memory.fraction": "0.5"}
    with pytest.raises(ConfigError, match=r"spark_conf\.spark\.executor\.cores.*valid string"):
        load_config(profile="sparky", config_dir=config_dir,
                    environ={"MLOPS__FEATURES__SPARK_CONF__SPARK.EXECUTOR.CORES": "[1, 2]"})
