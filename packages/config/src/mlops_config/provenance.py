"""``provenance``: how exported models are signed and verified (OpenSSF ``model-signing``)."""

from __future__ import annotations

from typing import Literal

from mlops_config._base import Section


class ProvenanceConfig(Section):
    signer: Literal["key", "sigstore", "none"] = "key"
    """How exported models are signed: ``key`` (an EC key pair named below), ``sigstore`` (keyless: an OIDC
    identity, Fulcio and Rekor; the production option where the trainer has a workload identity), or ``none``."""

    private_key_var: str | None = None
    """Name of the env var holding the path of the PEM EC private key that signs (the trainer only). Named
    ``_var``, not ``_env``: serving and the gates load the same config without it, so it is checked when
    signing, not at load time."""

    private_key_password_var: str | None = None
    """Name of the env var holding the private key's password, when the PEM is encrypted."""

    public_key_var: str | None = None
    """Name of the env var holding the path of the PEM public key that verifies (serving, gates, audits)."""

    local_key_dir: str | None = None
    """With no key vars set: a folder (relative to the repo root) where a P-256 key pair is generated once and
    reused; the local profile's demo key. Never committed; ``None`` means a missing key is an error."""

    require_signature: bool = True
    """Serving and the gates refuse a model with no signature (``False`` only to read models exported before
    signing existed)."""

    sigstore_identity: str | None = None
    """Keyless verification: the signer identity (e.g. the CI workflow's URI) a signature must carry."""

    sigstore_oidc_issuer: str | None = None
    """Keyless verification: the OIDC issuer of that identity (e.g. ``https://token.actions.githubusercontent.com``)."""
