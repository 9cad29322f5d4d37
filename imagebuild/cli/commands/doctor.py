"""`imagebuild doctor [--root DIR] [--json]`: read this node (driver, GPUs, kernel, RDMA ports,
GPUDirect, Slurm/pyxis/enroot), print its host facts as `resolve` flags, the best image of the
matrix that runs here, what GPUDirect RDMA lacks with the fix, and the NCCL/UCX settings for its
fabric. Exit 0 when the node was read (whatever it lacks); 2 for bad input (--root, a malformed
captured file)."""

from __future__ import annotations

import re
import shlex

from .. import add_matrix_option
from ..reporter import Reporter

SHOWN = 5   # images listed in the text output after the best one


def configure(parser) -> None:
    add_matrix_option(parser)
    parser.add_argument("--root", default="/", metavar="DIR",
                        help="read a captured /proc, /sys and nvidia-smi.csv below DIR instead of "
                             "this node (README: imagebuild doctor)")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--capture", metavar="DIR",
                        help="copy the files doctor reads into DIR (a new or empty folder), a tree "
                             "for --root: to file a report or make a test fixture")


def quote(arg: str) -> str:
    """A shell word; names with spaces in double quotes, as people type them."""
    if re.fullmatch(r"[A-Za-z0-9_.,:=/+-]+", arg):
        return arg
    if re.fullmatch(r"[A-Za-z0-9_.,:=/+ ()-]+", arg):
        return f'"{arg}"'
    return shlex.quote(arg)


def run(args) -> int:
    from ...render.run import MatrixRun
    from ...deliver import doctor

    rep = Reporter.for_args("doctor", args)
    if args.capture:
        written = doctor.capture(args.capture, args.root)
        rep.result({"capture": args.capture, "root": args.root, "files": written},
                   f"captured {len(written)} file(s) into {args.capture} "
                   f"(read it with: imagebuild doctor --root {quote(args.capture)})")
        return 0
    node = doctor.read_node(args.root)
    matrix_run = MatrixRun.open(args.matrix)    # the run's one read of the matrix
    k, specs = matrix_run.k, list(matrix_run.images.values())
    d = doctor.diagnose(k, specs, node)
    if args.json:
        rep.result(d.to_json())
        return 0
    print_text(d)
    return 0


def print_text(d) -> None:
    n = d.node
    where = "this node" if n.live else f"the tree {n.root}"
    print(f"Node ({where}):")
    if n.driver is None:
        print("  NVIDIA driver   none: no NVIDIA driver is loaded (no /proc/driver/nvidia/version"
              + (", nvidia-smi not found" if n.live and n.gpu_source is None else "") + ")")
    else:
        flavour = "open kernel module" if n.open_kernel_module else "proprietary kernel module"
        print(f"  NVIDIA driver   {n.driver} ({flavour})")
    if n.gpus:
        counts: dict[tuple[str, str], int] = {}
        for g in n.gpus:
            counts[(g.name, g.compute_cap)] = counts.get((g.name, g.compute_cap), 0) + 1
        for (name, cc), count in sorted(counts.items()):
            print(f"  GPUs            {count} x {name} (compute capability {cc}) [{n.gpu_source}]")
    else:
        print("  GPUs            none")
    print(f"  kernel          {n.kernel}" + (f" ({n.platform})" if n.platform else ""))
    if n.probe.ports:
        for p in n.probe.ports:
            net = f", {'/'.join(p.netdevs)}" if p.netdevs else ""
            print(f"  RDMA            {p.name} {p.fabric}, {p.state or 'state unknown'}"
                  + (f", {p.rate}" if p.rate else "") + net)
    else:
        print("  RDMA            none (/sys/class/infiniband is empty)")
    mods = [m for m, loaded in sorted(n.modules.items()) if loaded]
    print(f"  modules         {', '.join(mods) if mods else 'no nvidia_peermem, nv_peer_mem or gdrdrv'}")
    if n.ofed:
        print(f"  MLNX/DOCA-OFED  yes: {n.ofed_evidence}")
    slurm = ", ".join(f"{c} {n.commands[c] or 'not found'}" for c in ("srun", "sinfo", "enroot"))
    print(f"  Slurm           {slurm}; pyxis {n.pyxis or 'not configured (no plugstack.conf names it)'}")
    for note in n.notes:
        print(f"  note: {note}")
    print()
    print("Host facts (for imagebuild resolve / find):")
    print("  " + " ".join(quote(a) for a in d.facts.flags()))
    for note in d.facts.notes:
        print(f"  note: {note}")
    print()
    if d.best is None:
        print("No image of the matrix runs here.")
        for m in d.misfits[:3]:
            print(f"  {m.spec.id}: {m.why}")
    else:
        if n.driver is None:
            print("No NVIDIA driver: only CPU images run here (CUDA images need a GPU and its "
                  "driver).")
        b = d.best
        mode = ("CPU only" if b.mode == "n/a" else b.mode) + (f", needs {b.package}" if b.package else "")
        print(f"Best image here: {b.spec.id} ({mode})")
        print(f"  tags: {', '.join(b.spec.tags)}")
        if b.mode not in ("n/a",):
            print(f"  {b.detail}" + (f" (caveat: {b.caveat})" if b.caveat else ""))
        if d.runtime is not None:
            print("  NVIDIA's container runtime: " + ("its NVIDIA_REQUIRE_* hold on this node" if d.runtime == ""
                                                      else f"would refuse it here: {d.runtime}"))
        rest = d.fits[1:1 + SHOWN]
        if rest:
            print(f"  also runs here ({len(d.fits) - 1} more; --json lists all):")
            for f in rest:
                print(f"    {f.spec.id} ({f.mode}{', needs ' + f.package if f.package else ''})")
        print("  published tags and pull commands: imagebuild find "
              + " ".join(quote(a) for a in d.facts.flags()) + " --registry HOST[:PORT]/NAMESPACE")
    print()
    print(f"GPUDirect RDMA: {d.gpudirect}")
    for m in d.missing:
        print(f"  {'optional' if m.optional else 'missing'}: {m.what}")
        print(f"      fix: {m.fix}")
    if d.best is not None and d.best.gpudirect and n.driver is not None and n.probe.rdma_devices:
        print(f"  the matrix's GPUDirect paths for {d.best.spec.id}:")
        for g in d.best.gpudirect:
            print(f"    {g['path']:<15} {g['allowed']:<8} {g['detail']} [{g['source']}]")
    if d.env:
        print()
        print("Settings for this fabric (export in the job script):")
        for key, value in sorted(d.env.items()):
            print(f"  export {key}={shlex.quote(value)}")
    for note in d.fabric_notes:
        print(f"  note: {note}")
