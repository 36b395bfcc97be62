"""Signed exported models: OpenSSF ``model-signing`` over every file of the folder, the signature beside them.

:func:`sign_folder` hashes each file of an exported-model folder (SHA-256, ``model-signing``'s file
serialization) and signs the manifest with an EC private key, writing ``model.sig`` (a Sigstore bundle)
into the folder; the manifest ignores that one file. :func:`verify_folder` re-hashes the folder and checks
the signature with the public key: a changed byte, an added or a missing file, or a signature made by another
key is refused with a :class:`ModelSignatureError` naming what differs.

Keys: the provenance section names env vars holding PEM paths (trainer: private; serving and gates: public).
With none set, ``local_key_dir`` holds a P-256 pair the platform generates once (the local profile's demo
key, under ``.mlops/``, never committed). ``signer: sigstore`` signs keyless (OIDC + Fulcio + Rekor), the
production option where CI has a workload identity; it needs the network, so the tests use keys.

The *model digest* recorded in the registry and the ledger is the SHA-256 of the manifest's sorted
``<file> <sha256>`` lines: anyone can recompute it with ``sha256sum``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mlops_config import ProvenanceConfig
from mlops_model.errors import ModelSignatureError

log = logging.getLogger(__name__)

SIGNATURE_FILE = "model.sig"
PUBLISH_MARKER = "publish.json"
NOT_SIGNED = (SIGNATURE_FILE, PUBLISH_MARKER)
"""Files in a model folder that describe a copy of the model, not the model: its signature, and the marker the
promotion's publish step writes last into the ``storageUri`` copy (each file's SHA-256, checked by publish). The
predictor loads that copy (KServe's storage initializer downloads the whole folder), so the marker is not signed;
any other added file is refused."""
PRIVATE_KEY_FILE = "signing-key.pem"
PUBLIC_KEY_FILE = "signing-key.pub.pem"


@dataclass(frozen=True)
class SigningKeys:
    """Where the keys are (either may be ``None``) and the private key's password."""

    private_key: Path | None
    public_key: Path | None
    password: str | None = None


PEM_BEGIN = "-----BEGIN "


def _var_path(var: str | None, environ: Mapping[str, str]) -> Path | None:
    """The key file the env var ``var`` names; a var holding the PEM text itself (a CI secret, a Kubernetes
    ``secretKeyRef``) is written once to a private file (0600 in a 0700 folder) and that file is returned."""
    if not var:
        return None
    value = environ.get(var)
    if not value:
        return None
    if value.lstrip().startswith(PEM_BEGIN):
        import tempfile

        text = value.strip() + "\n"
        folder = Path(tempfile.gettempdir()) / f"mlops-signing-{os.getuid()}"
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)
        path = folder / f"{var}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.pem"
        if not path.is_file():
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            tmp.replace(path)
        return path
    return Path(value)


def resolve_keys(provenance: ProvenanceConfig, root: Path, environ: Mapping[str, str] | None = None) -> SigningKeys:
    """The key pair the provenance section names: env vars first, else the generated local pair.

    Raises:
        ModelSignatureError: a named key file does not exist.
    """
    env = os.environ if environ is None else environ
    private = _var_path(provenance.private_key_var, env)
    public = _var_path(provenance.public_key_var, env)
    password = env.get(provenance.private_key_password_var) if provenance.private_key_password_var else None
    if private is None and public is None and provenance.local_key_dir:
        folder = Path(provenance.local_key_dir)
        private, public = ensure_local_keys(folder if folder.is_absolute() else root / folder)
    for var, path in ((provenance.private_key_var, private), (provenance.public_key_var, public)):
        if path is not None and not path.is_file():
            raise ModelSignatureError(f"signing key {str(path)!r} (from ${var}) does not exist; expected a PEM file")
    return SigningKeys(private, public, password or None)


def ensure_local_keys(folder: Path) -> tuple[Path, Path]:
    """A P-256 key pair in ``folder``, generated on first use (atomically: concurrent callers get one pair)."""
    private, public = folder / PRIVATE_KEY_FILE, folder / PUBLIC_KEY_FILE
    if private.is_file() and public.is_file():
        return private, public
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    tmp.mkdir(mode=0o700)
    try:
        (tmp / PRIVATE_KEY_FILE).write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        (tmp / PRIVATE_KEY_FILE).chmod(0o600)
        (tmp / PUBLIC_KEY_FILE).write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        try:
            tmp.rename(folder)  # fails when another process (or an older half) got there first
            log.warning("generated a local model-signing key pair in %s (demo key; not for production)", folder)
        except OSError:
            if not (private.is_file() and public.is_file()):
                raise ModelSignatureError(f"{str(folder)!r} exists but holds no key pair; remove it to regenerate "
                                          "the local signing key") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return private, public


def _hashing_config():
    from model_signing import hashing

    return hashing.Config().set_ignored_paths(paths=list(NOT_SIGNED), ignore_git_paths=False)


def model_digest(folder: str | Path) -> str:
    """SHA-256 of the sorted ``<file> <sha256>`` lines of every file in ``folder`` but the signature."""
    manifest = _hashing_config().hash(Path(folder))
    lines = sorted(f"{rd.identifier} {rd.digest.digest_hex}" for rd in manifest.resource_descriptors())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def sign_folder(folder: str | Path, provenance: ProvenanceConfig, keys: SigningKeys) -> str | None:
    """Sign ``folder`` (writes ``model.sig`` into it); returns the model digest, ``None`` for ``signer: none``.

    Raises:
        ModelSignatureError: no private key is configured for ``signer: key``.
    """
    from model_signing import signing

    folder = Path(folder)
    if provenance.signer == "none":
        return None
    config = signing.Config().set_hashing_config(_hashing_config())
    if provenance.signer == "sigstore":
        config = config.use_sigstore_signer()
    else:
        if keys.private_key is None:
            raise ModelSignatureError(
                "no model-signing key: set the env var named by provenance.private_key_var "
                f"({provenance.private_key_var!r}) to a PEM private key, or provenance.local_key_dir for a local key")
        config = config.use_elliptic_key_signer(private_key=keys.private_key, password=keys.password)
    config.sign(folder, folder / SIGNATURE_FILE)
    return model_digest(folder)


def verify_folder(folder: str | Path, provenance: ProvenanceConfig, keys: SigningKeys) -> str | None:
    """Check ``folder`` against its ``model.sig``; returns the model digest (``None``: unsigned and allowed).

    Raises:
        ModelSignatureError: no signature (when required), files that differ from what was signed, or a
            signature that the configured key (or Sigstore identity) did not make.
    """
    from model_signing import verifying

    folder = Path(folder)
    signature = folder / SIGNATURE_FILE
    if not signature.is_file():
        if provenance.require_signature:
            raise ModelSignatureError(f"{str(folder)!r} has no {SIGNATURE_FILE}: the model is unsigned; re-export it "
                                      "(training signs at export)")
        return None
    config = verifying.Config().set_hashing_config(_hashing_config())
    if provenance.signer == "sigstore":
        if not (provenance.sigstore_identity and provenance.sigstore_oidc_issuer):
            raise ModelSignatureError("provenance.signer is 'sigstore' but sigstore_identity / sigstore_oidc_issuer "
                                      "are not set; expected the identity that signs in CI")
        config = config.use_sigstore_verifier(identity=provenance.sigstore_identity,
                                              oidc_issuer=provenance.sigstore_oidc_issuer)
    else:
        if keys.public_key is None:
            raise ModelSignatureError(
                "no public key to verify the model signature: set the env var named by provenance.public_key_var "
                f"({provenance.public_key_var!r}) to a PEM public key")
        config = config.use_elliptic_key_verifier(public_key=keys.public_key)
    try:
        config.verify(folder, signature)
    except ValueError as exc:
        text = str(exc)
        if text.startswith("Signature mismatch"):
            raise ModelSignatureError(f"{str(folder)!r} does not match its signature: {_describe_mismatch(text)}"
                                      ) from None
        raise ModelSignatureError(f"{str(folder)!r}: the signature in {SIGNATURE_FILE} does not verify with "
                                  f"{_key_name(provenance, keys)} ({text}): signed by another key, or edited") from None
    except Exception as exc:  # cryptography / protobuf errors on a damaged bundle
        raise ModelSignatureError(f"{str(folder)!r}: {SIGNATURE_FILE} is unreadable or forged: "
                                  f"{type(exc).__name__}: {exc}") from None
    return model_digest(folder)


def _describe_mismatch(text: str) -> str:
    """``model-signing``'s mismatch message (a list repr with raw digests) as ``changed: ...; added: ...``."""
    changed = re.findall(r"Hash mismatch for \\?'([^'\\]+)", text)  # the repr may escape the quotes
    added = re.findall(r"Extra files found in model \\?'[^']*': ([^\"'\]]+)", text)
    missing = re.findall(r"Missing files in model \\?'[^']*': ([^\"'\]]+)", text)
    parts = [f"changed {', '.join(changed)}" if changed else "", f"added {', '.join(added)}" if added else "",
             f"missing {', '.join(missing)}" if missing else ""]
    return "; ".join(p for p in parts if p) or text


def _key_name(provenance: ProvenanceConfig, keys: SigningKeys) -> str:
    if provenance.signer == "sigstore":
        return f"Sigstore identity {provenance.sigstore_identity!r}"
    return f"public key {str(keys.public_key)!r}"


@dataclass(frozen=True)
class ModelVerifier:
    """A callable for :meth:`mlops_model.ExportedModel.load` (``check=``): verify, then load."""

    provenance: ProvenanceConfig
    keys: SigningKeys

    def __call__(self, folder: Path) -> str | None:
        return verify_folder(folder, self.provenance, self.keys)


@dataclass(frozen=True)
class ModelSigner:
    """A callable for :func:`mlops_model.save_exported` (``sign=``): sign the folder just written."""

    provenance: ProvenanceConfig
    keys: SigningKeys

    def __call__(self, folder: Path) -> str | None:
        return sign_folder(folder, self.provenance, self.keys)


def model_verifier(provenance: ProvenanceConfig, root: Path, environ: Mapping[str, str] | None = None) -> ModelVerifier:
    """The verifier the provenance section describes (keys resolved once)."""
    return ModelVerifier(provenance, resolve_keys(provenance, root, environ))


def model_signer(provenance: ProvenanceConfig, root: Path, environ: Mapping[str, str] | None = None) -> ModelSigner:
    """The signer the provenance section describes (keys resolved once)."""
    return ModelSigner(provenance, resolve_keys(provenance, root, environ))
