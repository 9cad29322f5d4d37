"""`imagebuild build [IMAGE...]`: build images on a real engine.

Images come from the matrix (each rendered into a build context under --output first), or, with
`--context DIR` (repeatable), from ready build contexts: the image id is the folder's name and the
local reference `imagebuild/<id>:local`. Progress goes to stderr, the summary table to stdout, a
JSON report to <output>/build-report.json. Exit 0 when every image was built, 1 when one was not.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from ...errors import UsageError
from ..reporter import Reporter
from ...workspace import Workspace
from ...builder.jobs import (CA_SECRET, build_labels, check_platforms, foreign_platform,  # noqa: F401
                             jobs_for, jobs_for_contexts)
from ...deliver.lockcheck import check_locked  # noqa: F401 - re-exported


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
                             "order (matrix images are normalised by default: imagebuild/builder/reproducible.py)")
    parser.add_argument("--json", action="store_true",
                        help="print the build report (image ids included) as JSON instead of the table")
    add_matrix_option(parser)


def check_ca_bundle(path: Path) -> Path:
    try:
        head = path.read_bytes()[:1 << 20]
    except OSError as exc:
        raise UsageError(f"cannot read CA bundle {path}: {exc.strerror}", argument="--ca-bundle") from None
    if b"-----BEGIN CERTIFICATE-----" not in head:
        raise UsageError(f"{path} is not a PEM CA bundle (no BEGIN CERTIFICATE line)",
                         argument="--ca-bundle")
    return path.resolve()


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
    from ...builder.buildcache import SharedCache
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
    from ...builder.scheduler import build_all, format_table, outcomes_as_dict
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
            from ...builder import shards
            if args.images:
                raise UsageError("give either IMAGE names or --shard, not both", argument="--shard")
            args.images = shards.shard_of(k, every, *shards.parse_shard(args.shard))
            if not args.images:
                raise UsageError(f"shard {args.shard} holds no image (fewer chains than shards)",
                                 argument="--shard")
        chosen = matrix_run.select(list(dict.fromkeys(args.images)))   # an unknown name: one line, first
        if args.platform:
            from ...builder.emulation import platform_of
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
    from ...builder.reproducible import BuildTimeEngine
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
