"""imagebuild check: is a complete stack consistent (on a host, when host facts are given)?

The stack comes from flags, a JSON file (a `resolve --json` document, a plain {component: version}
mapping, or an image's labels as `docker inspect` prints them), or a built image's labels."""

from __future__ import annotations

import json

from ... import labels as L
from .. import add_matrix_option
from ...errors import UsageError
from ..reporter import Reporter
from ..options import (WISH_FLAGS, add_host_options, add_system_options, host_from, system_from,
                       wishes_from)
from ..resolution import print_resolution

LABEL_PREFIX = L.STACK


def configure(parser) -> None:
    add_matrix_option(parser)
    add_host_options(parser)
    g = parser.add_argument_group("the stack (exact versions, 'none' for absent)")
    for flag in WISH_FLAGS:
        g.add_argument(f"--{flag}", dest=f"wish_{flag}", metavar="VERSION")
    add_system_options(g)
    parser.add_argument("--from-json", metavar="FILE",
                        help="a resolve --json document, a {component: version} mapping, or labels")
    parser.add_argument("--image", metavar="REF", help="read the stack from a built image's labels")
    parser.add_argument("--json", action="store_true", help="print a JSON document")


def stack_from_mapping(data: dict, origin: str) -> dict[str, str]:
    """Accept {"stack": {...}}, {component: version}, docker inspect output, or a labels dict."""
    if isinstance(data, list) and data and isinstance(data[0], dict):  # docker inspect output
        data = data[0]
    if not isinstance(data, dict):
        raise UsageError("expected a JSON object", argument=origin)
    from ..reporter import SCHEMA
    if data.get("schema") == SCHEMA and isinstance(data.get("result"), dict):   # a --json envelope
        data = data["result"]
    if isinstance(data.get("stack"), dict):
        data = data["stack"]
    labels = data.get("Config", {}).get("Labels") if isinstance(data.get("Config"), dict) else None
    if labels is None:
        labels = data.get("Labels") or data.get("labels") or data
    out = {}
    for key, value in labels.items():
        key = str(key)
        if key.startswith(LABEL_PREFIX):
            key = key[len(LABEL_PREFIX):]
        comp = WISH_FLAGS.get(key)
        if comp is not None:
            out[comp] = str(value)
    if not out:
        raise UsageError("names no stack component (expected pytorch, cuda, ... or "
                         f"{LABEL_PREFIX}* labels)", argument=origin)
    return out


def _cuda_provider(data) -> str | None:
    """The io.imagebuild.cuda.provider label of labels, or of docker inspect output holding them
    (None when absent: CUDA from NVIDIA's repository); a value imagebuild does not write is refused."""
    from ...knowledge.recipe_inputs import CUDA_FROM
    from ...render.images import CUDA_PROVIDER_LABEL
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]
    if not isinstance(data, dict):
        return None
    labels = data.get("Config", {}).get("Labels") if isinstance(data.get("Config"), dict) else None
    if labels is None:
        labels = data.get("Labels") or data.get("labels") or data
    value = labels.get(CUDA_PROVIDER_LABEL) if isinstance(labels, dict) else None
    if value is None:
        return None
    if value not in CUDA_FROM:
        raise UsageError(f"label {CUDA_PROVIDER_LABEL}={value!r} is not one of "
                         f"{', '.join(CUDA_FROM)}", argument="--image")
    return str(value)


def run(args) -> int:
    from ... import knowledge
    from ...resolve import solver as R

    stack: dict[str, str] = {}
    image = False   # the stack is an imagebuild image's (its labels), not a machine's
    cuda_from = "repository"   # where that image's CUDA came from (its cuda.provider label)
    if args.from_json:
        from ...localfile import MAX_DOCUMENT_BYTES, read_text
        from ... import untrusted
        try:
            data = untrusted.loads(read_text(args.from_json, MAX_DOCUMENT_BYTES))
        except OSError as exc:
            raise UsageError(f"cannot read: {exc.strerror}", argument=args.from_json) from None
        except UnicodeDecodeError:
            raise UsageError("not UTF-8", argument=args.from_json) from None
        except untrusted.BadData as exc:
            raise UsageError(str(exc), argument=args.from_json) from None
        stack.update(stack_from_mapping(data, args.from_json))
        image = LABEL_PREFIX in json.dumps(data)
        cuda_from = _cuda_provider(data) or cuda_from
    env: dict[str, str] | None = None    # the image's environment, where the input holds it
    if args.from_json:
        env = _env_of(data)
    if args.image:
        from ...engines import get_engine
        found = get_engine().lookup(args.image)
        if found is None:
            raise UsageError(f"no image {args.image!r} in the engine", argument="--image")
        labels = dict(found.labels)
        env = dict(found.env)
        stack.update(stack_from_mapping(labels, args.image))
        image = True
        cuda_from = _cuda_provider(labels) or cuda_from
    stack.update({c: v.lstrip("=") for c, v in wishes_from(args).items()})
    if stack.get("driver") and not args.driver:
        args.driver = stack["driver"]
    k = knowledge.load(args.matrix)
    host = host_from(args)
    res = R.check(k, host, stack, args.allow_unverified, system=system_from(args), image=image,
                  cuda_from=cuda_from)
    refused = _runtime_refusal(k, env, host) if env is not None else None
    if args.json:
        doc = res.to_json()
        if env is not None and host.driver:
            doc["runtime"] = {"starts": refused is None, "message": refused}
        if refused:
            doc["ok"] = False
        Reporter.for_args("check", args).result(doc)
    elif res.ok:
        print("consistent:")
        print_resolution(res)
    else:
        print("inconsistent: the facts that rule this stack out:")
        for line in res.explanation:
            print(f"  - {line}")
    if refused and not args.json:
        print(f"NVIDIA's container runtime would refuse this image here: {refused} (the image's "
              "NVIDIA_REQUIRE_* variables; NVIDIA_DISABLE_REQUIRE=1 turns the check off)")
    return 0 if res.ok and not refused else 1


def _env_of(data) -> dict[str, str] | None:
    """The Config.Env of docker inspect output as a mapping, or None when the document has none."""
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]
    config = data.get("Config") if isinstance(data, dict) else None
    items = config.get("Env") if isinstance(config, dict) else None
    if not isinstance(items, list):
        return None
    return dict(str(e).split("=", 1) for e in items if isinstance(e, str) and "=" in e)


def _runtime_refusal(k, env: dict[str, str], host) -> str | None:
    """NVIDIA's runtime's error for the image on the host flags (None: it would start it)."""
    from ...deliver.runtimecheck import gpu_of, refusal
    gpu = gpu_of(k, host.gpu) if host.gpu and host.gpu.lower() != "none" else None
    return refusal(k, env, host.driver, [gpu] if gpu else [])
