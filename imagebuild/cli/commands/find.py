"""`imagebuild find [host facts | --from-doctor FILE] [--registry HOST[:PORT]/NS [--no-check]] [--lock FILE]`

The published images that run on a host, best first: the entries of images.lock whose smoke
report passed (`imagebuild publish` pushes nothing else), still declared by the matrix with the
same stack, that run on the host as `check --image` judges it; each with its CUDA compatibility
mode, its tags, and (with --registry) the commands that fetch and run it: `docker pull`,
`enroot import` and pyxis's `srun --container-image` (both of which take `HOST#NS/IMAGE:TAG`).

Where images.lock records what `imagebuild publish` pushed to that registry (the entry's
``published``: manifest digest and tags), `docker pull` names the immutable ``HOST/NS/IMAGE@DIGEST``.
enroot and pyxis get the dated tag: enroot 3.x's URI parser takes ``[REGISTRY#]IMAGE[:TAG]`` only and
refuses ``@sha256:`` (newer enroot parses it), so a digest form would fail on many clusters.

With --registry, find asks the registry (GET /v2/, then each tag's manifest digest, with the
credentials `publish` would use) before it offers anything, unless --no-check: an image is offered
only when its dated tag serves the digest the lock records. Otherwise it is listed apart: "tag moved
to <digest>", "not in registry", or "unrecorded" (the lock records no publish to that registry, so
nothing says the tag is the tested image). Checking is the default because `find --registry` is the
researcher's command and the failure it prevents (a job sent to a tag that was never pushed, was
deleted or now names another image) costs a queued job; --no-check is for a machine that cannot
reach the registry. Exit 0 when some image is offered, 1 when none is, 2 for bad input or refused
credentials, 3 when the registry cannot be reached.
"""

from __future__ import annotations

import functools

from .. import add_matrix_option
from ... import untrusted
from ...errors import UsageError
from ..reporter import SCHEMA, Reporter
from ..options import add_host_options

SHOWN = 10


def configure(parser) -> None:
    from .. import add_timeout_option

    add_matrix_option(parser)
    add_timeout_option(parser)
    add_host_options(parser)
    parser.add_argument("--platform", help="the nodes' CPU architecture (x86_64, aarch64)")
    parser.add_argument("--from-doctor", metavar="FILE",
                        help="host facts from `imagebuild doctor --json` output; flags override it")
    parser.add_argument("--lock", metavar="FILE",
                        help="images.lock (default: with --registry, the index `publish` wrote in "
                             "the registry; without, images.lock beside the matrix)")
    parser.add_argument("--registry", metavar="HOST[:PORT]/NAMESPACE",
                        help="where the images were published: read what was published from the "
                             "registry's index (or --lock), check that the registry serves it, print "
                             "pull and run commands")
    parser.add_argument("--key", metavar="PUB",
                        help="with --registry and no --lock: the public key (PEM) the index entries "
                             "must be signed with (`publish --sign-key`); unsigned entries are left out")
    parser.add_argument("--no-check", action="store_true",
                        help="with --registry: do not ask the registry (print the commands unchecked)")
    parser.add_argument("--auth-host", action="append", default=[], metavar="HOST",
                        help="a host other than the registry's whose token service may receive the "
                             "registry credentials (as for `imagebuild publish`); repeatable")
    parser.add_argument("--all", action="store_true", help=f"list every image (text lists {SHOWN})")
    parser.add_argument("--json", action="store_true", help="print a JSON document")


_FACTS = ("driver", "gpu", "kernel", "open_kernel_modules", "ofed", "platform")


def facts_from_doctor(path: str) -> dict:
    """The `host` object of a doctor --json document."""
    from ...localfile import MAX_DOCUMENT_BYTES, read_text

    try:
        data = untrusted.loads(read_text(path, MAX_DOCUMENT_BYTES))
    except OSError as exc:
        raise UsageError(f"cannot read: {exc.strerror}", argument="--from-doctor") from None
    except ValueError as exc:       # untrusted.BadData, a non-UTF-8 file
        raise UsageError(f"{path}: {exc}", argument="--from-doctor") from None
    if isinstance(data, dict) and data.get("schema") == SCHEMA:     # the --json envelope
        data = data.get("result")
    host = data.get("host") if isinstance(data, dict) else None
    if not isinstance(host, dict) or not set(_FACTS) <= set(host):
        raise UsageError(f"{path}: not `imagebuild doctor --json` output (no host object with "
                         f"{', '.join(_FACTS)})", argument="--from-doctor")
    for key in ("driver", "gpu", "kernel", "platform"):
        if host[key] is not None and not isinstance(host[key], str):
            raise UsageError(f"{path}: host.{key} must be a string or null", argument="--from-doctor")
    for key in ("open_kernel_modules", "ofed"):
        if host[key] is not None and not isinstance(host[key], bool):
            raise UsageError(f"{path}: host.{key} must be true, false or null",
                             argument="--from-doctor")
    return {key: host[key] for key in _FACTS}


def references(target, spec, digest: str | None = None) -> dict:
    """Docker and enroot/pyxis references of an image's tags, dated (immutable) tag first, and
    the commands that fetch it and run its smoke suite under Slurm/pyxis on the host. With the
    ``digest`` publish recorded, docker's reference is ``HOST/NS/IMAGE@DIGEST`` (first in the list);
    enroot/pyxis keep the dated tag (module docstring)."""
    repo = target.repository(spec.id)
    tags = [spec.tags[-1], *spec.tags[:-1]]     # spec.tags: the floating tag, then the dated one
    dated = tags[0]
    docker = f"{target.host}/{repo}@{digest}" if digest else f"{target.host}/{repo}:{dated}"
    enroot = f"{target.host}#{repo}:{dated}"
    return {"docker": [*([docker] if digest else []), *(f"{target.host}/{repo}:{t}" for t in tags)],
            "enroot": [f"{target.host}#{repo}:{t}" for t in tags],
            "commands": [f"docker pull {docker}", f"enroot import docker://{enroot}",
                         f"srun --container-image={enroot} imagebuild-smoke --tier "
                         f"{'cpu' if spec.stack.get('cuda', 'none') == 'none' else 'gpu'}"]}


def published_digest(target, spec, entry: dict) -> str | None:
    """The manifest digest images.lock records for ``spec`` in ``target``'s registry, or None."""
    record = (entry.get("published") or {}).get(target.reference(spec.id))
    return record["digest"] if record else None


def registry_status(api, target, spec, entry: dict, lock_path: str) -> dict:
    """What the registry serves for an image's tags against what the lock recorded at publish:
    ``status`` ok | moved | not-in-registry | unrecorded, and ``why`` (one line) when not ok.
    Only the dated tag decides: a floating tag moves on to newer builds by design."""
    repo_path, reference = target.repository(spec.id), target.reference(spec.id)
    dated = spec.tags[-1]
    served = {tag: api.manifest_digest(repo_path, tag) for tag in [dated, *spec.tags[:-1]]}
    recorded = published_digest(target, spec, entry)
    now = served[dated]
    out = {"repository": reference, "dated_tag": dated, "recorded": recorded, "serves": now,
           "tags": dict(sorted(served.items()))}
    if now is None:
        out.update(status="not-in-registry", why=f"not in registry: {reference}:{dated} does not exist")
    elif recorded is None:
        out.update(status="unrecorded",
                   why=f"unrecorded: {reference}:{dated} serves {now}, but {lock_path} records no "
                       f"publish to {reference}, so nothing says it is the tested image (publish it "
                       "with `imagebuild publish`, which records the digest)")
    elif now != recorded:
        out.update(status="moved", why=f"tag moved to {now}: {reference}:{dated} no longer serves "
                                       f"{recorded}, the digest {lock_path} records")
    else:
        out.update(status="ok", why=None)
    return out


def _registry(args, target):
    """The registry's API for this run, reached once (an unreachable registry is one line, exit 3,
    before anything is listed)."""
    from ...deliver.publish import RegistryAPI, find_credentials

    api = RegistryAPI(target.host, find_credentials(target.host), auth_hosts=args.auth_host,
                      deadline=args.timeout)
    api.ping()
    return api


def published(args, target, default_lock, registry) -> tuple[dict, str, list]:
    """What was published: images.lock (--lock, or the workspace's without --registry), or the
    index `publish` wrote in the registry (--registry without --lock: all a node needs; read
    through ``registry()``, the run's one API). Returns (entries, where they came from, index
    entries left out with why)."""
    from ...deliver import lockfile

    if args.key and (target is None or args.lock):
        raise UsageError("--key checks the registry's index: give --registry and no --lock", argument="--key")
    if args.lock or target is None:
        path = args.lock or str(default_lock)
        return lockfile.read_lock(path), path, []
    from ...deliver import catalog
    public_key = None
    if args.key:
        from ...deliver.signing import load_public_key
        public_key = load_public_key(args.key)
    if args.no_check:
        raise UsageError("--no-check needs --lock: without it the registry's index is read",
                         argument="--no-check")
    found = catalog.read(registry(), target, public_key=public_key)
    if not found.entries and not found.refused:
        raise UsageError(f"{found.where} holds no index of published images (`imagebuild publish` "
                         "writes it), and no --lock was given", argument="--registry")
    return found.entries, found.where, found.refused


def host_facts(args) -> dict:
    """The host's facts: --from-doctor's file, then the flags over it; a driver must be a release."""
    from ...versions import VersionSyntaxError, parse_host_driver

    facts = {key: None for key in _FACTS}
    if args.from_doctor:
        facts.update(facts_from_doctor(args.from_doctor))
    for key in _FACTS:
        value = getattr(args, key, None)
        if value is not None:
            facts[key] = value
    if facts["driver"] is None and facts["gpu"] is None:
        raise UsageError("give the host: --driver and --gpu (or --gpu none), or --from-doctor FILE",
                         argument="--driver")
    if facts["driver"] is not None:
        try:
            parse_host_driver(facts["driver"])
        except VersionSyntaxError as exc:
            raise UsageError(str(exc), argument="--driver") from None
    return facts


def run(args) -> int:
    from ...deliver import hostfit
    from ...render.run import MatrixRun
    from ...resolve.solver import Host
    from ...workspace import Workspace

    facts = host_facts(args)
    target = None
    if args.registry:
        from ...deliver.publish import parse_target
        target = parse_target(args.registry)
    elif args.no_check:
        raise UsageError("--no-check goes with --registry (without it no registry is asked)",
                         argument="--no-check")
    matrix_run = MatrixRun.open(args.matrix, allow_unverified=args.allow_unverified)   # its one read
    k = matrix_run.k
    if facts["platform"] is not None:
        facts["platform"] = hostfit.platform_id(k, facts["platform"])
        if facts["platform"] not in k.platforms:
            raise UsageError(f"unknown platform {facts['platform']!r} (one of "
                             f"{', '.join(k.platforms)})", argument="--platform")
    host = Host(driver=facts["driver"], gpu=facts["gpu"], kernel=facts["kernel"], ofed=facts["ofed"],
                open_kernel_modules=facts["open_kernel_modules"], date=args.date)
    registry = functools.cache(lambda: _registry(args, target))
    locked, lock_path, refused_entries = published(args, target, Workspace.of(args.matrix).lock, registry)
    candidates, left_out = _candidates(locked, dict(matrix_run.images))
    left_out[:0] = [(i, f"the registry's index entry is refused: {why}") for i, why in refused_entries]
    good, bad = hostfit.fits(k, candidates, host, facts["platform"], args.allow_unverified)
    left_out += [(m.spec.id, m.why) for m in bad]
    checked = target is not None and not args.no_check
    status: dict[str, dict] = {}
    if checked and good:
        api = registry()
        status = {f.spec.id: registry_status(api, target, f.spec, locked[f.spec.id], lock_path)
                  for f in good}
    offered = [f for f in good if not checked or status[f.spec.id]["status"] == "ok"]
    refused = [f for f in good if checked and status[f.spec.id]["status"] != "ok"]

    view = _View(args, target, locked, lock_path, status, checked)
    view.gpu_gap = gpu_gap(k, host, facts, offered, refused, dict(matrix_run.images), args)
    if args.json:
        return view.json(facts, offered, refused, left_out)
    return view.text(good, offered, refused, left_out)


def _candidates(locked: dict, specs: dict) -> tuple[list, list[tuple[str, str]]]:
    """The locked images that may be offered (declared, passed, the matrix's stack), and why each
    other one is left out."""
    from ...deliver import lockfile

    candidates, left_out = [], []
    for image_id, entry in sorted(locked.items()):
        spec = specs.get(image_id)
        if spec is None:
            left_out.append((image_id, "in the lock but no longer declared by the matrix"))
        elif not (entry.get("smoke") or {}).get("passed"):
            left_out.append((image_id, "no passing smoke report in the lock: not published"))
        else:
            drift = lockfile.drift(entry, {"stack": dict(spec.stack)}, only=("stack",))
            if drift:
                left_out.append((image_id, "the lock's stack differs from the matrix's ("
                                 + "; ".join(drift) + "): run `imagebuild lock`"))
            else:
                candidates.append(spec)
    return candidates, left_out


def gpu_gap(k, host, facts: dict, offered: list, refused: list, specs: dict, args) -> dict | None:
    """On a GPU host where nothing offered uses the GPUs (only CPU images are published, or none):
    what is missing, the best image of the matrix that would use them, and the commands that make
    and publish it. None when a GPU image is offered, or one that runs here is locked but not in
    the registry as published (the answer names it and why already), or the host has no GPU."""
    from ...deliver import hostfit
    if not hostfit._gpu_host(host) or any(f.mode != "n/a" for f in [*offered, *refused]):
        return None
    gpu_specs = [s for s in specs.values() if s.stack.get("cuda") not in (None, "none")]
    fit = hostfit.best(k, gpu_specs, host, facts.get("platform"), args.allow_unverified)
    where = f" --registry {args.registry}" if args.registry else " --registry HOST[:PORT]/NS"
    gap = {"gpu": facts.get("gpu"), "published_gpu_images": 0,
           "message": (f"no published image here uses this node's GPUs ({facts.get('gpu') or 'GPU'}, "
                       f"driver {facts.get('driver') or 'unknown'}): "
                       + ("every image offered is CPU-only" if offered else "none is offered"))}
    if fit is None:
        gap["message"] += "; and no image of the matrix runs on them (imagebuild resolve says why)"
        return gap
    gap["build"] = fit.spec.id
    gap["commands"] = [f"imagebuild build {fit.spec.id}", f"imagebuild test {fit.spec.id} --tier gpu",
                       f"imagebuild lock {fit.spec.id}", f"imagebuild publish {fit.spec.id}{where}"]
    gap["message"] += f"; the matrix's best for them is {fit.spec.id} ({fit.mode})"
    return gap


class _View:
    """What `find` prints: the images offered (with how to pull them), those that run here but
    are not in the registry as published, and how many locked images were left out."""

    def __init__(self, args, target, locked: dict, lock_path: str, status: dict, checked: bool):
        self.args, self.target, self.locked, self.lock_path = args, target, locked, lock_path
        self.status, self.checked = status, checked
        self.gpu_gap: dict | None = None

    def digest_of(self, f) -> str | None:
        return published_digest(self.target, f.spec, self.locked[f.spec.id])

    def json(self, facts: dict, offered: list, refused: list, left_out: list) -> int:
        out = []
        for f in offered:
            item = f.to_json()
            item["published"] = self.locked[f.spec.id].get("published") or {}
            if self.target is not None:
                item.update(references(self.target, f.spec, self.digest_of(f)))
                item["registry"] = self.status.get(f.spec.id) or {
                    "repository": self.target.reference(f.spec.id), "recorded": self.digest_of(f),
                    "status": "unchecked"}
            out.append(item)
        Reporter.for_args("find", self.args).result(
            {"host": facts, "lock": self.lock_path, "images": out,
             "not_offered": [{"image": f.spec.id, "why": self.status[f.spec.id]["why"],
                              "registry": self.status[f.spec.id]} for f in refused],
             "left_out": [{"image": i, "why": w} for i, w in left_out], "gpu_gap": self.gpu_gap})
        if self.gpu_gap is not None:
            Reporter.for_args("find", self.args).warn(self.gpu_gap["message"])
        return 0 if offered else 1

    def say_gap(self) -> None:
        if self.gpu_gap is None:
            return
        print(f"Missing: {self.gpu_gap['message']}.")
        if self.gpu_gap.get("commands"):
            print("  to make one: " + " && ".join(self.gpu_gap["commands"]))

    def text(self, good: list, offered: list, refused: list, left_out: list) -> int:
        if not offered:
            if good:
                print(f"No image of {self.lock_path} that runs on this host is in {self.target.host}/"
                      f"{self.target.namespace} as it was published.")
                for f in refused:
                    print(f"  {f.spec.id}: {self.status[f.spec.id]['why']}")
            else:
                print(f"No published image in {self.lock_path} runs on this host.")
                for image_id, why in left_out[:SHOWN]:
                    print(f"  {image_id}: {why}")
            self.say_gap()
            return 1
        shown = offered if self.args.all else offered[:SHOWN]
        for n, f in enumerate(shown, 1):
            mode = ("CPU only" if f.mode == "n/a" else f.mode) + (f", needs {f.package}" if f.package else "")
            print(f"{n}. {f.spec.id} ({mode})")
            if self.target is None:
                print(f"   tags: {', '.join(f.spec.tags)}")
                for repo, record in sorted((self.locked[f.spec.id].get("published") or {}).items()):
                    print(f"   published: {repo}@{record['digest']}")
            else:
                if self.checked:
                    print(f"   registry: ok ({f.spec.tags[-1]} serves the digest publish recorded)")
                for cmd in references(self.target, f.spec, self.digest_of(f))["commands"]:
                    print(f"   {cmd}")
        if len(offered) > len(shown):
            print(f"... and {len(offered) - len(shown)} more (--all)")
        if refused:
            print(f"Not offered: {len(refused)} image(s) that run here are not in the registry as published:")
            for f in refused:
                print(f"  {f.spec.id}: {self.status[f.spec.id]['why']}")
        if self.target is None:
            print("give --registry HOST[:PORT]/NAMESPACE (where they were published) for the pull commands")
        elif not self.checked:
            print("the registry was not asked (--no-check): a tag may be missing or name another image")
        if left_out:
            print(f"{len(left_out)} locked image(s) left out (--json says why)")
        self.say_gap()
        return 0
