"""Vulnerability audit of an image's wheel lock, against the package index's own vulnerability data.

Source: the index's JSON API (the one pip's default index serves; `--json-api URL` names another).
For each `name==version` of the lock it asks for that release (`/<name>/<version>/json`, whose
`vulnerabilities` are the advisories known to affect it: the same data and endpoint pip-audit's
default service reads). Where the index does not serve the release endpoint but serves the
project's (`/<name>/json`), and the locked version is the project's newest release, the project
page's `vulnerabilities` are those of that release and are used. Anything else is reported as
not audited, with the reason: never as clean.

pip-audit itself is not called: its PyPI service turns a release endpoint that answers 404 into
"skipped" and prints "No known vulnerabilities found", which on an index that does not serve that
endpoint is a clean verdict on wheels nobody checked.

Severity: the index's records carry none (id, aliases, summary, fixed_in, link). A vulnerability
without a severity counts at every `--fail-on` level; one with a severity counts at its level and
above.

OS packages are not audited: imagebuild reaches no vulnerability source for Debian, Ubuntu or
Rocky Linux packages. `imagebuild sbom` lists them (purl with version) for a scanner that has one.

Exit codes: 0 every wheel audited and none vulnerable at/above --fail-on; 1 vulnerabilities at/above
--fail-on; 3 (service unavailable) when the index cannot be reached or keeps failing, or when it
served no data for some wheels (unless --allow-partial, which then exits 0 or 1 on what was
audited).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .. import httpio, untrusted
from ..errors import EXIT_UNAVAILABLE, ImagebuildError, Unavailable

SEVERITIES = ("low", "medium", "high", "critical")
OS_NOTE = ("OS packages: not audited (imagebuild reaches no vulnerability source for Debian, Ubuntu "
           "or Rocky Linux packages; `imagebuild sbom` lists them with versions for a scanner that has one)")


class AuditError(ImagebuildError):
    """The audit cannot run (bad lock, bad URL)."""


class AuditUnavailable(Unavailable, AuditError):
    """The index's vulnerability data cannot be had: unreachable, failing, or not served (exit 3,
    the project's "service unavailable" code)."""


def default_json_api() -> str:
    """The JSON API of pip's own default index (read from pip, so no host name is written here)."""
    try:
        from pip._internal.models.index import PyPI  # noqa: PLC0415 - only for its default URL
        return PyPI.pypi_url.rstrip("/")
    except Exception:  # noqa: BLE001 - pip's internals moved: ask the user
        raise AuditError("cannot find pip's default index; pass --json-api URL",
                         argument="--json-api") from None


@dataclass
class Vulnerability:
    id: str
    aliases: list[str]
    summary: str
    fixed_in: list[str]
    link: str
    severity: str | None = None

    def to_json(self) -> dict:
        return {"id": self.id, "aliases": self.aliases, "summary": self.summary,
                "fixed_in": self.fixed_in, "link": self.link, "severity": self.severity}


@dataclass
class Finding:
    name: str
    version: str
    status: str             # audited | audited-latest | not-audited | not-on-index
    reason: str = ""
    vulnerabilities: list[Vulnerability] = field(default_factory=list)

    @property
    def audited(self) -> bool:
        return self.status.startswith("audited")

    def to_json(self) -> dict:
        return {"name": self.name, "version": self.version, "status": self.status,
                "reason": self.reason,
                "vulnerabilities": [v.to_json() for v in self.vulnerabilities]}


def _vulns(records) -> list[Vulnerability]:
    out = []
    for v in records or []:
        if not isinstance(v, dict) or v.get("withdrawn"):
            continue
        summary = v.get("summary") or v.get("details") or ""
        out.append(Vulnerability(
            id=str(v.get("id", "")), aliases=sorted(str(a) for a in v.get("aliases") or []),
            summary=" ".join(str(summary).split())[:300],
            fixed_in=[str(f) for f in v.get("fixed_in") or []], link=str(v.get("link") or ""),
            severity=(str(v["severity"]).lower() if v.get("severity") else None)))
    return _merge(out)


def _merge(vulns: list[Vulnerability]) -> list[Vulnerability]:
    """One record per advisory: the index lists an advisory under each of its ids (PYSEC-..., and
    GHSA-... with the PYSEC id as an alias); records sharing an id are merged, the index's own
    PYSEC id kept as the id when there is one."""
    groups: list[tuple[set[str], list[Vulnerability]]] = []
    for v in vulns:
        ids = {v.id, *v.aliases}
        hit = [g for g in groups if g[0] & ids]
        merged_ids, members = set(ids), [v]
        for g in hit:
            merged_ids |= g[0]
            members += g[1]
            groups.remove(g)
        groups.append((merged_ids, members))
    out = []
    for ids, members in groups:
        members.sort(key=lambda m: (not m.id.startswith("PYSEC-"), m.id))
        first = members[0]
        fixed = sorted({f for m in members for f in m.fixed_in})
        sev = next((m.severity for m in members if m.severity), None)
        out.append(Vulnerability(id=first.id, aliases=sorted(ids - {first.id}), summary=first.summary,
                                 fixed_in=fixed, link=first.link, severity=sev))
    return sorted(out, key=lambda x: x.id)


MAX_ANSWER_BYTES = 16 * 1024 * 1024   # one package's vulnerability records


class Client:
    """GETs against the JSON API with one retry on 429/5xx; transport failures are
    AuditUnavailable."""

    def __init__(self, base: str, timeout: float = 20.0):
        import requests
        self.base = base.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["Accept"] = "application/json"

    def get(self, path: str):
        import requests
        url = f"{self.base}/{path}"
        for attempt in range(2):
            try:
                r = self.session.get(url, timeout=self.timeout, stream=True)
                body = httpio.read_capped(r, MAX_ANSWER_BYTES, url, httpio.deadline_in(),
                                          refuse=AuditUnavailable, late=AuditUnavailable)
            except requests.RequestException as exc:
                raise AuditUnavailable(f"cannot reach the vulnerability data at {self.base} "
                                       f"({type(exc).__name__})") from None
            if r.status_code == 404:
                return None
            if r.status_code == 200:
                try:
                    return untrusted.loads(body)
                except ValueError:
                    raise AuditUnavailable(f"{url} answered with something other than JSON") from None
            if r.status_code == 429 or r.status_code >= 500:
                if attempt == 0:
                    time.sleep(min(httpio.retry_after(r) or 2.0, 30.0))
                    continue
                raise AuditUnavailable(f"the vulnerability data at {self.base} keeps failing "
                                       f"(HTTP {r.status_code})")
            raise AuditUnavailable(f"{url} answered HTTP {r.status_code}")
        raise AssertionError("unreachable")


def query(client: Client, name: str, version: str) -> Finding:
    from packaging.version import InvalidVersion, Version
    try:
        public = Version(version).public        # 2.13.0+cpu: the index knows 2.13.0
    except InvalidVersion:
        public = version
    data = client.get(f"{name}/{public}/json")
    if data is not None:
        return Finding(name, version, "audited", vulnerabilities=_vulns(data.get("vulnerabilities")))
    project = client.get(f"{name}/json")
    if project is None:
        return Finding(name, version, "not-on-index", reason=f"the index has no project {name}")
    latest = str((project.get("info") or {}).get("version") or "")
    try:
        is_latest = bool(latest) and Version(latest) == Version(public)
    except InvalidVersion:
        is_latest = latest == public
    if is_latest:
        return Finding(name, version, "audited-latest",
                       reason="the project page's data (it describes the newest release, this one)",
                       vulnerabilities=_vulns(project.get("vulnerabilities")))
    if public in (project.get("releases") or {}):
        return Finding(name, version, "not-audited",
                       reason=f"the index serves no per-release vulnerability data for {name} "
                              f"{public} (its newest is {latest})")
    return Finding(name, version, "not-on-index",
                   reason=f"the index has no release {public} of {name}")


@dataclass
class AuditResult:
    lock: str
    source: str
    findings: list[Finding]
    fail_on: str
    seconds: float

    def counted(self) -> list[tuple[Finding, Vulnerability]]:
        """The vulnerabilities at or above --fail-on (those without a severity always count)."""
        floor = SEVERITIES.index(self.fail_on)
        return [(f, v) for f in self.findings for v in f.vulnerabilities
                if v.severity is None or v.severity not in SEVERITIES
                or SEVERITIES.index(v.severity) >= floor]

    @property
    def not_audited(self) -> list[Finding]:
        return [f for f in self.findings if not f.audited]

    def exit_code(self, allow_partial: bool) -> int:
        if self.counted():
            return 1
        if self.not_audited and not allow_partial:
            return EXIT_UNAVAILABLE
        return 0

    def to_json(self, allow_partial: bool) -> dict:
        return {"lock": self.lock, "source": self.source, "fail_on": self.fail_on,
                "severity_note": "the index's records carry no severity: each counts at any --fail-on",
                "wheels": len(self.findings),
                "audited": sum(f.audited for f in self.findings),
                "not_audited": len(self.not_audited),
                "vulnerable": sorted({f.name for f, _ in self.counted()}),
                "findings": [f.to_json() for f in self.findings],
                "os_packages": "not audited: " + OS_NOTE.split("(", 1)[1].rstrip(")"),
                "exit_code": self.exit_code(allow_partial), "seconds": round(self.seconds, 2)}

    def table(self, allow_partial: bool) -> str:
        rows = [("PACKAGE", "VERSION", "STATUS", "VULNERABILITIES")]
        for f in self.findings:
            if f.vulnerabilities:
                vv = "; ".join(f"{v.id}" + (f" ({', '.join(v.aliases)})" if v.aliases else "")
                               + f" fixed in {', '.join(v.fixed_in) or 'no release'}"
                               for v in f.vulnerabilities)
            else:
                vv = "none known" if f.audited else f.reason
            rows.append((f.name, f.version, f.status, vv))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"lock {self.lock}: {len(self.findings)} wheels, data from {self.source}"]
        lines += [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in rows]
        counted = self.counted()
        lines.append(OS_NOTE)
        lines.append(f"summary: {len(self.findings) - len(self.not_audited)} audited, "
                     f"{len(self.not_audited)} not audited, {len(counted)} vulnerabilit"
                     f"{'y' if len(counted) == 1 else 'ies'} at or above {self.fail_on} in "
                     f"{len({f.name for f, _ in counted})} wheel(s); exit {self.exit_code(allow_partial)}")
        return "\n".join(lines)


def audit_lock(lock, *, source: str | None = None, fail_on: str = "low", workers: int = 8,
               timeout: float = 20.0) -> AuditResult:
    """Audit every entry of a wheellock.Lock."""
    if fail_on not in SEVERITIES:
        raise AuditError(f"unknown severity {fail_on!r} (one of {', '.join(SEVERITIES)})",
                         argument="--fail-on")
    base = source or default_json_api()
    if not base.startswith(("https://", "http://")):
        raise AuditError(f"{base!r} is not an http(s) URL", argument="--json-api")
    client = Client(base, timeout=timeout)
    started = time.monotonic()
    entries = sorted(lock.entries.values(), key=lambda e: e.name)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        findings = list(pool.map(lambda e: query(client, e.name, e.version), entries))
    result = AuditResult(lock=lock.path, source=base, findings=findings, fail_on=fail_on,
                         seconds=time.monotonic() - started)
    if findings and not any(f.audited for f in findings):
        raise AuditUnavailable(
            f"{base} served vulnerability data for none of the {len(findings)} wheels of "
            f"{lock.path} ({findings[0].name}: {findings[0].reason})")
    return result


class AuditRefused(AuditError):
    """An image's wheels have known vulnerabilities at or above the severity the user set: the
    answer is no (exit 1), not an error of input."""

    exit_code = 1


def gate(locks: dict[str, str | None], *, fail_on: str, allow_partial: bool = False,
         source: str | None = None) -> dict[str, AuditResult]:
    """`publish --fail-on`: audit each image's lock (image id -> lock path; None: no wheels) and
    refuse, before anything is pushed, when one has vulnerabilities at or above `fail_on`
    (AuditRefused, exit 1) or when the index served no data for some of its wheels and
    `allow_partial` is false (AuditUnavailable, exit 3)."""
    from pathlib import Path

    from ..render.wheellock import LockError, parse_lock
    results: dict[str, AuditResult] = {}
    for image_id, path in locks.items():
        if path is None:
            continue
        try:
            lock = parse_lock(Path(path).read_text(encoding="utf-8"), str(path))
        except OSError as exc:
            raise AuditError(f"{image_id}: cannot read its wheel lock: {exc.strerror}", file=str(path)) from None
        except LockError as exc:
            raise AuditError(str(exc)) from None
        result = audit_lock(lock, source=source, fail_on=fail_on)
        results[image_id] = result
        counted = result.counted()
        if counted:
            found = ", ".join(f"{f.name} {f.version} {v.id}" for f, v in counted[:4])
            more = f" and {len(counted) - 4} more" if len(counted) > 4 else ""
            raise AuditRefused(f"{image_id}: not published: {len(counted)} known vulnerabilit"
                               f"{'y' if len(counted) == 1 else 'ies'} at or above --fail-on "
                               f"{fail_on} ({found}{more}; `imagebuild audit {image_id}` lists them)")
        if result.not_audited and not allow_partial:
            names = ", ".join(f.name for f in result.not_audited[:5])
            raise AuditUnavailable(f"{image_id}: not published: the index served no vulnerability "
                                   f"data for {len(result.not_audited)} of {len(result.findings)} "
                                   f"wheels ({names}); --allow-partial-audit accepts that")
    return results
