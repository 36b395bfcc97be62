"""One overlay's model manifest (``infra/overlays/<env>/model-<model>.yaml``), edited round-trip.

The file is a kustomize patch of the model's InferenceService. It pins what the environment serves:

- ``metadata.annotations["mlops.platform/stable-version"]``: the version serving all non-canary traffic;
- ``metadata.annotations["mlops.platform/canary-version"]`` and ``spec.predictor.canaryTrafficPercent``:
  present only while a canary runs;
- ``metadata.annotations["mlops.platform/previous-version"]``: the version the last full promotion
  replaced (what a rollback returns to);
- ``spec.predictor.model.storageUri``: the immutable artifact of the newest version (the canary's while
  one runs: KServe sends ``canaryTrafficPercent`` to it and the rest to the last rolled-out revision).

ruamel.yaml's round-trip mode keeps comments, key order and quoting, so an edit changes only the lines
it means to and undoing it gives back the same bytes.
"""

from __future__ import annotations

import io
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from mlops_delivery.errors import ManifestError

logger = logging.getLogger(__name__)

STABLE = "mlops.platform/stable-version"
CANARY = "mlops.platform/canary-version"
PREVIOUS = "mlops.platform/previous-version"
TRAFFIC = "canaryTrafficPercent"


@dataclass(frozen=True)
class Placement:
    """What one environment serves, as its manifest says."""

    env: str
    stable_version: int
    storage_uri: str
    canary_version: int | None = None
    canary_percent: int = 0
    previous_version: int | None = None

    @property
    def stable_percent(self) -> int:
        """Share of traffic the stable version gets."""
        return 100 - self.canary_percent

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form, with the stable share spelled out."""
        return {**asdict(self), "stable_percent": self.stable_percent}


def round_trip_yaml() -> YAML:
    """The one ruamel.yaml setup for editing manifests in place (comments, quotes, order and indents kept)."""
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 4096
    return y


class ModelManifest:
    """The parsed manifest of one model in one environment; ``dump()`` gives the edited text."""

    def __init__(self, path: Path, env: str, model: str) -> None:
        self.path = path
        self.env = env
        self.model = model
        if not path.is_file():
            raise ManifestError(
                f"no model manifest for {model!r} in {env!r}: {str(path)!r} does not exist "
                f"(create it from another overlay's, or check delivery.infra_dir / delivery.model_manifest)"
            )
        self.original = path.read_text(encoding="utf-8")
        try:
            self.doc = round_trip_yaml().load(self.original)
        except Exception as exc:  # ruamel raises many unrelated types for bad YAML
            raise ManifestError(f"{str(path)!r} is not valid YAML: {exc}") from exc
        self._check_shape()

    def _check_shape(self) -> None:
        doc = self.doc
        where = repr(str(self.path))
        if not isinstance(doc, CommentedMap) or doc.get("kind") != "InferenceService":
            raise ManifestError(f"{where} must be one InferenceService patch, got kind {_get(doc, 'kind')!r}")
        name = _get(doc, "metadata", "name")
        if name != self.model:
            raise ManifestError(f"{where} patches InferenceService {name!r}, expected {self.model!r}")
        for keys in (("metadata", "annotations"), ("spec", "predictor", "model")):
            if not isinstance(_get(doc, *keys), CommentedMap):
                raise ManifestError(f"{where} lacks the mapping {'.'.join(keys)!r}")
        if not isinstance(_get(doc, "spec", "predictor", "model", "storageUri"), str):
            raise ManifestError(f"{where} lacks spec.predictor.model.storageUri (a string)")
        self.placement()  # validates the annotations

    @property
    def _annotations(self) -> CommentedMap:
        return self.doc["metadata"]["annotations"]

    @property
    def _predictor(self) -> CommentedMap:
        return self.doc["spec"]["predictor"]

    def _version(self, key: str, *, required: bool) -> int | None:
        raw = self._annotations.get(key)
        if raw is None:
            if required:
                raise ManifestError(f"{str(self.path)!r} lacks the annotation {key!r} (the version it serves)")
            return None
        try:
            value = int(str(raw))
        except ValueError:
            raise ManifestError(
                f"{str(self.path)!r}: annotation {key!r} is {raw!r}, expected a registry version number"
            ) from None
        if value < 0:
            raise ManifestError(f"{str(self.path)!r}: annotation {key!r} is {raw!r}, expected a version >= 0")
        return value

    def placement(self) -> Placement:
        """Read what this environment serves."""
        stable = self._version(STABLE, required=True)
        canary = self._version(CANARY, required=False)
        percent = self._predictor.get(TRAFFIC)
        if (canary is None) != (percent is None):
            raise ManifestError(
                f"{str(self.path)!r}: {CANARY!r} and spec.predictor.{TRAFFIC} must be set together "
                f"(got version {canary!r}, percent {percent!r})"
            )
        if percent is not None and (not isinstance(percent, int) or not 0 < percent < 100):
            raise ManifestError(f"{str(self.path)!r}: {TRAFFIC} is {percent!r}, expected an integer in 1..99")
        assert stable is not None
        return Placement(
            env=self.env,
            stable_version=stable,
            storage_uri=str(self._predictor["model"]["storageUri"]),
            canary_version=canary,
            canary_percent=percent or 0,
            previous_version=self._version(PREVIOUS, required=False),
        )

    def set_stable(self, version: int, storage_uri: str) -> None:
        """Serve ``version`` to all traffic; the replaced stable version becomes ``previous``."""
        old = self.placement()
        self.clear_canary()
        if old.stable_version != version:
            self._set_annotation(PREVIOUS, old.stable_version, after=STABLE)
        self._set_annotation(STABLE, version)
        self._predictor["model"]["storageUri"] = storage_uri

    def restore_stable(self, version: int, storage_uri: str, previous: int | None) -> None:
        """Serve ``version`` to all traffic with ``previous`` as the fallback (``None``: no fallback)."""
        self.clear_canary()
        self._set_annotation(STABLE, version)
        if previous is None:
            self._annotations.pop(PREVIOUS, None)
        else:
            self._set_annotation(PREVIOUS, previous, after=STABLE)
        self._predictor["model"]["storageUri"] = storage_uri

    def set_canary(self, version: int, percent: int, storage_uri: str) -> None:
        """Send ``percent`` of traffic to ``version``; the stable version keeps the rest."""
        anchor = PREVIOUS if PREVIOUS in self._annotations else STABLE
        self._set_annotation(CANARY, version, after=anchor)
        if TRAFFIC in self._predictor:
            self._predictor[TRAFFIC] = percent
        else:
            self._predictor.insert(0, TRAFFIC, percent)
        self._predictor["model"]["storageUri"] = storage_uri

    def clear_canary(self) -> None:
        """Drop the canary keys (all traffic to the stable version); storageUri is left to the caller."""
        self._annotations.pop(CANARY, None)
        self._predictor.pop(TRAFFIC, None)

    def _set_annotation(self, key: str, version: int, *, after: str | None = None) -> None:
        value = DoubleQuotedScalarString(str(version))
        ann = self._annotations
        if key in ann or after is None or after not in ann:
            ann[key] = value
        else:
            ann.insert(list(ann).index(after) + 1, key, value)

    def dump(self) -> str:
        """The manifest's text with the edits made so far."""
        buf = io.StringIO()
        round_trip_yaml().dump(self.doc, buf)
        return buf.getvalue()

    def changed(self) -> bool:
        """Whether the edits change the file's text."""
        return self.dump() != self.original


def _get(doc: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def manifest_path(root: Path, infra_dir: str, template: str, env: str, model: str) -> Path:
    """Where the model manifest of ``model`` in ``env`` lives."""
    return root / infra_dir / "overlays" / env / template.format(model=model)


def storage_uri(template: str, model: str, version: int) -> str:
    """The immutable artifact location of one registered version."""
    return template.format(model=model, version=version)
