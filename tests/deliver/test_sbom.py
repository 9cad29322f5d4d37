"""`imagebuild sbom`: a CycloneDX SBOM of the real smoke-cpu image (built once per session by the
conftest fixture), validated with cyclonedx-python-lib's strict JSON validator and compared with
what the image itself says (dpkg-query, its wheel lock)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from conftest import ROOT

pytestmark = pytest.mark.engine


def cli(*args, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "imagebuild", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def one_line_error(proc, code=2):
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


@pytest.fixture(scope="module")
def sbom_doc(smoke_cpu_image, tmp_path_factory):
    out = tmp_path_factory.mktemp("sbom") / "smoke-cpu.cdx.json"
    proc = cli("sbom", "smoke-cpu", "--output", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning" not in proc.stderr, proc.stderr   # the image agrees with its lock
    return out


def smoke_lock():
    from imagebuild.render.run import load_images
    from imagebuild.render.wheellock import parse_lock
    spec = load_images(ROOT / "matrix.yaml")["smoke-cpu"]
    path = ROOT / spec.wheel_lock
    return path, parse_lock(path.read_text(), str(path))


def test_validates_against_cyclonedx_schema(sbom_doc):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator
    text = sbom_doc.read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    assert json.loads(text)["specVersion"] == "1.6"
    # and the validator does reject a broken document (it is not a no-op)
    broken = json.loads(text)
    broken["components"][0]["type"] = "no-such-type"
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(broken)) is not None


def test_every_dpkg_package_is_listed(sbom_doc, docker_client, smoke_cpu_image):
    doc = json.loads(sbom_doc.read_text())
    listed = docker_client.containers.run(smoke_cpu_image, ["sh", "-c", "dpkg-query -W | wc -l"],
                                          remove=True, network_mode="none")
    in_image = int(listed.decode().strip())
    debs = [c for c in doc["components"] if c.get("purl", "").startswith("pkg:deb/debian/")]
    assert len(debs) == in_image > 100
    names = docker_client.containers.run(smoke_cpu_image, ["dpkg-query", "-W", "-f=${Package} ${Version}\n"],
                                         remove=True, network_mode="none").decode().split("\n")
    assert {tuple(n.split(" ", 1)) for n in names if n} == {(c["name"], c["version"]) for c in debs}
    openmpi = next(c for c in debs if c["name"] == "openmpi-bin")
    from packageurl import PackageURL
    purl = PackageURL.from_string(openmpi["purl"])
    assert (purl.type, purl.namespace, purl.name, purl.version) == ("deb", "debian", "openmpi-bin",
                                                                    openmpi["version"])
    assert purl.qualifiers == {"arch": "amd64", "distro": "debian-12"}


def test_every_locked_wheel_with_its_hashes(sbom_doc):
    doc = json.loads(sbom_doc.read_text())
    _, lock = smoke_lock()
    wheels = {c["name"]: c for c in doc["components"] if c.get("purl", "").startswith("pkg:pypi/")}
    for name, entry in lock.entries.items():
        comp = wheels[name]
        assert comp["version"] == entry.version
        assert sorted(h["content"] for h in comp["hashes"]) == sorted(entry.hashes)
        assert all(h["alg"] == "SHA-256" for h in comp["hashes"])
        assert {"name": "imagebuild:origin", "value": "lock"} in comp["properties"]
    # pip, seeded by `python -m venv` from Debian's python3-pip-whl, is named as such
    assert {"name": "imagebuild:origin", "value": "venv-seed"} in wheels["pip"]["properties"]
    problems = [p for p in doc["properties"] if p["name"] == "imagebuild:lock-check"]
    assert problems == [{"name": "imagebuild:lock-check", "value": "ok"}]


def test_image_stack_base_and_determinism(sbom_doc, docker_client, smoke_cpu_image, tmp_path):
    doc = json.loads(sbom_doc.read_text())
    image = docker_client.images.get(smoke_cpu_image)
    from imagebuild.deliver.sbom import SERIAL_NAMESPACE
    assert doc["serialNumber"] == f"urn:uuid:{uuid.uuid5(SERIAL_NAMESPACE, image.id)}"
    assert doc["metadata"]["timestamp"].startswith(image.labels["org.opencontainers.image.created"][:10])
    props = {p["name"]: p["value"] for p in doc["metadata"]["component"]["properties"]}
    for comp in ("cuda", "cudnn", "nccl", "ucx", "openmpi", "pytorch"):
        assert props[f"imagebuild:label:io.imagebuild.stack.{comp}"] == image.labels[f"io.imagebuild.stack.{comp}"]
    assert props["imagebuild:image-id"] == image.id
    base = next(c for c in doc["components"] if c["type"] == "container")
    assert base["name"] == "imagebuild/base:debian-bookworm"
    assert base["version"] == docker_client.images.get("imagebuild/base:debian-bookworm").id
    # the same image gives the same bytes
    again = tmp_path / "again.json"
    proc = cli("sbom", smoke_cpu_image, "--output", str(again))
    assert proc.returncode == 0, proc.stderr
    assert again.read_bytes() == sbom_doc.read_bytes()


def test_lock_disagreement_is_reported_and_strict_fails(smoke_cpu_image, tmp_path):
    path, lock = smoke_lock()
    text = path.read_text()
    torch_hash = lock.entries["torch"].hashes[0]
    changed = text.replace(torch_hash, "0" * 64)
    # drop mpmath from the lock: the image has it installed
    entry = lock.entries["mpmath"].text
    changed = changed.replace(entry + "\n", "")
    assert changed != text and "mpmath" not in changed
    bad = tmp_path / "other.txt"
    bad.write_text(changed)
    out = tmp_path / "sbom.json"
    proc = cli("sbom", "smoke-cpu", "--output", str(out), "--lock", str(bad))
    assert proc.returncode == 0, proc.stderr
    assert "mpmath 1.3.0 is installed" in proc.stderr and "does not pin it" in proc.stderr
    assert "pins torch==" in proc.stderr and "other sha256 hashes" in proc.stderr
    assert "wheels-lock" in proc.stderr          # the label names another lock
    doc = json.loads(out.read_text())
    problems = [p["value"] for p in doc["properties"] if p["name"] == "imagebuild:lock-check:problem"]
    assert any("mpmath" in p for p in problems) and any("torch" in p for p in problems)
    strict_out = tmp_path / "strict.json"
    proc = cli("sbom", "smoke-cpu", "--output", str(strict_out), "--lock", str(bad), "--strict")
    assert proc.returncode == 1 and not strict_out.exists()


def test_source_tarballs_of_a_cuda_recipe(smoke_cpu_image):
    """smoke-cpu compiles nothing; the tarball part is checked with a CUDA image's real list from
    the matrix on the real smoke-cpu contents."""
    from imagebuild.engines import get_engine
    from imagebuild.render.images import expand
    from imagebuild.knowledge import load
    from imagebuild.deliver.sbom import build_sbom, read_image
    from imagebuild.render.sources import for_image

    k = load(ROOT / "matrix.yaml")
    specs = {s.id: s for s in expand(k)[0]}
    cuda = next(s for s in specs.values() if s.stack["cuda"] != "none" and s.ucx.install == "source")
    tarballs = for_image(k, cuda)
    assert {t.name for t in tarballs} == {"ucx", "openmpi", "gdrcopy", "nccl-tests"}
    engine = get_engine()
    info = engine.inspect(smoke_cpu_image)
    result = build_sbom(ref=smoke_cpu_image, info=info, contents=read_image(engine, info.id),
                        spec=specs["smoke-cpu"], lock=smoke_lock()[1], tarballs=tarballs, base=(None, None))
    doc = json.loads(result.text)
    for tb in tarballs:
        comp = next(c for c in doc["components"] if c["name"] == tb.name and c["version"] == tb.version)
        assert comp["hashes"] == [{"alg": "SHA-256", "content": tb.sha256}]
        assert comp["externalReferences"][0]["url"] == tb.url
    assert result.counts["source_tarballs"] == 4


def test_bad_input_is_one_line(smoke_cpu_image, tmp_path):
    err = one_line_error(cli("sbom", "no-such-image", "--output", str(tmp_path / "x.json")))
    assert "no-such-image" in err
    err = one_line_error(cli("sbom", "imagebuild/base:debian-bookworm", "--output", str(tmp_path / "x.json")))
    assert "IMAGE" in err and "io.imagebuild.image-id" in err      # not an image imagebuild built
    err = one_line_error(cli("sbom", "smoke-cpu", "--output", str(tmp_path / "missing" / "x.json")))
    assert "--output" in err
    err = one_line_error(cli("sbom", "smoke-cpu", "--output", str(tmp_path / "x.json"),
                             "--lock", str(tmp_path / "nope.txt")))
    assert "--lock" in err
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("this is not a lock\n")
    err = one_line_error(cli("sbom", "smoke-cpu", "--output", str(tmp_path / "x.json"), "--lock", str(garbage)))
    assert "garbage.txt:1" in err


def test_verify_files_finds_a_changed_file(smoke_cpu_image, docker_client, tmp_path):
    """--verify-files hashes every file the wheels' RECORD lists: all match in smoke-cpu as built,
    and one line appended to an installed file of a locked wheel (a one-layer image on top of
    smoke-cpu, same labels) is reported."""
    import io
    out = tmp_path / "ok.json"
    proc = cli("sbom", "smoke-cpu", "--output", str(out), "--verify-files")
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    doc = json.loads(out.read_text())
    checks = {c["name"]: p["value"] for c in doc["components"] for p in c.get("properties", [])
              if p["name"] == "imagebuild:record-check"}
    recorded = docker_client.containers.run(
        smoke_cpu_image, ["sh", "-c", "grep -c ',sha256=' /opt/venv/lib/python3.11/site-packages/torch-*.dist-info/RECORD"],
        remove=True, network_mode="none").decode().strip()
    assert checks["torch"] == f"{int(recorded)} files match RECORD"
    assert set(checks) >= {"jinja2", "torch", "pip"}
    target = "/opt/venv/lib/python3.11/site-packages/jinja2/__init__.py"
    dockerfile = f"FROM {smoke_cpu_image}\nRUN echo '# changed after install' >> {target}\n"
    ref = "imagebuild/sbom-tampered:test"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=ref, rm=True)
    try:
        proc = cli("sbom", ref, "--output", str(tmp_path / "bad.json"), "--verify-files", "--strict")
        assert proc.returncode == 1, proc.stderr
        assert "jinja2 3.1.6: 1 of" in proc.stderr and "jinja2/__init__.py" in proc.stderr
    finally:
        docker_client.images.remove(ref, force=True)


def test_no_engine_is_exit_3(tmp_path):
    import os
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")
    err = one_line_error(cli("sbom", "smoke-cpu", "--output", str(tmp_path / "x.json"), env=env), code=3)
    assert "DOCKER_HOST" in err and not (tmp_path / "x.json").exists()
