"""`imagebuild publish IMAGE... --registry HOST[:PORT]/NAMESPACE [--report FILE]`

Pushes tested images (a passing smoke report for the exact engine image id) and checks through the
registry's HTTP API that it holds the digest the engine pushed. Dated immutable tag first, floating
tag after it: see imagebuild/deliver/publish.py for why.
"""

from __future__ import annotations

import os

from ... import untrusted
from ...errors import ImagebuildError
from ..reporter import Reporter
from ...workspace import Workspace
from ...digests import sha256_bytes


def configure(parser) -> None:
    from .. import add_matrix_option, add_timeout_option

    add_timeout_option(parser)
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image ids from the matrix")
    parser.add_argument("--registry", required=True, metavar="HOST[:PORT]/NAMESPACE",
                        help="where to push, e.g. localhost:5000/hpc")
    parser.add_argument("--report", metavar="FILE",
                        help="the smoke report to trust (one IMAGE only; default "
                             ".imagebuild/reports/<image-id>.json beside the matrix)")
    parser.add_argument("--reports-dir", metavar="DIR", default=None,
                        help="folder of smoke reports (default .imagebuild/reports beside the matrix)")
    parser.add_argument("--auth-host", action="append", default=[], metavar="HOST",
                        help="a host other than the registry's whose token service may receive the "
                             "registry credentials (a bearer realm elsewhere is refused otherwise); "
                             "repeatable")
    parser.add_argument("--lock", metavar="FILE", default=None,
                        help="images.lock, which must record the engine image id being pushed and the "
                             "sha256 of its smoke report (default: images.lock beside the matrix)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    from ...deliver.audit import SEVERITIES
    parser.add_argument("--fail-on", choices=SEVERITIES, default=None, metavar="SEVERITY",
                        help="audit each image's wheel lock first (as `imagebuild audit`) and push "
                             f"nothing when one has vulnerabilities at or above it ({', '.join(SEVERITIES)})")
    parser.add_argument("--allow-partial-audit", action="store_true",
                        help="with --fail-on: accept wheels the index has no vulnerability data for")
    parser.add_argument("--sbom", action="store_true",
                        help="attach each image's CycloneDX SBOM as an OCI referrer: "
                             ".imagebuild/sbom/<id>.cdx.json beside the matrix (where `imagebuild lock` "
                             "reads it), else generated from the built image as `imagebuild sbom` does")
    parser.add_argument("--sbom-file", metavar="FILE", default=None,
                        help="with one IMAGE: attach this SBOM (implies --sbom); it must describe the "
                             "engine's image and match the sbom_sha256 images.lock records, if any")
    parser.add_argument("--notes", action="store_true",
                        help="attach each image's notes page (`imagebuild notes IMAGE`: what is "
                             "inside, the driver it needs, the smoke result and SBOM the lock "
                             "records) as an OCI referrer, text/markdown")
    parser.add_argument("--sign-key", metavar="FILE", default=None,
                        help="sign each pushed manifest (and its SBOM referrer) with this ECDSA P-256 "
                             "PEM private key, in cosign's format; its password, if any, from "
                             "IMAGEBUILD_SIGN_KEY_PASSWORD (never a flag)")
    add_matrix_option(parser)


def image_sbom(image_id: str, engine_id: str, args, matrix_run) -> bytes | None:
    """The SBOM --sbom/--sbom-file attaches to one image, read and checked before anything is pushed:
    it must describe exactly the engine's image (its metadata.component bom-ref), and when images.lock
    records an sbom_sha256 for the image it must be that SBOM (the referrer's layer digest is then
    the lock's sbom_sha256). None without --sbom."""
    from pathlib import Path
    from ...deliver import lockfile
    from ...errors import UsageError

    if not (args.sbom or args.sbom_file):
        return None
    path = Path(args.sbom_file) if args.sbom_file else Workspace.of(args.matrix).sbom / f"{image_id}.cdx.json"
    where: dict = {"file": str(path)}
    if os.path.lexists(path):
        from ...localfile import MAX_DOCUMENT_BYTES, read_bytes
        try:
            raw = read_bytes(path, MAX_DOCUMENT_BYTES)
        except OSError as exc:
            raise UsageError(f"cannot read the SBOM ({exc.strerror})", file=str(path)) from None
    elif args.sbom_file:
        raise UsageError(f"no such file {args.sbom_file}", argument="--sbom-file")
    else:
        from ...deliver import sbom
        from ...engines import get_engine
        result = sbom.generate(get_engine(), run=matrix_run, image=image_id)
        for problem in result.problems:
            Reporter.for_args("publish", args).warn(f"{image_id}: SBOM: {problem}", image=image_id)
        raw, where = result.text.encode("utf-8"), {"argument": "--sbom"}
    try:
        subject = untrusted.loads(raw)["metadata"]["component"]["bom-ref"]
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{image_id}: not a CycloneDX SBOM written by `imagebuild sbom`", **where) from None
    if subject != f"image:{engine_id}":
        raise UsageError(f"{image_id}: the SBOM describes {str(subject)[:25]}, the engine holds image:"
                         f"{engine_id[:19]}; write it again (imagebuild sbom {image_id} --output FILE)", **where)
    lock_path = args.lock or str(Workspace.of(args.matrix).lock)
    recorded = ((lockfile.read_lock(lock_path).get(image_id) or {}).get("provenance") or {}).get("sbom_sha256")
    actual = sha256_bytes(raw)
    if recorded and recorded != actual:
        raise UsageError(f"{image_id}: the lock records SBOM sha256 {recorded[:16]}..., the SBOM to attach is "
                         f"{actual[:16]}...; write the SBOM and the lock again", file=lock_path)
    return raw


def notes_pages(args, matrix_run, specs: dict) -> dict[str, bytes]:
    """With --notes: each image's notes page, rendered before anything is pushed, from the lock
    that vouches for the image; {} without."""
    if not getattr(args, "notes", False):
        return {}
    from ...deliver import lockfile, notes
    locked = lockfile.read_lock(args.lock or Workspace.of(args.matrix).lock)
    return {i: notes.render(matrix_run.k, s, locked.get(i)).encode("utf-8") for i, s in specs.items()}


def attach_to(api, target, image_id: str, sbom: bytes | None, key, done: dict, say,
              repository_name: str | None = None, notes: bytes | None = None):
    """publish_image's after_dated hook: the SBOM referrer, then the signatures of the image and of
    the SBOM referrer; what was pushed goes into ``done``. ``repository_name``: the repository's
    last part when it is not the image id (one platform's image of a multi-platform name)."""
    from ...deliver import referrers, signing

    def hook(digest: str) -> None:
        repository = target.repository(repository_name or image_id)
        reference = target.reference(repository_name or image_id)
        if sbom is not None:
            subject = referrers.subject_of(api, repository, digest)
            done["sbom"] = referrers.attach_sbom(api, repository, subject, sbom, image_id=image_id,
                                                 progress=say)
        if notes is not None:
            subject = referrers.subject_of(api, repository, digest)
            done["notes"] = referrers.attach_notes(api, repository, subject, notes,
                                                   image_id=image_id, progress=say)
        if key is not None:
            done["signature"] = signing.sign(api, repository, docker_reference=reference, digest=digest,
                                             key=key, progress=say)
            if "sbom" in done:
                done["sbom_signature"] = signing.sign(api, repository, docker_reference=reference,
                                                      digest=done["sbom"].digest, key=key, progress=say)
    return hook


def attachment_lines(result, done: dict) -> list[str]:
    repo = result.repository
    lines = []
    if "sbom" in done:
        a = done["sbom"]
        lines.append(f"{repo}@{a.digest} sbom sha256:{a.layer_digest.split(':', 1)[1]} of {result.digest} "
                     f"({a.listed_by})")
    if "notes" in done:
        a = done["notes"]
        lines.append(f"{repo}@{a.digest} notes sha256:{a.layer_digest.split(':', 1)[1]} of {result.digest} "
                     f"({a.listed_by})")
    for what in ("signature", "sbom_signature"):
        if what in done:
            s = done[what]
            lines.append(f"{repo}:{s.tag}@{s.digest} {what.replace('_', ' ')} of {s.subject} (key {s.key_id})")
    if "platforms" in done:
        x = done["platforms"]
        if x.digest is not None:
            lines.append(f"{x.repository}@{x.digest} index of {', '.join(m.oci_platform for m in x.members)}"
                         + (f" (signed, key {done['platforms_signature'].key_id})"
                            if "platforms_signature" in done else ""))
        else:
            lines.append(f"{x.repository}: index not written yet: it waits for "
                         f"{', '.join(x.waiting_for)} (publish that image, and the index follows)")
    if "index" in done:
        w = done["index"]
        host = repo.split("/", 1)[0]
        lines.append(f"{host}/{w.repository}:{w.tag}@{w.digest} index entry"
                     + (f" (signed, key {w.signature.key_id})" if w.signature is not None else ""))
    return lines


def check_lock(image_id: str, engine_id: str, report_source: str, args) -> None:
    """The lock records this image id and this report as its test report (lockfile.check_publishable)."""
    from ...deliver import lockfile

    lock_path = args.lock or str(Workspace.of(args.matrix).lock)
    entries = lockfile.read_lock(lock_path)
    from ...localfile import MAX_DOCUMENT_BYTES, read_bytes
    lockfile.check_publishable(entries.get(image_id), name=image_id, engine_id=engine_id,
                               report_raw=read_bytes(report_source, MAX_DOCUMENT_BYTES), lock_path=lock_path)


def record_published(result, args) -> None:
    """images.lock records what was pushed: repository, verified manifest digest, tags (lockfile's
    ``published``), so that `imagebuild find --registry` can print the digest and check the registry."""
    from ...deliver import lockfile

    lock_path = args.lock or str(Workspace.of(args.matrix).lock)
    lockfile.record_published(lock_path, result.image_id, engine_image_id=result.engine_image_id,
                              repository=result.repository, digest=result.digest,
                              tags=[t.reference.rsplit(":", 1)[1] for t in result.tags])


def write_index(api, target, image_id: str, key, args, say, repository_name: str | None = None):
    """The registry's index entry of what was just published and recorded (deliver/catalog.py):
    what `find --registry` reads on a node that has no images.lock."""
    from ...deliver import catalog, lockfile

    lock_path = args.lock or str(Workspace.of(args.matrix).lock)
    return catalog.write(api, target, image_id, lockfile.read_lock(lock_path)[image_id], key=key,
                         progress=say, repository_name=repository_name)


def platform_twins(every: dict, spec) -> list:
    """Every platform's image of ``spec``'s name and tag, in the matrix's order, when there are
    several (else []): those publish under one index."""
    key = (getattr(spec, "base_name", spec.id), getattr(spec, "tag", None))
    twins = [s for s in every.values() if (getattr(s, "base_name", s.id), getattr(s, "tag", None)) == key]
    return twins if len(twins) > 1 else []


def publish_platforms(api, target, spec, twins: list, key, done: dict, say) -> None:
    """After one platform's image is pushed: the index over every platform of its name, when all
    of them are in the registry (deliver/platforms.py), signed with ``key``."""
    from ...deliver import platforms, publish, signing
    repository = target.repository(spec.base_name)
    result = platforms.publish_index(api, host=target.host, repository=repository,
                                     tags=publish.order_tags(list(spec.tags)),
                                     platforms=[t.oci_platform for t in twins], progress=say)
    done["platforms"] = result
    if result.digest is not None and key is not None:
        done["platforms_signature"] = signing.sign(api, repository, docker_reference=result.repository,
                                                   digest=result.digest, key=key, progress=say)


def run(args) -> int:
    from ...deliver import publish
    from ...engines import get_engine

    rep = Reporter.for_args("publish", args)
    target = publish.parse_target(args.registry)
    if args.report and len(args.images) != 1:
        raise ImagebuildError("--report names the report of one image; give one IMAGE", argument="--report")
    if args.sbom_file and len(args.images) != 1:
        raise ImagebuildError("--sbom-file names the SBOM of one image; give one IMAGE", argument="--sbom-file")
    if args.sign_key:   # a key that cannot be read stops the run before anything is pushed
        from ...deliver.signing import load_signing_key
        key = load_signing_key(args.sign_key)
    else:
        key = None
    from ...render.run import MatrixRun
    matrix_run = MatrixRun.open(args.matrix)     # the run's one read of the matrix
    every = dict(matrix_run.images)              # all of them: an image's twins on other platforms too
    specs = matrix_run.lookup(list(dict.fromkeys(args.images)))
    if args.fail_on:   # before anything else: a refused image stops the whole run
        from ...deliver.audit import gate
        from ...render.wheellock import lock_root
        gate({i: (str(lock_root(matrix_run.k) / s.wheel_lock) if s.wheel_lock else None)
              for i, s in specs.items()}, fail_on=args.fail_on, allow_partial=args.allow_partial_audit)
    reports_dir = args.reports_dir or Workspace.of(args.matrix).reports
    # every report is checked before anything is pushed: one untested image stops the whole run
    reports = {}
    for image_id in specs:
        path = args.report or publish.default_report_path(image_id, reports_dir)
        reports[image_id] = (publish.load_report(path), str(path))
    engine = get_engine()
    credentials = publish.find_credentials(target.host)
    sboms: dict = {}
    for image_id, spec in specs.items():
        found = engine.lookup(spec.local_ref)
        if found is None:
            raise ImagebuildError(f"image {spec.local_ref} is not in the engine; build it first")
        engine_id = found.id
        report, source = reports[image_id]
        publish.check_report(report, engine_id, name=image_id, source=source)
        check_lock(image_id, engine_id, source, args)
        sboms[image_id] = image_sbom(image_id, engine_id, args, matrix_run)
    pages = notes_pages(args, matrix_run, specs)
    api = publish.RegistryAPI(target.host, credentials, auth_hosts=args.auth_host, deadline=args.timeout)
    results = []
    attached: dict = {}
    for image_id, spec in specs.items():
        report, source = reports[image_id]
        say = rep.progress
        done: dict = {}
        twins = platform_twins(every, spec)
        name = getattr(spec, "base_name", image_id) if twins else None
        tags = list(spec.tags)
        staging = publish.STAGING_TAG
        if twins:      # one platform's image of a multi-platform name (deliver/platforms.py)
            from ...deliver.platforms import arch_tag
            tags = [arch_tag(t, spec.oci_platform) for t in spec.tags]
            staging = arch_tag(staging, spec.oci_platform)
        result = publish.publish_image(
            engine, image_id=image_id, local_ref=spec.local_ref, tags=tags, target=target,
            report=report, report_source=source, credentials=credentials, api=api,
            progress=say, repository_name=name, staging_tag=staging,
            after_dated=attach_to(api, target, image_id, sboms[image_id], key, done, say, name,
                                  pages.get(image_id))
            if sboms[image_id] is not None or key is not None or image_id in pages else None)
        if twins:
            publish_platforms(api, target, spec, twins, key, done, say)
        attached[image_id] = done
        results.append(result)
        record_published(result, args)
        done["index"] = write_index(api, target, image_id, key, args, say, name)
        for tag in result.tags:
            rep.line(f"{tag.reference}@{tag.digest}", image=image_id)
        for line in attachment_lines(result, attached[image_id]):
            rep.line(line, image=image_id)
    rep.result([{**r.as_dict(), **{k: v.as_dict() for k, v in attached[r.image_id].items()}}
                for r in results])
    return 0
