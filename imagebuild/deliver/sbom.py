"""SBOMs: what a built image contains, read from the image itself, as CycloneDX JSON.

`imagebuild sbom IMAGE --output FILE` runs one short-lived container of the image (no network)
with a POSIX shell script that prints the package database (`dpkg-query -W` on Debian and Ubuntu,
`rpm -qa` on Rocky Linux), /etc/os-release, every `*.dist-info` folder's METADATA name and version
and INSTALLER, the ensurepip seed wheels, and the wheel requirement files kept under
/opt/imagebuild/requirements/. No Python or pip is needed inside the image. The document is built
with cyclonedx-python-lib, checked with its strict JSON validator, and holds:

- every OS package (`pkg:deb/<debian|ubuntu>/NAME@VERSION?arch=..&distro=<id>-<version>`, or
  `pkg:rpm/rocky/NAME@VERSION-RELEASE?arch=..&epoch=..&distro=..`);
- every wheel installed by pip or uv (`pkg:pypi/NAME@VERSION`) with the sha256 hashes the image's
  wheel lock allows for it (pip installed it `--require-hashes`, so the file it installed had one
  of them; an installed wheel no longer carries the hash of the file it came from);
- every source tarball the recipe compiles (name, version, URL, sha256 from matrix.yaml);
- the base image (the last FROM of the generated Dockerfile) with its engine ID and repo digests;
- the stack the image's labels declare (io.imagebuild.stack.*: CUDA, cuDNN, NCCL, UCX, Open MPI,
  ...) and the lock label, as properties of the image component.

Cross-check against the lock (locks/wheels/): a wheel installed that the lock lacks, a version
other than the locked one, a locked wheel missing from the image, a requirement file in the image
whose hashes differ from the repository's lock, or an `io.imagebuild.wheels-lock` label other than
the lock's sha256. Each is a warning line on stderr and an `imagebuild:lock-check:problem` property
of the BOM; with `--strict` the command writes nothing and exits 1. Wheels that `python -m venv`
seeds from the OS's ensurepip wheels (pip, setuptools in /usr/share/python-wheels (Debian, Ubuntu),
/usr/share/python3-wheels (Rocky Linux) or
ensurepip/_bundled, same name and version) are recorded with `imagebuild:origin=venv-seed`, not
flagged: the OS package that ships them is in the BOM. `--verify-files` also hashes, in a second
container, every file each installed wheel's RECORD lists and reports those that differ (a file
changed after pip installed it).

Deterministic: the same image gives the same bytes. Components are sorted (by purl); the serial
number is a UUID derived from the image ID (uuid5 of the ID); the timestamp is the image's own
`org.opencontainers.image.created` label, never the clock.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .. import labels as L
from ..dockerfile import final_base
from ..errors import UsageError
from .sbomread import (MARK, REQUIREMENTS_DIR, Contents, Dist, OsPackage, SbomError,  # noqa: F401 - re-exported
                       cross_check, os_managed, parse_output, read_image, vendored_in, verify_records)

# a fixed namespace, so that uuid5(namespace, image id) is the same on every machine
SERIAL_NAMESPACE = uuid.UUID("6f1d2a5e-3c0b-5e4f-9a7d-2b8c1e0f4d3a")
# ----------------------------------------------------------------------------------------------
# The document


def created_of(labels: dict[str, str], ref: str) -> datetime:
    """The image's own creation date (its org.opencontainers.image.created label), in UTC."""
    text = labels.get(L.CREATED, "")
    try:
        if re.fullmatch(r"\d{4}-\d\d-\d\d", text):
            return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    except ValueError:
        raise SbomError(f"{ref}: label {L.CREATED} is {text!r}, not a date: "
                        "the SBOM's timestamp comes from it") from None


def os_purl(pkg: OsPackage, manager: str, os_release: dict[str, str]):
    from packageurl import PackageURL
    os_id = os_release.get("ID", "").lower() or "unknown"
    distro = f"{os_id}-{os_release.get('VERSION_ID', '')}".rstrip("-")
    if manager == "dpkg":
        return PackageURL(type="deb", namespace=os_id, name=pkg.name, version=pkg.version,
                          qualifiers={"arch": pkg.arch, "distro": distro})
    q = {"arch": pkg.arch, "distro": distro}
    if pkg.epoch:
        q["epoch"] = pkg.epoch
    return PackageURL(type="rpm", namespace=os_id, name=pkg.name, version=pkg.version, qualifiers=q)


@dataclass
class SbomResult:
    text: str                    # the JSON document
    problems: list[str]
    counts: dict[str, int]
    image_id: str


def _os_components(contents: Contents) -> list:
    """One component per OS package, named by its purl (deb or rpm, with the distribution)."""
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component, ComponentType

    comps = []
    for pkg in contents.packages:
        purl = os_purl(pkg, contents.manager, contents.os_release)
        props = [Property(name="imagebuild:package-manager", value=contents.manager),
                 Property(name="imagebuild:source-package", value=pkg.source)]
        if pkg.status:
            props.append(Property(name="imagebuild:dpkg-status", value=pkg.status))
        comps.append(Component(type=ComponentType.LIBRARY, name=pkg.name, version=pkg.version,
                               purl=purl, bom_ref=purl.to_string(), properties=props))
    return comps


def _wheel_components(contents: Contents, lock, origins: dict[str, str],
                      records: dict[str, tuple[int, list[str]]] | None,
                      problems: list[str]) -> tuple[list, dict[str, int]]:
    """One component per Python distribution no OS package owns, with its origin (the lock, the
    venv's seed, vendored, or a problem), the lock's hashes for a locked one, and its RECORD check
    when `records` has one (a file that differs is added to `problems`); and the count of each
    origin."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    comps = []
    wheel_counts = {"lock": 0, "venv-seed": 0, "vendored": 0, "problem": 0}
    for d in contents.dists:
        if d.path not in origins:
            continue       # owned by an OS package, which is listed
        origin = origins[d.path]
        purl = PackageURL(type="pypi", name=d.name, version=d.version)
        entry = lock.entries.get(d.name) if lock is not None else None
        hashes = [HashType(alg=HashAlgorithm.SHA_256, content=h)
                  for h in sorted(entry.hashes)] if entry is not None and origin == "lock" else []
        props = [Property(name="imagebuild:origin", value=origin),
                 Property(name="imagebuild:dist-info", value=d.path),
                 Property(name="imagebuild:installer", value=d.installer)]
        if lock is not None and origin == "lock":
            props.append(Property(name="imagebuild:lock", value=Path(lock.path).name))
        if records is not None and d.path in records:
            checked, bad = records[d.path]
            props.append(Property(name="imagebuild:record-check",
                                  value=f"{checked} files match RECORD" if not bad else
                                  f"{len(bad)} of {checked} files differ from RECORD"))
            if bad:
                problems.append(f"{d.name} {d.version}: {len(bad)} of {checked} installed files differ "
                                f"from its RECORD (e.g. {bad[0]})")
        kind = origin.split(":")[0]
        wheel_counts[kind if kind in wheel_counts else "problem"] += 1
        comps.append(Component(type=ComponentType.LIBRARY, name=d.name, version=d.version,
                               purl=purl, bom_ref=f"{purl.to_string()}#{d.path}", hashes=hashes,
                               properties=props))
    return comps, wheel_counts


def _tarball_components(tarballs) -> list:
    """One component per source tarball the image compiled, with its checksum and where the
    checksum comes from, and its upstream URL when it has one."""
    from cyclonedx.model import (ExternalReference, ExternalReferenceType, HashAlgorithm,
                                 HashType, Property, XsUri)
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    comps = []
    for tb in tarballs:
        q = {"checksum": f"sha256:{tb.sha256}"}
        if tb.url:
            q["download_url"] = tb.url
        purl = PackageURL(type="generic", name=tb.name, version=tb.version, qualifiers=q)
        refs = [ExternalReference(type=ExternalReferenceType.SOURCE_DISTRIBUTION, url=XsUri(tb.url),
                                  hashes=[HashType(alg=HashAlgorithm.SHA_256, content=tb.sha256)])] \
            if tb.url else []
        comps.append(Component(
            type=ComponentType.LIBRARY, name=tb.name, version=tb.version, purl=purl,
            bom_ref=purl.to_string(), hashes=[HashType(alg=HashAlgorithm.SHA_256, content=tb.sha256)],
            external_references=refs,
            properties=[Property(name="imagebuild:kind", value="source-tarball"),
                        Property(name="imagebuild:form", value=tb.form),
                        Property(name="imagebuild:file", value=tb.file),
                        Property(name="imagebuild:checksum-source", value=tb.source)]))
    return comps


def _base_component(base, info, problems: list[str]):
    """The FROM image as a component (None for an image FROM scratch): its id and repo digests as
    the engine has them, and whether its layers are the image's lowest (if not, a problem)."""
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component, ComponentType

    base_ref, base_info = base
    if not base_ref:
        return None
    props = [Property(name="imagebuild:kind", value="base-image")]
    version = None
    if base_info is not None:
        version = base_info.id
        props.append(Property(name="imagebuild:base:id", value=base_info.id))
        for rd in base_info.repo_digests:
            props.append(Property(name="imagebuild:base:repo-digest", value=rd))
        is_prefix = tuple(info.layers[:len(base_info.layers)]) == tuple(base_info.layers)
        props.append(Property(name="imagebuild:base:layers-match", value=str(is_prefix).lower()))
        if not is_prefix:
            problems.append(f"the base {base_ref} in the engine ({base_info.id[:19]}) is not the "
                            "one the image was built on (its layers are not the image's lowest)")
    else:
        props.append(Property(name="imagebuild:base:id", value="not in the engine"))
    return Component(type=ComponentType.CONTAINER, name=base_ref, version=version,
                     bom_ref=f"base-image:{base_ref}", properties=props)


def _image_component(ref: str, info, spec, labels: dict[str, str]):
    """The image itself, the document's subject: its imagebuild labels, its id and reference."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.component import Component, ComponentType

    image_props = [Property(name=f"imagebuild:label:{k}", value=v) for k, v in sorted(labels.items())
                   if k.startswith(L.PREFIX)]
    # the image id, not its registry digests: those say where it was pushed, not what it is, and
    # would make the SBOM written after a publish differ from the one published beside the image
    image_props.append(Property(name="imagebuild:image-id", value=info.id))
    image_props.append(Property(name="imagebuild:reference", value=ref))
    return Component(type=ComponentType.CONTAINER, name=spec.id if spec else ref,
                     version=labels.get(L.VERSION) or info.id,
                     bom_ref=f"image:{info.id}", properties=image_props,
                     hashes=[HashType(alg=HashAlgorithm.SHA_256, content=info.id.split(":")[-1])])


def _document(ref: str, info, labels: dict[str, str], root, comps: list,
              problems: list[str]) -> str:
    """The CycloneDX 1.6 JSON of `root` and its components, with the lock check's verdict, keys
    sorted (equal BOMs are equal bytes), validated against the schema."""
    from cyclonedx.model import Property
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.output.json import JsonV1Dot6
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    meta = BomMetaData(component=root, timestamp=created_of(labels, ref))
    bom_props = [Property(name="imagebuild:lock-check",
                          value="ok" if not problems else f"{len(problems)} problem(s)")]
    bom_props += [Property(name="imagebuild:lock-check:problem", value=p) for p in problems]
    bom_props.append(Property(name="imagebuild:os-vulnerabilities",
                              value="not audited: see `imagebuild audit`"))
    bom = Bom(components=comps, metadata=meta, properties=bom_props,
              serial_number=uuid.uuid5(SERIAL_NAMESPACE, info.id))
    bom.register_dependency(root, comps)
    text = JsonV1Dot6(bom).output_as_string(indent=2)
    # the library's JSON keeps insertion order in places: sort keys so equal BOMs are equal bytes
    text = json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    err = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if err is not None:
        raise SbomError(f"the SBOM of {ref} does not validate against CycloneDX 1.6: {err}")
    return text


def build_sbom(*, ref: str, info, contents: Contents, spec, lock, tarballs, base,
               records: dict[str, tuple[int, list[str]]] | None = None) -> SbomResult:
    """The CycloneDX 1.6 document. `info`: the engine's ImageInfo of `ref`; `spec` the matrix's
    ImageSpec; `lock` the repository's wheel lock (or None); `tarballs` sources.Tarball list;
    `base`: (reference, ImageInfo or None) of the FROM image."""
    labels = dict(info.labels)
    origins, problems = cross_check(contents, lock, labels.get(L.WHEELS_LOCK)
                                    if lock is not None else None)
    comps = _os_components(contents)
    wheels, wheel_counts = _wheel_components(contents, lock, origins, records, problems)
    comps += wheels
    comps += _tarball_components(tarballs)
    base_comp = _base_component(base, info, problems)
    if base_comp is not None:
        comps.append(base_comp)
    root = _image_component(ref, info, spec, labels)
    text = _document(ref, info, labels, root, comps, problems)
    counts = {"os_packages": len(contents.packages), "wheels_locked": wheel_counts["lock"],
              "wheels_venv_seed": wheel_counts["venv-seed"],
              "wheels_vendored": wheel_counts["vendored"], "wheels_flagged": wheel_counts["problem"],
              "source_tarballs": len(tarballs), "base_images": 1 if base_comp else 0,
              "components": len(comps)}
    return SbomResult(text=text, problems=problems, counts=counts, image_id=info.id)


def generate(engine, *, run, image: str, lock_path: str | None = None,
             verify_files: bool = False) -> SbomResult:
    """Everything `imagebuild sbom` does but writing: find the image and its spec, read it, check
    it against its lock, build and validate the document. ``run``: the command's matrix, read
    once (render.run.MatrixRun)."""
    from ..engines import check_ref
    from ..render.sources import for_image
    from ..render.wheellock import LockError, lock_root, parse_lock

    k, specs, matrix = run.k, run.images, run.matrix
    if ":" in image or "/" in image:
        ref = check_ref(image)
        info = engine.inspect(ref)
        iid = info.labels.get(L.IMAGE_ID)
        if iid not in specs:
            what = f"its {L.IMAGE_ID} {iid!r} is not" if iid else f"it has no {L.IMAGE_ID} label naming"
            raise UsageError(f"{ref}: {what} an image of {matrix}: imagebuild describes the images "
                             "it builds", argument="IMAGE")
        spec = specs[iid]
    else:
        if image not in specs:
            raise UsageError(f"unknown image {image!r} (`imagebuild images` lists them)", argument="IMAGE")
        spec = specs[image]
        ref = spec.local_ref
        if not engine.exists(ref):
            raise SbomError(f"image {ref} is not in the engine; build it first (imagebuild build {image})")
        info = engine.inspect(ref)
    lock = None
    lock_file = lock_path or (str(lock_root(k) / spec.wheel_lock)
                              if spec.wheel_lock else None)
    if lock_file:
        try:
            text = Path(lock_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read the wheel lock: {exc.strerror}", file=lock_file) from None
        try:
            lock = parse_lock(text, lock_file)
        except LockError as exc:
            raise UsageError(str(exc)) from None
    # the base: the built image's label, else the last FROM of the Dockerfile `build` renders
    # from the matrix (no generated file needed: a pip-installed imagebuild works from any folder)
    base_ref = info.labels.get(L.BASE_NAME)
    if not base_ref:
        from ..render.renderer import Renderer
        base_ref = final_base(Renderer().dockerfile(spec, k))
    base_info = engine.inspect(base_ref) if base_ref and engine.exists(base_ref) else None
    contents = read_image(engine, info.id)
    records = None
    if verify_files:
        origins, _ = cross_check(contents, lock, None)
        records = verify_records(engine, info.id, [d for d in contents.dists if d.path in origins
                                                   and not origins[d.path].startswith("vendored:")])
    return build_sbom(records=records, ref=ref, info=info, contents=contents, spec=spec, lock=lock,
                      tarballs=for_image(k, spec), base=(base_ref, base_info))
