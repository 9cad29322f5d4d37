"""The registry's index of published images (deliver/catalog.py), against the real local registry
(Debian's docker-registry with htpasswd auth, test_publish's fixture): what `publish` writes there,
what `find --registry` believes of it, and what it refuses. No engine: the entries are written
from lock entries, as publish writes them, and forged ones are pushed through the registry API."""

from __future__ import annotations

import json

import pytest

from imagebuild.render.run import load_images
from imagebuild import cli
from imagebuild.deliver import catalog, publish, signing
from imagebuild.deliver.referrers import EMPTY_BLOB, OCI_MANIFEST, canonical_json
from imagebuild.digests import sha256_digest

from conftest import ROOT, answer
from registry_service import PASSWORD, USER, registry  # noqa: F401 - fixture
from test_publish_referrers import write_key

pytestmark = pytest.mark.registry

MATRIX = str(ROOT / "matrix.yaml")
CPU = "smoke-cpu"
DIGEST = "sha256:" + "ab" * 32


def _lock_entry(repository: str, digest: str = DIGEST) -> dict:
    spec = load_images(MATRIX)[CPU]
    return {"stack": dict(spec.stack), "image_id": "sha256:" + "cd" * 32,
            "smoke": {"passed": True, "counts": {"pass": 10, "fail": 0, "skip": 0}},
            "provenance": {"recipe_sha256": "ef" * 32},
            "published": {repository: {"digest": digest, "tags": list(spec.tags)}}}


@pytest.fixture()
def api(registry):  # noqa: F811
    return publish.RegistryAPI(registry, publish.Credentials(USER, PASSWORD))


@pytest.fixture()
def env(monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_REGISTRY_USER", USER)
    monkeypatch.setenv("IMAGEBUILD_REGISTRY_PASSWORD", PASSWORD)


def _target(registry, ns):  # noqa: F811
    return publish.parse_target(f"{registry}/{ns}")


def test_an_entry_reads_back_as_it_was_written(api, registry):  # noqa: F811
    target = _target(registry, "cat-a")
    lock_entry = _lock_entry(target.reference(CPU))
    written = catalog.write(api, target, CPU, lock_entry)
    assert written.repository == "cat-a/imagebuild-index" and written.tag == CPU
    got = catalog.read(api, target)
    assert got.refused == [] and list(got.entries) == [CPU]
    assert got.entries[CPU]["published"] == lock_entry["published"]
    assert got.entries[CPU]["stack"] == lock_entry["stack"] and got.entries[CPU]["smoke"]["passed"]
    # the same lock entry gives the same bytes: publishing again changes nothing
    assert catalog.write(api, target, CPU, lock_entry).digest == written.digest
    # an empty namespace has no index: an empty catalog, not an error
    assert catalog.read(api, _target(registry, "cat-empty")).entries == {}


def test_find_reads_the_index_from_an_empty_folder(api, registry, env, tmp_path, monkeypatch, capsys):  # noqa: F811
    """No checkout, no lock: the packaged knowledge and the registry's index. The digest the index
    names is not served by the image's tags (nothing was pushed), so find offers nothing and says
    why: the index vouches for no more than the tags serve."""
    target = _target(registry, "cat-b")
    catalog.write(api, target, CPU, _lock_entry(target.reference(CPU)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("IMAGEBUILD_MATRIX", raising=False)
    code = cli.main(["find", "--registry", f"{registry}/cat-b", "--gpu", "none", "--json"])
    doc = answer(capsys.readouterr().out, "find", code=1)
    assert code == 1 and doc["lock"] == f"{registry}/cat-b/imagebuild-index"
    assert [(r["image"], r["registry"]["status"]) for r in doc["not_offered"]] == [(CPU, "not-in-registry")]
    assert list(tmp_path.iterdir()) == []
    code = cli.main(["find", "--registry", f"{registry}/cat-none", "--gpu", "none"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "holds no index of published images" in err[0]


def _forge(api, target, tag: str, layer: bytes, *, artifact_type=catalog.ARTIFACT_TYPE, size=None):
    repo = catalog.index_repository(target)
    api.push_blob(repo, EMPTY_BLOB)
    api.push_blob(repo, layer)
    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": artifact_type,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha256_digest(EMPTY_BLOB),
                   "size": 2},
        "layers": [{"mediaType": catalog.ARTIFACT_TYPE, "digest": sha256_digest(layer),
                    "size": len(layer) if size is None else size}]})
    api.put_manifest(repo, tag, manifest, OCI_MANIFEST)


def test_forged_or_malformed_entries_are_left_out_with_the_reason(api, registry):  # noqa: F811
    target = _target(registry, "cat-c")
    good = _lock_entry(target.reference(CPU))
    catalog.write(api, target, CPU, good)
    other = "pytorch-2.13.0-cu130-debian12-runtime"
    cases = {
        # an entry under one tag that names another image
        other: (catalog.entry(CPU, good, repository=target.reference(CPU)), {}),
        "not-json": (b"{not json", {}),
        "big": (b"{}", {"size": catalog.MAX_ENTRY_BYTES + 1}),
        "other-type": (b"{}", {"artifact_type": "application/vnd.example+json"}),
        # an entry that sends the pull elsewhere
        "elsewhere": (canonical_json({**json.loads(catalog.entry(CPU, good, repository=target.reference(CPU))),
                                      "image": "elsewhere", "repository": "evil.example/x/elsewhere"}), {}),
    }
    for tag, (layer, kw) in cases.items():
        _forge(api, target, tag, layer, **kw)
    got = catalog.read(api, target)
    assert list(got.entries) == [CPU]
    why = dict(got.refused)
    assert set(why) == set(cases)
    assert f"names image '{CPU}', not {other}" in why[other]
    assert "not JSON" in why["not-json"]
    assert "at most" in why["big"]
    assert "not an imagebuild index entry" in why["other-type"]
    assert "evil.example" in why["elsewhere"]


def test_with_a_key_only_signed_entries_are_believed(api, registry, tmp_path, env, capsys):  # noqa: F811
    key_path, pub = write_key(tmp_path / "sign.pem")
    key = signing.load_signing_key(str(key_path))
    target = _target(registry, "cat-d")
    written = catalog.write(api, target, CPU, _lock_entry(target.reference(CPU)), key=key)
    assert written.signature is not None and written.signature.key_id == key.key_id
    unsigned = "pytorch-2.13.0-cu130-debian12-runtime"
    spec = load_images(MATRIX)[unsigned]
    entry = _lock_entry(target.reference(unsigned))
    entry["stack"] = dict(spec.stack)
    catalog.write(api, target, unsigned, entry)
    public = signing.load_public_key(str(pub))
    got = catalog.read(api, target, public_key=public)
    assert list(got.entries) == [CPU] and [t for t, _ in got.refused] == [unsigned]
    assert "no signature" in dict(got.refused)[unsigned]
    # another key believes neither
    _, other_pub = write_key(tmp_path / "other.pem")
    got = catalog.read(api, target, public_key=signing.load_public_key(str(other_pub)))
    assert got.entries == {} and len(got.refused) == 2
    # through find: the refused entry is named among the left out
    code = cli.main(["find", "--matrix", MATRIX, "--registry", f"{registry}/cat-d", "--key", str(pub),
                     "--gpu", "none", "--json"])
    doc = answer(capsys.readouterr().out, "find", code=1)
    left = {x["image"]: x["why"] for x in doc["left_out"]}
    assert code == 1 and "index entry is refused" in left[unsigned]
