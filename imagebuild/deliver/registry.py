"""The registry's HTTP API (distribution spec v2) as publish, find and the referrers use it: the
credentials proven before anything moves, retries for connection errors, 5xx and 429, a deadline
over every call, each answer read under a byte cap, and manifests read back by digest.

Network checks: plain http is used only for a loopback registry (a literal loopback address or
exactly ``localhost``); a token service is checked by credentials.check_realm before credentials
are sent there."""

from __future__ import annotations

import base64
import re
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .. import httpio, untrusted
from ..digests import sha256_digest
from ..errors import ImagebuildError, RegistryError, RegistryUnavailable
from ..redact import redact

from .credentials import PASSWORD_ENV, USER_ENV, Credentials, check_realm, scrub
from .target import DIGEST_RE, HOST_RE, REPOSITORY_RE, TAG_RE, is_loopback

#: manifest media types we accept when reading a digest back (docker v2 schema 2 and OCI)
MANIFEST_ACCEPT = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
])

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})

# --------------------------------------------------------------------------- registry HTTP API


def _retrying(call: Callable[[], Any], *, what: str, host: str, tries: int, backoff: float,
              sleep: Callable[[float], None]):
    """Run ``call`` (returns a requests.Response); retry connection errors, 5xx and 429."""
    import requests

    last = ""
    for attempt in range(1, tries + 1):
        try:
            response = call()
        except requests.exceptions.RequestException as exc:
            last = _describe_exception(exc)
        else:
            if response.status_code not in TRANSIENT_STATUS:
                return response
            last = f"HTTP {response.status_code}"
            asked = httpio.retry_after(response)      # a 429/503's own wait, when it names one
            if asked is not None and attempt < tries:
                sleep(max(asked, backoff * (2 ** (attempt - 1))))
                continue
        if attempt < tries:
            sleep(backoff * (2 ** (attempt - 1)))
    raise RegistryUnavailable(f"registry {host} is unreachable: {what} failed {tries} times ({last})")


# The most imagebuild reads of any one registry answer (a manifest, an index, a token, an error
# document, a signature or SBOM blob has its own, smaller cap): a hostile or broken server's body
# is refused once it passes the bound, before it is in memory, and never fetched again.
MAX_ANSWER_BYTES = 16 * 1024 * 1024
MAX_TOKEN_BYTES = 1024 * 1024


#: the default overall deadline of a command's registry conversation, in seconds (--timeout)
DEFAULT_DEADLINE = 600.0


def read_bounded(response, cap: int, what: str, deadline: float | None = None) -> None:
    """Read a streamed requests.Response's body into it (``.content`` then works as usual) under
    ``cap`` and ``deadline`` (httpio.read_capped, the one bounded reader): too large or a
    malformed Content-Length is a RegistryError, which the retry loop does not retry (the same
    server would send the same body again); past the deadline, RegistryUnavailable."""
    httpio.read_capped(response, cap, what, deadline, refuse=RegistryError, late=RegistryUnavailable,
                       hint=" (--timeout)")


class DeadlinePassed(RegistryUnavailable):
    """The registry conversation ran past its deadline (exit 3: retry later, or allow more)."""


def _deadline_alarm(seconds: float | None, message: str):
    """httpio.deadline_alarm raising DeadlinePassed(message)."""
    return httpio.deadline_alarm(seconds, DeadlinePassed(message))


def _describe_exception(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Connection reset", "timed out", "Name or service not known",
                   "Temporary failure in name resolution", "No route to host", "certificate verify failed"):
        if marker.lower() in text.lower():
            return marker.lower()
    return type(exc).__name__


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'([A-Za-z_]+)="([^"]*)"', rest))
    return scheme.lower(), params


class RegistryAPI:
    """The parts of the distribution HTTP API that publishing needs: ping with auth, manifest digests.

    Handles the Basic and Bearer challenges; retries transient failures with exponential backoff
    (``tries`` attempts, waits ``backoff``, 2x``backoff``, ...); 401/403 is never retried.
    """

    def __init__(self, host: str, credentials: Credentials | None = None, *, scheme: str | None = None,
                 tries: int = 4, backoff: float = 0.5, timeout: float = 10.0,
                 sleep: Callable[[float], None] = time.sleep, auth_hosts: Iterable[str] = (),
                 deadline: float | None = DEFAULT_DEADLINE):
        import requests

        if not HOST_RE.match(host):
            raise ImagebuildError(f"registry host {host!r} is not HOST[:PORT]")
        self.host = host
        self.credentials = credentials
        self.scheme = scheme or ("http" if is_loopback(host) else "https")
        self.tries, self.backoff, self.timeout, self._sleep = tries, backoff, timeout, sleep
        self.auth_hosts = tuple(auth_hosts)   # token services on other hosts the user trusts
        # the whole conversation ends by this instant (time.monotonic()), however the server paces it
        self.seconds = deadline
        self.deadline = None if deadline is None else time.monotonic() + float(deadline)
        self.session = requests.Session()
        if is_loopback(host):
            self.session.trust_env = False  # a proxy never reaches our own loopback registry
        self._auth_header: dict[str, str] = {}

    @property
    def _user(self) -> str:
        return self.credentials.user if self.credentials else "anonymous"

    def _secrets(self) -> list[str]:
        return [self.credentials.password] if self.credentials else []

    def _time_left(self, what: str) -> float:
        """Seconds to the deadline for one request (at most the per-request timeout);
        RegistryUnavailable once it has passed."""
        if self.deadline is None:
            return self.timeout
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlinePassed(self._deadline_message(what))
        return min(self.timeout, left)

    def _deadline_message(self, what: str) -> str:
        return (f"registry {self.host}: {what}: the {self.seconds:g} s deadline passed "
                "(--timeout SECONDS to allow more)")

    def _within_deadline(self, what: str):
        """(seconds for this request, the block's deadline timer): one request's share of the
        conversation's deadline."""
        left = self._time_left(what)
        return left, _deadline_alarm(None if self.deadline is None else left, self._deadline_message(what))

    def _sleep_capped(self, seconds: float) -> None:
        """The retry wait, never past the deadline (the next attempt then says it passed)."""
        left = seconds if self.deadline is None else min(seconds, max(0.0, self.deadline - time.monotonic()))
        self._sleep(left)

    def _get(self, url: str, headers: dict[str, str], what: str, method: str = "GET",
             data: bytes | None = None, cap: int = MAX_ANSWER_BYTES):
        def call():
            left, timer = self._within_deadline(what)
            with timer:
                response = self.session.request(method, url, headers={**headers, **self._auth_header},
                                                data=data, timeout=left, allow_redirects=True, stream=True)
                read_bounded(response, cap, f"registry {self.host}: {what}", self.deadline)
            return response
        return _retrying(call, what=what, host=self.host, tries=self.tries, backoff=self.backoff,
                         sleep=self._sleep_capped)

    def _refused(self) -> RegistryError:
        return RegistryError(f"registry {self.host} refused the credentials for {self._user}")

    def _authenticate(self, challenge: str, scope: str | None) -> None:
        """Answer a WWW-Authenticate challenge; sets the header for later requests."""
        scheme, params = _parse_challenge(challenge)
        if self.credentials is None:
            raise RegistryError(f"registry {self.host} requires credentials: set {USER_ENV} and "
                                f"{PASSWORD_ENV}, or log in with docker login")
        if scheme == "basic":
            token = base64.b64encode(f"{self.credentials.user}:{self.credentials.password}".encode()).decode()
            self._auth_header = {"Authorization": f"Basic {token}"}
            return
        if scheme == "bearer" and params.get("realm"):
            realm = check_realm(params["realm"], registry_host=self.host, registry_scheme=self.scheme,
                                allowed_hosts=self.auth_hosts)
            query = {k: v for k, v in (("service", params.get("service")),
                                       ("scope", scope or params.get("scope"))) if v}
            def token_request():
                left, timer = self._within_deadline("token request")
                with timer:
                    answer = self.session.get(realm, params=query, timeout=left, stream=True,
                                              auth=(self.credentials.user, self.credentials.password))
                    read_bounded(answer, MAX_TOKEN_BYTES, f"registry {self.host}: token service", self.deadline)
                return answer
            response = _retrying(token_request, what="token request", host=self.host, tries=self.tries,
                                 backoff=self.backoff, sleep=self._sleep_capped)
            if response.status_code in (401, 403):
                raise self._refused()
            if response.status_code != 200:
                raise RegistryError(f"registry {self.host}: token service answered HTTP {response.status_code}")
            try:
                body = response.json()
                token = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else None
            except ValueError:
                token = None
            if not isinstance(token, str) or not token:
                raise RegistryError(f"registry {self.host}: token service sent no token")
            self._auth_header = {"Authorization": f"Bearer {token}"}
            return
        raise RegistryError(f"registry {self.host} asks for an authentication scheme imagebuild "
                            f"does not speak ({scheme or 'none'})")

    def _request(self, path: str, *, headers: dict[str, str] | None = None, scope: str | None = None,
                 what: str, method: str = "GET", data: bytes | None = None, cap: int = MAX_ANSWER_BYTES):
        url = f"{self.scheme}://{self.host}{path}"
        headers = headers or {}
        try:
            response = self._get(url, headers, what, method, data, cap)
            if response.status_code == 401 and "WWW-Authenticate" in response.headers:
                self._authenticate(response.headers["WWW-Authenticate"], scope)
                response = self._get(url, headers, what, method, data, cap)
            if response.status_code in (401, 403):
                raise self._refused()
            return response
        except RegistryError as exc:
            exc.message = scrub(exc.message, self._secrets())
            raise

    def ping(self) -> None:
        """Reach ``/v2/`` and prove the credentials (when the registry asks for any)."""
        response = self._request("/v2/", what="GET /v2/")
        if response.status_code != 200:
            raise RegistryError(f"registry {self.host} answered HTTP {response.status_code} on /v2/ "
                                "(not a distribution registry?)")

    def manifest_digest(self, repository: str, tag: str) -> str | None:
        """The ``Docker-Content-Digest`` of ``repository:tag``, or None when the tag does not exist."""
        if not REPOSITORY_RE.match(repository) or not TAG_RE.match(tag):
            raise ImagebuildError(f"invalid repository or tag {repository!r}:{tag!r}")
        response = self._request(f"/v2/{repository}/manifests/{tag}",
                                 headers={"Accept": MANIFEST_ACCEPT},
                                 scope=f"repository:{repository}:pull",
                                 what=f"GET manifest {repository}:{tag}", cap=MAX_MANIFEST_BYTES)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RegistryError(f"registry {self.host} answered HTTP {response.status_code} for "
                                f"{repository}:{tag}")
        # the bytes received decide: a Docker-Content-Digest that names other bytes is a lie, and
        # believing it would print pull lines for an image the tag does not serve
        return self._served_digest(response, repository, tag)

    def _served_digest(self, response, repository: str, reference: str) -> str:
        """The digest of the manifest bytes received for ``repository:reference``; a registry that
        served other bytes for a digest, or names another digest in ``Docker-Content-Digest``, is
        a RegistryError naming both."""
        digest = sha256_digest(response.content)
        said = response.headers.get("Docker-Content-Digest", "")
        if (DIGEST_RE.match(reference) and digest != reference) or (DIGEST_RE.match(said) and said != digest):
            raise RegistryError(f"registry {self.host} served manifest bytes for {repository}:{reference} "
                                f"whose digest is {digest}, not {said if said != digest else reference}")
        return digest

    # ---- reading and writing manifests and blobs (SBOM referrers, signatures: referrers.py, signing.py)

    def _check_name(self, repository: str, reference: str | None = None) -> None:
        if not REPOSITORY_RE.match(repository) or (
                reference is not None and not (TAG_RE.match(reference) or DIGEST_RE.match(reference))):
            raise ImagebuildError(f"invalid repository or reference {repository!r} {reference!r}")

    def _refusal(self, response, doing: str) -> RegistryError:
        """One line for a registry's 4xx/5xx answer: its first error code and message, if any."""
        detail = f"HTTP {response.status_code}"
        try:
            errors = untrusted.arr(untrusted.loads(response.content), "errors", [])
            first = errors[0] if errors and isinstance(errors[0], dict) else {}
            code, message = untrusted.text(first, "code", ""), untrusted.text(first, "message", "")
            if code or message:
                detail += f" {code[:80]}: {' '.join(message.split())[:200]}".rstrip(": ")
        except ValueError:          # not JSON, or not the shape the API gives: the status alone
            pass
        return RegistryError(scrub(f"registry {self.host} refused {doing} ({detail})", self._secrets()))

    def get_manifest(self, repository: str, reference: str, *,
                     accept: str = MANIFEST_ACCEPT) -> "Manifest | None":
        """The manifest ``repository:reference`` (a tag or a digest) as the registry serves it, or None
        when there is none. Its digest is computed from the bytes: a registry that serves other bytes
        for a digest, or names another digest in ``Docker-Content-Digest``, is an error."""
        self._check_name(repository, reference)
        response = self._request(f"/v2/{repository}/manifests/{reference}", headers={"Accept": accept},
                                 scope=f"repository:{repository}:pull",
                                 what=f"GET manifest {repository}:{reference}", cap=MAX_MANIFEST_BYTES)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._refusal(response, f"GET manifest {repository}:{reference}")
        body = response.content            # at most MAX_MANIFEST_BYTES: read under that cap
        digest = self._served_digest(response, repository, reference)
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        if not media_type or media_type in ("application/json", "application/octet-stream"):
            try:
                media_type = str(untrusted.loads(body).get("mediaType") or media_type)
            except (ValueError, AttributeError):
                pass
        return Manifest(body=body, media_type=media_type, digest=digest)

    def put_manifest(self, repository: str, reference: str, body: bytes, media_type: str) -> tuple[str, bool]:
        """PUT a manifest under a tag or its digest; (its digest, whether the registry answered
        ``OCI-Subject``, i.e. indexed its subject for the referrers API)."""
        self._check_name(repository, reference)
        digest = sha256_digest(body)
        if DIGEST_RE.match(reference) and reference != digest:
            raise ImagebuildError(f"manifest digest {digest} is not {reference}")
        response = self._request(f"/v2/{repository}/manifests/{reference}",
                                 headers={"Content-Type": media_type}, data=body, method="PUT",
                                 scope=f"repository:{repository}:pull,push",
                                 what=f"PUT manifest {repository}:{reference}")
        if response.status_code not in (200, 201):
            raise self._refusal(response, f"the manifest {repository}:{reference}")
        said = response.headers.get("Docker-Content-Digest", "")
        if DIGEST_RE.match(said) and said != digest:
            raise RegistryError(f"registry {self.host} stored {repository}:{reference} as {said}, "
                                f"imagebuild sent {digest}")
        return digest, bool(response.headers.get("OCI-Subject"))

    def blob_exists(self, repository: str, digest: str) -> bool:
        self._check_name(repository, digest)
        response = self._request(f"/v2/{repository}/blobs/{digest}", method="HEAD",
                                 scope=f"repository:{repository}:pull",
                                 what=f"HEAD blob {repository}@{digest}")
        if response.status_code in (200, 404):
            return response.status_code == 200
        raise self._refusal(response, f"HEAD blob {repository}@{digest}")

    def push_blob(self, repository: str, data: bytes) -> str:
        """Upload ``data`` as a blob (monolithic: POST, then PUT to the upload location) unless the
        repository already holds it; its digest. The upload location must be on the registry's own
        scheme and host: credentials go nowhere else."""
        digest = sha256_digest(data)
        if self.blob_exists(repository, digest):
            return digest
        response = self._request(f"/v2/{repository}/blobs/uploads/", method="POST", data=b"",
                                 scope=f"repository:{repository}:pull,push",
                                 what=f"POST blob upload {repository}")
        location = response.headers.get("Location", "")
        if response.status_code != 202 or not location:
            raise self._refusal(response, f"a blob upload to {repository}")
        parts = urllib.parse.urlsplit(urllib.parse.urljoin(f"{self.scheme}://{self.host}/", location))
        if parts.scheme != self.scheme or parts.netloc.lower() != self.host.lower():
            raise RegistryError(f"registry {self.host} sent the upload to {redact(parts.scheme + '://' + parts.netloc)}; "
                                "imagebuild uploads only to the registry itself")
        path = parts.path + ("?" + parts.query if parts.query else "")
        path += ("&" if parts.query else "?") + urllib.parse.urlencode({"digest": digest})
        response = self._request(path, method="PUT", data=data,
                                 headers={"Content-Type": "application/octet-stream"},
                                 scope=f"repository:{repository}:pull,push",
                                 what=f"PUT blob {repository}@{digest}")
        if response.status_code != 201:
            raise self._refusal(response, f"the blob {digest} for {repository}")
        return digest

    def get_blob(self, repository: str, digest: str, *, max_bytes: int) -> bytes:
        """The blob's bytes, checked against its digest (RegistryError when missing or different)."""
        self._check_name(repository, digest)
        response = self._request(f"/v2/{repository}/blobs/{digest}", scope=f"repository:{repository}:pull",
                                 what=f"GET blob {repository}@{digest}", cap=max_bytes)
        if response.status_code == 404:
            raise RegistryError(f"registry {self.host} has no blob {digest} in {repository}")
        if response.status_code != 200:
            raise self._refusal(response, f"GET blob {repository}@{digest}")
        data = response.content            # at most max_bytes: read under that cap
        if sha256_digest(data) != digest:
            raise RegistryError(f"registry {self.host} served bytes for blob {digest} that do not match it")
        return data

    def tags(self, repository: str, *, limit: int) -> list[str]:
        """The repository's tags (``GET /v2/<name>/tags/list``, following its ``Link`` pages on the
        registry's own host), at most ``limit``; [] when the repository does not exist. A
        malformed answer is a RegistryError; more than ``limit`` tags is one too (never a silent
        cut: a caller would believe it saw them all)."""
        self._check_name(repository)
        path: str | None = f"/v2/{repository}/tags/list?n={limit + 1}"
        found: list[str] = []
        for _page in range(64):
            if path is None:
                break
            response = self._request(path, scope=f"repository:{repository}:pull",
                                     what=f"GET tags {repository}", cap=MAX_MANIFEST_BYTES)
            if response.status_code == 404:
                return []
            if response.status_code != 200:
                raise self._refusal(response, f"GET tags {repository}")
            try:
                page = untrusted.loads(response.content).get("tags") or []
                if not isinstance(page, list) or not all(isinstance(t, str) for t in page):
                    raise TypeError
            except (ValueError, TypeError, AttributeError):
                raise RegistryError(f"registry {self.host} answered a malformed tag list for {repository}") from None
            found += page
            if len(found) > limit:
                raise RegistryError(f"{self.host}/{repository} has more than {limit} tags; imagebuild "
                                    "reads at most that many")
            path = self._next_page(response.headers.get("Link", ""))
        return found

    def _next_page(self, link: str) -> str | None:
        """The path of a ``Link: <...>; rel="next"`` on this registry, or None."""
        m = re.match(r'\s*<([^>]+)>\s*;\s*rel="?next"?', link or "")
        if not m:
            return None
        parts = urllib.parse.urlsplit(urllib.parse.urljoin(f"{self.scheme}://{self.host}/", m.group(1)))
        if parts.scheme != self.scheme or parts.netloc.lower() != self.host.lower():
            raise RegistryError(f"registry {self.host} sent the next page of a tag list elsewhere; not followed")
        return parts.path + ("?" + parts.query if parts.query else "")

    def referrers(self, repository: str, digest: str) -> bytes | None:
        """The referrers API's image index for ``digest`` (``GET /v2/<name>/referrers/<digest>``), or
        None when the registry has no referrers API (404: the client falls back to the tag schema)."""
        self._check_name(repository, digest)
        response = self._request(f"/v2/{repository}/referrers/{digest}",
                                 headers={"Accept": "application/vnd.oci.image.index.v1+json"},
                                 scope=f"repository:{repository}:pull",
                                 what=f"GET referrers {repository}@{digest}", cap=MAX_MANIFEST_BYTES)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._refusal(response, f"GET referrers {repository}@{digest}")
        return response.content            # at most MAX_MANIFEST_BYTES: read under that cap


#: the largest manifest or index read (the distribution spec's suggested limit for manifests)
MAX_MANIFEST_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Manifest:
    """A manifest as a registry serves it: its bytes, media type and (computed) digest."""

    body: bytes
    media_type: str
    digest: str

    @property
    def size(self) -> int:
        return len(self.body)

    def descriptor(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}

