"""imagebuild upgrade: the driver-upgrade day in one command.

It plans as `imagebuild plan` does (images.lock says what is built and published), then for each
image to build or rebuild runs the steps a user would: `build`, `test`, `lock` and, with
`--registry`, `publish` (each the real command, in its own process, its output in a log beside
the report), and plans again with the new lock to name each GPU pool's tag. The report goes to
`--reports-dir` (default .imagebuild/reports beside the matrix): upgrade.json, upgrade.md and
upgrade.junit.xml (one test case per image step). `--dry-run` plans and writes the report without
running a step. Exit 1 when a step failed (the others still run; an image whose step failed is not
published)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .. import add_matrix_option
from ..options import driver_pair, gpu_pools, read_lock_or_none
from ..reporter import Reporter

STEPS = ("build", "test", "lock", "publish")


def configure(parser) -> None:
    parser.add_argument("--driver-from", required=True, metavar="VERSION",
                        help="the driver the cluster runs now, a release such as 570.172.08")
    parser.add_argument("--driver-to", required=True, metavar="VERSION",
                        help="the driver it moves to, a release")
    parser.add_argument("--gpu", required=True,
                        help="the cluster's GPU pools, e.g. H100 or H100,A100 (or `any`)")
    parser.add_argument("--registry", default=None, metavar="HOST[:PORT]/NAMESPACE",
                        help="publish what was built and tested there (without it: build, test "
                             "and lock only)")
    parser.add_argument("--lock", dest="lock_in", default=None, metavar="FILE",
                        help="images.lock (default: beside the matrix); the steps update it")
    parser.add_argument("--reports-dir", default=None, metavar="DIR",
                        help="where upgrade.json, upgrade.md, upgrade.junit.xml and the step logs "
                             "go (default: .imagebuild/reports beside the matrix)")
    parser.add_argument("--date", help="judge end of life on this day (default: the matrix's as_of)")
    parser.add_argument("--dry-run", action="store_true",
                        help="plan and report what would be done; run no step")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_matrix_option(parser)


def _plan(args, gpus):
    from ...deliver.plan import current_recipes, day
    from ...render.run import MatrixRun

    run = MatrixRun.open(args.matrix)
    k, specs = run.k, list(run.images.values())
    locked = read_lock_or_none(args, args.matrix)
    return run, day(k, specs, args.driver_from, args.driver_to, gpus, args.date, locked,
                    current_recipes(k, specs, locked))


def _step(argv: list[str], log: Path) -> tuple[int, float]:
    """One imagebuild command in its own process, as a user runs it; (exit code, seconds)."""
    start = time.monotonic()
    with open(log, "wb") as fh:
        done = subprocess.run([sys.executable, "-m", "imagebuild", *argv], stdout=fh,
                              stderr=subprocess.STDOUT, env=dict(os.environ))
    return done.returncode, time.monotonic() - start


def run(args) -> int:
    from ...atomic import write_atomic
    from ...redact import redact
    from ...workspace import Workspace

    driver_pair(args)
    if args.registry is not None:
        from ...deliver.publish import parse_target
        parse_target(args.registry)          # one line naming --registry before any work
    gpus = gpu_pools(args.gpu)
    ws = Workspace.of(args.matrix)
    reports = Path(args.reports_dir) if args.reports_dir else ws.reports
    reports.mkdir(parents=True, exist_ok=True)
    rep = Reporter.for_args("upgrade", args)
    run_, first = _plan(args, gpus)
    todo = [v for v in first.verdicts if v.action in ("build", "rebuild")]
    # an image built FROM another comes after it; each chain's steps run image by image
    order = sorted(todo, key=lambda v: (v.base is not None, v.image))
    common = ["--matrix", args.matrix]
    lock = ["--lock", args.lock_in] if args.lock_in else []
    steps_done: list[dict] = []
    failed_images: set[str] = set()
    for v in order if not args.dry_run else ():
        if v.base in failed_images:
            steps_done.append({"image": v.image, "step": "build", "code": None, "seconds": 0.0,
                               "log": None, "skipped": f"{v.base} (its base) failed"})
            failed_images.add(v.image)
            continue
        chain = [("build", ["build", v.image, *common]),
                 ("test", ["test", v.image, "--report", str(reports / f"{v.image}.json"), *common]),
                 ("lock", ["lock", v.image, "--reports-dir", str(reports), *lock, *common])]
        if args.registry:
            chain.append(("publish", ["publish", v.image, "--registry", args.registry,
                                      "--reports-dir", str(reports), "--notes", *lock, *common]))
        for name, argv in chain:
            log = reports / f"upgrade-{v.image}-{name}.log"
            rep.progress(f"{v.image}: {name}", image=v.image, step=name)
            code, secs = _step(argv, log)
            steps_done.append({"image": v.image, "step": name, "code": code,
                               "seconds": round(secs, 1), "log": str(log)})
            if code != 0:
                failed_images.add(v.image)
                rep.progress(f"{v.image}: {name} failed (exit {code}); its log: {log}",
                             image=v.image, step=name)
                break
    after = first if args.dry_run else _plan(args, gpus)[1]
    doc = {"driver_from": args.driver_from, "driver_to": args.driver_to,
           "gpus": [g or "any" for g in gpus], "dry_run": args.dry_run,
           "registry": redact(args.registry) if args.registry else None,
           "images": [{**v.to_json(), "done": [s for s in steps_done if s["image"] == v.image]}
                      for v in first.verdicts],
           "pools": [p.to_json() for p in after.pools],
           "failed": sorted(failed_images)}
    md = _markdown(doc)
    write_atomic(reports / "upgrade.json", (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    write_atomic(reports / "upgrade.md", md.encode())
    write_atomic(reports / "upgrade.junit.xml", _junit(doc).encode())
    rep.result({**doc, "reports": {"json": str(reports / "upgrade.json"),
                                   "markdown": str(reports / "upgrade.md"),
                                   "junit": str(reports / "upgrade.junit.xml")}}, md, end="")
    return 1 if failed_images else 0


def _markdown(doc: dict) -> str:
    lines = [f"# Driver upgrade {doc['driver_from']} -> {doc['driver_to']}"
             + (" (dry run)" if doc["dry_run"] else ""), ""]
    lines += ["## GPU pools", ""]
    for p in doc["pools"]:
        lines.append(f"- **{p['gpu']}**: {p['action']}: {p['why']}")
    lines += ["", "## Images", "", "| image | action | status | done | why |", "|---|---|---|---|---|"]
    for i in doc["images"]:
        done = ", ".join(f"{s['step']} " + ("ok" if s["code"] == 0 else
                                            "skipped" if s["code"] is None else f"failed ({s['code']})")
                         for s in i["done"]) or ("would " + i["action"] if doc["dry_run"] and
                                                  i["action"] in ("build", "rebuild") else "-")
        lines.append(f"| {i['image']} | {i['action']} | {i['status']} | {done} | {i['why']} |")
    if doc["failed"]:
        lines += ["", "Failed: " + ", ".join(doc["failed"])]
    return "\n".join(lines) + "\n"


def _junit(doc: dict) -> str:
    from xml.etree import ElementTree as ET

    steps = [s for i in doc["images"] for s in i["done"]]
    suite = ET.Element("testsuite", name=f"imagebuild upgrade {doc['driver_from']} -> {doc['driver_to']}",
                       tests=str(len(steps)),
                       failures=str(sum(1 for s in steps if s["code"] not in (0, None))),
                       skipped=str(sum(1 for s in steps if s["code"] is None)))
    for s in steps:
        case = ET.SubElement(suite, "testcase", classname=s["image"], name=s["step"],
                             time=str(s["seconds"]))
        if s["code"] is None:
            ET.SubElement(case, "skipped", message=s.get("skipped", ""))
        elif s["code"] != 0:
            ET.SubElement(case, "failure", message=f"exit {s['code']}; log {s['log']}")
    return ET.tostring(suite, encoding="unicode") + "\n"
