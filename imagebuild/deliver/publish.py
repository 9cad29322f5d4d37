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

Credentials come from the environment (``IMAGEBUILD_REGISTRY_USER`` / ``IMAGEBUILD_REGISTRY_PASSWORD``)
or from the Docker config the way docker itself reads it (the SDK's ``docker.auth``: ``credHelpers``
for the host, then ``credsStore``, then the base64 ``auths``), so the digest read-back carries the
same credentials as the push. The password never appears in output, logs or exception text: every
message leaving this module is scrubbed.

Network checks: plain http is used only for a loopback registry (a literal loopback address or
exactly ``localhost``). A bearer challenge's token service (``realm``) must be https (http only when
the registry and the realm are both on loopback), and credentials go there only when its host is
the registry's host, or one the user allowed (``--auth-host``); otherwise one line refuses.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import re
import signal
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .. import reference
from ..digests import sha256_digest
from ..errors import EngineError, EngineRefused, ImagebuildError, RegistryError, RegistryUnavailable
from ..redact import redact
from ..workspace import REPORTS

#: where ``imagebuild test`` writes a report by default, relative to the matrix's folder:
#: ``REPORTS_DIR/<image-id>.json`` (workspace.py)
REPORTS_DIR = REPORTS

USER_ENV = "IMAGEBUILD_REGISTRY_USER"
PASSWORD_ENV = "IMAGEBUILD_REGISTRY_PASSWORD"

#: manifest media types we accept when reading a digest back (docker v2 schema 2 and OCI)
MANIFEST_ACCEPT = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
])

# strict patterns: every value that reaches a registry URL, an engine call or a message
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
_PORT = r"(?::[0-9]{1,5})?"
_IPV6 = r"\[[0-9A-Fa-f:.]{2,45}\]"
HOST_RE = re.compile(rf"^(?:{_HOST}|{_IPV6}){_PORT}\Z")
# a repository path, a tag and a digest: reference.py's grammar (used with .match)
NAMESPACE_RE = reference.PATH_RE
REPOSITORY_RE = NAMESPACE_RE
TAG_RE = reference.TAG_RE
DIGEST_RE = reference.DIGEST_RE
IMAGE_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}\Z")

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


class NotTestedError(ImagebuildError):
    """An image has no passing smoke report for its exact engine image id: it is not published."""


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """Where images go: ``HOST[:PORT]/NAMESPACE``."""

    host: str
    namespace: str

    def repository(self, image_id: str) -> str:
        """The repository (without host) for one image: ``NAMESPACE/<image-id>``."""
        if not IMAGE_ID_RE.match(image_id) or not REPOSITORY_RE.match(f"{self.namespace}/{image_id}"):
            raise ImagebuildError(f"image id {image_id!r} is not a valid repository name component")
        return f"{self.namespace}/{image_id}"

    def reference(self, image_id: str) -> str:
        """The engine's name for the repository: ``HOST[:PORT]/NAMESPACE/<image-id>``."""
        return f"{self.host}/{self.repository(image_id)}"


def split_host(host: str) -> tuple[str, int | None]:
    """``HOST[:PORT]`` (``[::1]:5000`` for IPv6) -> (host name or address, port or None).

    ValueError when the form is wrong (unbalanced brackets, a port that is not 1-65535, an IPv6
    address without brackets, a bracketed value that is not an IPv6 address)."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            raise ValueError("unbalanced '['")
        name, rest = host[1:end], host[end + 1:]
        ipaddress.IPv6Address(name)            # ValueError when it is not one
        if rest and not rest.startswith(":"):
            raise ValueError("text after ']'")
        port_text = rest[1:] if rest else None
    else:
        if host.count(":") > 1:
            raise ValueError("an IPv6 address needs brackets: [ADDRESS]:PORT")
        name, sep, port_text = host.partition(":")
        port_text = port_text if sep else None
    if port_text is None:
        return name, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"port {port_text!r} is not 1-65535")
    return name, int(port_text)


def parse_target(text: str) -> Target:
    """``HOST[:PORT]/NAMESPACE`` -> Target, or ImagebuildError naming the argument."""
    host, sep, namespace = text.partition("/")
    if not sep or not HOST_RE.match(host) or not NAMESPACE_RE.match(namespace):
        raise ImagebuildError(
            f"{text!r} is not HOST[:PORT]/NAMESPACE (lower-case namespace components of "
            "letters, digits, '.', '_', '-'; an IPv6 address in brackets: [::1]:5000)",
            argument="--registry")
    try:
        split_host(host)
    except ValueError as exc:
        raise ImagebuildError(f"{host!r} is not HOST[:PORT]: {exc}", argument="--registry") from None
    return Target(host=host, namespace=namespace)


def is_loopback(host: str) -> bool:
    """True for a literal loopback address (127.0.0.0/8, ::1) or exactly ``localhost``, with or
    without a port. A name that merely starts with 127. or localhost is not loopback."""
    try:
        name, _port = split_host(host)
    except ValueError:
        return False
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_realm(realm: str, *, registry_host: str, registry_scheme: str,
                allowed_hosts: Iterable[str] = ()) -> str:
    """The bearer token service URL ``realm``, or RegistryError (one line) when credentials must
    not be sent there: not http(s); plain http unless the registry is loopback over http and the
    realm is loopback too; a host other than the registry's and not in ``allowed_hosts``."""
    shown = redact(realm)
    try:
        parts = urllib.parse.urlsplit(realm)
        realm_host = parts.hostname or ""
        parts.port  # noqa: B018 - ValueError on a bad port
    except ValueError:
        raise RegistryError(f"registry {registry_host}: its token service {shown!r} is not a URL; "
                            "credentials not sent") from None
    if parts.scheme not in ("http", "https") or not realm_host:
        raise RegistryError(f"registry {registry_host}: its token service {shown!r} is not an "
                            "http(s) URL; credentials not sent")
    if parts.scheme == "http" and not (registry_scheme == "http" and is_loopback(registry_host)
                                       and is_loopback(parts.netloc.rpartition("@")[2])):
        raise RegistryError(f"registry {registry_host}: its token service {shown} is plain http; "
                            "credentials are sent only over https")
    reg_name = split_host(registry_host)[0].lower()
    allowed = {reg_name} | {h.lower().strip("[]") for h in allowed_hosts}
    if realm_host.lower() not in allowed:
        raise RegistryError(f"registry {registry_host}: its token service is on another host "
                            f"({realm_host}); credentials not sent there (allow it with "
                            f"--auth-host {realm_host})")
    return realm


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str = field(repr=False)
    source: str = "environment"

    def auth_config(self) -> dict[str, str]:
        return {"username": self.user, "password": self.password}


def find_credentials(host: str, *, env: dict[str, str] | None = None,
                     docker_config: str | os.PathLike | None = None) -> Credentials | None:
    """Credentials for ``host``: the environment first, then the Docker config as docker reads it
    (``credHelpers``, ``credsStore``, ``auths``; through engines.registry_auth, which runs the
    ``docker-credential-*`` helpers).

    None when neither has any (anonymous access). A malformed Docker config or a failing helper is
    one line naming it.
    """
    env = os.environ if env is None else env
    user, password = env.get(USER_ENV), env.get(PASSWORD_ENV)
    if user and password is not None:
        return Credentials(user, password, "environment")
    if docker_config is None:
        base = env.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
        docker_config = os.path.join(base, "config.json")
    path = Path(docker_config)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"cannot read the Docker config ({type(exc).__name__})", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise RegistryError(f"malformed JSON ({exc.msg})", file=str(path), line=exc.lineno,
                            column=exc.colno) from None
    if not isinstance(data, dict):
        raise RegistryError("the Docker config is not a JSON object", file=str(path))
    if not data:
        return None     # (the SDK would read another file for an empty dict)
    from ..engines import registry_auth

    try:
        found = registry_auth(data, host, env)
    except EngineError as exc:
        helper = (data.get("credHelpers") or {}).get(host) if isinstance(data.get("credHelpers"), dict) \
            else None
        helper = helper or data.get("credsStore")
        what = f"the credential helper docker-credential-{helper}" if helper else "its auths entry"
        detail = " ".join(exc.message.split())[:200]
        raise RegistryError(f"cannot read the credentials for {host} from {what} ({detail})",
                            file=str(path)) from None
    if not found:
        return None
    if found.get("IdentityToken"):
        raise RegistryError(f"the credentials for {host} are an identity token, which imagebuild "
                            f"does not speak; set {USER_ENV} and {PASSWORD_ENV}", file=str(path))
    user = found.get("Username") or found.get("username")
    password = found.get("Password") if "Password" in found else found.get("password")
    if not user or password is None:
        return None
    return Credentials(str(user), str(password), str(path))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every (non-empty) secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


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
    """Read a streamed requests.Response's body into it (``.content`` then works as usual) without
    ever holding more than ``cap`` bytes: a declared Content-Length above it is refused before
    reading, a body that runs past it is refused at that point. The refusal is a RegistryError,
    which the retry loop does not retry (the same server would send the same body again).
    ``deadline`` (time.monotonic()): a server that trickles its answer (a byte a second never
    trips a read timeout) is given up at that instant, RegistryUnavailable."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > cap:
        response.close()
        raise RegistryError(f"{what}: the answer declares {int(declared)} bytes, more than the "
                            f"{cap} imagebuild reads")
    body = bytearray()
    try:
        for chunk in response.iter_content(64 * 1024):
            if len(body) + len(chunk) > cap:
                raise RegistryError(f"{what}: the answer is larger than the {cap} bytes imagebuild reads")
            body += chunk
            if deadline is not None and time.monotonic() > deadline:
                raise RegistryUnavailable(f"{what}: still sending after the deadline "
                                          "(--timeout); given up")
    finally:
        response.close()
    response._content = bytes(body)


class DeadlinePassed(RegistryUnavailable):
    """The registry conversation ran past its deadline (exit 3: retry later, or allow more)."""


@contextlib.contextmanager
def _deadline_alarm(seconds: float | None, message: str):
    """Raise DeadlinePassed in the main thread when ``seconds`` pass inside the block, wherever it
    blocks: a server that trickles its headers or body a byte at a time never trips a socket
    timeout (each byte restarts it), so the deadline is a timer, not a read timeout. Off in other
    threads (signals reach only the main one) and when ``seconds`` is None."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum, _frame):
        raise DeadlinePassed(message)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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
            first = (response.json().get("errors") or [{}])[0]
            code, message = str(first.get("code", "")), str(first.get("message", ""))
            if code or message:
                detail += f" {code}: {' '.join(message.split())[:200]}".rstrip(": ")
        except (ValueError, AttributeError, TypeError, IndexError):
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
                media_type = str(json.loads(body).get("mediaType") or media_type)
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
                page = json.loads(response.content).get("tags") or []
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
        report = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotTestedError(f"malformed smoke report ({exc.msg}); not published", file=str(path),
                             line=exc.lineno, column=exc.colno) from None
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
                          sleep: Callable[[float], None]) -> str | None:
    """_engine_push with bounded exponential backoff on transient failures."""
    for attempt in range(1, tries + 1):
        try:
            return _engine_push(engine, repository, tag, credentials, secrets)
        except _TransientPush as exc:
            if attempt == tries:
                raise RegistryUnavailable(f"{exc.message} (failed {tries} times)") from None
            sleep(backoff * (2 ** (attempt - 1)))
    return None  # pragma: no cover - the loop returns or raises


def _engine_push(engine, repository: str, tag: str, credentials: Credentials | None,
                 secrets: list[str]) -> str | None:
    """Push one tag through the engine; the digest it reports (stream ``aux``), or RegistryError."""
    try:
        pushed = engine.push(repository, tag,
                             auth=credentials.auth_config() if credentials is not None else None)
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
                                          tries=api.tries, backoff=api.backoff, sleep=api._sleep)
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
                  after_dated: Callable[[str], None] | None = None) -> PublishResult:
    """Push ``local_ref`` as ``target/<image_id>:<tag>`` for every tag, in the safe order.

    ``engine`` is an imagebuild Engine; ``report`` the smoke report of the image (checked against the
    engine's image id before anything happens); ``api`` the registry HTTP API used to read digests
    back (built from ``target`` and ``credentials`` when None). ``after_dated(digest)`` attaches the
    SBOM referrer and the signatures. The engine can push only a tag, so with ``after_dated`` the
    image is first pushed under STAGING_TAG, verified, given its attachments, and only then tagged
    with the release's tags: no release tag, dated or floating, ever names an image without them.
    When ``after_dated`` raises, no release tag was pushed and publishing again completes it.
    """
    say = progress or (lambda _msg: None)
    secrets = [credentials.password] if credentials else []
    ordered = order_tags(list(tags))
    repository_path = target.repository(image_id)
    repository = target.reference(image_id)
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
                                         STAGING_TAG, credentials, secrets, target, say)
        try:
            after_dated(digest_of_image)
        except RegistryError as exc:
            cls = RegistryUnavailable if isinstance(exc, RegistryUnavailable) else RegistryError
            raise cls(f"{exc.message}; the image is pushed only as {repository}:{STAGING_TAG} "
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
