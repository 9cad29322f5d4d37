"""Registries that lie or flood (issue 23): every answer imagebuild reads is hashed as received,
bounded while it is read, and a forgery is refused. Servers on the loopback address only, each
request loop bounded in count and time."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT
from imagebuild.digests import sha256_digest
from imagebuild import cli
from imagebuild.deliver import publish, referrers, signing
from imagebuild.errors import RegistryError
from test_publish_referrers import _ReferrersRegistry, write_key


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers as the test says: ``server.answer(handler)`` writes the whole response. Counts the
    requests by path in ``server.hits``."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server API
        self.server.hits.append(self.path)
        try:
            self.server.answer(self)
        except (BrokenPipeError, ConnectionResetError):
            pass        # the client stopped reading: what a bounded reader does

    def log_message(self, *args):
        pass


class _Server:
    def __init__(self, handler, answer=None):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.hits = []
        self.httpd.answer = answer
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _send(h, code: int, body: bytes, headers: dict | None = None):
    h.send_response(code)
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def _api(host: str, **kw) -> publish.RegistryAPI:
    return publish.RegistryAPI(host, backoff=0.01, timeout=10, **kw)


MANIFEST_A = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[],"a":1}'
MANIFEST_B = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[],"b":2}'


# ---------------------------------------------------------------- a lying Docker-Content-Digest

def test_a_content_digest_that_names_other_bytes_is_refused_naming_both():
    """The tag serves B's bytes and says it is A (the digest publish recorded): believed, `find`
    would print pull lines for B. The bytes decide; the disagreement is one line with both."""
    a, b = sha256_digest(MANIFEST_A), sha256_digest(MANIFEST_B)

    def answer(h):
        _send(h, 200, MANIFEST_B, {"Docker-Content-Digest": a,
                                   "Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    with _Server(_Scripted, answer) as server:
        with pytest.raises(RegistryError) as err:
            _api(server.host).manifest_digest("ci/x", "1")
    assert a in str(err.value) and b in str(err.value) and "\n" not in str(err.value)

    def honest(h):
        _send(h, 200, MANIFEST_B, {"Docker-Content-Digest": b})
    with _Server(_Scripted, honest) as server:
        assert _api(server.host).manifest_digest("ci/x", "1") == b


def test_no_content_digest_header_is_the_hash_of_the_bytes():
    with _Server(_Scripted, lambda h: _send(h, 200, MANIFEST_A)) as server:
        assert _api(server.host).manifest_digest("ci/x", "1") == sha256_digest(MANIFEST_A)


# ---------------------------------------------------------------- bounds: refused before it is in memory

def test_a_declared_length_past_the_cap_is_refused_unread_and_never_retried():
    def answer(h):
        h.send_response(200)
        h.send_header("Content-Length", str(2 * 1024 ** 3))
        h.end_headers()
        h.wfile.write(b"{" * 65536)        # and then nothing: a reader that waits for 2 GiB hangs
    with _Server(_Scripted, answer) as server:
        start = time.monotonic()
        with pytest.raises(RegistryError) as err:
            _api(server.host).get_manifest("ci/x", "1")
        hits = list(server.httpd.hits)
    assert "declares 2147483648 bytes" in str(err.value)
    assert time.monotonic() - start < 30
    assert hits == ["/v2/ci/x/manifests/1"]        # once: the same server sends the same again


def test_an_endless_body_without_a_length_is_cut_at_the_cap():
    def answer(h):
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        chunk = b" " * 65536
        for _ in range(2000):                     # 131 MB at most: bounded in count
            h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        h.wfile.write(b"0\r\n\r\n")
    with _Server(_Scripted, answer) as server:
        with pytest.raises(RegistryError) as err:
            _api(server.host).manifest_digest("ci/x", "1")
        assert server.httpd.hits == ["/v2/ci/x/manifests/1"]
    assert f"larger than the {publish.MAX_MANIFEST_BYTES} bytes" in str(err.value)


_PEAK = r"""
import resource, sys
from imagebuild.deliver import publish
from imagebuild.errors import RegistryError
api = publish.RegistryAPI(sys.argv[1], backoff=0.01, timeout=10)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for call in (lambda: api.manifest_digest("ci/x", "1"), lambda: api.get_blob("ci/x", "sha256:" + "a" * 64,
             max_bytes=publish.MAX_ANSWER_BYTES), lambda: api.referrers("ci/x", "sha256:" + "b" * 64)):
    try:
        call()
    except RegistryError:
        pass
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)
"""


def test_peak_memory_stays_bounded_whatever_the_registry_sends():
    """200 MB for a manifest, a blob and a referrers index, without Content-Length: the process's
    peak resident memory grows by at most 64 MiB (measured: ru_maxrss, in its own process)."""
    def answer(h):
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        chunk = b"x" * (1024 * 1024)
        for _ in range(200):
            h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        h.wfile.write(b"0\r\n\r\n")
    with _Server(_Scripted, answer) as server:
        proc = subprocess.run([sys.executable, "-c", _PEAK, server.host], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    grown_mib = int(proc.stdout.strip())
    assert grown_mib <= 64, f"peak memory grew by {grown_mib} MiB"


# ---------------------------------------------------------------- malformed answers: one line, no traceback

@pytest.mark.parametrize("token_answer", [b"[]", b'"token"', b'{"token": 5}', b"not json", b'{"token": null}'])
def test_a_token_service_answering_nonsense_is_one_line(token_answer):
    def answer(h):
        if h.path.startswith("/token"):
            return _send(h, 200, token_answer, {"Content-Type": "application/json"})
        realm = f"http://{h.server.server_address[0]}:{h.server.server_address[1]}/token"
        _send(h, 401, b"{}", {"WWW-Authenticate": f'Bearer realm="{realm}",service="x"'})
    with _Server(_Scripted, answer) as server:
        api = _api(server.host, credentials=publish.Credentials("u", "pw-not-shown"))
        with pytest.raises(RegistryError) as err:
            api.ping()
    assert str(err.value) == f"registry {server.host}: token service sent no token"


@pytest.mark.parametrize("errors", [b'{"errors": "no"}', b'{"errors": [5]}', b"[1, 2]", b"\xff\xfe"])
def test_an_error_document_of_the_wrong_shape_is_one_line(errors):
    with _Server(_Scripted, lambda h: _send(h, 400, errors, {"Content-Type": "application/json"})) as server:
        with pytest.raises(RegistryError) as err:
            _api(server.host).get_manifest("ci/x", "1")
    assert str(err.value) == f"registry {server.host} refused GET manifest ci/x:1 (HTTP 400)"


# ---------------------------------------------------------------- verify --require-sbom: another image's SBOM

@pytest.fixture()
def referrers_registry():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ReferrersRegistry)
    store = {"blobs": {}, "manifests": {}, "referrers": {}}
    for tag, body in (("a", MANIFEST_A), ("b", MANIFEST_B)):
        store["manifests"][tag] = store["manifests"][sha256_digest(body)] = (referrers.OCI_MANIFEST, body)
    server.store, server.log = store, []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", store, server.log
    server.shutdown()
    server.server_close()


def _verify(capfd, *argv) -> tuple[int, str]:
    capfd.readouterr()
    code = cli.main(["verify", *argv])
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    return code, out + err


def test_verify_require_sbom_refuses_another_images_sbom_and_an_unserved_referrer(referrers_registry,
                                                                                    tmp_path, capfd):
    host, store, _log = referrers_registry
    api = _api(host)
    key_path, pub = write_key(tmp_path / "sign.key")
    key = signing.load_signing_key(str(key_path), env={})
    a, b = sha256_digest(MANIFEST_A), sha256_digest(MANIFEST_B)
    name = f"{host}/ci/x"
    attached = referrers.attach_sbom(api, "ci/x", referrers.subject_of(api, "ci/x", a),
                                     b'{"bomFormat":"CycloneDX"}', image_id="a")
    for digest in (a, attached.digest, b):
        signing.sign(api, "ci/x", docker_reference=name, digest=digest, key=key)
    # A, with its own signed SBOM: verified (the control)
    code, text = _verify(capfd, f"{name}@{a}", "--key", str(pub), "--require-sbom")
    assert code == 0, text
    # B lists A's referrer: signed with the key, but for another subject
    store["referrers"][b] = list(store["referrers"][a])
    code, text = _verify(capfd, f"{name}@{b}", "--key", str(pub), "--require-sbom")
    assert code == 1, text
    assert "no SBOM referrer signed with key" in text and "1 refused" in text
    # B lists a referrer the registry does not serve, whose signature tag exists
    phantom = "sha256:" + "ab" * 32
    signing.sign(api, "ci/x", docker_reference=name, digest=phantom, key=key)
    store["referrers"][b] = [{"mediaType": referrers.OCI_MANIFEST, "digest": phantom, "size": 10,
                              "artifactType": referrers.CYCLONEDX_JSON}]
    code, text = _verify(capfd, f"{name}@{b}", "--key", str(pub), "--require-sbom")
    assert code == 1, text
    # without --require-sbom the image's own signature still verifies, and says what it found
    code, text = _verify(capfd, f"{name}@{b}", "--key", str(pub))
    assert code == 0 and "none signed with this key for this image" in text, text


def test_verify_reads_at_most_a_bounded_number_of_referrers(referrers_registry, tmp_path, capfd):
    """250 listed referrers: verify fetches the first MAX_SBOM_REFERRERS and no more."""
    host, store, log = referrers_registry
    api = _api(host)
    key_path, pub = write_key(tmp_path / "sign.key")
    key = signing.load_signing_key(str(key_path), env={})
    b = sha256_digest(MANIFEST_B)
    signing.sign(api, "ci/x", docker_reference=f"{host}/ci/x", digest=b, key=key)
    listed = ["sha256:%064x" % i for i in range(250)]
    store["referrers"][b] = [{"mediaType": referrers.OCI_MANIFEST, "digest": d, "size": 10,
                              "artifactType": referrers.CYCLONEDX_JSON} for d in listed]
    del log[:]
    code, text = _verify(capfd, f"{host}/ci/x@{b}", "--key", str(pub), "--require-sbom")
    assert code == 1 and "250 SBOM referrer(s) listed" in text, text
    asked = {path.rsplit("/", 1)[1] for method, path in log if method == "GET" and "/manifests/" in path}
    assert len(asked & set(listed)) == referrers.MAX_SBOM_REFERRERS


# ---------------------------------------------------------------- a registry that trickles

def _trickle(where: str, stop: threading.Event):
    """An answer that never ends in time: headers (or the body) one byte every 0.2 s, which no
    socket read timeout ever trips; it stops when the client goes or after 60 s."""
    def answer(h):
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"
        if where == "body":
            h.wfile.write(head + b"\r\n")
            head = b"x" * 100000
        h.wfile.flush()
        for byte in head[:300]:
            if stop.is_set():
                return
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
            time.sleep(0.2)
    return answer


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_trickling_registry_ends_at_the_deadline(where, tmp_path):
    """A byte every 0.2 s kept `verify` running without end (each byte restarts the read
    timeout). With --timeout 2 it ends in about 2 s: one line, exit 3 (retry later)."""
    _, pub = write_key(tmp_path / "k.pem")
    stop = threading.Event()
    with _Server(_Scripted, _trickle(where, stop)) as server:
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "imagebuild", "verify", f"{server.host}/ns/x:1",
                               "--key", str(pub), "--timeout", "2"], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        took = time.monotonic() - start
        stop.set()
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 3 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "deadline" in lines[0] and "--timeout" in lines[0]
    assert took < 30, took          # not the 60 s the server would go on for


def test_the_deadline_ends_the_retries_too():
    """A registry that answers 503 forever: the retries (with their backoff) stop at the deadline."""
    def answer(h):
        _send(h, 503, b"{}")
    with _Server(_Scripted, answer) as server:
        api = publish.RegistryAPI(server.host, backoff=0.5, tries=50, timeout=10, deadline=1.5)
        start = time.monotonic()
        with pytest.raises(publish.RegistryUnavailable) as failed:
            api.ping()
        assert time.monotonic() - start < 10
    assert "deadline" in str(failed.value) or "failed" in str(failed.value)
