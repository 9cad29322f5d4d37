"""`imagebuild build [IMAGE...]`: build images on a real engine.

Images come from the matrix (each rendered into a build context under --output first), or, with
`--context DIR` (repeatable), from ready build contexts: the image id is the folder's name and the
local reference `imagebuild/<id>:local`. Progress goes to stderr, the summary table to stdout, a
JSON report to <output>/build-report.json. Exit 0 when every image was built, 1 when one was not.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from pathlib import Path

from ...errors import UsageError
from ..reporter import Reporter
from ...workspace import Workspace

CA_SECRET = "ca-bundle"   # RUN --mount=type=secret,id=ca-bundle  ->  /run/secrets/ca-bundle


def configure(parser) -> None:
    from .. import add_matrix_option
    parser.add_argument("images", nargs="*", metavar="IMAGE", help="image ids (default: all in the matrix)")
    parser.add_argument("--shard", metavar="K/N",
                        help="build shard K of N of the matrix's images (as `imagebuild images --shard K/N` "
                             "lists them); not with IMAGE names")
    parser.add_argument("--platform", metavar="OS/ARCH",
                        help="build the images named (default: every one) for this platform: "
                             "linux/amd64 or linux/arm64 (arm64, aarch64), the matrix's twin of "
                             "each (id ending -arm64); another CPU than this host's is built under "
                             "emulation (binfmt_misc and qemu-user-static, checked first)")
    parser.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                        help="build up to N independent images at once (default: 1)")
    parser.add_argument("--keep-going", "-k", action="store_true",
                        help="after a failure, still build the images that do not depend on it")
    parser.add_argument("--ca-bundle", type=Path, metavar="FILE",
                        help="a PEM CA bundle for build steps that download; given to the build as "
                             f"the BuildKit secret '{CA_SECRET}' (/run/secrets/{CA_SECRET}), never "
                             "stored in a layer")
    parser.add_argument("--log-dir", type=Path, metavar="DIR",
                        help="one <image>.log per image (default: .imagebuild/logs beside the matrix)")
    parser.add_argument("--output", type=Path, metavar="DIR",
                        help="where build contexts and build-report.json go, and where a built "
                             "image is unpacked while it is normalised (about its size again, "
                             "briefly; default: .imagebuild/build beside the matrix)")
    parser.add_argument("--context", type=Path, action="append", default=[], metavar="DIR",
                        help="build this ready context instead of matrix images (repeatable)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--locked", action="store_true",
                        help="refuse to build anything whose stack, Dockerfile or base image "
                             "drifted from images.lock, and say what drifted; build FROM the bases "
                             "the lock records (by registry digest, else by engine id)")
    parser.add_argument("--lock", type=Path, metavar="FILE",
                        help="the lock file for --locked (default: images.lock beside the matrix)")
    parser.add_argument("--sources", metavar="DIR|URL",
                        help="fill the source cache (.imagebuild/sources) from this mirror folder or "
                             "URL (default: the tarballs' upstream URLs); every file is checked "
                             "against matrix.yaml's sha256")
    parser.add_argument("--no-cache", action="store_true", help="build every step anew (a cold build)")
    parser.add_argument("--cache-from", metavar="HOST/REPO",
                        help="reuse the layer cache other builders pushed to this registry repository "
                             "prefix (HOST/REPO/<image id>:buildcache; BuildKit's inline cache)")
    parser.add_argument("--cache-to", metavar="HOST/REPO",
                        help="push each image's layer cache there after its build (and read it, as "
                             "--cache-from does); credentials as for publish")
    parser.add_argument("--no-normalize", action="store_true",
                        help="keep the engine's image as built: no clamped times, no fixed file "
                             "order (matrix images are normalised by default: imagebuild/build/reproducible.py)")
    parser.add_argument("--json", action="store_true",
                        help="print the build report (image ids included) as JSON instead of the table")
    add_matrix_option(parser)


def check_locked(image_ids: list[str], k, lock_path: Path, *, every: dict | None = None) -> dict[str, dict[str, dict]]:
    """Before building: every image is in the lock, and its build inputs are what the lock says.
    `k` is the run's loaded matrix; the generated recipes are read beside it. Returns the bases to
    build from (imagebuild.build.pinning): image ref -> {FROM ref -> the lock's {"id", "digest"}}, for
    every external base (a matrix image another one starts from is built in this run instead).
    ``every``: the matrix's images by id, when the run has expanded them already."""
    from ...deliver import lockfile
    from ...engines import get_engine
    from ...errors import BuildError
    from ...render.images import expand, select, with_bases

    locked = lockfile.read_lock(lock_path)
    every = every if every is not None else {s.id: s for s in expand(k)[0]}
    specs = with_bases(select(every, image_ids), every)
    engine = get_engine()
    root = Path(k.path).resolve().parent
    problems = []
    ours = {s.local_ref for s in every.values()}
    pins = {spec.local_ref: {ref: dict(base) for ref, base in (locked[spec.id].get("bases") or {}).items()
                             if ref not in ours}
            for spec in specs if spec.id in locked}
    from ...render.renderer import Renderer
    renderer = Renderer()      # the Dockerfiles this build renders, as `lock` hashed them
    for spec in specs:
        if spec.id not in locked:
            users = [s.id for s in specs if spec.id in s.depends_on]
            problems.append(f"{spec.id}: not in {lock_path.name}"
                            + (f" (the image {users[0]} is built FROM it)" if users else ""))
            continue
        current = lockfile.entry_for_image(engine, image_id=spec.id, stack=dict(spec.stack),
                                           local_ref=spec.local_ref, root=root,
                                           dockerfile_text=renderer.dockerfile(spec, k))
        # a base that is a matrix image (a devel's runtime) is built in this run from its own
        # locked inputs, checked above: its engine id is no input of this image's build
        lines = lockfile.drift(lockfile.without_bases(locked[spec.id], ours),
                               lockfile.without_bases(current, ours), only=lockfile.BUILD_INPUTS)
        problems += [f"{spec.id}: {line}" for line in lines]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        # `lock IMAGE` locks what `build IMAGE` builds (the runtime of a devel too): the images
        # asked for, when named by id (`lock` takes no family name), accept every line above
        named = image_ids and all(i in every for i in image_ids)
        accept = " ".join(["imagebuild lock", *(image_ids if named else [])])
        raise BuildError(f"refusing to build: drifted from {lock_path}: "
                         + "; ".join(problems[:3]) + more + f" (run `{accept}` to accept)")
    return pins


def check_ca_bundle(path: Path) -> Path:
    try:
        head = path.read_bytes()[:1 << 20]
    except OSError as exc:
        raise UsageError(f"cannot read CA bundle {path}: {exc.strerror}", argument="--ca-bundle") from None
    if b"-----BEGIN CERTIFICATE-----" not in head:
        raise UsageError(f"{path} is not a PEM CA bundle (no BEGIN CERTIFICATE line)",
                         argument="--ca-bundle")
    return path.resolve()


def build_labels(spec, root: Path) -> dict[str, str]:
    """Labels added at build time, beside those the Dockerfile sets: the project's repository from
    `git remote get-url origin` (https only, credentials removed) when matrix.yaml states none.
    A fact of the clone, so it is kept out of the committed recipes; no remote, no label.
    The commit (org.opencontainers.image.revision) when the clone has no uncommitted change.
    The base image's name and digest are added by reproducible.BuildTimeEngine, just before each
    build."""
    from ...render.images import SOURCE_LABEL, git_source_url
    from ...build.reproducible import REVISION_LABEL, git_revision
    labels = {}
    url = None if spec.labels.get(SOURCE_LABEL) else git_source_url(str(root))
    if url:
        labels[SOURCE_LABEL] = url
    rev = git_revision(root)
    if rev:
        labels[REVISION_LABEL] = rev
    return labels


def jobs_for(image_ids: list[str], k, workdir: Path, *,
             secrets: dict[str, Path] | None = None, sources: str | None = None,
             progress=None, every: dict | None = None) -> list:
    """BuildJobs for matrix images: each rendered into workdir/<id> by imagebuild.render.

    `k` is the run's one loaded matrix (imagebuild.knowledge.load): the images are expanded from
    it and `write_context(spec, dest, k=k)` renders each context from it, so a build never reads
    another matrix. Images a requested one depends on are added. Just before each build, the
    tarballs the image compiles are put in the source cache (.imagebuild/sources beside the
    matrix), from `sources` (a mirror folder or URL) or their upstream URLs, each checked against
    the matrix's sha256, and from there into its context. ``every``: the matrix's images by id,
    when the run has expanded them already.
    """
    from ...render import sources as S
    from ...build.scheduler import BuildJob
    from ...render.images import expand, with_bases
    from ...render.output import write_context

    specs = every if every is not None else {s.id: s for s in expand(k)[0]}
    unknown = [i for i in image_ids if i not in specs]
    if unknown:
        raise UsageError(f"unknown image {unknown[0]!r} (known: {', '.join(sorted(specs))})",
                         argument="IMAGE")
    ws = Workspace.of(k.path)
    jobs = []
    for spec in with_bases([specs[i] for i in image_ids or sorted(specs)], specs):
        ctx = write_context(spec, Path(workdir) / spec.id, k=k)
        # a devel image is FROM its runtime image, which compiled them: it reads no tarball
        tarballs = [] if spec.from_image else S.for_image(k, spec, spec.sources)
        prepare = None
        if tarballs:
            prepare = functools.partial(_put_sources, tarballs, Path(ctx),
                                        ws.sources, sources, progress)
        jobs.append(BuildJob(image_id=spec.id, context=Path(ctx), ref=spec.local_ref,
                             labels=build_labels(spec, ws.root), secrets=dict(secrets or {}),
                             depends_on=tuple(spec.depends_on), prepare=prepare,
                             platform=foreign_platform(spec)))
    return jobs


def foreign_platform(spec) -> str | None:
    """The OCI platform to build ``spec`` for when it is not this host's (linux/arm64 on an
    x86_64 builder), else None: the engine's own, as before platforms were listed."""
    from ...build.emulation import PLATFORMS, is_native
    target = PLATFORMS.get(spec.oci_platform)
    return None if target is None or is_native(target) else target.oci


def check_platforms(specs) -> None:
    """Before anything is rendered or downloaded: each foreign platform asked for can run here
    (binfmt_misc and QEMU), or one line naming the image and the fix."""
    from ...build.emulation import PLATFORMS, emulation_for, host_platform
    host = host_platform()
    skip = f" (or build this host's images only: --platform {host.oci})" if host else ""
    for spec in specs:
        oci = foreign_platform(spec)
        if oci is not None:
            emulation_for(spec.id, PLATFORMS[oci], hint=skip)


def _put_sources(tarballs, ctx: Path, cache: Path, origin: str | None, progress) -> None:
    """Before an image's build: its tarballs into the source cache (from `origin` or upstream,
    each checked against the matrix by sources.fetch), then into the context's sources/, which
    the Dockerfile binds (and checks again): hard links where the file system allows, copies
    otherwise."""
    import shutil

    from ...render import sources as S
    S.fetch(tarballs, cache, origin, progress=progress, argument="--sources")
    (ctx / "sources").mkdir(exist_ok=True)
    for t in tarballs:
        try:
            os.link(cache / t.file, ctx / "sources" / t.file)
        except OSError:
            shutil.copy2(cache / t.file, ctx / "sources" / t.file)


def jobs_for_contexts(contexts: list[Path], *, secrets: dict[str, Path] | None = None) -> list:
    from ...build.scheduler import BuildJob
    from ...engines import NAME_RE, check_ref
    jobs = []
    for ctx in contexts:
        if not (ctx / "Dockerfile").is_file():
            raise UsageError(f"{ctx} has no Dockerfile", argument="--context")
        image_id = ctx.resolve().name.lower()
        if not NAME_RE.match(image_id):
            raise UsageError(f"the folder name {image_id!r} cannot be an image id", argument="--context")
        jobs.append(BuildJob(image_id=image_id, context=ctx, ref=check_ref(f"imagebuild/{image_id}:local"),
                             secrets=dict(secrets or {})))
    return jobs


def check_cache_prefix(text: str | None, argument: str) -> str | None:
    """A registry repository prefix for the shared cache (HOST[:PORT]/REPO), or one line naming
    the argument."""
    if text is None:
        return None
    from ...deliver.referrers import parse_reference
    from ...errors import ImagebuildError
    try:
        parse_reference(f"{text.rstrip('/')}/x:buildcache", argument=argument)
    except ImagebuildError:
        raise UsageError(f"{text!r} is not a registry repository prefix HOST[:PORT][/REPO] "
                         "(each image's cache is PREFIX/<image id>:buildcache)", argument=argument) from None
    return text.rstrip("/")


@contextlib.contextmanager
def shared_cache(args):
    """The run's SharedCache (None without --cache-from/--cache-to). Credentials for the cache
    registry come as for publish (IMAGEBUILD_REGISTRY_USER/PASSWORD, else the Docker config): the
    push gets them from imagebuild; the BuildKit CLI, which reads the cache, reads a Docker config
    folder, so environment credentials are written to a private one for the run (mode 0600 in a
    0700 folder, removed after), never to a command line."""
    import base64
    import shutil
    import tempfile

    from ...atomic import write_atomic
    from ...build.buildcache import SharedCache
    from ...deliver.publish import find_credentials

    cache_from, cache_to = args.cache_from, args.cache_to      # checked by run()
    if not (cache_from or cache_to):
        yield None
        return
    hosts = sorted({p.split("/", 1)[0] for p in (cache_from, cache_to) if p})
    creds = {h: find_credentials(h) for h in hosts}
    folder = None
    try:
        if any(c is not None and c.source == "environment" for c in creds.values()):
            folder = Path(tempfile.mkdtemp(prefix="imagebuild-cache-auth-"))
            auths = {h: {"auth": base64.b64encode(f"{c.user}:{c.password}".encode()).decode()}
                     for h, c in creds.items() if c is not None}
            write_atomic(folder / "config.json", json.dumps({"auths": auths}), perm=0o600)
        push_creds = creds.get(cache_to.split("/", 1)[0]) if cache_to else None
        yield SharedCache(cache_from, cache_to, docker_config=folder,
                          auth=push_creds.auth_config() if push_creds else None)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _write_json(path: Path, data) -> None:
    from ...atomic import write_atomic
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n", perm=0o600, parents=True)


def run(args) -> int:
    from ...build.scheduler import build_all, format_table, outcomes_as_dict
    from ...engines import get_engine
    rep = Reporter.for_args("build", args)
    if args.jobs < 1:
        raise UsageError(f"--jobs must be 1 or more, not {args.jobs}", argument="--jobs")
    if args.context and args.images:
        raise UsageError("give either IMAGE names or --context folders, not both", argument="--context")
    if args.context and args.platform:
        raise UsageError("--platform builds matrix images, not --context folders", argument="--platform")
    # the shared cache's arguments before the engine is asked for
    args.cache_from = check_cache_prefix(args.cache_from, "--cache-from")
    args.cache_to = check_cache_prefix(args.cache_to, "--cache-to")
    if args.context and (args.cache_from or args.cache_to):
        raise UsageError("--cache-from and --cache-to build matrix images (their cache is named by "
                         "image id), not --context folders",
                         argument="--cache-to" if args.cache_to else "--cache-from")
    ws = Workspace.of(args.matrix)
    output = args.output or ws.build
    log_dir = args.log_dir or ws.logs
    secrets = {CA_SECRET: check_ca_bundle(args.ca_bundle)} if args.ca_bundle else {}
    pins: dict[str, dict[str, dict]] = {}
    every: dict = {}
    if args.context:
        jobs = jobs_for_contexts(args.context, secrets=secrets)
        engine = get_engine("docker")
    else:
        from ...render.run import MatrixRun
        matrix_run = MatrixRun.open(args.matrix)   # the run's one matrix: all below comes from it
        k, every = matrix_run.k, dict(matrix_run.images)
        if args.shard:
            from ...build import shards
            if args.images:
                raise UsageError("give either IMAGE names or --shard, not both", argument="--shard")
            args.images = shards.shard_of(k, every, *shards.parse_shard(args.shard))
            if not args.images:
                raise UsageError(f"shard {args.shard} holds no image (fewer chains than shards)",
                                 argument="--shard")
        chosen = matrix_run.select(list(dict.fromkeys(args.images)))   # an unknown name: one line, first
        if args.platform:
            from ...build.emulation import platform_of
            from ...render.images import for_platform
            args.images = [s.id for s in for_platform(every, chosen, platform_of(args.platform).oci)]
        if args.locked:
            pins = check_locked(list(dict.fromkeys(args.images)), k, args.lock or ws.lock, every=every)
        from ...render.images import with_bases
        check_platforms(with_bases(matrix_run.select(list(dict.fromkeys(args.images))), every))
        # the engine before anything is downloaded or rendered for an engine that is not there
        engine = get_engine("docker")    # builds with secrets or RUN --mount go through the BuildKit CLI
        jobs = jobs_for(list(dict.fromkeys(args.images)), k, Path(output), secrets=secrets,
                        sources=args.sources, progress=rep.progress, every=every)
    if not jobs:
        raise UsageError("no images to build")
    from ...build.reproducible import BuildTimeEngine
    from ...sourcedate import source_epoch
    epochs = {}
    if not args.no_normalize:
        epochs = {s.local_ref: source_epoch(s.as_of) for s in every.values()}   # empty for --context
    from ...atomic import terminate_as_interrupt
    with shared_cache(args) as cache, terminate_as_interrupt():  # SIGTERM stops the builds as Ctrl-C does
        engine = BuildTimeEngine(engine, epochs, no_cache=args.no_cache, pins=pins,
                                 workdir=Path(output), cache=cache)
        outcomes = build_all(jobs, engine=engine, jobs_n=args.jobs, keep_going=args.keep_going,
                             log_dir=log_dir, progress=rep.progress)
    _write_json(Path(output) / "build-report.json", outcomes_as_dict(outcomes))
    rep.result(outcomes_as_dict(outcomes), format_table(outcomes))
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        rep.error(f"{o.image_id}: {o.status}: {o.error}", image=o.image_id, status=o.status)
    return 1 if failed else 0
