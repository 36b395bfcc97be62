"""Layered loading: defaults ← base.yaml ← profiles/<p>.yaml ← models/<m>.yaml ← env ← ``--set``.

Later layers win key by key. Every leaf remembers which layer set it, so ``mlops config show`` can say
where a value came from and a bad value's error can name the file it is in. A key that moved
(:mod:`mlops_config.moved`) is refused in whichever layer sets it, naming its new place.
"""

from __future__ import annotations

import difflib
import os
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from mlops_config.errors import ConfigError
from mlops_config.moved import moved_message
from mlops_config.platform import PlatformConfig

ENV_PREFIX = "MLOPS__"
DEFAULT_LAYER = "default"
CONFIG_DIR_ENV = "MLOPS_CONFIG_DIR"
PROFILE_ENV = "MLOPS_PROFILE"


@dataclass(frozen=True)
class Layer:
    """One source of config values: its name (a file, ``env:VAR`` or ``--set``) and a nested dict."""

    name: str
    values: dict[str, Any]
    # Per leaf path, the exact origin inside the layer (e.g. the env var name) when it differs from `name`.
    origins: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadedConfig:
    """The validated config, the layer that set each leaf, and the repo root paths are relative to."""

    config: PlatformConfig
    sources: dict[str, str]
    root: Path
    layers: tuple[str, ...]

    def resolve_path(self, path: str | os.PathLike[str]) -> Path:
        """A config path made absolute against the repo root (absolute paths pass through)."""
        p = Path(path)
        return p if p.is_absolute() else self.root / p


def find_config_dir(start: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """``$MLOPS_CONFIG_DIR``, else the first ``configs/base.yaml`` found walking up from ``start`` (cwd)."""
    env = os.environ if environ is None else environ
    if env.get(CONFIG_DIR_ENV):
        d = Path(env[CONFIG_DIR_ENV]).expanduser().resolve()
        if not (d / "base.yaml").is_file():
            raise ConfigError(f"{CONFIG_DIR_ENV}={str(d)!r} has no base.yaml; point it at the repo's configs/ folder")
        return d
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "configs" / "base.yaml").is_file():
            return d / "configs"
    raise ConfigError(
        f"no configs/base.yaml in {str(here)!r} or any parent; run from the repo or set {CONFIG_DIR_ENV}"
    )


def load_config(
    profile: str | None = None,
    model: str | None = None,
    overrides: Iterable[str] = (),
    *,
    config_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    check_secrets: bool = True,
) -> LoadedConfig:
    """Load, merge and validate every layer.

    Args:
        profile: ``configs/profiles/<profile>.yaml``; default ``$MLOPS_PROFILE`` or ``local``.
        model: ``configs/models/<model>.yaml``; default the merged ``project.model``.
        overrides: ``section.key=value`` strings (values parsed as YAML scalars/lists).
        config_dir: the ``configs/`` folder; default found by :func:`find_config_dir`.
        environ: environment to read ``MLOPS__...`` overrides and secrets from; default ``os.environ``.
        check_secrets: fail when an ``*_env`` field names an env var that is not set.

    Raises:
        ConfigError: naming the layer (file), key path, bad value and what was expected.
    """
    env = os.environ if environ is None else environ
    cdir = (config_dir or find_config_dir(environ=env)).resolve()
    root = cdir.parent
    profile = profile or env.get(PROFILE_ENV) or "local"

    layers = [_file_layer(cdir / "base.yaml", root)]
    layers.append(_file_layer(_named_file(cdir, "profiles", profile), root))
    env_layer = _env_layer(env)
    set_layer = _set_layer(overrides)
    for layer in (*layers, env_layer, set_layer):  # a bad key says so before a missing model does
        _check_keys(layer.values, PlatformConfig, (), layer)
    if model is None:
        merged_so_far = _merge_all([*layers, env_layer, set_layer])
        model = (merged_so_far.get("project") or {}).get("model")
        if not model:
            known = sorted(p.stem for p in (cdir / "models").glob("*.yaml"))
            raise ConfigError(f"no model selected: project.model = {model!r} in every layer and no --model; expected "
                              f"one of {known} (configs/models/), named by project.model in configs/base.yaml or "
                              "by --model")
    layers.append(_file_layer(_named_file(cdir, "models", model), root))
    layers += [env_layer, set_layer]
    layers.append(Layer("loader", {"project": {"profile": profile, "model": model}}))
    _check_keys(layers[2].values, PlatformConfig, (), layers[2])
    sources: dict[str, str] = {}
    merged = _merge_all(layers, sources)
    try:
        config = PlatformConfig.model_validate(merged)
    except ValidationError as exc:
        raise _validation_error(exc, sources) from None
    for path in _leaf_paths(config.model_dump()):
        sources.setdefault(path, DEFAULT_LAYER)
    if check_secrets:
        _check_secrets(config, sources, env)
    return LoadedConfig(config=config, sources=dict(sorted(sources.items())), root=root,
                        layers=tuple(dict.fromkeys(s for s in sources.values())))


def _named_file(cdir: Path, kind: str, name: str) -> Path:
    path = cdir / kind / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (cdir / kind).glob("*.yaml"))
        hint = difflib.get_close_matches(name, known, n=1)
        did = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ConfigError(f"unknown {kind[:-1]} {name!r}: no {path}; expected one of {known}{did}")
    return path


def _file_layer(path: Path, root: Path) -> Layer:
    name = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{name}{where}: malformed YAML: {problem}; expected a mapping of sections") from None
    except ValueError as exc:  # PyYAML's timestamp resolver builds a datetime of e.g. 2026-13-40 and lets it raise
        raise ConfigError(f"{name}: a timestamp-shaped value is no valid time ({exc}); expected ISO 8601, "
                          "e.g. 2026-11-04T00:00:00Z") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: top level is {type(data).__name__} {data!r}; expected a mapping of sections")
    return Layer(name, data)


def _parse_scalar(text: str, origin: str) -> Any:
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        raise ConfigError(f"{origin}: value {text!r} is not a valid YAML scalar or list") from None
    except ValueError as exc:  # PyYAML's timestamp resolver builds a datetime of e.g. 2026-13-40 and lets it raise
        raise ConfigError(f"{origin}: value {text!r} is no valid time ({exc}); expected ISO 8601, "
                          "e.g. 2026-11-04T00:00:00Z") from None


def _env_layer(env: Mapping[str, str]) -> Layer:
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX):
            continue
        parts = [p.lower() for p in var[len(ENV_PREFIX):].split("__")]
        if not all(parts):
            raise ConfigError(f"env:{var}: malformed name; expected {ENV_PREFIX}SECTION__KEY[__SUBKEY]")
        _put(values, parts, _parse_scalar(env[var], f"env:{var}"))
        origins[".".join(parts)] = f"env:{var}"
    return Layer("env", values, origins)


def _set_layer(overrides: Iterable[str]) -> Layer:
    values: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(f"--set {item!r}: expected section.key=value, e.g. training.max_steps=10")
        _put(values, parts, _parse_scalar(raw, f"--set {item}"))
    return Layer("--set", values)


def _put(target: dict[str, Any], parts: list[str], value: Any) -> None:
    for p in parts[:-1]:
        target = target.setdefault(p, {})
    target[parts[-1]] = value


def _merge_all(layers: Iterable[Layer], sources: dict[str, str] | None = None) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for layer in layers:
        _merge(merged, layer.values, (), layer, sources)
    return merged


def _merge(dst: dict[str, Any], src: Mapping[str, Any], prefix: tuple[str, ...], layer: Layer,
           sources: dict[str, str] | None) -> None:
    for key, value in src.items():
        path = (*prefix, str(key))
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            _merge(dst[key], value, path, layer, sources)
            continue
        dst[key] = _deepcopy(value)
        if sources is not None:
            dotted = ".".join(path)
            for stale in [p for p in sources if p == dotted or p.startswith(dotted + ".")]:
                del sources[stale]
            leaves = _leaf_paths(value, dotted) if isinstance(value, dict) and value else [dotted]
            for leaf in leaves:
                sources[leaf] = layer.origins.get(leaf, layer.name)


def _deepcopy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deepcopy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deepcopy(v) for v in value]
    return value


def _leaf_paths(value: Mapping[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for key, val in value.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(val, Mapping) and val:
            out += _leaf_paths(val, path)
        else:
            out.append(path)
    return out


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds, looking through ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            sub = _submodel(arg)
            if sub is not None:
                return sub
    return None


def _check_keys(values: Any, model: type[BaseModel], prefix: tuple[str, ...], layer: Layer) -> None:
    if not isinstance(values, dict):
        return
    fields = model.model_fields
    for key, val in values.items():
        path = ".".join((*prefix, str(key)))
        where = layer.origins.get(path, layer.name)
        if key not in fields:
            leaf = _leaf_paths(val, path)[0] if isinstance(val, dict) and val else path
            moved = moved_message(path, leaf, layer.origins.get(leaf, layer.name))
            if moved is not None:
                raise ConfigError(moved)
            hint = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            did = f"; did you mean {'.'.join((*prefix, hint[0]))!r}?" if hint else ""
            section = ".".join(prefix) or "the top level"
            raise ConfigError(
                f"{where}: unknown key {path!r}; expected one of {sorted(fields)} in {section}{did}"
            )
        sub = _submodel(fields[key].annotation)
        if sub is not None:
            if not isinstance(val, dict) and val is not None:
                raise ConfigError(f"{where}: {path} = {val!r}; expected a mapping of {sub.__name__} keys")
            _check_keys(val, sub, (*prefix, str(key)), layer)


def _validation_error(exc: ValidationError, sources: Mapping[str, str]) -> ConfigError:
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"]]
    path = ".".join(loc) or "<root>"
    source = DEFAULT_LAYER
    for n in range(len(loc), 0, -1):
        prefix = ".".join(loc[:n])
        hits = sorted(s for p, s in sources.items() if p == prefix or p.startswith(prefix + "."))
        if hits:
            source = sources.get(prefix) or ", ".join(sorted(set(hits)))
            break
    value = err.get("input")
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    msg = err["msg"].removeprefix("Value error, ")
    return ConfigError(f"{source}: {path} = {value!r}; expected: {msg}{more}")


def _check_secrets(config: BaseModel, sources: Mapping[str, str], env: Mapping[str, str],
                   prefix: str = "") -> None:
    for name, info in type(config).model_fields.items():
        value = getattr(config, name)
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(value, BaseModel):
            _check_secrets(value, sources, env, path)
        elif name.endswith("_env") and value and value not in env:
            raise ConfigError(
                f"{sources.get(path, DEFAULT_LAYER)}: {path} names env var {value!r}, which is not set; "
                f"expected it to hold the secret ({info.description or 'see the schema'}) — export it first"
            )


def config_schema() -> dict[str, Any]:
    """JSON Schema of the YAML files (every layer is a partial ``PlatformConfig``)."""
    schema = PlatformConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mlops platform config layer"
    return schema
