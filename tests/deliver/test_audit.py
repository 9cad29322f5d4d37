"""`imagebuild audit`: wheel locks against the package index's real vulnerability data.

The index is reached through pip's default (no host name here). When it cannot be reached these
tests skip locally and fail under CI=true (conftest.need)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from conftest import ROOT, answer, need

# pycrypto 2.6.1 (its last release, abandoned) has public advisories with no fixed release:
# PYSEC-2017-94 (CVE-2013-7459) and PYSEC-2018-97 (CVE-2018-6594). The sha256 is the index's.
VULNERABLE_LOCK = """# a lock pinning a release with known advisories
pycrypto==2.6.1 \\
    --hash=sha256:f2ce1e989b272cfcb677616763e0a2e7ec659effa67a88aa92b3a65528f60a3c
"""
STATUSES = {"audited", "audited-latest", "not-audited", "not-on-index"}


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "imagebuild", "audit", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def reachable_or_need(proc):
    if proc.returncode == 3 and "cannot reach" in proc.stderr:
        need("the package index's JSON API", proc.stderr.strip())


def test_known_vulnerable_release_fails_with_its_advisory(tmp_path):
    lock = tmp_path / "vulnerable.txt"
    lock.write_text(VULNERABLE_LOCK)
    proc = cli("--lock", str(lock))
    reachable_or_need(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "PYSEC-2017-94" in proc.stdout and "CVE-2013-7459" in proc.stdout
    assert "OS packages: not audited" in proc.stdout
    # the index's records carry no severity: they fail at every --fail-on level
    proc = cli("--lock", str(lock), "--json", "--fail-on", "critical")
    assert proc.returncode == 1, proc.stderr
    doc = answer(proc.stdout, "audit", code=proc.returncode)
    assert doc["vulnerable"] == ["pycrypto"] and doc["exit_code"] == 1
    ids = {v["id"] for f in doc["findings"] for v in f["vulnerabilities"]}
    assert {"PYSEC-2017-94", "PYSEC-2018-97"} <= ids
    # one record per advisory: the GHSA twins are aliases, not extra findings
    assert not any(i.startswith("GHSA-") for i in ids)


def test_real_lock_of_smoke_cpu_against_the_index():
    from imagebuild.deliver.audit import default_json_api
    from imagebuild.render.run import load_images
    from imagebuild.render.wheellock import parse_lock
    import requests

    spec = load_images(ROOT / "matrix.yaml")["smoke-cpu"]
    lock = parse_lock((ROOT / spec.wheel_lock).read_text(), spec.wheel_lock)
    proc = cli("smoke-cpu", "--json", "--allow-partial")
    reachable_or_need(proc)
    assert proc.returncode in (0, 1), proc.stderr
    doc = answer(proc.stdout, "audit", code=proc.returncode)
    assert [f["name"] for f in doc["findings"]] == sorted(lock.entries)
    assert all(f["status"] in STATUSES for f in doc["findings"])
    assert doc["audited"] >= 1 and doc["exit_code"] == proc.returncode
    assert proc.returncode == (1 if doc["vulnerable"] else 0)
    # each audited verdict is what the index itself says about that release
    base = default_json_api()
    for f in doc["findings"]:
        if f["status"] == "audited":
            page = requests.get(f"{base}/{f['name']}/{f['version'].split('+')[0]}/json", timeout=30).json()
        elif f["status"] == "audited-latest":
            page = requests.get(f"{base}/{f['name']}/json", timeout=30).json()
            assert page["info"]["version"] == f["version"].split("+")[0]
        else:
            assert f["reason"]
            continue
        theirs = {v["id"] for v in page.get("vulnerabilities") or [] if not v.get("withdrawn")}
        ours = {v["id"] for v in f["vulnerabilities"]} | {a for v in f["vulnerabilities"] for a in v["aliases"]}
        assert {v["id"] for v in f["vulnerabilities"]} <= theirs <= ours
    # without --allow-partial a wheel nobody audited is never a clean verdict
    strict = cli("smoke-cpu")
    expected = 1 if doc["vulnerable"] else 3 if doc["not_audited"] else 0
    assert strict.returncode == expected, strict.stdout + strict.stderr


def test_unreachable_index_is_exit_3_in_one_line(tmp_path):
    lock = tmp_path / "vulnerable.txt"
    lock.write_text(VULNERABLE_LOCK)
    with socket.socket() as s:            # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = cli("--lock", str(lock), "--json-api", f"http://127.0.0.1:{port}/pypi")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "cannot reach" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("args, names", [
    ((), "IMAGE"),
    (("smoke-cpu", "--lock", "x.txt"), "IMAGE"),
    (("no-such-image",), "no-such-image"),
    (("--lock", "/nonexistent/lock.txt"), "/nonexistent/lock.txt"),
    (("--lock", "README.md"), "README.md:3"),   # line 1 is a comment, line 3 prose
    (("smoke-cpu", "--fail-on", "severe"), "--fail-on"),
    (("smoke-cpu", "--json-api", "ftp://example.invalid/pypi"), "--json-api"),
])
def test_bad_input_is_one_line(args, names):
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert names in proc.stderr


def test_severity_threshold():
    from imagebuild.deliver.audit import AuditResult, Finding, Vulnerability
    vuln = lambda i, sev: Vulnerability(id=i, aliases=[], summary="", fixed_in=[], link="", severity=sev)  # noqa: E731
    f = Finding("pkg", "1.0", "audited", vulnerabilities=[vuln("A", "low"), vuln("B", "high"), vuln("C", None)])
    ids = lambda level: {v.id for _, v in AuditResult("l", "s", [f], level, 0.0).counted()}  # noqa: E731
    assert ids("low") == {"A", "B", "C"}
    assert ids("high") == {"B", "C"}
    assert ids("critical") == {"C"}           # no severity: counts at every level
    clean = Finding("other", "2.0", "audited")
    assert AuditResult("l", "s", [clean], "low", 0.0).exit_code(False) == 0
    partial = [clean, Finding("x", "1", "not-audited", reason="no data")]
    assert AuditResult("l", "s", partial, "low", 0.0).exit_code(False) == 3
    assert AuditResult("l", "s", partial, "low", 0.0).exit_code(True) == 0


def test_publish_gate_refuses_a_vulnerable_lock(tmp_path):
    from imagebuild.deliver.audit import AuditRefused, AuditUnavailable, gate
    lock = tmp_path / "vulnerable.txt"
    lock.write_text(VULNERABLE_LOCK)
    try:
        gate({"some-image": str(lock)}, fail_on="critical")
    except AuditUnavailable as exc:
        need("the package index's JSON API", str(exc))
    except AuditRefused as exc:
        assert exc.exit_code == 1
        assert "some-image: not published" in str(exc) and "PYSEC-2017-94" in str(exc)
    else:
        pytest.fail("a lock pinning pycrypto 2.6.1 passed the publish gate")
    assert gate({"no-wheels": None}, fail_on="low") == {}


def test_publish_fail_on_stops_before_anything_is_pushed(tmp_path):
    audit = cli("smoke-cpu", "--json", "--allow-partial")
    reachable_or_need(audit)
    doc = answer(audit.stdout, "audit", code=audit.returncode)
    # 1: refused; 3: data missing for some wheels; 2: the gate passed and the next check (the smoke
    # report, here an empty folder) refused: in no case is the registry (a closed port) contacted
    expected = 1 if doc["vulnerable"] else 3 if doc["not_audited"] else 2
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "publish", "smoke-cpu", "--registry",
                           "localhost:9/none", "--fail-on", "low", "--reports-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == expected, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    if expected == 3:
        assert "--allow-partial-audit" in proc.stderr
