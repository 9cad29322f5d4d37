"""`imagebuild find [host facts | --from-doctor FILE] [--registry HOST[:PORT]/NS] [--lock FILE]`

The published images that run on a host, best first: the entries of images.lock whose smoke
report passed (`imagebuild publish` pushes nothing else), still declared by the matrix with the
same stack, that run on the host as `check --image` judges it; each with its CUDA compatibility
mode, its tags, and (with --registry) the commands that fetch and run it: `docker pull`,
`enroot import` and pyxis's `srun --container-image` (both of which take `HOST#NS/IMAGE:TAG`).
Exit 0 when some image runs there, 1 when none does, 2 for bad input.
"""

from __future__ import annotations

import json
import os

from ..cli import add_matrix_option
from ..errors import UsageError
from .resolve import add_host_options

SHOWN = 10


def configure(parser) -> None:
    add_matrix_option(parser)
    add_host_options(parser)
    parser.add_argument("--platform", help="the nodes' CPU architecture (x86_64, aarch64)")
    parser.add_argument("--from-doctor", metavar="FILE",
                        help="host facts from `imagebuild doctor --json` output; flags override it")
    parser.add_argument("--lock", metavar="FILE",
                        help="images.lock (default: images.lock beside the matrix)")
    parser.add_argument("--registry", metavar="HOST[:PORT]/NAMESPACE",
                        help="where the images were published: print pull and run commands")
    parser.add_argument("--all", action="store_true", help=f"list every image (text lists {SHOWN})")
    parser.add_argument("--json", action="store_true", help="print a JSON document")


_FACTS = ("driver", "gpu", "kernel", "open_kernel_modules", "ofed", "platform")


def facts_from_doctor(path: str) -> dict:
    """The `host` object of a doctor --json document."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise UsageError(f"cannot read: {exc.strerror}", argument="--from-doctor") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        raise UsageError(f"{path}: malformed JSON{where}", argument="--from-doctor") from None
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


def references(target, spec) -> dict:
    """Docker and enroot/pyxis references of an image's tags, dated (immutable) tag first, and
    the commands that fetch it and run its smoke suite under Slurm/pyxis on the host."""
    repo = target.repository(spec.id)
    tags = [spec.tags[-1], *spec.tags[:-1]]     # spec.tags: the floating tag, then the dated one
    dated = tags[0]
    docker = f"{target.host}/{repo}:{dated}"
    enroot = f"{target.host}#{repo}:{dated}"
    return {"docker": [f"{target.host}/{repo}:{t}" for t in tags],
            "enroot": [f"{target.host}#{repo}:{t}" for t in tags],
            "commands": [f"docker pull {docker}", f"enroot import docker://{enroot}",
                         f"srun --container-image={enroot} imagebuild-smoke --tier "
                         f"{'cpu' if spec.stack.get('cuda', 'none') == 'none' else 'gpu'}"]}


def run(args) -> int:
    from .. import hostfit, images, knowledge, lockfile
    from ..resolve import Host

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
    target = None
    if args.registry:
        from ..publish import parse_target
        target = parse_target(args.registry)
    k = knowledge.load(args.matrix)
    if facts["platform"] is not None:
        facts["platform"] = hostfit.platform_id(k, facts["platform"])
        if facts["platform"] not in k.platforms:
            raise UsageError(f"unknown platform {facts['platform']!r} (one of "
                             f"{', '.join(k.platforms)})", argument="--platform")
    host = Host(driver=facts["driver"], gpu=facts["gpu"], kernel=facts["kernel"], ofed=facts["ofed"],
                open_kernel_modules=facts["open_kernel_modules"], date=args.date)
    lock_path = args.lock or os.path.join(os.path.dirname(os.path.abspath(args.matrix)),
                                          lockfile.DEFAULT_LOCK)
    locked = lockfile.read_lock(lock_path)
    specs = {s.id: s for s in images.expand(k, allow_unverified=args.allow_unverified)[0]}
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
    good, bad = hostfit.fits(k, candidates, host, facts["platform"], args.allow_unverified)
    left_out += [(m.spec.id, m.why) for m in bad]
    if args.json:
        out = []
        for f in good:
            item = f.to_json()
            if target is not None:
                item.update(references(target, f.spec))
            out.append(item)
        print(json.dumps({"host": facts, "lock": lock_path, "images": out,
                          "left_out": [{"image": i, "why": w} for i, w in left_out]},
                         indent=2, sort_keys=True))
        return 0 if good else 1
    if not good:
        print(f"No published image in {lock_path} runs on this host.")
        for image_id, why in left_out[:SHOWN]:
            print(f"  {image_id}: {why}")
        return 1
    shown = good if args.all else good[:SHOWN]
    for n, f in enumerate(shown, 1):
        mode = ("CPU only" if f.mode == "n/a" else f.mode) + (f", needs {f.package}" if f.package else "")
        print(f"{n}. {f.spec.id} ({mode})")
        if target is None:
            print(f"   tags: {', '.join(f.spec.tags)}")
        else:
            for cmd in references(target, f.spec)["commands"]:
                print(f"   {cmd}")
    if len(good) > len(shown):
        print(f"... and {len(good) - len(shown)} more (--all)")
    if target is None:
        print("give --registry HOST[:PORT]/NAMESPACE (where they were published) for the pull commands")
    if left_out:
        print(f"{len(left_out)} locked image(s) left out (--json says why)")
    return 0
