"""One tag, several platforms: the OCI image index `publish` writes over the images of one name.

The matrix can declare an image for several platforms (a family's `platforms:`): one image per
platform, with ids that differ by a suffix (`...-runtime`, `...-runtime-arm64`) and the same name
and tag (ImageSpec.base_name, .tag). Each is built and tested on its own (an arm64 one under
emulation) and may be published from its own CI job. So publishing is in two steps, each safe
alone:

1. the platform's image goes to the name's repository under its own tags, the image's tags with
   the OCI architecture appended (`TAG-arm64`, `TAG-YYYYMMDD-arm64`), verified as every push is;
2. the index: once every platform the matrix declares for the name is in the registry (read back
   by the dated per-platform tag, each manifest and config checked: the config's os/architecture
   must be that platform's, so a tag that serves another platform's image is refused), the index
   is written under the image's own tags, dated tag first, and read back by digest. Until then the
   index is not written, and `publish` says which platform it waits for: a tag never names an
   index that lacks a platform the matrix promises, and the immutable dated tag is written once.

The index is deterministic (platforms in the matrix's order, canonical JSON): two jobs that finish
together write the same bytes. Its media type follows the members': an OCI index over OCI
manifests, Docker's manifest list over Docker's (what the engine pushed), as registries and
engines expect. `docker pull --platform linux/arm64 REPO:TAG` then gets the arm64 image, and
`enroot import` on a Grace node its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import untrusted
from ..digests import sha256_digest
from ..errors import RegistryError
from .referrers import OCI_INDEX, OCI_MANIFEST, canonical_json
from .registry import RegistryAPI

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
#: an image config is small; one that is not is not read
MAX_CONFIG_BYTES = 1 << 20


def arch_tag(tag: str, oci_platform: str) -> str:
    """The tag of one platform's image: TAG-arm64 for linux/arm64."""
    return f"{tag}-{oci_platform.split('/')[1]}"


@dataclass(frozen=True)
class Member:
    """One platform's image in the registry: its manifest's descriptor and its platform, as read."""
    oci_platform: str
    media_type: str
    digest: str
    size: int
    platform: dict          # os, architecture[, variant] from the image's config


@dataclass(frozen=True)
class IndexResult:
    repository: str          # HOST/NAMESPACE/NAME
    digest: str | None       # None: not written (a platform is missing)
    tags: tuple[str, ...]
    members: tuple[Member, ...]
    waiting_for: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"repository": self.repository, "digest": self.digest, "tags": list(self.tags),
                "manifests": {m.oci_platform: m.digest for m in self.members},
                "waiting_for": list(self.waiting_for)}


def read_member(api: RegistryAPI, repository: str, tag: str, oci_platform: str) -> Member | None:
    """The image ``repository:tag`` serves, checked to be an image (not an index) for
    ``oci_platform``; None when the tag does not exist."""
    manifest = api.get_manifest(repository, tag)
    if manifest is None:
        return None
    where = f"{repository}:{tag}"
    if manifest.media_type not in (OCI_MANIFEST, DOCKER_MANIFEST):
        raise RegistryError(f"{where} is a {manifest.media_type or 'document of no media type'}, not "
                            f"one platform's image")
    try:
        config = untrusted.loads(manifest.body)["config"]
        config_digest, config_size = str(config["digest"]), int(config["size"])
    except (ValueError, KeyError, TypeError):
        raise RegistryError(f"the manifest of {where} names no config") from None
    if config_size > MAX_CONFIG_BYTES:
        raise RegistryError(f"the config of {where} is {config_size} bytes, more than the "
                            f"{MAX_CONFIG_BYTES} read")
    try:
        doc = untrusted.loads(api.get_blob(repository, config_digest, max_bytes=MAX_CONFIG_BYTES))
        platform = {"architecture": str(doc["architecture"]), "os": str(doc["os"])}
    except (ValueError, KeyError, TypeError):
        raise RegistryError(f"the config of {where} names no os and architecture") from None
    if doc.get("variant"):
        platform["variant"] = str(doc["variant"])
    want_os, want_arch = oci_platform.split("/")[:2]
    if (platform["os"], platform["architecture"]) != (want_os, want_arch):
        raise RegistryError(f"{where} serves an image for {platform['os']}/{platform['architecture']}, "
                            f"not {oci_platform}; no index written")
    return Member(oci_platform, manifest.media_type, manifest.digest, manifest.size, platform)


def index_body(members: list[Member]) -> tuple[bytes, str]:
    """The index over ``members`` (in their order) and its media type."""
    oci = all(m.media_type == OCI_MANIFEST for m in members)
    media_type = OCI_INDEX if oci else DOCKER_LIST
    doc = {"schemaVersion": 2, "mediaType": media_type,
           "manifests": [{"mediaType": m.media_type, "digest": m.digest, "size": m.size,
                          "platform": m.platform} for m in members]}
    return canonical_json(doc), media_type


def publish_index(api: RegistryAPI, *, host: str, repository: str, tags: list[str],
                  platforms: list[str], progress: Callable[[str], None] | None = None) -> IndexResult:
    """Write the index of ``repository`` under ``tags`` (dated first, as order_tags puts them)
    over every platform in ``platforms`` (the matrix's order), each read by its dated per-platform
    tag; or, when one is not in the registry yet, write nothing and say which."""
    say = progress or (lambda _line: None)
    reference = f"{host}/{repository}"
    dated = tags[0]
    members, missing = [], []
    for oci in platforms:
        member = read_member(api, repository, arch_tag(dated, oci), oci)
        if member is None:
            missing.append(oci)
        else:
            members.append(member)
    if missing:
        say(f"{reference}:{dated}: the index waits for {', '.join(missing)} (no "
            f"{', '.join(arch_tag(dated, m) for m in missing)} in the registry yet)")
        return IndexResult(reference, None, (), tuple(members), tuple(missing))
    body, media_type = index_body(members)
    digest = sha256_digest(body)
    existing = api.manifest_digest(repository, dated)
    if existing is not None and existing != digest:
        raise RegistryError(f"immutable tag {reference}:{dated} already names {existing}, not the "
                            f"index over {', '.join(platforms)} ({digest}); nothing moved")
    written = []
    for tag in tags:
        api.put_manifest(repository, tag, body, media_type)
        served = api.manifest_digest(repository, tag)
        if served != digest:
            raise RegistryError(f"registry {host} serves {served or 'nothing'} for {reference}:{tag}, "
                                f"imagebuild wrote the index {digest}"
                                + ("; floating tags were not moved" if tag == dated else ""))
        say(f"verified {reference}:{tag} {digest} (index: {', '.join(platforms)})")
        written.append(f"{reference}:{tag}")
    return IndexResult(reference, digest, tuple(written), tuple(members))
