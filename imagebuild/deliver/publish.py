"""Publish tested images to a registry and prove the registry holds what the engine pushed.

Only an image whose smoke report passed *for that exact engine image id* is pushed. The report is
the JSON written by ``imagebuild test --report`` (keys ``image``, ``image_id``, ``passed``); its
default place is ``.imagebuild/reports/<image-id>.json`` (:data:`REPORTS_DIR`).

Order of tags (decided, so that a failure never leaves a moved floating tag):

1. the registry is reached and the credentials are proven (``GET /v2/``) before anything moves;
2. the *dated, immutable* tag is pushed first; if the registry already holds that tag with another
   digest, nothing is pushed (an immutable tag is never overwritten);
3. its manifest digest is read back through the registry's HTTP API and compared with the digest
   the engine reports for the push; a mismatch raises RegistryError;
4. only then is the *floating* (version-derived) tag pushed and checked the same way.

With attachments (an SBOM referrer, signatures: ``after_dated``), the image is first pushed under
STAGING_TAG, checked the same way and given them, before step 2: no release tag ever names an image
without its SBOM and signatures.

A failure at any step stops there: the floating tag keeps pointing where it pointed before. The
dated tag names exactly one build, so a dated tag left behind by a failed check points at nothing
a consumer follows by name.

Where images go (target.py), the credentials and where they may be sent (credentials.py) and the
registry's HTTP API (registry.py) have their own modules; their names are imported here too, where
the callers have always found them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import untrusted
from ..errors import EngineRefused, ImagebuildError, RegistryError, RegistryUnavailable
from ..workspace import REPORTS
from .credentials import (PASSWORD_ENV, USER_ENV, Credentials, check_realm,  # noqa: F401 - re-exported
                          find_credentials, scrub)
from .registry import (DEFAULT_DEADLINE, MANIFEST_ACCEPT, MAX_ANSWER_BYTES,  # noqa: F401 - re-exported
                       MAX_MANIFEST_BYTES, MAX_TOKEN_BYTES, TRANSIENT_STATUS, DeadlinePassed, Manifest,
                       RegistryAPI, _parse_challenge, _retrying, read_bounded)
from .target import (DIGEST_RE, HOST_RE, IMAGE_ID_RE, NAMESPACE_RE,  # noqa: F401 - re-exported
                     REPOSITORY_RE, TAG_RE, Target, is_loopback, parse_target, split_host)


#: where ``imagebuild test`` writes a report by default, relative to the matrix's folder:
#: ``REPORTS_DIR/<image-id>.json`` (workspace.py)
REPORTS_DIR = REPORTS


class NotTestedError(ImagebuildError):
    """An image has no passing smoke report for its exact engine image id: it is not published."""



# --------------------------------------------------------------------------- reports


def default_report_path(image_id: str, reports_dir: str | os.PathLike = REPORTS_DIR) -> Path:
    if not IMAGE_ID_RE.match(image_id):
        raise ImagebuildError(f"image id {image_id!r} is not a valid image id")
    return Path(reports_dir) / f"{image_id}.json"


def load_report(path: str | os.PathLike) -> dict:
    """The smoke report at ``path`` or NotTestedError (missing, unreadable, malformed)."""
    from ..localfile import MAX_DOCUMENT_BYTES, read_text

    path = Path(path)
    try:
        text = read_text(path, MAX_DOCUMENT_BYTES)
    except FileNotFoundError:
        raise NotTestedError("no smoke report (run `imagebuild test --report` first); not published",
                             file=str(path)) from None
    except UnicodeDecodeError:
        raise NotTestedError("cannot read the smoke report (not UTF-8); not published", file=str(path)) from None
    except OSError as exc:
        raise NotTestedError(f"cannot read the smoke report ({exc.strerror or type(exc).__name__}); "
                             "not published", file=str(path)) from None
    try:
        report = untrusted.loads(text)
    except ValueError as exc:       # untrusted.BadData
        raise NotTestedError(f"malformed smoke report ({exc}); not published", file=str(path),
                             line=getattr(exc, "line", None), column=getattr(exc, "column", None)) from None
    if not isinstance(report, dict):
        raise NotTestedError("the smoke report is not a JSON object; not published", file=str(path))
    return report


def check_report(report: dict, engine_image_id: str, *, name: str, source: str = "report") -> None:
    """Refuse (NotTestedError) unless ``report`` passed for exactly ``engine_image_id``."""
    reported = report.get("image_id")
    if reported != engine_image_id:
        raise NotTestedError(
            f"{name}: the smoke report is for image {str(reported)[:19]!s}, the engine holds "
            f"{engine_image_id[:19]}; test this image before publishing", file=source)
    if report.get("passed") is not True:
        raise NotTestedError(f"{name}: the smoke report did not pass; not published", file=source)


# --------------------------------------------------------------------------- pushing


@dataclass(frozen=True)
class PushedTag:
    reference: str  # HOST/NAMESPACE/ID:TAG
    digest: str     # sha256:... equal in the engine and the registry


@dataclass(frozen=True)
class PublishResult:
    image_id: str
    engine_image_id: str
    repository: str       # HOST/NAMESPACE/ID
    digest: str
    tags: tuple[PushedTag, ...]

    def as_dict(self) -> dict:
        return {"image": self.image_id, "image_id": self.engine_image_id, "repository": self.repository,
                "digest": self.digest, "tags": [t.reference for t in self.tags]}


def order_tags(tags: list[str]) -> list[str]:
    """Push order: the dated immutable tag (last in ImageSpec.tags) first, floating tags after it."""
    if not tags:
        raise ImagebuildError("an image has no tags to publish")
    for tag in tags:
        if not TAG_RE.match(tag):
            raise ImagebuildError(f"tag {tag!r} is not a valid tag")
    return [tags[-1], *tags[:-1]]


_TRANSIENT_PUSH = re.compile(r"connection reset|connection refused|broken pipe|i/o timeout|timed out|"
                             r"\bEOF\b|too many requests|service unavailable|bad gateway|"
                             r"gateway time-?out|\b(?:429|500|502|503|504)\b", re.IGNORECASE)


class _TransientPush(RegistryError):
    """A push failed in a way worth retrying (connection reset, 5xx, 429)."""


def _engine_push_retrying(engine, repository: str, tag: str, credentials: Credentials | None,
                          secrets: list[str], *, tries: int, backoff: float,
                          sleep: Callable[[float], None],
                          progress: Callable[[str], None] | None = None) -> str | None:
    """_engine_push with bounded exponential backoff on transient failures."""
    for attempt in range(1, tries + 1):
        try:
            return _engine_push(engine, repository, tag, credentials, secrets, progress)
        except _TransientPush as exc:
            if attempt == tries:
                raise RegistryUnavailable(f"{exc.message} (failed {tries} times)") from None
            sleep(backoff * (2 ** (attempt - 1)))
    return None  # pragma: no cover - the loop returns or raises


def _engine_push(engine, repository: str, tag: str, credentials: Credentials | None,
                 secrets: list[str], progress: Callable[[str], None] | None = None) -> str | None:
    """Push one tag through the engine; the digest it reports (stream ``aux``), or RegistryError.
    ``progress`` (where given) hears how far the push is."""
    try:
        pushed = engine.push(repository, tag,
                             auth=credentials.auth_config() if credentials is not None else None,
                             **({"progress": progress} if progress is not None else {}))
    except EngineRefused as exc:
        raise RegistryError(scrub(f"pushing {repository}:{tag} failed: {exc.detail}", secrets)) from None
    if pushed.error is not None:
        text = scrub(pushed.error.splitlines()[0] if pushed.error else "", secrets)
        host = repository.split("/", 1)[0]
        low = text.lower()
        if "unauthorized" in low or "authentication required" in low or "denied" in low \
                or "no basic auth credentials" in low:
            user = credentials.user if credentials else "anonymous"
            raise RegistryError(f"registry {host} refused the credentials for {user} ({text})")
        kind = _TransientPush if _TRANSIENT_PUSH.search(text) else RegistryError
        raise kind(f"pushing {repository}:{tag} failed: {text}")
    digests = [d for d in pushed.digests if DIGEST_RE.match(d)]
    return digests[-1] if digests else None


def _engine_repo_digest(engine, repository: str, local_ref: str) -> str | None:
    for entry in engine.inspect(local_ref).repo_digests:
        name, _, digest = entry.partition("@")
        if name == repository and DIGEST_RE.match(digest):
            return digest
    return None


#: the tag an image is pushed under before its SBOM and signatures are attached (publish_image):
#: one per repository, moved by every signed publish; the release's tags follow only once they are
STAGING_TAG = "imagebuild-staging"


def _push_verified(engine, api, engine_id: str, local_ref: str, repository: str, repository_path: str,
                   tag: str, credentials, secrets, target, say) -> str:
    """Tag and push one tag through the engine, and the digest the registry serves for it, which
    must be the one the engine pushed."""
    engine.tag(engine_id, repository, tag)
    say(f"pushing {repository}:{tag}")
    engine_digest = _engine_push_retrying(engine, repository, tag, credentials, secrets,
                                          tries=api.tries, backoff=api.backoff, sleep=api._sleep,
                                          progress=say)
    engine_digest = engine_digest or _engine_repo_digest(engine, repository, local_ref)
    if engine_digest is None:
        raise RegistryError(f"the engine reported no digest for {repository}:{tag}")
    try:
        registry_digest = api.manifest_digest(repository_path, tag)
    except RegistryUnavailable:
        raise
    except RegistryError as exc:     # it answered, and the answer does not hold up
        raise RegistryError(f"{exc.message}; the engine pushed {engine_digest}; floating tags "
                            "were not moved") from None
    if registry_digest != engine_digest:
        raise RegistryError(
            f"registry {target.host} holds {registry_digest or 'nothing'} for {repository_path}:{tag}, "
            f"the engine pushed {engine_digest}; floating tags were not moved")
    say(f"verified {repository}:{tag} {engine_digest}")
    return engine_digest


def publish_image(engine, *, image_id: str, local_ref: str, tags: list[str], target: Target,
                  report: dict, report_source: str = "report", credentials: Credentials | None = None,
                  api: RegistryAPI | None = None,
                  progress: Callable[[str], None] | None = None,
                  after_dated: Callable[[str], None] | None = None,
                  repository_name: str | None = None, staging_tag: str = STAGING_TAG) -> PublishResult:
    """Push ``local_ref`` as ``target/<image_id>:<tag>`` for every tag, in the safe order.

    ``engine`` is an imagebuild Engine; ``report`` the smoke report of the image (checked against the
    engine's image id before anything happens); ``api`` the registry HTTP API used to read digests
    back (built from ``target`` and ``credentials`` when None). ``after_dated(digest)`` attaches the
    SBOM referrer and the signatures. The engine can push only a tag, so with ``after_dated`` the
    image is first pushed under STAGING_TAG, verified, given its attachments, and only then tagged
    with the release's tags: no release tag, dated or floating, ever names an image without them.
    When ``after_dated`` raises, no release tag was pushed and publishing again completes it.
    ``repository_name``: the repository's last part when it is not the image id (one platform's
    image of a multi-platform name goes to the name's repository: deliver/platforms.py), and
    ``staging_tag`` then is the platform's own, so that two platforms' jobs never move each other's.
    """
    say = progress or (lambda _msg: None)
    secrets = [credentials.password] if credentials else []
    ordered = order_tags(list(tags))
    repository_path = target.repository(repository_name or image_id)
    repository = target.reference(repository_name or image_id)
    image = engine.lookup(local_ref)
    if image is None:
        raise ImagebuildError(f"image {local_ref} is not in the engine; build it first")
    engine_id = image.id
    check_report(report, engine_id, name=image_id, source=report_source)

    api = api or RegistryAPI(target.host, credentials)
    api.ping()

    dated = ordered[0]
    existing = api.manifest_digest(repository_path, dated)
    if existing is not None and existing != _engine_repo_digest(engine, repository, local_ref):
        # an immutable tag is never moved: refuse before anything is pushed
        raise RegistryError(f"immutable tag {repository}:{dated} already exists with digest {existing}, "
                            "which is not this image; nothing pushed")

    pushed: list[PushedTag] = []
    digest_of_image: str | None = None
    if after_dated is not None:
        digest_of_image = _push_verified(engine, api, engine_id, local_ref, repository, repository_path,
                                         staging_tag, credentials, secrets, target, say)
        try:
            after_dated(digest_of_image)
        except RegistryError as exc:
            cls = RegistryUnavailable if isinstance(exc, RegistryUnavailable) else RegistryError
            raise cls(f"{exc.message}; the image is pushed only as {repository}:{staging_tag} "
                      f"({digest_of_image}), no tag of this release was pushed: publishing again "
                      "completes it") from None
    for tag in ordered:
        engine_digest = _push_verified(engine, api, engine_id, local_ref, repository, repository_path, tag,
                                       credentials, secrets, target, say)
        if digest_of_image is not None and engine_digest != digest_of_image:
            raise RegistryError(f"{repository}:{tag} got digest {engine_digest}, the first "
                                f"{'push' if after_dated is not None else 'tag'} {digest_of_image}")
        digest_of_image = engine_digest
        pushed.append(PushedTag(f"{repository}:{tag}", engine_digest))
    assert digest_of_image is not None
    return PublishResult(image_id=image_id, engine_image_id=engine_id, repository=repository,
                         digest=digest_of_image, tags=tuple(pushed))
