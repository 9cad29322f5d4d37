"""The published index in the registry: what `publish` pushed, where a node with no checkout finds it.

A cluster node has the registry's address and nothing else: no checkout, no images.lock. So each
`publish` also writes, beside the images, one small OCI artifact per image in the repository
``NAMESPACE/imagebuild-index``, tagged with the image id:

- the manifest: OCI 1.1, ``artifactType`` ``application/vnd.imagebuild.published.v1+json``, the
  empty config, one layer: the entry;
- the entry (canonical JSON): the image id, its stack, its smoke summary, the engine image id, the
  provenance the lock records, and where it was published (repository, manifest digest, tags),
  i.e. the published part of the image's images.lock entry;
- with `publish --sign-key`, a cosign-format signature of the entry's manifest (signing.py). The
  manifest is pushed by digest and signed before the tag is set, so the tag never names an
  unsigned entry.

One tag per image, not one shared document: the CI jobs that publish images in parallel never
read-modify-write the same tag, so none loses another's entry.

`find --registry HOST/NS` reads it (`read`): the tag list (at most MAX_ENTRIES), each manifest and
entry under a byte cap, every blob checked against its digest, each entry's shape checked, and with
`--key PUB` each entry's signature verified; an entry that fails is left out with the reason, never
believed. The image digests it names are then checked against what the tags serve, as find does
for a lock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .. import labels as L
from .. import untrusted
from ..errors import ImagebuildError, RegistryError, RegistryUnavailable
from ..platforms import repository_names
from .publish import DIGEST_RE, RegistryAPI, Target
from .referrers import EMPTY_BLOB, EMPTY_MEDIA_TYPE, OCI_MANIFEST, canonical_json

REPOSITORY = "imagebuild-index"
ARTIFACT_TYPE = "application/vnd.imagebuild.published.v1+json"
SCHEMA = 1
#: the most entries read (one per image; a site with more splits its namespaces)
MAX_ENTRIES = 1000
#: the largest entry read (a real one is about 1.5 kB)
MAX_ENTRY_BYTES = 256 * 1024
TAG_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}\Z")
#: the lock entry's keys an index entry carries (lockfile.py), besides where it was published
CARRIED = ("stack", "smoke", "image_id", "provenance")


@dataclass(frozen=True)
class Written:
    repository: str      # NAMESPACE/imagebuild-index
    tag: str             # the image id
    digest: str          # the entry manifest's digest
    signature: object | None = None   # signing.Signed

    def as_dict(self) -> dict:
        out = {"repository": self.repository, "tag": self.tag, "digest": self.digest}
        if self.signature is not None:
            out["signature"] = self.signature.as_dict()
        return out


def index_repository(target: Target) -> str:
    return target.repository(REPOSITORY)


def entry(image_id: str, lock_entry: dict, *, repository: str) -> bytes:
    """The index entry of one published image, from its images.lock entry (canonical JSON: the same
    lock entry gives the same bytes)."""
    record = (lock_entry.get("published") or {}).get(repository)
    if not record:
        raise ImagebuildError(f"{image_id}: the lock records no publish to {repository}")
    doc = {"schema": SCHEMA, "image": image_id, "repository": repository,
           "digest": record["digest"], "tags": sorted(record["tags"]),
           **{key: lock_entry.get(key) for key in CARRIED}}
    return canonical_json(doc)


def write(api: RegistryAPI, target: Target, image_id: str, lock_entry: dict, *, key=None,
          progress: Callable[[str], None] | None = None, repository_name: str | None = None) -> Written:
    """Push the entry of ``image_id`` (and its signature with ``key``), then point the tag at it.
    ``repository_name``: where the image was published when not under its id (one platform's
    image of a multi-platform name)."""
    from ..digests import sha256_digest
    from . import signing

    say = progress or (lambda _m: None)
    repo = index_repository(target)
    layer = entry(image_id, lock_entry, repository=target.reference(repository_name or image_id))
    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": sha256_digest(EMPTY_BLOB), "size": len(EMPTY_BLOB)},
        "layers": [{"mediaType": ARTIFACT_TYPE, "digest": sha256_digest(layer), "size": len(layer)}],
        "annotations": {L.IMAGE_ID: image_id}})
    api.push_blob(repo, EMPTY_BLOB)
    api.push_blob(repo, layer)
    digest, _ = api.put_manifest(repo, sha256_digest(manifest), manifest, OCI_MANIFEST)
    signed = None
    if key is not None:      # signed before the tag names it: no tag ever points at an unsigned entry
        signed = signing.sign(api, repo, docker_reference=f"{target.host}/{repo}", digest=digest, key=key,
                              progress=say)
    api.put_manifest(repo, image_id, manifest, OCI_MANIFEST)
    served = api.manifest_digest(repo, image_id)
    if served != digest:
        raise RegistryError(f"registry {api.host} serves {served} under {repo}:{image_id}, imagebuild "
                            f"pushed {digest}")
    say(f"index: {target.host}/{repo}:{image_id}@{digest}")
    return Written(repo, image_id, digest, signed)


@dataclass(frozen=True)
class Catalog:
    """What the registry's index says: image id -> a lock-shaped entry (stack, smoke, published),
    and the entries left out, each with why."""

    where: str
    entries: dict[str, dict]
    refused: list[tuple[str, str]]


def read(api: RegistryAPI, target: Target, *, public_key=None) -> Catalog:
    """Every entry of the index at ``target``, checked (module docstring)."""
    from . import signing

    repo = index_repository(target)
    where = f"{target.host}/{repo}"
    tags = api.tags(repo, limit=MAX_ENTRIES)
    entries: dict[str, dict] = {}
    refused: list[tuple[str, str]] = []
    for tag in tags:
        if not TAG_RE.match(tag) or tag.endswith(".sig"):
            continue        # signature tags, and names no image id has
        try:
            doc = _read_one(api, repo, tag, where, tuple(target.reference(n) for n in repository_names(tag)))
            if public_key is not None:
                manifest_digest = api.manifest_digest(repo, tag)
                signing.verify_signature(api, repo, manifest_digest, public_key)
        except RegistryUnavailable:
            raise
        except ImagebuildError as exc:
            refused.append((tag, exc.message))
            continue
        entries[tag] = {key: doc.get(key) for key in CARRIED} | {
            "published": {doc["repository"]: {"digest": doc["digest"], "tags": list(doc["tags"])}}}
    return Catalog(where, entries, refused)


def _read_one(api: RegistryAPI, repo: str, tag: str, where: str, expected: tuple[str, ...]) -> dict:
    manifest = api.get_manifest(repo, tag, accept=OCI_MANIFEST)
    if manifest is None:
        raise RegistryError(f"{where}:{tag} vanished while it was read")
    try:
        doc = untrusted.loads(manifest.body)
        layers = doc["layers"]
        ok = doc.get("artifactType") == ARTIFACT_TYPE and isinstance(layers, list) and len(layers) == 1
        layer = layers[0] if ok else {}
        size = int(layer.get("size", -1)) if isinstance(layer, dict) else -1
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        raise RegistryError(f"{where}:{tag} is not an imagebuild index entry (malformed manifest)") from None
    if not ok or layer.get("mediaType") != ARTIFACT_TYPE or not DIGEST_RE.match(str(layer.get("digest"))):
        raise RegistryError(f"{where}:{tag} is not an imagebuild index entry")
    if not 0 <= size <= MAX_ENTRY_BYTES:
        raise RegistryError(f"{where}:{tag}: its entry declares {size} bytes (at most {MAX_ENTRY_BYTES} are read)")
    body = api.get_blob(repo, layer["digest"], max_bytes=MAX_ENTRY_BYTES)   # checked against its digest
    try:
        entry_doc = untrusted.loads(body)
    except ValueError:
        raise RegistryError(f"{where}:{tag}: the entry is not JSON") from None
    return _checked(entry_doc, tag, where, expected)


def _checked(doc, tag: str, where: str, expected: tuple[str, ...]) -> dict:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise RegistryError(f"{where}:{tag}: not a schema-{SCHEMA} entry")
    if doc.get("image") != tag:
        raise RegistryError(f"{where}:{tag}: the entry names image {str(doc.get('image'))[:80]!r}, not {tag}")
    repository, digest, tags = doc.get("repository"), doc.get("digest"), doc.get("tags")
    if repository not in expected:
        raise RegistryError(f"{where}:{tag}: the entry names {str(repository)[:120]!r}, not "
                            f"{' or '.join(expected)}")
    if not isinstance(repository, str) or \
            not DIGEST_RE.match(str(digest)) or not isinstance(tags, list) or \
            not all(isinstance(t, str) and TAG_RE.match(t) for t in tags):
        raise RegistryError(f"{where}:{tag}: the entry's repository, digest or tags are malformed")
    if not isinstance(doc.get("stack"), dict) or not isinstance(doc.get("smoke"), dict):
        raise RegistryError(f"{where}:{tag}: the entry has no stack or smoke summary")
    return doc
