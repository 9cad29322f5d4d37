"""The SBOM as an OCI referrer of the published image, and offline signing in cosign's key-based
format, against a real registry (Debian's docker-registry, distribution 2.8, htpasswd auth, started
on a free loopback port as tests/deliver/test_publish.py does) and the real Docker engine. distribution 2.8
has no referrers API, so these runs take the referrers tag schema; the one fake is the small HTTP
server of the referrers-API case, which no registry here can be made to serve."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import threading
import types

import pytest

from conftest import answer, fake_matrix
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from imagebuild.digests import sha256_digest
from imagebuild import cli
from imagebuild.deliver import lockfile, publish, referrers, signing
from imagebuild.errors import ImagebuildError
from imagebuild.render.run import MatrixRun
from registry_service import (BASE, CREDS, PASSWORD, USER, api_for, build_small, engine, free_port,  # noqa: F401
                              on_engine, passing_report, registry)

KEY_PASSWORD = "Key-Pw-7Hq2-never-shown"


# ----------------------------------------------------------------------------- helpers

def write_key(path, *, password: str | None = None, curve=None):
    key = ec.generate_private_key(curve or ec.SECP256R1())
    enc = serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc))
    pub = path.with_suffix(".pub")
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    return path, pub


def sbom_for(engine_id: str, name: str) -> bytes:
    """A CycloneDX 1.6 document whose subject is the engine image (as `imagebuild sbom` names it)."""
    doc = {"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1,
           "metadata": {"component": {"bom-ref": f"image:{engine_id}", "type": "container", "name": name}},
           "components": [{"bom-ref": "pkg:generic/token", "type": "file", "name": "/token"}]}
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def write_lock(engine, ref, name, report_path, tmp_path, *, sbom_sha256=None):
    built = engine.images.get(ref).id
    entry = lockfile.compute_entry(stack={}, dockerfile_sha256="0" * 64, base_image=None,
                                   image_id=built, smoke=None)
    entry["provenance"] = {"base_digest": None, "recipe_sha256": "0" * 64, "sbom_sha256": sbom_sha256,
                           "test_report_sha256": lockfile.report_sha256_for(report_path, built),
                           "wheel_lock_sha256": None}
    path = tmp_path / f"{name}.lock"
    lockfile.write_lock(path, {name: entry})
    return path


def cli_publish(engine, registry, ref, name, tmp_path, monkeypatch, *extra, sbom=None, lock_sbom="same",
                tags=("1", "1-20260101")):
    """`imagebuild publish` in-process with a one-image lookup; ``sbom`` bytes go to --sbom-file and,
    unless ``lock_sbom`` says otherwise, their sha256 into the lock's provenance."""
    report = tmp_path / f"{name}.json"
    report.write_text(json.dumps(passing_report(engine, ref, name)))
    spec = types.SimpleNamespace(id=name, local_ref=ref, tags=list(tags), labels={}, stack={})
    fake_matrix(monkeypatch, {name: spec})
    monkeypatch.setenv(publish.USER_ENV, USER)
    monkeypatch.setenv(publish.PASSWORD_ENV, PASSWORD)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    argv = ["publish", name, "--registry", f"{registry}/ci", "--report", str(report)]
    recorded = None
    if sbom is not None:
        sbom_path = tmp_path / f"{name}.cdx.json"
        sbom_path.write_bytes(sbom)
        argv += ["--sbom-file", str(sbom_path)]
        recorded = hashlib.sha256(sbom).hexdigest() if lock_sbom == "same" else lock_sbom
    lock = write_lock(engine, ref, name, report, tmp_path, sbom_sha256=recorded)
    return cli.main(argv + ["--lock", str(lock), *extra])


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# ----------------------------------------------------------------------------- formats (pure logic)

def test_payload_is_cosigns_simple_signing_json():
    digest = "sha256:" + "ab" * 32
    # the field order and compact form of sigstore's payload.SimpleContainerImage through encoding/json
    assert signing.payload("127.0.0.1:5000/ci/x", digest) == (
        b'{"critical":{"identity":{"docker-reference":"127.0.0.1:5000/ci/x"},'
        b'"image":{"docker-manifest-digest":"sha256:' + b"ab" * 32 + b'"},'
        b'"type":"cosign container image signature"},"optional":null}')
    assert signing.signature_tag(digest) == "sha256-" + "ab" * 32 + ".sig"
    assert referrers.referrers_tag(digest) == "sha256-" + "ab" * 32
    for bad in ("sha256:abc", "sha512:" + "a" * 128, "ab" * 32):
        with pytest.raises(ImagebuildError):
            signing.signature_tag(bad)
        with pytest.raises(ImagebuildError):
            referrers.referrers_tag(bad)


def test_artifact_manifest_shape_and_determinism():
    subject = {"mediaType": "application/vnd.docker.distribution.manifest.v2+json",
               "digest": "sha256:" + "cd" * 32, "size": 524}
    args = dict(artifact_type=referrers.CYCLONEDX_JSON, layer=b'{"bomFormat":"CycloneDX"}',
                layer_media_type=referrers.CYCLONEDX_JSON, subject=subject,
                annotations={referrers.IMAGE_ID_ANNOTATION: "x"}, title="x.cdx.json")
    body = referrers.artifact_manifest(**args)
    assert body == referrers.artifact_manifest(**args)
    doc = json.loads(body)
    assert doc["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert doc["artifactType"] == "application/vnd.cyclonedx+json"
    assert doc["config"] == {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2,
                             "digest": "sha256:" + hashlib.sha256(b"{}").hexdigest()}
    assert doc["subject"] == subject
    assert [la["digest"] for la in doc["layers"]] == ["sha256:" + hashlib.sha256(args["layer"]).hexdigest()]


def test_references_are_parsed_strictly():
    r = referrers.parse_reference("127.0.0.1:5000/ci/pub-x:1.0-cpu")
    assert (r.host, r.repository, r.tag, r.digest, r.name) == ("127.0.0.1:5000", "ci/pub-x", "1.0-cpu", None,
                                                               "127.0.0.1:5000/ci/pub-x")
    d = "sha256:" + "0f" * 32
    r = referrers.parse_reference(f"[::1]:5000/ci/x@{d}")
    assert (r.host, r.repository, r.digest, str(r)) == ("[::1]:5000", "ci/x", d, f"[::1]:5000/ci/x@{d}")
    for bad in ("127.0.0.1:5000/ci/x", "ci/x:1", "h.example/ci/X:1", "h.example/ci/x@sha256:12",
                "h.example/ci/x:bad tag", "h.example/ci/x:1;id", "h:99999/ci/x:1", "",
                "h.example/ci/x@md5:" + "0" * 32):
        with pytest.raises(ImagebuildError) as err:
            referrers.parse_reference(bad)
        assert "argument REF" in str(err.value) and "\n" not in str(err.value)


def test_keys_are_refused_in_one_line_without_the_password(tmp_path):
    enc, _ = write_key(tmp_path / "enc.key", password=KEY_PASSWORD)
    plain, pub = write_key(tmp_path / "plain.key")
    assert signing.load_signing_key(str(enc), env={signing.PASSWORD_ENV: KEY_PASSWORD}).key_id == \
        signing.key_id(signing.load_public_key(str(enc.with_suffix(".pub"))))
    # a password in the environment for a key that has none is harmless
    assert signing.load_signing_key(str(plain), env={signing.PASSWORD_ENV: "x"}).key_id == \
        signing.key_id(signing.load_public_key(str(pub)))
    p384, _ = write_key(tmp_path / "p384.key", curve=ec.SECP384R1())
    rsa_key = tmp_path / "rsa.key"
    rsa_key.write_bytes(rsa.generate_private_key(65537, 2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    cosign_format = tmp_path / "cosign.key"
    cosign_format.write_text("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n"
                             "-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    cases = [
        (enc, {}, "the key is encrypted; set IMAGEBUILD_SIGN_KEY_PASSWORD"),
        (enc, {signing.PASSWORD_ENV: "wrong-" + KEY_PASSWORD}, "cannot decrypt the key"),
        (p384, {}, "not an ECDSA P-256 private key"),
        (rsa_key, {}, "not an ECDSA P-256 private key"),
        (cosign_format, {}, "cosign's own encrypted format"),
        (tmp_path / "missing.key", {}, "no such file"),
        (pub, {}, "not a PEM private key"),
    ]
    for path, env, why in cases:
        with pytest.raises(ImagebuildError) as err:
            signing.load_signing_key(str(path), env=env)
        text = str(err.value)
        assert why in text and "argument --sign-key" in text and "\n" not in text, text
        assert KEY_PASSWORD not in text and err.value.exit_code == 2
    with pytest.raises(ImagebuildError, match="that is a private key"):
        signing.load_public_key(str(plain))


def test_signature_checks_fail_on_another_key_or_changed_bytes():
    key = signing.SigningKey(ec.generate_private_key(ec.SECP256R1()), "mem")
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    data = signing.payload("h:1/ci/x", "sha256:" + "1" * 64)
    sig = signing.sign_bytes(key, data)
    assert signing.verifies(key.public_key, data, sig)
    assert signing.sign_bytes(key, data) == sig            # RFC 6979: a second publish re-signs identically
    assert not signing.verifies(other, data, sig)
    assert not signing.verifies(key.public_key, data.replace(b"1111", b"2222", 1), sig)
    raw = bytearray(base64.b64decode(sig))
    raw[-1] ^= 1
    assert not signing.verifies(key.public_key, data, base64.b64encode(bytes(raw)).decode())
    assert not signing.verifies(key.public_key, data, "not base64!")


# ----------------------------------------------------------------------------- real registry

def _index(api, repo, digest):
    return api.get_manifest(repo, referrers.referrers_tag(digest), accept=referrers.OCI_INDEX)


@pytest.mark.registry
@pytest.mark.engine
def test_sbom_referrer_is_read_back_byte_identical_beside_an_earlier_referrer(engine, registry, tmp_path,
                                                                              monkeypatch, capfd):
    name = "pub-sbom"
    ref = build_small(engine, name)
    api = api_for(registry)
    repo = f"ci/{name}"
    target = publish.parse_target(f"{registry}/ci")
    # published once without an SBOM; another tool then attaches an unrelated referrer to it
    first = publish.publish_image(on_engine(engine), image_id=name, local_ref=ref, tags=["1", "1-20260101"], target=target,
                                  report=passing_report(engine, ref, name), credentials=CREDS, api=api)
    spdx = b'{"spdxVersion":"SPDX-2.3","SPDXID":"SPDXRef-DOCUMENT","name":"earlier"}'
    earlier = referrers.attach(api, repo, referrers.subject_of(api, repo, first.digest),
                               artifact_type="application/spdx+json", layer=spdx,
                               layer_media_type="application/spdx+json", annotations={"note": "earlier"})
    before = json.loads(_index(api, repo, first.digest).body)["manifests"]
    assert [m["digest"] for m in before] == [earlier.digest]

    sbom = sbom_for(engine.images.get(ref).id, name)
    capfd.readouterr()
    assert cli_publish(engine, registry, ref, name, tmp_path, monkeypatch, "--json", sbom=sbom) == 0
    out, err = capfd.readouterr()
    result = answer(out, "publish")[0]
    attached = result["sbom"]
    assert result["digest"] == first.digest
    assert attached["layer_digest"] == "sha256:" + hashlib.sha256(sbom).hexdigest()  # = the lock's sbom_sha256
    assert attached["listed_by"] == f"tag {referrers.referrers_tag(first.digest)}" and attached["added"]
    index = _index(api, repo, first.digest)
    listed = json.loads(index.body)["manifests"]
    assert listed[0] == before[0]                                 # the earlier referrer, untouched
    assert [m["digest"] for m in listed] == [earlier.digest, attached["digest"]]
    assert listed[1]["artifactType"] == "application/vnd.cyclonedx+json"
    assert listed[1]["annotations"] == {"io.imagebuild.image-id": name}
    served = json.loads(api.get_manifest(repo, attached["digest"], accept=referrers.OCI_MANIFEST).body)
    assert served["subject"] == referrers.subject_of(api, repo, first.digest).descriptor()

    # read back through the command line: the same bytes, by tag and by digest
    for source in (f"{registry}/ci/{name}:1", f"{registry}/ci/{name}@{first.digest}"):
        out_file = tmp_path / "back.cdx.json"
        assert cli.main(["sbom", "--from-registry", source, "--output", str(out_file)]) == 0
        assert out_file.read_bytes() == sbom
    # a second publish adds nothing: same referrer, same index bytes, one entry each
    capfd.readouterr()
    assert cli_publish(engine, registry, ref, name, tmp_path, monkeypatch, "--json", sbom=sbom) == 0
    again = answer(capfd.readouterr()[0], "publish")[0]["sbom"]
    assert again["digest"] == attached["digest"] and again["added"] is False
    assert _index(api, repo, first.digest).body == index.body


@pytest.mark.registry
@pytest.mark.engine
def test_an_sbom_for_another_image_or_the_lock_is_refused_before_anything_moves(engine, registry, tmp_path,
                                                                                monkeypatch, capfd):
    name = "pub-sbom-refused"
    ref = build_small(engine, name)
    other = sbom_for("sha256:" + "9" * 64, name)
    assert cli_publish(engine, registry, ref, name, tmp_path, monkeypatch, sbom=other) == 2
    good = sbom_for(engine.images.get(ref).id, name)
    assert cli_publish(engine, registry, ref, name, tmp_path, monkeypatch, sbom=good, lock_sbom="e" * 64) == 2
    _out, err = capfd.readouterr()
    lines = error_lines(err)
    assert len(lines) == 2, lines
    assert "the SBOM describes image:sha256:99999" in lines[0]
    assert "the lock records SBOM sha256 eeeeeeeeeeeeeeee" in lines[1]
    assert api_for(registry).manifest_digest(f"ci/{name}", "1-20260101") is None


@pytest.mark.registry
@pytest.mark.engine
def test_verify_accepts_the_key_and_refuses_another_key_a_tampered_signature_and_a_repointed_tag(
        engine, registry, tmp_path, monkeypatch, capfd):
    name = "pub-signed"
    ref = build_small(engine, name)
    key, pub = write_key(tmp_path / "sign.key", password=KEY_PASSWORD)
    _other, other_pub = write_key(tmp_path / "other.key")
    monkeypatch.setenv(signing.PASSWORD_ENV, KEY_PASSWORD)
    sbom = sbom_for(engine.images.get(ref).id, name)
    assert cli_publish(engine, registry, ref, name, tmp_path, monkeypatch, "--sign-key", str(key), sbom=sbom) == 0
    out, err = capfd.readouterr()
    assert KEY_PASSWORD not in out + err and PASSWORD not in out + err
    api = api_for(registry)
    repo = f"ci/{name}"
    digest = api.manifest_digest(repo, "1")
    kid = signing.key_id(signing.load_public_key(str(pub)))
    sig_lines = [line for line in out.splitlines() if " signature of " in line]
    assert [line.split(" ", 1)[0] for line in sig_lines][0] == \
        f"{registry}/{repo}:{signing.signature_tag(digest)}@{api.get_manifest(repo, signing.signature_tag(digest)).digest}"
    assert len(sig_lines) == 2 and "sbom signature of" in sig_lines[1]

    def verify(*extra):
        capfd.readouterr()
        code = cli.main(["verify", f"{registry}/{repo}:1", *extra])
        o, e = capfd.readouterr()
        return code, error_lines(o), error_lines(e)

    code, out_lines, err_lines = verify("--key", str(pub), "--require-sbom")
    assert code == 0 and err_lines == []
    assert out_lines[0].startswith(f"verified {registry}/{repo}:1 ({digest}): signed with key {kid}; SBOM sha256:")
    assert len(out_lines) == 1
    # the signature tag is cosign's, and a second publish does not add a second signature
    sig_before = api.get_manifest(repo, signing.signature_tag(digest))
    assert cli_publish(engine, registry, ref, name, tmp_path, monkeypatch, "--sign-key", str(key), sbom=sbom) == 0
    sig_after = api.get_manifest(repo, signing.signature_tag(digest))
    assert sig_after.digest == sig_before.digest and len(json.loads(sig_after.body)["layers"]) == 1
    layer = json.loads(sig_after.body)["layers"][0]
    assert layer["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json"
    assert api.get_blob(repo, layer["digest"], max_bytes=4096) == signing.payload(f"{registry}/{repo}", digest)

    # another key: exit 1, one line
    code, out_lines, err_lines = verify("--key", str(other_pub))
    assert code == 1 and out_lines == [] and len(err_lines) == 1
    assert err_lines[0].startswith(f"imagebuild verify: {registry}/{repo}@{digest}: none of the 1 signature(s)")

    # a tampered signature: one bit of the DER flipped, the signature manifest pushed again
    doc = json.loads(sig_after.body)
    raw = bytearray(base64.b64decode(doc["layers"][0]["annotations"][signing.SIGNATURE_ANNOTATION]))
    raw[-1] ^= 1
    doc["layers"][0]["annotations"][signing.SIGNATURE_ANNOTATION] = base64.b64encode(bytes(raw)).decode()
    api.put_manifest(repo, signing.signature_tag(digest), referrers.canonical_json(doc), referrers.OCI_MANIFEST)
    code, _o, err_lines = verify("--key", str(pub))
    assert code == 1 and len(err_lines) == 1 and "verifies with key" in err_lines[0]
    api.put_manifest(repo, signing.signature_tag(digest), sig_after.body, referrers.OCI_MANIFEST)  # restored
    assert verify("--key", str(pub))[0] == 0

    # the tag re-pointed (pushed by someone else, unsigned): no signature for what it names now
    intruder = build_small(engine, name)
    image = engine.images.get(intruder)
    image.tag(f"{registry}/{repo}", tag="1")
    for _event in engine.api.push(f"{registry}/{repo}", tag="1", stream=True, decode=True,
                                  auth_config=CREDS.auth_config()):
        pass
    new_digest = api.manifest_digest(repo, "1")
    assert new_digest != digest
    code, _o, err_lines = verify("--key", str(pub))
    assert code == 1 and err_lines == [
        f"imagebuild verify: {registry}/{repo}@{new_digest}: no signature ({registry}/{repo}:"
        f"{signing.signature_tag(new_digest)} does not exist)"]
    # ... and with the old signature copied beside it: signed, but for another digest
    api.put_manifest(repo, signing.signature_tag(new_digest), sig_after.body, referrers.OCI_MANIFEST)
    code, _o, err_lines = verify("--key", str(pub))
    assert code == 1 and len(err_lines) == 1 and f"is for {digest}, not this digest" in err_lines[0]
    # the digest that was signed still verifies
    capfd.readouterr()
    assert cli.main(["verify", f"{registry}/{repo}@{digest}", "--key", str(pub)]) == 0


@pytest.mark.registry
@pytest.mark.engine
def test_a_wrong_key_password_stops_publish_before_anything_is_pushed(engine, registry, tmp_path, monkeypatch,
                                                                      capfd):
    name = "pub-badpass"
    ref = build_small(engine, name)
    key, _pub = write_key(tmp_path / "sign.key", password=KEY_PASSWORD)
    wrong = "Wrong-" + KEY_PASSWORD
    monkeypatch.setenv(signing.PASSWORD_ENV, wrong)
    assert cli_publish(engine, registry, ref, name, tmp_path, monkeypatch, "--sign-key", str(key)) == 2
    out, err = capfd.readouterr()
    assert wrong not in out + err and KEY_PASSWORD not in out + err
    assert error_lines(err) == [f"imagebuild publish: argument --sign-key: {key}: cannot decrypt the key with "
                                f"{signing.PASSWORD_ENV}, or it is not a PEM private key"]
    assert api_for(registry).manifest_digest(f"ci/{name}", "1-20260101") is None
    # the password has no flag: it can only come from the environment
    assert cli.main(["publish", name, "--registry", f"{registry}/ci", "--sign-key", str(key),
                     "--sign-key-password", KEY_PASSWORD]) == 2


@pytest.mark.registry
@pytest.mark.engine
def test_a_signature_that_fails_after_the_push_leaves_no_release_tag_and_the_next_run_completes_it(
        engine, registry, tmp_path, monkeypatch, capfd):
    """The engine pushes only tags, so a signed publish stages the image under imagebuild-staging:
    when the registry fails before the signature is in, neither the dated nor the floating tag
    exists, the error says where the image is, and publishing again signs it and tags it."""
    from imagebuild.errors import RegistryUnavailable
    name = "pub-halfsigned"
    ref = build_small(engine, name)
    key, pub = write_key(tmp_path / "sign.key")
    repo = f"ci/{name}"

    def registry_fails(_digest):
        raise RegistryUnavailable(f"registry {registry}: HTTP 503 on PUT /v2/{repo}/manifests/sha256-x.sig")

    with pytest.raises(RegistryUnavailable) as err:
        publish.publish_image(on_engine(engine), image_id=name, local_ref=ref, tags=["1", "1-20260101"],
                              target=publish.parse_target(f"{registry}/ci"),
                              report=passing_report(engine, ref, name), credentials=CREDS,
                              api=api_for(registry), after_dated=registry_fails)
    api = api_for(registry)
    staged = api.manifest_digest(repo, publish.STAGING_TAG)
    assert staged is not None
    assert str(err.value).endswith(f"HTTP 503 on PUT /v2/{repo}/manifests/sha256-x.sig; the image is pushed only "
                                   f"as {registry}/{repo}:imagebuild-staging ({staged}), no tag of this "
                                   "release was pushed: publishing again completes it") and err.value.exit_code == 3
    assert api.manifest_digest(repo, "1-20260101") is None and api.manifest_digest(repo, "1") is None
    capfd.readouterr()
    assert cli_publish(engine, registry, ref, name, tmp_path, monkeypatch, "--sign-key", str(key)) == 0
    assert api.manifest_digest(repo, "1-20260101") == api.manifest_digest(repo, "1") == staged
    capfd.readouterr()
    for tag in ("1", "1-20260101"):
        assert cli.main(["verify", f"{registry}/{repo}:{tag}", "--key", str(pub)]) == 0


def test_a_dead_registry_is_exit_3_in_one_line(tmp_path, capfd):
    _key, pub = write_key(tmp_path / "k.key")
    dead = f"127.0.0.1:{free_port()}"
    assert cli.main(["verify", f"{dead}/ci/x:1", "--key", str(pub)]) == 3
    assert cli.main(["sbom", "--from-registry", f"{dead}/ci/x:1", "--output", str(tmp_path / "s.json")]) == 3
    _out, err = capfd.readouterr()
    lines = error_lines(err)
    assert lines == [f"imagebuild verify: registry {dead} is unreachable: GET manifest ci/x:1 failed 4 times "
                     "(connection refused)",
                     f"imagebuild sbom: registry {dead} is unreachable: GET manifest ci/x:1 failed 4 times "
                     "(connection refused)"]
    assert not (tmp_path / "s.json").exists()


def test_bad_arguments_are_exit_2_in_one_line(tmp_path, capfd):
    _key, pub = write_key(tmp_path / "k.key")
    assert cli.main(["verify", "not a ref", "--key", str(pub)]) == 2
    assert cli.main(["verify", "127.0.0.1:1/ci/x:1", "--key", str(tmp_path / "none.pub")]) == 2
    assert cli.main(["sbom", "--output", str(tmp_path / "s.json")]) == 2
    assert cli.main(["sbom", "smoke-cpu", "--from-registry", "127.0.0.1:1/ci/x:1",
                     "--output", str(tmp_path / "s.json")]) == 2
    _out, err = capfd.readouterr()
    lines = error_lines(err)
    assert len(lines) == 4 and all(line.startswith("imagebuild ") for line in lines), lines
    assert "argument REF" in lines[0] and "no such file" in lines[1] and "--from-registry REF" in lines[2]


# ----------------------------------------------------------------------------- a registry with the referrers API

class _ReferrersRegistry(http.server.BaseHTTPRequestHandler):
    """Just enough of a registry with the referrers API (OCI distribution 1.1) to see that the client
    uses it and writes no fallback tag: blobs and manifests in memory, referrers indexed by subject."""

    def _send(self, code, body=b"", headers=None):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self):
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_HEAD(self):  # noqa: N802
        self.do_GET()

    def do_GET(self):  # noqa: N802
        store, path = self.server.store, self.path.split("?")[0]
        self.server.log.append((self.command, path))
        if path == "/v2/":
            return self._send(200)
        _, _, name_rest = path.partition("/v2/")
        if "/referrers/" in path:
            subject = path.rsplit("/", 1)[1]
            index = {"schemaVersion": 2, "mediaType": referrers.OCI_INDEX,
                     "manifests": store["referrers"].get(subject, [])}
            return self._send(200, json.dumps(index).encode(), {"Content-Type": referrers.OCI_INDEX})
        if "/blobs/" in path:
            data = store["blobs"].get(path.rsplit("/", 1)[1])
            return self._send(404) if data is None else self._send(200, data)
        if "/manifests/" in path:
            found = store["manifests"].get(path.rsplit("/", 1)[1])
            if found is None:
                return self._send(404)
            media, body = found
            return self._send(200, body, {"Content-Type": media,
                                          "Docker-Content-Digest": sha256_digest(body)})
        return self._send(404)

    def do_POST(self):  # noqa: N802
        self._body()
        self.server.log.append(("POST", self.path))
        self._send(202, headers={"Location": "/v2/upload/1"})

    def do_PUT(self):  # noqa: N802
        store, body = self.server.store, self._body()
        path, _, query = self.path.partition("?")
        self.server.log.append(("PUT", path))
        if path.startswith("/v2/upload/"):
            digest = query.split("digest=", 1)[1].replace("%3A", ":")
            store["blobs"][digest] = body
            return self._send(201, headers={"Location": f"/v2/x/blobs/{digest}"})
        reference = path.rsplit("/", 1)[1]
        digest = sha256_digest(body)
        media = self.headers.get("Content-Type")
        store["manifests"][reference] = store["manifests"][digest] = (media, body)
        headers = {"Docker-Content-Digest": digest}
        doc = json.loads(body)
        if "subject" in doc:
            entry = {"mediaType": media, "digest": digest, "size": len(body), "artifactType": doc["artifactType"],
                     "annotations": doc.get("annotations", {})}
            store["referrers"].setdefault(doc["subject"]["digest"], []).append(entry)
            headers["OCI-Subject"] = doc["subject"]["digest"]
        self._send(201, headers=headers)

    def log_message(self, *args):
        pass


def test_a_registry_with_the_referrers_api_gets_no_fallback_tag():
    image = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}'
    digest = sha256_digest(image)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ReferrersRegistry)
    server.store = {"blobs": {}, "manifests": {"1": (referrers.OCI_MANIFEST, image),
                                               digest: (referrers.OCI_MANIFEST, image)}, "referrers": {}}
    server.log = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = publish.RegistryAPI(f"127.0.0.1:{server.server_address[1]}", backoff=0.01)
        subject = referrers.subject_of(api, "ci/x", digest)
        attached = referrers.attach_sbom(api, "ci/x", subject, b'{"bomFormat":"CycloneDX"}', image_id="x")
        assert attached.listed_by == "referrers API" and attached.added
        digest_2, data = referrers.fetch_sbom(api, "ci/x", digest)
        assert (digest_2, data) == (attached.digest, b'{"bomFormat":"CycloneDX"}')
    finally:
        server.shutdown()
        server.server_close()
    puts = [p for method, p in server.log if method == "PUT" and "/manifests/" in p]
    assert puts == [f"/v2/ci/x/manifests/{attached.digest}"]        # no sha256-<hex> tag written
    assert ("GET", f"/v2/ci/x/referrers/{digest}") in server.log



@pytest.mark.registry
@pytest.mark.engine
def test_the_sbom_written_after_a_push_is_the_one_written_before(engine, registry, tmp_path):
    """The SBOM names the image by its id, not by the registry digests the engine learns at a push:
    else the SBOM of a re-publish would differ from the one attached, and a second would be attached."""
    from conftest import ROOT
    from imagebuild.deliver import sbom
    from imagebuild.engines import get_engine

    import io
    import uuid
    ref = "imagebuild/pub-sbom-stable:test"         # labelled as smoke-cpu: sbom describes it as that image
    engine.images.build(fileobj=io.BytesIO(f"FROM {BASE}\nRUN echo {uuid.uuid4().hex} > /token\n"
                                           "LABEL io.imagebuild.image-id=smoke-cpu org.opencontainers.image.created=2026-11-21T00:00:00Z\n".encode()), tag=ref, rm=True)
    api = api_for(registry)
    run = MatrixRun.open(ROOT / "matrix.yaml")
    generate = lambda: sbom.generate(get_engine("docker", client=engine), run=run, image=ref).text  # noqa: E731
    before = generate()
    assert not engine.images.get(ref).attrs.get("RepoDigests")
    publish.publish_image(on_engine(engine), image_id="sbom-stable", local_ref=ref, tags=["1", "1-20260101"],
                          target=publish.parse_target(f"{registry}/ci"),
                          report=passing_report(engine, ref, "sbom-stable"), credentials=CREDS, api=api)
    assert engine.images.get(ref).attrs.get("RepoDigests"), "the push gave the engine a repo digest"
    assert generate() == before
