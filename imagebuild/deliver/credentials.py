"""Registry credentials and where they may go.

Credentials come from the environment (``IMAGEBUILD_REGISTRY_USER`` / ``IMAGEBUILD_REGISTRY_PASSWORD``)
or from the Docker config the way docker itself reads it (the SDK's ``docker.auth``: ``credHelpers``
for the host, then ``credsStore``, then the base64 ``auths``), so the digest read-back carries the
same credentials as the push. The password never appears in output, logs or exception text: every
message is scrubbed (``scrub``).

A bearer challenge's token service (``realm``) must be https (http only when the registry and the
realm are both on loopback), and credentials go there only when its host is the registry's host,
or one the user allowed (``--auth-host``); otherwise one line refuses (``check_realm``)."""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .. import untrusted
from ..errors import EngineError, RegistryError
from ..redact import redact

from .target import is_loopback, split_host

USER_ENV = "IMAGEBUILD_REGISTRY_USER"
PASSWORD_ENV = "IMAGEBUILD_REGISTRY_PASSWORD"


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
        data = untrusted.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"cannot read the Docker config ({type(exc).__name__})", file=str(path)) from None
    except untrusted.BadData as exc:
        raise RegistryError(str(exc), file=str(path), line=exc.line, column=exc.column) from None
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


