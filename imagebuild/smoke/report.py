"""Check results and the suite report: JSON (sorted keys) and JUnit XML. Standard library only.

A check ends in one of three states. ``pass`` and ``fail`` are verdicts; ``skip`` means the check
did not run (with the reason in ``detail``) and is never counted as a pass: the JSON lists it as
skipped, JUnit marks it ``<skipped>``. The report's ``passed`` is true only when no *required*
check failed.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from xml.etree import ElementTree as ET

PASS, FAIL, SKIP = "pass", "fail", "skip"
STATUSES = (PASS, FAIL, SKIP)


@dataclass
class CheckResult:
    name: str
    status: str
    detail: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    required: bool = True

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {self.status!r}")
        clean: dict[str, float] = {}
        for key, value in self.metrics.items():
            if isinstance(value, bool):
                value = int(value)
            if not isinstance(value, (int, float)):
                raise TypeError(f"metric {key!r} of check {self.name!r} is not a number: {value!r}")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"metric {key!r} of check {self.name!r} is not finite: {value!r}")
            clean[str(key)] = value
        self.metrics = clean

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail,
                "metrics": dict(sorted(self.metrics.items())), "required": self.required}

    @classmethod
    def from_dict(cls, data: dict) -> "CheckResult":
        return cls(name=str(data["name"]), status=str(data["status"]),
                   detail=str(data.get("detail", "")), metrics=dict(data.get("metrics") or {}),
                   required=bool(data.get("required", True)))


def combine(name: str, parts: list[tuple[str, str]], metrics: dict | None = None,
            required: bool = True) -> CheckResult:
    """One result from sub-results [(status, text)]: any fail fails; all skipped skips."""
    statuses = [s for s, _ in parts]
    if FAIL in statuses:
        status = FAIL
    elif statuses and all(s == SKIP for s in statuses):
        status = SKIP
    elif not statuses:
        status, parts = SKIP, [(SKIP, "nothing to check")]
    else:
        status = PASS
    # failures first so that a one-line summary starts with what went wrong
    order = {FAIL: 0, PASS: 1, SKIP: 2}
    ordered = sorted(parts, key=lambda p: order[p[0]])
    detail = "; ".join(text if s == PASS else f"{s.upper()}: {text}" for s, text in ordered)
    return CheckResult(name, status, detail, metrics or {}, required)


@dataclass
class Report:
    image: str
    checks: list[CheckResult]
    tier: str = "cpu"
    extra: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not any(c.status == FAIL and c.required for c in self.checks)

    def summary(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES}

    def skipped(self) -> dict[str, str]:
        return {c.name: c.detail for c in self.checks if c.status == SKIP}

    def to_dict(self) -> dict:
        data = {"image": self.image, "passed": self.passed, "tier": self.tier,
                "summary": self.summary(), "skipped": self.skipped(),
                "checks": [c.to_dict() for c in self.checks]}
        for key, value in self.extra.items():
            data.setdefault(key, value)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict) -> "Report":
        known = {"image", "passed", "tier", "summary", "skipped", "checks"}
        return cls(image=str(data.get("image", "")), tier=str(data.get("tier", "cpu")),
                   checks=[CheckResult.from_dict(c) for c in data.get("checks", [])],
                   extra={k: v for k, v in data.items() if k not in known})

    def junit_suite(self) -> ET.Element:
        summ = self.summary()
        suite = ET.Element("testsuite", {
            "name": f"imagebuild.smoke {self.image}".strip(), "tests": str(len(self.checks)),
            "failures": str(summ[FAIL]), "skipped": str(summ[SKIP]), "errors": "0"})
        for check in self.checks:
            case = ET.SubElement(suite, "testcase", {
                "classname": "imagebuild.smoke", "name": check.name,
                "time": f"{float(check.metrics.get('seconds', 0.0)):.3f}"})
            if check.status == SKIP:
                ET.SubElement(case, "skipped", {"message": check.detail})
            elif check.status == FAIL:
                node = ET.SubElement(case, "failure", {"message": check.detail[:500]})
                node.text = check.detail
            if check.metrics:
                props = ET.SubElement(case, "properties")
                for key, value in sorted(check.metrics.items()):
                    ET.SubElement(props, "property", {"name": key, "value": repr(value)})
        return suite

    def to_junit(self) -> str:
        return junit_text([self])


def junit_text(reports: list[Report]) -> str:
    if len(reports) == 1:
        root = reports[0].junit_suite()
    else:
        root = ET.Element("testsuites")
        for rep in reports:
            root.append(rep.junit_suite())
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def junit_path(report_path: str) -> str:
    """The JUnit file beside a JSON report: report.json -> report.xml, report -> report.xml."""
    base, ext = os.path.splitext(report_path)
    return (base if ext.lower() == ".json" else report_path) + ".xml"


def write_atomic(path, text: str, mode: int | None = None) -> None:
    """Write through a temporary file in the same folder and rename: never a half-written file.
    The smoke suite's own copy of imagebuild.atomic.write_atomic: this package is standard-library
    only and ships inside images, so it cannot import it. `mode` sets the file's permissions
    before it appears."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
