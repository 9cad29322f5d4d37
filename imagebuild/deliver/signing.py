"""Offline signing of pushed images with a key the user provides, in cosign's key-based format.

No network service is involved: the signature is made here with an ECDSA P-256 private key (PEM,
PKCS#8 or SEC1, encrypted or not; its password only from ``IMAGEBUILD_SIGN_KEY_PASSWORD``, never
from argv) and stored in the same registry, where ``cosign verify --key`` finds it:

- the payload is the "simple signing" JSON cosign signs (``critical.identity.docker-reference`` =
  the repository with its host, ``critical.image.docker-manifest-digest`` = the manifest digest,
  ``critical.type`` = ``cosign container image signature``, ``optional`` = null), serialised as Go's
  encoding/json does it (compact, keys in this order);
- the signature is ECDSA over SHA-256 of the payload bytes, ASN.1 DER, base64 (standard alphabet);
- it is stored under the tag ``sha256-<hex>.sig`` of the same repository: an OCI image manifest whose
  layers are payloads (``application/vnd.dev.cosign.simplesigning.v1+json``), each with its
  signature in the annotation ``dev.cosignproject.cosign/signature``. Signatures already there (other
  keys, cosign's own) are kept; a signature this key already made for this payload is not added twice.

These details were checked against cosign's and sigstore's source (payload type and field names,
media type, annotation key, the signature tag), not by running cosign, which cannot be installed on
the development machines. What a site with sigstore adds is in docs/supply-chain.md.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from typing import Callable

from .. import untrusted
from ..errors import ImagebuildError, RegistryError, RegistryUnavailable, UsageError
from ..digests import sha256_bytes, sha256_digest
from .publish import DIGEST_RE, RegistryAPI
from .referrers import OCI_MANIFEST, canonical_json
from ..localfile import MAX_KEY_BYTES, read_bytes

PASSWORD_ENV = "IMAGEBUILD_SIGN_KEY_PASSWORD"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
SIGNATURE_TYPE = "cosign container image signature"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
SIGNATURE_ACCEPT = ", ".join([OCI_MANIFEST, "application/vnd.docker.distribution.manifest.v2+json"])
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_SIGNATURES = 100


class VerificationFailed(ImagebuildError):
    """A signature is missing or does not verify: the answer is no (exit 1)."""

    exit_code = 1


# --------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class SigningKey:
    private_key: object = None   # cryptography's EllipticCurvePrivateKey
    path: str = ""

    @property
    def public_key(self):
        return self.private_key.public_key()

    @property
    def key_id(self) -> str:
        return key_id(self.public_key)


def key_id(public_key) -> str:
    """``sha256:`` and the first 16 hex digits of the key's DER SubjectPublicKeyInfo: a name for the
    key in messages (the same for the private key and its public half)."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + sha256_bytes(der)[:16]


def _p256(key, path: str, what: str, argument: str):
    from cryptography.hazmat.primitives.asymmetric import ec

    if not isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)) \
            or not isinstance(key.curve, ec.SECP256R1):
        raise UsageError(f"{path}: not an ECDSA P-256 {what} (the key type cosign uses)", argument=argument)
    return key


def _read(path: str, argument: str) -> bytes:
    try:
        return read_bytes(path, MAX_KEY_BYTES)
    except FileNotFoundError:
        raise UsageError(f"no such file {path}", argument=argument) from None
    except OSError as exc:
        raise UsageError(f"cannot read {path} ({exc.strerror or type(exc).__name__})", argument=argument) from None


def load_signing_key(path: str, env: dict[str, str] | None = None, *, argument: str = "--sign-key") -> SigningKey:
    """The private key at ``path``; its password (when it is encrypted) from ``IMAGEBUILD_SIGN_KEY_PASSWORD``.
    One line naming the file for anything wrong; the password is never in a message."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    env = os.environ if env is None else env
    data = _read(path, argument)
    if b"SIGSTORE PRIVATE KEY" in data or b"COSIGN PRIVATE KEY" in data:
        raise UsageError(f"{path}: a key in cosign's own encrypted format is not read; give an ECDSA "
                         "P-256 key in PEM (cosign import-key-pair takes the same PEM key)", argument=argument)
    password = env.get(PASSWORD_ENV)
    secret = password.encode("utf-8") if password else None
    try:
        try:
            key = serialization.load_pem_private_key(data, password=secret)
        except TypeError:
            if secret is None:
                raise UsageError(f"{path}: the key is encrypted; set {PASSWORD_ENV}", argument=argument) from None
            key = serialization.load_pem_private_key(data, password=None)   # not encrypted after all
    except ValueError:
        why = (f"cannot decrypt the key with {PASSWORD_ENV}, or it is not a PEM private key" if secret
               else "not a PEM private key")
        raise UsageError(f"{path}: {why}", argument=argument) from None
    except UnsupportedAlgorithm:
        raise UsageError(f"{path}: a key type imagebuild cannot read", argument=argument) from None
    return SigningKey(private_key=_p256(key, path, "private key", argument), path=path)


def load_public_key(path: str, *, argument: str = "--key"):
    """The ECDSA P-256 public key at ``path`` (PEM ``PUBLIC KEY``, as cosign.pub is)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    data = _read(path, argument)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        hint = " (that is a private key: give its public half)" if b"PRIVATE KEY" in data else ""
        raise UsageError(f"{path}: not a PEM public key{hint}", argument=argument) from None
    return _p256(key, path, "public key", argument)


# --------------------------------------------------------------------------- payload and signature


def payload(docker_reference: str, digest: str) -> bytes:
    """cosign's simple-signing payload for ``docker_reference@digest``, byte for byte as cosign
    (Go's encoding/json) writes it."""
    if not DIGEST_RE.match(digest):
        raise ImagebuildError(f"{digest!r} is not a sha256 digest")
    doc = {"critical": {"identity": {"docker-reference": docker_reference},
                        "image": {"docker-manifest-digest": digest},
                        "type": SIGNATURE_TYPE},
           "optional": None}
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def signature_tag(digest: str) -> str:
    """cosign's tag for the signatures of ``digest``: ``sha256-<hex>.sig``."""
    if not DIGEST_RE.match(digest):
        raise ImagebuildError(f"{digest!r} is not a sha256 digest")
    return digest.replace(":", "-") + ".sig"


def sign_bytes(key: SigningKey, data: bytes) -> str:
    """base64 of the ASN.1 DER ECDSA-SHA256 signature of ``data``; deterministic (RFC 6979) where
    the OpenSSL under cryptography has it, so the same payload gets the same signature."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        der = key.private_key.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
    except (UnsupportedAlgorithm, TypeError):   # an OpenSSL before 3.2, a cryptography before 44
        der = key.private_key.sign(data, ec.ECDSA(hashes.SHA256()))
    return base64.b64encode(der).decode("ascii")


def verifies(public_key, data: bytes, signature_b64: str) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        der = base64.b64decode(signature_b64, validate=True)
        public_key.verify(der, data, ec.ECDSA(hashes.SHA256()))
        return True
    except (InvalidSignature, ValueError, TypeError):
        return False


def _claims(data: bytes) -> tuple[str | None, str | None, str | None]:
    """(type, docker-manifest-digest, docker-reference) of a payload, None where missing."""
    try:
        critical = untrusted.loads(data)["critical"]
        return (critical.get("type"), critical.get("image", {}).get("docker-manifest-digest"),
                critical.get("identity", {}).get("docker-reference"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, None, None


def _layers(body: bytes, where: str) -> list[dict]:
    try:
        doc = untrusted.loads(body)
    except untrusted.BadData as exc:
        raise RegistryError(f"{where} is not a JSON manifest ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
        raise RegistryError(f"{where} has no list of layers")
    try:
        return [untrusted.descriptor(la, where, DIGEST_RE) for la in doc["layers"]]
    except untrusted.BadData as exc:
        raise RegistryError(str(exc)) from None


def signature_manifest(layers: list[dict]) -> tuple[bytes, bytes]:
    """(manifest, config) of a signature image holding ``layers``: an OCI image manifest and an
    image config whose rootfs lists the layers, as cosign's signature images have (without the
    creation time cosign stamps, so the same signatures give the same bytes)."""
    config = canonical_json({"architecture": "", "config": {}, "os": "",
                             "rootfs": {"type": "layers", "diff_ids": [la["digest"] for la in layers]}})
    manifest = canonical_json({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                               "config": {"mediaType": OCI_CONFIG, "digest": sha256_digest(config),
                                          "size": len(config)},
                               "layers": layers})
    return manifest, config


# --------------------------------------------------------------------------- sign and verify


@dataclass(frozen=True)
class Signed:
    subject: str       # the digest signed
    tag: str           # sha256-<hex>.sig
    digest: str        # the signature manifest's digest
    key_id: str
    added: bool        # False: this key's signature of this payload was there already

    def as_dict(self) -> dict:
        return {"subject": self.subject, "tag": self.tag, "digest": self.digest, "key": self.key_id,
                "added": self.added}


@dataclass(frozen=True)
class Verified:
    digest: str
    identity: str | None     # the docker-reference the signature names
    tag: str
    key_id: str


def verify_signature(api: RegistryAPI, repository: str, digest: str, public_key) -> Verified:
    """A signature made with ``public_key`` for exactly ``digest`` in ``sha256-<hex>.sig``, or
    VerificationFailed (exit 1) saying why: no signature tag, none made with this key, or one made
    with this key for another digest."""
    tag = signature_tag(digest)
    kid = key_id(public_key)
    where = f"{api.host}/{repository}:{tag}"
    manifest = api.get_manifest(repository, tag, accept=SIGNATURE_ACCEPT)
    if manifest is None:
        raise VerificationFailed(f"{api.host}/{repository}@{digest}: no signature ({where} does not exist)")
    layers = [la for la in _layers(manifest.body, where)
              if la.get("mediaType") == SIMPLE_SIGNING and DIGEST_RE.match(str(la.get("digest", "")))]
    other_digest = None
    for layer in layers[:MAX_SIGNATURES]:
        signature = (layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION)
        if not isinstance(signature, str):
            continue
        try:
            data = api.get_blob(repository, layer["digest"], max_bytes=MAX_PAYLOAD_BYTES)
        except RegistryUnavailable:
            raise
        except RegistryError:
            continue      # a payload the registry does not serve (intact) vouches for nothing
        if not verifies(public_key, data, signature):
            continue
        kind, signed, identity = _claims(data)
        if kind != SIGNATURE_TYPE:
            continue
        if signed != digest:
            other_digest = signed
            continue
        return Verified(digest=digest, identity=identity, tag=tag, key_id=kid)
    if other_digest:
        raise VerificationFailed(f"{api.host}/{repository}@{digest}: the signature made with key {kid} "
                                 f"in {tag} is for {other_digest}, not this digest")
    raise VerificationFailed(f"{api.host}/{repository}@{digest}: none of the {len(layers)} signature(s) "
                             f"in {tag} verifies with key {kid}")


def sign(api: RegistryAPI, repository: str, *, docker_reference: str, digest: str, key: SigningKey,
         progress: Callable[[str], None] | None = None) -> Signed:
    """Sign ``digest`` (the manifest as the registry holds it) and store the signature under
    ``sha256-<hex>.sig``, keeping the signatures already there; then read it back and verify it."""
    say = progress or (lambda _msg: None)
    tag = signature_tag(digest)
    body = payload(docker_reference, digest)
    body_digest = sha256_digest(body)
    existing = api.get_manifest(repository, tag, accept=SIGNATURE_ACCEPT)
    layers = _layers(existing.body, f"{api.host}/{repository}:{tag}") if existing is not None else []
    already = any(la.get("digest") == body_digest
                  and verifies(key.public_key, body, str((la.get("annotations") or {}).get(SIGNATURE_ANNOTATION, "")))
                  for la in layers)
    if not already:
        api.push_blob(repository, body)
        layers.append({"mediaType": SIMPLE_SIGNING, "digest": body_digest, "size": len(body),
                       "annotations": {SIGNATURE_ANNOTATION: sign_bytes(key, body)}})
        manifest, config = signature_manifest(layers)
        api.push_blob(repository, config)
        api.put_manifest(repository, tag, manifest, OCI_MANIFEST)
    try:
        verify_signature(api, repository, digest, key.public_key)
    except VerificationFailed as exc:
        raise RegistryError(f"the signature pushed for {repository}@{digest} does not verify when read "
                            f"back ({exc.message})") from None
    served = api.get_manifest(repository, tag, accept=SIGNATURE_ACCEPT)
    assert served is not None
    say(f"{'signed' if not already else 'already signed'} {repository}@{digest} with key {key.key_id} "
        f"({tag})")
    return Signed(subject=digest, tag=tag, digest=served.digest, key_id=key.key_id, added=not already)
