"""Publishing against a real registry (Debian's docker-registry, htpasswd auth, started here on a
free loopback port) and the real Docker engine. The only fake is the tiny HTTP server of the
digest-mismatch case, which a real registry cannot be made to produce."""

from __future__ import annotations

import base64
import http.server
import json
import os
import threading
import types
import uuid

import pytest

from imagebuild.digests import sha256_digest
from imagebuild import cli
from imagebuild.deliver import publish
from imagebuild.engines import PushResult
from imagebuild.errors import ImagebuildError, RegistryError

from conftest import fake_matrix

from registry_service import (BASE, CREDS, PASSWORD, USER, api_for, build_small,  # noqa: F401
                              engine, free_port, on_engine, passing_report, registry,
                              write_lock)  # fixtures and helpers


# ----------------------------------------------------------------------------- pure logic

def test_parse_target_accepts_and_rejects():
    t = publish.parse_target("localhost:5000/hpc/team")
    assert (t.host, t.namespace) == ("localhost:5000", "hpc/team")
    assert t.reference("pt-cu12") == "localhost:5000/hpc/team/pt-cu12"
    for bad in ("localhost:5000", "host/UPPER", "host/a;rm -rf /", "host/$(id)", "ho st/ns",
                "host:99999/ns", "host/ns\nx", "host/../ns", ""):
        with pytest.raises(ImagebuildError):
            publish.parse_target(bad)


def test_order_puts_dated_tag_first():
    assert publish.order_tags(["2.4.1-cu12", "2.4.1-cu12-20260101"]) == ["2.4.1-cu12-20260101", "2.4.1-cu12"]
    with pytest.raises(ImagebuildError):
        publish.order_tags(["ok", "bad tag"])


def test_credentials_from_environment_and_docker_config(tmp_path):
    assert publish.find_credentials("r:1", env={publish.USER_ENV: "u", publish.PASSWORD_ENV: "p"}) \
        == publish.Credentials("u", "p", "environment")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"auths": {"r:1": {"auth": base64.b64encode(b"bob:pa:ss").decode()}}}))
    found = publish.find_credentials("r:1", env={}, docker_config=cfg)
    assert (found.user, found.password) == ("bob", "pa:ss")
    assert "pa:ss" not in repr(found)
    assert publish.find_credentials("other:2", env={}, docker_config=cfg) is None
    cfg.write_text('{"auths": {\n  "r:1": }')
    with pytest.raises(RegistryError) as err:
        publish.find_credentials("r:1", env={}, docker_config=cfg)
    assert "config.json:2" in str(err.value)


def test_transient_failures_are_retried_with_backoff_then_given_up():
    waits, calls = [], []

    class Resp:
        def __init__(self, code):
            self.status_code = code

    codes = iter([503, 429, 200])
    got = publish._retrying(lambda: calls.append(1) or Resp(next(codes)), what="x", host="h",
                            tries=4, backoff=0.5, sleep=waits.append)
    assert got.status_code == 200 and waits == [0.5, 1.0]
    waits.clear()
    with pytest.raises(RegistryError, match=r"failed 4 times \(HTTP 502\)"):
        publish._retrying(lambda: Resp(502), what="x", host="h", tries=4, backoff=0.5, sleep=waits.append)
    assert waits == [0.5, 1.0, 2.0]
    # 401 is an answer, not a transient failure: returned at once, never retried
    waits.clear()
    assert publish._retrying(lambda: Resp(401), what="x", host="h", tries=4, backoff=0.5,
                             sleep=waits.append).status_code == 401 and waits == []


def test_engine_push_retries_transient_errors_only():
    digest = "sha256:" + "a" * 64
    streams = []

    class FakeEngine:  # only push: what the engine reported for each push
        def push(self, repository, tag, *, auth=None):
            return streams.pop(0)

    engine = FakeEngine()
    waits = []
    streams[:] = [PushResult(error="received unexpected HTTP status: 503 Service Unavailable"),
                  PushResult(digests=(digest,))]
    assert publish._engine_push_retrying(engine, "h:1/ns/x", "1", None, [], tries=4, backoff=0.5,
                                         sleep=waits.append) == digest
    assert waits == [0.5]
    waits.clear()
    streams[:] = [PushResult(error="manifest invalid: manifest invalid")]
    with pytest.raises(RegistryError, match="manifest invalid") as err:
        publish._engine_push_retrying(engine, "h:1/ns/x", "1", None, [], tries=4, backoff=0.5,
                                      sleep=waits.append)
    assert waits == [] and "failed 4 times" not in str(err.value)
    streams[:] = [PushResult(error="read: connection reset by peer")] * 4
    with pytest.raises(RegistryError, match=r"connection reset by peer \(failed 4 times\)"):
        publish._engine_push_retrying(engine, "h:1/ns/x", "1", None, [], tries=4, backoff=0.5,
                                      sleep=waits.append)
    assert waits == [0.5, 1.0, 2.0]
    streams[:] = [PushResult(error="unauthorized: authentication required Pw-secret")]
    with pytest.raises(RegistryError) as err:
        publish._engine_push(engine, "h:1/ns/x", "1", publish.Credentials("u", "Pw-secret"), ["Pw-secret"])
    assert str(err.value).startswith("registry h:1 refused the credentials for u") and "Pw-secret" not in str(err.value)


def test_auth_challenges_are_parsed():
    assert publish._parse_challenge('Basic realm="imagebuild-test"') == ("basic", {"realm": "imagebuild-test"})
    scheme, params = publish._parse_challenge(
        'Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull"')
    assert scheme == "bearer" and params == {"realm": "https://auth.example/token",
                                             "service": "registry.example", "scope": "repository:a/b:pull"}


def test_report_checks(tmp_path):
    good = {"image": "a", "image_id": "sha256:" + "1" * 64, "passed": True}
    publish.check_report(good, "sha256:" + "1" * 64, name="a")
    with pytest.raises(publish.NotTestedError, match="report is for image"):
        publish.check_report(good, "sha256:" + "2" * 64, name="a")
    with pytest.raises(publish.NotTestedError, match="did not pass"):
        publish.check_report({**good, "passed": "yes"}, "sha256:" + "1" * 64, name="a")
    with pytest.raises(publish.NotTestedError, match="no smoke report"):
        publish.load_report(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{\n oops")
    with pytest.raises(publish.NotTestedError) as err:
        publish.load_report(tmp_path / "bad.json")
    assert "bad.json:2" in str(err.value)
    assert publish.default_report_path("pt-cu12") == publish.REPORTS_DIR / "pt-cu12.json"


# ----------------------------------------------------------------------------- real registry

@pytest.mark.registry
@pytest.mark.engine
def test_push_verify_and_pull_back(engine, registry):
    ref = build_small(engine, "pub-roundtrip")
    engine_id = engine.images.get(ref).id
    target = publish.parse_target(f"{registry}/ci")
    seen = []
    result = publish.publish_image(on_engine(engine), image_id="pub-roundtrip", local_ref=ref,
                                   tags=["1.0-cpu", "1.0-cpu-20260101"], target=target,
                                   report=passing_report(engine, ref, "pub-roundtrip"),
                                   credentials=CREDS, api=api_for(registry), progress=seen.append)
    # dated tag pushed (and verified) before the floating one
    assert [t.reference.rsplit(":", 1)[1] for t in result.tags] == ["1.0-cpu-20260101", "1.0-cpu"]
    assert [m for m in seen if m.startswith("pushing")][0].endswith("1.0-cpu-20260101")
    api = api_for(registry)
    for tag in ("1.0-cpu", "1.0-cpu-20260101"):
        assert api.manifest_digest("ci/pub-roundtrip", tag) == result.digest
    repo = f"{registry}/ci/pub-roundtrip"
    assert f"{repo}@{result.digest}" in engine.images.get(ref).attrs["RepoDigests"]
    # remove every local name of the image, pull it back: same image id
    for name in (ref, f"{repo}:1.0-cpu", f"{repo}:1.0-cpu-20260101"):
        engine.images.remove(name)
    with pytest.raises(Exception):
        engine.images.get(engine_id)
    pulled = engine.images.pull(repo, tag="1.0-cpu", auth_config=CREDS.auth_config())
    assert pulled.id == engine_id


@pytest.mark.registry
@pytest.mark.engine
def test_refuses_images_without_a_passing_report_for_that_id(engine, registry, tmp_path):
    ref = build_small(engine, "pub-untested")
    other = build_small(engine, "pub-other")
    target = publish.parse_target(f"{registry}/ci")
    reports = [
        {**passing_report(engine, ref, "pub-untested"), "passed": False},
        passing_report(engine, other, "pub-untested"),  # a passing report of ANOTHER image id
        {"image": "pub-untested", "passed": True},
    ]
    for report in reports:
        with pytest.raises(publish.NotTestedError):
            publish.publish_image(on_engine(engine), image_id="pub-untested", local_ref=ref,
                                  tags=["1", "1-20260101"], target=target, report=report,
                                  credentials=CREDS, api=api_for(registry))
    api = api_for(registry)
    assert api.manifest_digest("ci/pub-untested", "1") is None
    assert api.manifest_digest("ci/pub-untested", "1-20260101") is None


@pytest.mark.registry
@pytest.mark.engine
def test_wrong_password_is_one_line_and_never_printed(engine, registry, tmp_path, monkeypatch, capfd):
    ref = build_small(engine, "pub-auth")
    wrong = "Wr0ng-pass-Zq81-secret"
    api = publish.RegistryAPI(registry, publish.Credentials(USER, wrong), backoff=0.01)
    with pytest.raises(RegistryError) as err:
        publish.publish_image(on_engine(engine), image_id="pub-auth", local_ref=ref, tags=["1", "1-20260101"],
                              target=publish.parse_target(f"{registry}/ci"),
                              report=passing_report(engine, ref, "pub-auth"),
                              credentials=publish.Credentials(USER, wrong), api=api)
    assert str(err.value) == f"registry {registry} refused the credentials for {USER}"
    # the same through the command line, with the password in the environment
    run_cli_publish(engine, registry, ref, "pub-auth", tmp_path, monkeypatch, password=wrong)
    out, errtext = capfd.readouterr()
    assert wrong not in out + errtext
    lines = [line for line in errtext.splitlines() if line.strip()]
    assert lines == [f"imagebuild publish: registry {registry} refused the credentials for {USER}"]
    assert api_for(registry).manifest_digest("ci/pub-auth", "1") is None


def run_cli_publish(engine, registry, ref, name, tmp_path, monkeypatch, password=PASSWORD, tags=None):
    """`imagebuild publish` in-process, the matrix replaced by a one-image lookup (conftest.fake_matrix)."""
    report = tmp_path / f"{name}.json"
    report.write_text(json.dumps(passing_report(engine, ref, name)))
    spec = types.SimpleNamespace(id=name, local_ref=ref, tags=tags or ["1", "1-20260101"],
                                 labels={}, stack={})
    fake_matrix(monkeypatch, {name: spec})
    monkeypatch.setenv(publish.USER_ENV, USER)
    monkeypatch.setenv(publish.PASSWORD_ENV, password)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    lock = write_lock(engine, ref, name, report, tmp_path)
    return cli.main(["publish", name, "--registry", f"{registry}/ci", "--report", str(report),
                     "--lock", str(lock)])


@pytest.mark.registry
@pytest.mark.engine
def test_cli_success_output_holds_no_password(engine, registry, tmp_path, monkeypatch, capfd):
    ref = build_small(engine, "pub-cli")
    assert run_cli_publish(engine, registry, ref, "pub-cli", tmp_path, monkeypatch) == 0
    out, errtext = capfd.readouterr()
    assert PASSWORD not in out + errtext
    api = api_for(registry)
    digest = api.manifest_digest("ci/pub-cli", "1")
    index = api.manifest_digest("ci/imagebuild-index", "pub-cli")    # the registry's index entry
    assert out.splitlines() == [f"{registry}/ci/pub-cli:1-20260101@{digest}",
                                f"{registry}/ci/pub-cli:1@{digest}",
                                f"{registry}/ci/imagebuild-index:pub-cli@{index} index entry"]


@pytest.mark.engine
def test_dead_registry_is_retried_then_one_clear_line(engine, tmp_path, monkeypatch, capfd):
    ref = build_small(engine, "pub-dead")
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    waits = []
    api = publish.RegistryAPI(dead, CREDS, backoff=0.01, sleep=waits.append)
    with pytest.raises(RegistryError) as err:
        publish.publish_image(on_engine(engine), image_id="pub-dead", local_ref=ref, tags=["1", "1-20260101"],
                              target=publish.parse_target(f"{dead}/ci"),
                              report=passing_report(engine, ref, "pub-dead"), credentials=CREDS, api=api)
    assert str(err.value) == (f"registry {dead} is unreachable: GET /v2/ failed 4 times "
                              "(connection refused)")
    assert waits == [0.01, 0.02, 0.04]  # bounded exponential backoff
    assert err.value.exit_code == 3     # an outage, not the user's mistake: CI may retry
    assert run_cli_publish(engine, dead, ref, "pub-dead", tmp_path, monkeypatch) == 3
    _out, errtext = capfd.readouterr()
    assert errtext.strip().splitlines() == [
        f"imagebuild publish: registry {dead} is unreachable: GET /v2/ failed 4 times (connection refused)"]


class _LyingRegistry(http.server.BaseHTTPRequestHandler):
    """Answers /v2/; a manifest is "not found" the first time it is asked for (before the push),
    then always carries a digest nothing pushed."""

    WRONG = "sha256:" + "0" * 64
    seen: set = set()

    def do_GET(self):  # noqa: N802 - http.server API
        manifest = "/manifests/" in self.path
        if manifest and self.path not in self.seen:
            self.seen.add(self.path)
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
        if manifest:
            self.send_header("Docker-Content-Digest", self.WRONG)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.mark.registry
@pytest.mark.engine
def test_digest_mismatch_stops_before_the_floating_tag_moves(engine, registry):
    target = publish.parse_target(f"{registry}/ci")
    first = build_small(engine, "pub-mismatch")
    good = publish.publish_image(on_engine(engine), image_id="pub-mismatch", local_ref=first,
                                 tags=["2.0", "2.0-20260101"], target=target,
                                 report=passing_report(engine, first, "pub-mismatch"),
                                 credentials=CREDS, api=api_for(registry))
    second = build_small(engine, "pub-mismatch")  # a new build under the same floating tag
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LyingRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        liar = publish.RegistryAPI(f"127.0.0.1:{server.server_address[1]}", CREDS, backoff=0.01)
        with pytest.raises(RegistryError) as err:
            publish.publish_image(on_engine(engine), image_id="pub-mismatch", local_ref=second,
                                  tags=["2.0", "2.0-20260202"], target=target,
                                  report=passing_report(engine, second, "pub-mismatch"),
                                  credentials=CREDS, api=liar)
    finally:
        server.shutdown()
        server.server_close()
    assert _LyingRegistry.WRONG in str(err.value) and "floating tags were not moved" in str(err.value)
    assert [p.rsplit("/", 1)[1] for p in sorted(_LyingRegistry.seen)] == ["2.0-20260202"]
    # the floating tag still names the first, tested-and-verified build
    assert api_for(registry).manifest_digest("ci/pub-mismatch", "2.0") == good.digest


# ----------------------------------------------------------------------------- network checks

def test_loopback_is_a_literal_address_or_exactly_localhost():
    for host in ("127.0.0.1", "127.0.0.1:5000", "127.9.8.7:80", "localhost", "localhost:5000",
                 "[::1]", "[::1]:5000"):
        assert publish.is_loopback(host), host
    for host in ("127.attacker.example", "127.0.0.1.attacker.example:5000", "localhost.attacker.example",
                 "localhostx:5000", "10.0.0.1:5000", "registry.example:443", "[2001:db8::1]:5000",
                 "::1", "[::1:5000", "127.1"):
        assert not publish.is_loopback(host), host
    assert publish.split_host("[::1]:5000") == ("::1", 5000)
    assert publish.split_host("h.example") == ("h.example", None)
    t = publish.parse_target("[::1]:5000/hpc")
    assert (t.host, t.reference("x")) == ("[::1]:5000", "[::1]:5000/hpc/x")
    assert publish.RegistryAPI("[::1]:5000").scheme == "http"
    assert publish.RegistryAPI("127.attacker.example:5000").scheme == "https"
    for bad in ("[::1]:0/ns", "[::1]:70000/ns", "[nothex]:5000/ns", "[::1/ns", "::1:5000/ns"):
        with pytest.raises(ImagebuildError):
            publish.parse_target(bad)


def test_bearer_realm_rules():
    ok = publish.check_realm("https://reg.example/token", registry_host="reg.example:443",
                             registry_scheme="https")
    assert ok == "https://reg.example/token"
    cases = [
        ("http://reg.example/token", "reg.example", "https", (), "plain http"),
        ("https://auth.attacker.example/token", "reg.example", "https", (), "another host"),
        ("ftp://reg.example/token", "reg.example", "https", (), "not an http(s) URL"),
        ("https:///token", "reg.example", "https", (), "not an http(s) URL"),
        # loopback over http may use an http realm only on loopback too
        ("http://evil.example/token", "127.0.0.1:5000", "http", ("evil.example",), "plain http"),
    ]
    for realm, host, scheme, allowed, why in cases:
        with pytest.raises(RegistryError) as err:
            publish.check_realm(realm, registry_host=host, registry_scheme=scheme, allowed_hosts=allowed)
        assert why in str(err.value) and "\n" not in str(err.value), (realm, str(err.value))
    # another host is fine when the user allowed it; credentials inside a realm are never shown
    assert publish.check_realm("https://auth.example/t", registry_host="reg.example",
                               registry_scheme="https", allowed_hosts=["auth.example"])
    with pytest.raises(RegistryError) as err:
        publish.check_realm("https://u:S3cr3t-realm@auth.example/t", registry_host="reg.example",
                            registry_scheme="https")
    assert "S3cr3t-realm" not in str(err.value)
    assert publish.check_realm("http://localhost:9/t", registry_host="127.0.0.1:5000",
                               registry_scheme="http", allowed_hosts=["localhost"])


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A registry or token service on loopback: records (path, Authorization) of every request and
    answers by the class's `answer(handler)`."""

    def do_GET(self):  # noqa: N802 - http.server API
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        code, headers, body = self.server.answer(self)
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _Server:
    def __init__(self, answer, bind="127.0.0.1"):
        self.httpd = http.server.ThreadingHTTPServer((bind, 0), _Recorder)
        self.httpd.seen, self.httpd.answer = [], answer
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def seen(self):
        return self.httpd.seen

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


# the fake registries serve the manifest b"{}": its digest is what a client computes and the
# header names (a header naming other bytes is refused: tests/deliver/test_hostile_registry.py)
DIGEST = sha256_digest(b"{}")


def _bearer_registry(realm: str, token: str = "tok-123"):
    def answer(h):
        if h.headers.get("Authorization") != f"Bearer {token}":
            return 401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="test"'}, b""
        return 200, {"Docker-Content-Digest": DIGEST}, b"{}"
    return answer


def _token_service(token: str = "tok-123"):
    return lambda h: (200, {"Content-Type": "application/json"}, json.dumps({"token": token}).encode())


def test_bearer_realm_on_another_host_gets_no_credentials():
    secret = "Realm-Pw-" + uuid.uuid4().hex
    creds = publish.Credentials("u", secret)
    with _Server(_token_service()) as tokens:
        # registry at 127.0.0.1, token service named "localhost": another host name
        with _Server(_bearer_registry(f"http://localhost:{tokens.port}/token")) as reg:
            host = f"127.0.0.1:{reg.port}"
            with pytest.raises(RegistryError) as err:
                publish.RegistryAPI(host, creds, backoff=0.01).manifest_digest("ci/x", "1")
            assert str(err.value) == (f"registry {host}: its token service is on another host "
                                      "(localhost); credentials not sent there (allow it with "
                                      "--auth-host localhost)")
            assert tokens.seen == [] and secret not in str(err.value)
            # allowed by the user: the token service receives them, the registry the token
            api = publish.RegistryAPI(host, creds, backoff=0.01, auth_hosts=["localhost"])
            assert api.manifest_digest("ci/x", "1") == DIGEST
            basic = "Basic " + base64.b64encode(f"u:{secret}".encode()).decode()
            assert [a for _p, a in tokens.seen] == [basic]
            assert reg.seen[-1][1] == "Bearer tok-123"
        # the registry's own host: allowed without asking
        with _Server(_bearer_registry(f"http://127.0.0.1:{tokens.port}/token")) as reg:
            assert publish.RegistryAPI(f"127.0.0.1:{reg.port}", creds, backoff=0.01) \
                .manifest_digest("ci/x", "1") == DIGEST


def test_refused_realm_is_a_refusal_not_an_outage():
    """Exit code 2 (the registry's set-up must change, a retry will not help), not 3."""
    with _Server(_token_service()) as tokens, \
            _Server(_bearer_registry(f"http://localhost:{tokens.port}/token")) as reg:
        api = publish.RegistryAPI(f"127.0.0.1:{reg.port}", publish.Credentials("u", "p"), backoff=0.01)
        with pytest.raises(RegistryError) as err:
            api.ping()
        assert err.value.exit_code == 2 and tokens.seen == []


# ----------------------------------------------------------------------------- credential helpers

HELPER_USER = "helper-user"


def _install_helper(tmp_path, secret: str, user: str = HELPER_USER):
    """A real docker credential helper (the protocol: `get` on argv, the server on stdin, JSON
    {Username, Secret} on stdout) first on PATH; it logs the servers it is asked about."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "helper.log"
    helper = bindir / "docker-credential-imagebuildtest"
    helper.write_text(f"""#!/bin/sh
read -r server
echo "$1 $server" >> '{log}'
if [ "$1" = get ]; then
  printf '{{"ServerURL":"%s","Username":"{user}","Secret":"{secret}"}}' "$server"
  exit 0
fi
echo "unsupported: $1" >&2
exit 1
""")
    helper.chmod(0o755)
    return bindir, log


def test_credential_helper_credentials_reach_the_digest_read_back(tmp_path, monkeypatch):
    secret = "Helper-Pw-" + uuid.uuid4().hex
    bindir, log = _install_helper(tmp_path, secret)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    want = "Basic " + base64.b64encode(f"{HELPER_USER}:{secret}".encode()).decode()

    def answer(h):
        if h.headers.get("Authorization") != want:
            return 401, {"WWW-Authenticate": 'Basic realm="test"'}, b""
        return 200, {"Docker-Content-Digest": DIGEST}, b"{}"

    with _Server(answer) as reg:
        host = f"127.0.0.1:{reg.port}"
        cfg = tmp_path / "config.json"
        # an `auths` entry without credentials (as docker login leaves with a helper) and the helper
        cfg.write_text(json.dumps({"auths": {host: {}}, "credHelpers": {host: "imagebuildtest"}}))
        creds = publish.find_credentials(host, env=dict(os.environ), docker_config=cfg)
        assert creds is not None and (creds.user, creds.password) == (HELPER_USER, secret)
        assert secret not in repr(creds)
        assert log.read_text().split() == ["get", host]
        assert publish.RegistryAPI(host, creds, backoff=0.01).manifest_digest("ci/x", "1") == DIGEST
        assert reg.seen[-1] == ("/v2/ci/x/manifests/1", want)
        # credsStore (the default store) is used the same way for a host without a helper entry
        cfg.write_text(json.dumps({"credsStore": "imagebuildtest"}))
        assert publish.find_credentials(host, env=dict(os.environ), docker_config=cfg).password == secret
        # a helper that is not installed is one line naming it and the config
        cfg.write_text(json.dumps({"credHelpers": {host: "imagebuild-missing"}}))
        with pytest.raises(RegistryError) as err:
            publish.find_credentials(host, env=dict(os.environ), docker_config=cfg)
        text = str(err.value)
        assert "docker-credential-imagebuild-missing" in text and str(cfg) in text and "\n" not in text


@pytest.mark.registry
@pytest.mark.engine
def test_cli_publish_with_credential_helper_only(engine, registry, tmp_path, monkeypatch, capfd):
    """The real registry (htpasswd) and the real engine; the only credentials are those the helper
    gives: the ping, the push and the digest read-back all need them."""
    bindir, log = _install_helper(tmp_path, PASSWORD, user=USER)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    ref = build_small(engine, "pub-helper")
    report = tmp_path / "pub-helper.json"
    report.write_text(json.dumps(passing_report(engine, ref, "pub-helper")))
    spec = types.SimpleNamespace(id="pub-helper", local_ref=ref, tags=["1", "1-20260101"], labels={}, stack={})
    fake_matrix(monkeypatch, {"pub-helper": spec})
    monkeypatch.delenv(publish.USER_ENV, raising=False)
    monkeypatch.delenv(publish.PASSWORD_ENV, raising=False)
    docker_dir = tmp_path / "docker"
    docker_dir.mkdir()
    (docker_dir / "config.json").write_text(json.dumps({"credHelpers": {registry: "imagebuildtest"}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_dir))
    lock = write_lock(engine, ref, "pub-helper", report, tmp_path)
    rc = cli.main(["publish", "pub-helper", "--registry", f"{registry}/ci", "--report", str(report),
                   "--lock", str(lock)])
    out, err = capfd.readouterr()
    assert rc == 0, err
    assert PASSWORD not in out + err
    digest = api_for(registry).manifest_digest("ci/pub-helper", "1")
    assert f"{registry}/ci/pub-helper:1@{digest}" in out.splitlines()
    assert out.splitlines()[-1].endswith(" index entry")
    assert f"get {registry}" in log.read_text()


def test_an_empty_docker_config_means_no_credentials(tmp_path, monkeypatch):
    # docker.auth, given an empty dict, would go and read the default config instead
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(
        {"auths": {"r:1": {"auth": base64.b64encode(b"x:not-this-one").decode()}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(other))
    empty = tmp_path / "config.json"
    empty.write_text("{}")
    assert publish.find_credentials("r:1", env={}, docker_config=empty) is None
    empty.write_text("[]")
    with pytest.raises(RegistryError, match="not a JSON object"):
        publish.find_credentials("r:1", env={}, docker_config=empty)
