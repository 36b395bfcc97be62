"""A detached ECDSA signature over a small document (a checkpoint's manifest) with the model-signing key pair.

A training checkpoint holds DCP's ``.metadata``, a pickle that ``torch.distributed.checkpoint`` unpickles on
load. Its SHA-256 is in the checkpoint's ``manifest.json``, but whoever can write the checkpoint folder can
rewrite the manifest too; the seal (the manifest's bytes signed with the run's signing key, which only the
trainer holds) is what a resume checks before anything is unpickled.

The key is the one ``provenance`` names for models (:func:`mlops_model.signing.resolve_keys`). ``signer: key``
seals; ``none`` and ``sigstore`` (keyless: no key in the job to seal with) return no seal, and a resume then
checks the manifest's checksums only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlops_config import ProvenanceConfig
from mlops_model.errors import ModelSignatureError
from mlops_model.signing import SigningKeys, resolve_keys


@dataclass(frozen=True)
class ManifestSeal:
    """Signs and checks a document's bytes with one EC key pair (the public half derived when not given)."""

    keys: SigningKeys

    def _private(self) -> Any:
        from cryptography.hazmat.primitives import serialization

        if self.keys.private_key is None:
            raise ModelSignatureError(
                "no signing key to seal a checkpoint manifest with: set the env var named by "
                "provenance.private_key_var (rank 0 of the training job holds it)"
            )
        password = self.keys.password.encode() if self.keys.password else None
        return serialization.load_pem_private_key(self.keys.private_key.read_bytes(), password=password)

    def _public(self) -> Any:
        from cryptography.hazmat.primitives import serialization

        if self.keys.public_key is not None:
            return serialization.load_pem_public_key(self.keys.public_key.read_bytes())
        return self._private().public_key()

    def sign(self, data: bytes) -> bytes:
        """The DER ECDSA-SHA256 signature of ``data``."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        return bytes(self._private().sign(data, ec.ECDSA(hashes.SHA256())))

    def verify(self, data: bytes, signature: bytes, *, what: str) -> None:
        """Raises:
        ModelSignatureError: ``signature`` was not made over ``data`` by this key pair (``what`` names it).
        """
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        try:
            self._public().verify(signature, data, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError) as exc:
            raise ModelSignatureError(
                f"{what}: the seal does not verify with the run's signing key "
                f"({type(exc).__name__}): edited, or sealed by another key"
            ) from None


def manifest_seal(
    provenance: ProvenanceConfig, root: Path, environ: Mapping[str, str] | None = None
) -> ManifestSeal | None:
    """The seal for ``signer: key`` (keys resolved once); ``None`` for ``none`` and keyless ``sigstore``.

    Raises:
        ModelSignatureError: ``signer: key`` without a private key (before a step is trained, not at the first save).
    """
    if provenance.signer != "key":
        return None
    keys = resolve_keys(provenance, root, environ)
    if keys.private_key is None:
        raise ModelSignatureError(
            "no model-signing key to seal checkpoints with: set the env var named by "
            f"provenance.private_key_var ({provenance.private_key_var!r}) on rank 0"
        )
    return ManifestSeal(keys)
