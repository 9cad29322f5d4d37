"""What spares a build work it has done before: the memo of which normalised image a builder's
image became (`NormalizeMemo`: an unchanged rebuild is tagged, not normalised again), and the
layer cache shared through a registry between builders (`SharedCache`: `build --cache-from`,
`--cache-to`). Used by reproducible.normalize_image and reproducible.BuildTimeEngine."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

from .. import usercache
from ..digests import sha256_bytes, sha256_digest
from ..errors import ImagebuildError
from ..patterns import SHA256_DIGEST


#: bumped whenever normalising changes what it makes from the same image: a memo of an older
#: normaliser is then never taken for this one's
NORMALIZER = 2


def _memo_folder() -> Path | None:
    """normalized/ in imagebuild's cache folder (usercache.folder: an absolute XDG_CACHE_HOME or
    ~/.cache); None when caching is off (IMAGEBUILD_NO_CACHE) or there is no home folder."""
    here = usercache.folder()
    return None if here is None else here / "normalized"


class NormalizeMemo:
    """Which normalised image a builder's image became, one small JSON file per image reference:
    ``{"ref", "built", "key", "image"}``, in imagebuild's cache folder. Reading never fails and
    trusts nothing (a missing file, a link, a FIFO, another user's or a group-writable file, a
    larger one or a foreign one is no memo: usercache.read_own); writing is atomic, 0600 and best
    effort (a read-only home only costs the time); with caching off there is no memo."""

    def __init__(self, ref: str, folder: Path | None = None):
        self.ref = ref
        base = folder if folder is not None else _memo_folder()
        self.path = None if base is None else base / (sha256_bytes(ref)[:32] + ".json")

    @staticmethod
    def key(built_id: str, epoch: int, base_id: str | None, labels: dict[str, str] | None) -> str:
        text = json.dumps([NORMALIZER, built_id, int(epoch), base_id or "", dict(sorted((labels or {}).items()))],
                          separators=(",", ":"))
        return sha256_digest(text.encode())

    def read(self) -> dict:
        data = None if self.path is None else usercache.read_own(self.path, 4096)
        if data is None:
            return {}
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            return {}
        ok = (isinstance(doc, dict) and doc.get("ref") == self.ref
              and all(isinstance(doc.get(k), str) and _IMAGE_ID.fullmatch(doc[k]) for k in ("built", "key", "image")))
        return doc if ok else {}

    def write(self, built_id: str, key: str, image_id: str) -> None:
        from ..atomic import OutputRefused, write_atomic
        if self.path is None:
            return
        doc = {"ref": self.ref, "built": built_id, "key": key, "image": image_id}
        with contextlib.suppress(OSError, OutputRefused):
            write_atomic(self.path, json.dumps(doc, sort_keys=True) + "\n", perm=0o600, parents=True,
                         own=True)


_IMAGE_ID = re.compile(SHA256_DIGEST)


def _split_ref(ref: str) -> tuple[str, str]:
    """repository and tag of ``ref`` (``latest`` when it names none)."""
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, _, tag = ref.rpartition(":")
        return repo, tag
    return ref, "latest"


def _reuse(engine, ref: str, built, memo: NormalizeMemo, key: str,
           labels: dict[str, str] | None) -> str | None:
    """The normalised image the memo names for this very build, when the engine still holds it
    as normalising would make it (the builder's labels, as many layers); None otherwise."""
    doc = memo.read()
    if doc.get("key") != key or doc.get("built") != built.id:
        return None
    image = engine.lookup(doc["image"])
    if image is None or image.id != doc["image"]:
        return None
    if image.labels != {**built.labels, **(labels or {})} or len(image.layers) != len(built.layers):
        return None
    engine.tag(image.id, *_split_ref(ref))
    return image.id


class SharedCache:
    """``build --cache-from PREFIX --cache-to PREFIX``: the layer cache shared through a registry.
    Each image's cache is the image ``PREFIX/<name>:buildcache`` (``<name>`` the last part of its
    repository: the matrix image's id), the builder's own image as built with BuildKit's inline
    cache records, pushed before it is normalised: BuildKit can reuse the records of that image
    only (the normalised image's layers are other bytes). Another engine building the same
    image with ``--cache-from`` takes every step the records cover from the registry instead of
    running it; its builder's image is then the same bytes, so it normalises to the same ID."""

    TAG = "buildcache"

    def __init__(self, cache_from: str | None, cache_to: str | None, *,
                 docker_config: Path | None = None, auth: dict[str, str] | None = None):
        self.sources, self.to = cache_from, cache_to
        self.docker_config, self._auth = docker_config, auth

    def ref(self, prefix: str, ref: str) -> str:
        name = _split_ref(ref)[0].rsplit("/", 1)[-1]
        return f"{prefix}/{name}:{self.TAG}"

    def for_build(self, ref: str):
        from ..engines.base import BuildCache
        sources = tuple(dict.fromkeys(self.ref(p, ref) for p in (self.sources, self.to) if p))
        return BuildCache(cache_from=sources, inline=bool(self.to), docker_config=self.docker_config)

    def push(self, engine, ref: str, built_id: str, progress) -> None:
        """Push the builder's image ``built_id`` of ``ref`` as its cache image (a temporary tag,
        removed after). BuildError when the registry refuses it: a builder that was asked to fill
        the cache and did not would leave every other builder compiling again, unseen."""
        from ..errors import BuildError
        target = self.ref(self.to, ref)
        repo, tag = _split_ref(target)
        engine.tag(built_id, repo, tag)
        try:
            pushed = engine.push(repo, tag, auth=self._auth)
        except ImagebuildError as exc:
            pushed = None
            error = str(exc)
        finally:
            with contextlib.suppress(ImagebuildError):
                engine.untag(target)
        if pushed is not None:
            error = pushed.error
        if error:
            secret = (self._auth or {}).get("password")
            if secret:
                error = error.replace(secret, "***")
            raise BuildError(f"{ref}: built, but pushing its build cache to {target} failed: "
                             f"{' '.join(error.split())[:300]}")
        if progress:
            progress(f"{ref}: build cache pushed to {target}")
