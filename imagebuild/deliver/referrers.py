"""OCI 1.1 referrers: an artifact attached to a pushed image through its ``subject`` (the image's SBOM).

A label cannot carry the SBOM: it would change the image's digest. So the SBOM goes to the registry
as its own OCI artifact, next to the image:

- an image manifest (``application/vnd.oci.image.manifest.v1+json``) with ``artifactType``
  ``application/vnd.cyclonedx+json``, the empty config descriptor (``application/vnd.oci.empty.v1+json``,
  the 2-byte ``{}``), one layer (the SBOM JSON, byte for byte as ``imagebuild sbom`` wrote it) and
  ``subject`` = the pushed image's manifest descriptor (media type, digest and size as the registry
  serves them);
- found again by the referrers API (``GET /v2/<name>/referrers/<digest>``) where the registry has it;
  where it answers 404 (distribution 2.8, Debian's docker-registry), through the distribution spec's
  *referrers tag schema*: the tag ``sha256-<hex of the subject digest>`` holds an OCI image index
  listing the referrers, each with its ``artifactType`` and annotations. That index is read, our
  descriptor appended when it is not there yet (other referrers are kept as they were), and pushed
  back. Two clients updating it at the same moment can lose one entry: distribution 2.8 has no
  conditional PUT; the read-back below catches ours missing.

Everything pushed is read back: the referrers list must name the manifest, the manifest's bytes and
the layer's bytes must be the ones sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from .. import labels as L
from .. import untrusted
from ..errors import ImagebuildError, RegistryError
from .publish import DIGEST_RE, Manifest, RegistryAPI

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"
CYCLONEDX_JSON = "application/vnd.cyclonedx+json"
IMAGE_ID_ANNOTATION = L.IMAGE_ID
TITLE_ANNOTATION = L.TITLE
#: the largest SBOM read back from a registry (smoke-cpu's is about 0.3 MB)
MAX_SBOM_BYTES = 16 * 1024 * 1024
#: the most SBOM referrers `verify` fetches and checks for one manifest (a hostile index may list
#: thousands; imagebuild attaches one per image)
MAX_SBOM_REFERRERS = 16


class NoReferrer(ImagebuildError):
    """The registry holds no such referrer: an answer (exit 1), not a mistake or an outage."""

    exit_code = 1


def canonical_json(obj) -> bytes:
    """The bytes imagebuild pushes for a manifest or index: sorted keys, no spaces, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def referrers_tag(digest: str) -> str:
    """The referrers tag schema's tag for ``digest``: ``<alg>-<hex>`` (``sha256-0123...``)."""
    if not DIGEST_RE.match(digest):
        raise ImagebuildError(f"{digest!r} is not a sha256 digest")
    alg, _, hexpart = digest.partition(":")
    return f"{alg[:32]}-{hexpart[:64]}"


def artifact_manifest(*, artifact_type: str, layer: bytes, layer_media_type: str, subject: dict,
                      annotations: dict[str, str], title: str | None = None) -> bytes:
    """An OCI 1.1 artifact manifest: empty config, one layer, ``subject``; the same inputs give the
    same bytes."""
    from ..digests import sha256_digest

    layer_desc: dict = {"mediaType": layer_media_type, "digest": sha256_digest(layer), "size": len(layer)}
    if title:
        layer_desc["annotations"] = {TITLE_ANNOTATION: title}
    manifest: dict = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": sha256_digest(EMPTY_BLOB), "size": len(EMPTY_BLOB)},
        "layers": [layer_desc],
        "subject": {k: subject[k] for k in ("mediaType", "digest", "size")},
    }
    if annotations:
        manifest["annotations"] = dict(annotations)
    return canonical_json(manifest)


def _index(body: bytes, where: str) -> dict:
    """A referrers list (OCI image index) parsed and checked, or RegistryError naming ``where``."""
    try:
        index = untrusted.loads(body)
    except untrusted.BadData as exc:
        raise RegistryError(f"{where} is not JSON ({exc})") from None
    if not isinstance(index, dict) or not isinstance(index.get("manifests", []), list) \
            or index.get("mediaType", OCI_INDEX) != OCI_INDEX:
        raise RegistryError(f"{where} is not an OCI image index")
    try:
        for entry in index.get("manifests", []):
            untrusted.descriptor(entry, where, DIGEST_RE)
    except untrusted.BadData as exc:
        raise RegistryError(str(exc)) from None
    index.setdefault("manifests", [])
    return index


def list_referrers(api: RegistryAPI, repository: str, digest: str) -> tuple[list[dict], str]:
    """The referrers of ``digest``: the referrers API's answer where the registry has one, else the
    index under the referrers tag (empty when there is none); with where they came from."""
    body = api.referrers(repository, digest)
    if body is not None:
        where = "referrers API"
        return _index(body, f"registry {api.host}: the referrers of {digest}")["manifests"], where
    tag = referrers_tag(digest)
    current = api.get_manifest(repository, tag, accept=OCI_INDEX)
    if current is None:
        return [], f"tag {tag}"
    return _index(current.body, f"registry {api.host}: {repository}:{tag}")["manifests"], f"tag {tag}"


@dataclass(frozen=True)
class Attached:
    """A referrer pushed and read back."""

    digest: str          # the referrer's manifest digest
    size: int
    artifact_type: str
    layer_digest: str    # its one layer (the SBOM's sha256)
    listed_by: str       # "referrers API" or "tag sha256-..."
    added: bool          # False: the referrers list named it already (a second publish)

    def as_dict(self) -> dict:
        return {"digest": self.digest, "size": self.size, "artifact_type": self.artifact_type,
                "layer_digest": self.layer_digest, "listed_by": self.listed_by, "added": self.added}


def attach(api: RegistryAPI, repository: str, subject: Manifest, *, artifact_type: str, layer: bytes,
           layer_media_type: str, annotations: dict[str, str], title: str | None = None,
           progress: Callable[[str], None] | None = None) -> Attached:
    """Push ``layer`` as an artifact referring to ``subject``, list it (referrers API, else the tag
    schema), and read everything back."""
    say = progress or (lambda _msg: None)
    body = artifact_manifest(artifact_type=artifact_type, layer=layer, layer_media_type=layer_media_type,
                             subject=subject.descriptor(), annotations=annotations, title=title)
    api.push_blob(repository, EMPTY_BLOB)
    layer_digest = api.push_blob(repository, layer)
    from ..digests import sha256_digest
    digest = sha256_digest(body)
    has_api = api.referrers(repository, subject.digest) is not None
    pushed, indexed = api.put_manifest(repository, digest, body, OCI_MANIFEST)
    assert pushed == digest
    added = True
    if has_api or indexed:
        listed_by = "referrers API"
    else:
        tag = referrers_tag(subject.digest)
        listed_by = f"tag {tag}"
        current = api.get_manifest(repository, tag, accept=OCI_INDEX)
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []} if current is None \
            else _index(current.body, f"registry {api.host}: {repository}:{tag} (not overwritten)")
        if any(m.get("digest") == digest for m in index["manifests"]):
            added = False
        else:
            entry: dict = {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(body),
                           "artifactType": artifact_type}
            if annotations:
                entry["annotations"] = dict(annotations)
            index["manifests"].append(entry)
            api.put_manifest(repository, tag, canonical_json(index), OCI_INDEX)
    say(f"{'attached' if added else 'already attached'} {artifact_type} {digest} to "
        f"{repository}@{subject.digest} ({listed_by})")
    # read back: listed, the manifest's bytes, the layer's bytes
    listed, _ = list_referrers(api, repository, subject.digest)
    if not any(m.get("digest") == digest and m.get("artifactType") == artifact_type for m in listed):
        raise RegistryError(f"registry {api.host}: the referrers of {repository}@{subject.digest} "
                            f"({listed_by}) do not list {digest} after it was pushed")
    served = api.get_manifest(repository, digest, accept=OCI_MANIFEST)
    if served is None or served.body != body:
        raise RegistryError(f"registry {api.host} does not serve the referrer {digest} that was pushed")
    if api.get_blob(repository, layer_digest, max_bytes=max(len(layer), 1)) != layer:
        raise RegistryError(f"registry {api.host} serves other bytes for {layer_digest}")
    return Attached(digest=digest, size=len(body), artifact_type=artifact_type, layer_digest=layer_digest,
                    listed_by=listed_by, added=added)


def attach_sbom(api: RegistryAPI, repository: str, subject: Manifest, sbom: bytes, *, image_id: str,
                progress: Callable[[str], None] | None = None) -> Attached:
    """The image's CycloneDX SBOM as a referrer of ``subject``."""
    return attach(api, repository, subject, artifact_type=CYCLONEDX_JSON, layer=sbom,
                  layer_media_type=CYCLONEDX_JSON, annotations={IMAGE_ID_ANNOTATION: image_id},
                  title=f"{image_id}.cdx.json", progress=progress)


#: the media type of an image's notes page (imagebuild notes), attached as a referrer
NOTES_MARKDOWN = "text/markdown"


def attach_notes(api: RegistryAPI, repository: str, subject: Manifest, page: bytes, *, image_id: str,
                 progress: Callable[[str], None] | None = None) -> Attached:
    """The image's notes page (Markdown) as a referrer of ``subject``: `oras discover` lists it,
    `oras pull REPO@DIGEST` fetches NOTES.md."""
    return attach(api, repository, subject, artifact_type=NOTES_MARKDOWN, layer=page,
                  layer_media_type=NOTES_MARKDOWN, annotations={IMAGE_ID_ANNOTATION: image_id},
                  title="NOTES.md", progress=progress)


def subject_of(api: RegistryAPI, repository: str, digest: str) -> Manifest:
    """The pushed image's manifest, as the subject descriptor needs it (media type, digest, size)."""
    from .publish import MANIFEST_ACCEPT
    manifest = api.get_manifest(repository, digest, accept=MANIFEST_ACCEPT)
    if manifest is None:
        raise RegistryError(f"registry {api.host} has no manifest {repository}@{digest}")
    return manifest


def sbom_referrers(api: RegistryAPI, repository: str, digest: str) -> tuple[list[dict], str]:
    """The CycloneDX referrers of ``digest`` (imagebuild's first), with where they were listed."""
    listed, where = list_referrers(api, repository, digest)
    sboms = [m for m in listed if m.get("artifactType") == CYCLONEDX_JSON]
    sboms.sort(key=lambda m: 0 if IMAGE_ID_ANNOTATION in (m.get("annotations") or {}) else 1)
    return sboms, where


def fetch_sbom(api: RegistryAPI, repository: str, digest: str, *, referrer: str | None = None) -> tuple[str, bytes]:
    """(referrer digest, SBOM bytes) of the image ``repository@digest``. With several CycloneDX
    referrers, imagebuild's (annotated with the image id) is taken when it is the only one;
    otherwise ``referrer`` must choose."""
    sboms, where = sbom_referrers(api, repository, digest)
    if referrer is not None:
        chosen = [m for m in sboms if m["digest"] == referrer]
        if not chosen:
            raise NoReferrer(f"{api.host}/{repository}@{digest} has no CycloneDX referrer {referrer} ({where})")
    else:
        ours = [m for m in sboms if IMAGE_ID_ANNOTATION in (m.get("annotations") or {})]
        chosen = ours or sboms
        if not chosen:
            raise NoReferrer(f"{api.host}/{repository}@{digest} has no CycloneDX SBOM referrer ({where})")
        if len(chosen) > 1:
            raise ImagebuildError(f"{api.host}/{repository}@{digest} has {len(chosen)} SBOM referrers "
                                  f"({', '.join(m['digest'] for m in chosen)}); choose one with --referrer",
                                  argument="--referrer")
    ref_digest = chosen[0]["digest"]
    manifest = api.get_manifest(repository, ref_digest, accept=OCI_MANIFEST)
    if manifest is None:
        raise NoReferrer(f"registry {api.host} lists {ref_digest} ({where}) but does not serve it")
    try:
        doc = untrusted.loads(manifest.body)
        layers = doc["layers"]
        subject = doc["subject"]["digest"]
    except (ValueError, KeyError, TypeError):
        raise RegistryError(f"registry {api.host}: referrer {ref_digest} is not an OCI artifact manifest") from None
    if subject != digest:
        raise RegistryError(f"registry {api.host}: referrer {ref_digest} names subject {subject}, not {digest}")
    sbom_layers = [la for la in layers if isinstance(la, dict) and la.get("mediaType") == CYCLONEDX_JSON
                   and DIGEST_RE.match(str(la.get("digest", "")))]
    if len(sbom_layers) != 1:
        raise RegistryError(f"registry {api.host}: referrer {ref_digest} has {len(sbom_layers)} CycloneDX "
                            "layers, not one")
    return ref_digest, api.get_blob(repository, sbom_layers[0]["digest"], max_bytes=MAX_SBOM_BYTES)


@dataclass(frozen=True)
class RemoteRef:
    """``HOST[:PORT]/REPOSITORY`` with ``:TAG`` or ``@sha256:...``."""

    host: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """The repository with its host (the docker-reference a signature names)."""
        return f"{self.host}/{self.repository}"

    def __str__(self) -> str:
        return self.name + (f"@{self.digest}" if self.digest else f":{self.tag}")


def parse_reference(text: str, *, argument: str = "REF") -> RemoteRef:
    """``HOST[:PORT]/NS/NAME:TAG`` or ``HOST[:PORT]/NS/NAME@sha256:<hex>`` -> RemoteRef, or one line
    naming the argument (exit 2)."""
    from .publish import HOST_RE, REPOSITORY_RE, TAG_RE, split_host

    host, sep, rest = text.partition("/")
    name, at, digest = rest.partition("@")
    tag = None
    if not at:
        head, colon, tail = name.rpartition(":")
        if colon and "/" not in tail:
            name, tag = head, tail
    # the first component is a registry only when it looks like one, as docker reads a reference
    looks_like_host = "." in host or ":" in host or host == "localhost" or host.startswith("[")
    ok = bool(sep and looks_like_host and HOST_RE.match(host) and REPOSITORY_RE.match(name)
              and ((at and DIGEST_RE.match(digest)) or (not at and tag and TAG_RE.match(tag))))
    if ok:
        try:
            split_host(host)
        except ValueError:
            ok = False
    if not ok:
        raise ImagebuildError(f"{text!r} is not HOST[:PORT]/NAMESPACE/NAME:TAG or "
                              "HOST[:PORT]/NAMESPACE/NAME@sha256:<64 hex>", argument=argument)
    return RemoteRef(host=host, repository=name, tag=tag, digest=digest if at else None)


def resolve(api: RegistryAPI, ref: RemoteRef) -> Manifest:
    """The manifest ``ref`` names now (a tag is read as the registry serves it at this moment)."""
    from .publish import MANIFEST_ACCEPT
    manifest = api.get_manifest(ref.repository, ref.digest or ref.tag, accept=MANIFEST_ACCEPT)
    if manifest is None:
        raise NoReferrer(f"registry {ref.host} has no manifest {ref}")
    return manifest
