"""`imagebuild doctor`: read a cluster node and say what runs there and what is missing.

What is read (below ``root``, "/" on the node itself; a captured tree in tests):

- ``proc/driver/nvidia/version``: the driver version and the kernel module's flavour (the open
  module's line says "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ...", the proprietary
  one "NVIDIA UNIX x86_64 Kernel Module  535.104.05 ..."), and the CPU architecture it was built for;
- the GPUs: on the node, NVML through ``nvidia-ml-py`` when it is installed, else
  ``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader``; in a captured
  tree, that command's output saved as ``nvidia-smi.csv`` at the tree's top (:data:`SMI_CAPTURE`);
- ``proc/sys/kernel/osrelease``, ``proc/modules``, ``proc/net/route``, ``sys/module/*`` and
  ``sys/class/infiniband/<dev>/{ports/<n>/{link_layer,state,rate},device/net/*}``: through the
  GPUDirect probe the images carry (:mod:`imagebuild.smoke.gdr`), so the node and the image judge
  GPUDirect RDMA and the NCCL/UCX settings the same way;
- Slurm: ``srun``, ``sinfo``, ``enroot`` and MLNX_OFED's ``ofed_info`` on PATH (in a captured tree:
  a file of that name in one of :data:`COMMAND_DIRS`), and ``etc/slurm/plugstack.conf`` or
  ``etc/slurm/plugstack.conf.d/*`` naming pyxis.

Core module: returns data, prints nothing.
"""

from __future__ import annotations

import os
import platform as _platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from ..errors import ImagebuildError, UsageError
from ..smoke import gdr, rootfs

SMI_CAPTURE = "nvidia-smi.csv"
SMI_QUERY = ("nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader")
COMMAND_DIRS = ("usr/local/bin", "usr/bin", "bin", "usr/sbin", "sbin", "opt/slurm/bin")
COMMANDS = ("srun", "sinfo", "enroot", "ofed_info")
PLUGSTACK = ("etc/slurm/plugstack.conf", "etc/slurm/plugstack.conf.d")

_CC = re.compile(r"^\d+\.\d+\Z")
_DRIVER = re.compile(r"^\d+(\.\d+){1,2}\Z")
_ARCH = re.compile(r"Kernel Module for (\S+)|NVIDIA UNIX (?!Open )(\S+) Kernel Module")


@dataclass(frozen=True)
class GpuInfo:
    name: str
    compute_cap: str        # "9.0"
    driver: str

    def to_json(self) -> dict:
        return {"name": self.name, "compute_cap": self.compute_cap, "driver": self.driver}


@dataclass
class Node:
    root: str
    live: bool                          # read from the running node (not a captured tree)
    kernel: str
    platform: str | None                # x86_64 | aarch64 | None when not known
    driver: str | None
    open_kernel_module: bool
    gpus: list[GpuInfo]
    gpu_source: str | None              # nvml | nvidia-smi | the captured file
    probe: gdr.GdrProbe
    modules: dict[str, bool]            # the GPUDirect-related modules: loaded or not
    ofed: bool | None                   # MLNX_OFED/DOCA-OFED: True with evidence, else unknown
    ofed_evidence: str | None
    commands: dict[str, str | None]     # srun, sinfo, enroot, ofed_info -> path or None
    pyxis: str | None                   # the plugstack file naming pyxis
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "root": self.root, "live": self.live, "kernel": self.kernel, "platform": self.platform,
            "driver": self.driver, "open_kernel_module": self.open_kernel_module,
            "gpus": [g.to_json() for g in self.gpus], "gpu_source": self.gpu_source,
            "modules": dict(sorted(self.modules.items())), "ofed": self.ofed,
            "ofed_evidence": self.ofed_evidence,
            "rdma_ports": [{"device": p.device, "port": p.port, "link_layer": p.link_layer,
                            "fabric": p.fabric, "state": p.state, "rate": p.rate,
                            "netdevs": list(p.netdevs)} for p in self.probe.ports],
            "gpudirect": {"path": self.probe.path, "available": list(self.probe.available)},
            "slurm": {"srun": self.commands.get("srun"), "sinfo": self.commands.get("sinfo"),
                      "enroot": self.commands.get("enroot"), "pyxis": self.pyxis},
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------------------------ reading


def _read(root: str, rel: str) -> str | None:
    """A regular file of the node below ``root``, resolved inside it and bounded (smoke/rootfs)."""
    return rootfs.read_text(root, rel)


def parse_smi_csv(text: str, origin: str) -> list[GpuInfo]:
    """nvidia-smi's ``name, compute_cap, driver_version`` CSV lines (a header line is skipped);
    a malformed line is an error naming ``origin`` and the line."""
    gpus = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = [c.strip() for c in line.rsplit(",", 2)]
        if n == 1 and cols == ["name", "compute_cap", "driver_version"]:
            continue
        if len(cols) != 3 or not cols[0] or not _CC.match(cols[1]) or not _DRIVER.match(cols[2]):
            raise ImagebuildError("expected 'NAME, COMPUTE_CAP, DRIVER' as printed by "
                                  f"{' '.join(SMI_QUERY)}, got {line.strip()[:80]!r}",
                                  file=origin, line=n)
        gpus.append(GpuInfo(cols[0], cols[1], cols[2]))
    return gpus


def _nvml_gpus() -> tuple[list[GpuInfo] | None, str | None]:
    """The GPUs through NVML (nvidia-ml-py), or (None, why) when NVML cannot answer."""
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        return None, None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError and loader errors alike
        return None, f"NVML did not start ({type(exc).__name__}: {exc})"

    def text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    try:
        driver = text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(GpuInfo(text(pynvml.nvmlDeviceGetName(handle)), f"{major}.{minor}", driver))
        return gpus, None
    except Exception as exc:  # noqa: BLE001
        return None, f"NVML failed ({type(exc).__name__}: {exc})"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _smi_gpus() -> tuple[list[GpuInfo] | None, str | None]:
    exe = shutil.which(SMI_QUERY[0])
    if exe is None:
        return None, None
    try:
        out = subprocess.run([exe, *SMI_QUERY[1:]], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi did not answer ({type(exc).__name__})"
    if out.returncode != 0:
        why = (out.stdout + out.stderr).strip().splitlines()
        return None, f"nvidia-smi failed: {why[0] if why else f'exit code {out.returncode}'}"
    try:
        return parse_smi_csv(out.stdout, "nvidia-smi output"), None
    except ImagebuildError as exc:
        return None, str(exc)


def _command(root: str, live: bool, name: str) -> str | None:
    if live:
        return shutil.which(name)
    for d in COMMAND_DIRS:
        if rootfs.is_file(root, f"{d}/{name}"):
            return "/" + d + "/" + name
    return None


def _plugstack_files(root: str) -> list[str]:
    """plugstack.conf and the files of plugstack.conf.d, relative to ``root``, in name order."""
    conf, folder = PLUGSTACK
    return [conf] + [f"{folder}/{name}" for name in rootfs.listdir(root, folder)]


#: the files a node's facts stand on: one that is there but cannot be read is said, never skipped
_KEY_FILES = ("proc/driver/nvidia/version", "proc/modules", "proc/sys/kernel/osrelease", SMI_CAPTURE)


def _unreadable(root: str, rels) -> list[str]:
    """A note for each of ``rels`` that is present below ``root`` but is no regular file doctor
    can read within its bound (a link to /dev/zero, a FIFO, a folder, a huge file): its facts
    are unknown, and the report says so instead of reading the node as if it were absent."""
    notes = []
    for rel in rels:
        if os.path.lexists(os.path.join(root, rel)) and _read(root, rel) is None:
            notes.append(f"/{rel} is present but is not a readable regular file of at most "
                         f"{rootfs.MAX_BYTES} bytes (a link to a device, a FIFO?): passed over, its "
                         "facts are unknown")
    return notes


def _pyxis(root: str) -> str | None:
    """The first plugstack file (in name order) with an uncommented line naming pyxis."""
    for rel in _plugstack_files(root):
        text = _read(root, rel)
        if text and any("pyxis" in line.split("#", 1)[0] for line in text.splitlines()):
            return "/" + rel
    return None


def _platform_of(version_text: str | None, root: str, live: bool) -> str | None:
    m = _ARCH.search(version_text or "")
    if m:
        return m.group(1) or m.group(2)
    arch = (_read(root, "proc/sys/kernel/arch") or "").strip()
    if arch:
        return arch
    return (_platform.machine() or None) if live else None


def read_node(root: str = "/", *, nvml: bool = True) -> Node:
    """Read the node below ``root`` ("/": the running node, with NVML and nvidia-smi)."""
    if not os.path.isdir(root):
        raise UsageError(f"{root!r} is not a folder (a captured /proc and /sys tree)",
                         argument="--root")
    live = os.path.realpath(root) == "/"
    if not live and not rootfs.is_file(root, "proc/sys/kernel/osrelease"):
        raise ImagebuildError("a captured tree needs proc/sys/kernel/osrelease (the kernel "
                              "release; without it this machine's would be reported)",
                              file=os.path.join(root, "proc/sys/kernel/osrelease"))
    probe = gdr.probe(root)
    version_text = _read(root, "proc/driver/nvidia/version")
    driver, open_km = probe.nvidia_driver, probe.open_kernel_module
    notes: list[str] = _unreadable(root, _KEY_FILES)
    gpus: list[GpuInfo] = []
    source = None
    if live:
        found, why = _nvml_gpus() if nvml else (None, None)
        if found is not None:
            gpus, source = found, "nvml"
        else:
            if why:
                notes.append(why)
            found, why = _smi_gpus()
            if found is not None:
                gpus, source = found, "nvidia-smi"
            elif why:
                notes.append(why)
    else:
        if rootfs.is_file(root, SMI_CAPTURE):
            text = _read(root, SMI_CAPTURE)
            gpus, source = parse_smi_csv(text or "", os.path.join(root, SMI_CAPTURE)), "/" + SMI_CAPTURE
    if driver is None and gpus:
        driver = gpus[0].driver
        notes.append("no /proc/driver/nvidia/version: the driver version is the one "
                     f"{source} reports")
    elif driver and driver != "unknown":
        other = sorted({g.driver for g in gpus if g.driver != driver})
        if other:
            notes.append(f"the kernel module is {driver} but {source} reports {', '.join(other)}: "
                         "driver and library versions differ (reboot or reload the driver)")
    if driver is not None and not gpus and source is None:
        notes.append("the NVIDIA kernel module is loaded but no GPU list could be read "
                     "(no NVML, no nvidia-smi" + ("" if live else f", no {SMI_CAPTURE}") + ")")
    modules = gdr.loaded_modules(root)
    mods = {m: gdr.module_loaded(root, m, modules) for m in ("nvidia_peermem", "nv_peer_mem",
                                                              "gdrdrv")}
    commands = {c: _command(root, live, c) for c in COMMANDS}
    ofed, evidence = None, None
    if commands.get("ofed_info"):
        ofed, evidence = True, f"{commands['ofed_info']} (MLNX_OFED/DOCA-OFED)"
    elif mods["nvidia_peermem"] or mods["nv_peer_mem"]:
        loaded = "nvidia_peermem" if mods["nvidia_peermem"] else "nv_peer_mem"
        ofed, evidence = True, f"{loaded} is loaded (it needs MLNX_OFED/DOCA-OFED's peer-memory API)"
    return Node(root=root, live=live, kernel=probe.kernel,
                platform=_platform_of(version_text, root, live), driver=driver,
                open_kernel_module=open_km, gpus=gpus, gpu_source=source, probe=probe,
                modules=mods, ofed=ofed, ofed_evidence=evidence, commands=commands,
                pyxis=_pyxis(root), notes=notes)


# ------------------------------------------------------------------------------------ judging


def kernel_version(release: str) -> str | None:
    """6.18.44 of 6.18.44-fc-v657-gpu (what `resolve --kernel` takes)."""
    m = re.match(r"(\d+\.\d+(?:\.\d+)?)", release or "")
    return m.group(1) if m else None


@dataclass
class HostFacts:
    driver: str | None
    gpu: str | None               # a name the knowledge knows, sm_XY, or "none"
    kernel: str | None
    open_kernel_modules: bool | None
    ofed: bool | None
    platform: str | None
    notes: list[str] = field(default_factory=list)

    def flags(self) -> list[str]:
        """The facts as `imagebuild resolve` / `find` arguments (argv form)."""
        out = []
        if self.driver:
            out += ["--driver", self.driver]
        if self.gpu:
            out += ["--gpu", self.gpu]
        if self.kernel:
            out += ["--kernel", self.kernel]
        if self.open_kernel_modules is not None:
            out += ["--open-kernel-modules", "yes" if self.open_kernel_modules else "no"]
        if self.ofed is not None:
            out += ["--ofed", "yes" if self.ofed else "no"]
        if self.platform:
            out += ["--platform", self.platform]
        return out

    def host(self):
        from ..resolve.solver import Host
        return Host(driver=self.driver, gpu=self.gpu, kernel=self.kernel, ofed=self.ofed,
                    open_kernel_modules=self.open_kernel_modules)

    def to_json(self) -> dict:
        return {"driver": self.driver, "gpu": self.gpu, "kernel": self.kernel,
                "open_kernel_modules": self.open_kernel_modules, "ofed": self.ofed,
                "platform": self.platform}


def host_facts(k, node: Node) -> HostFacts:
    """The node as resolver host facts. A GPU name the knowledge does not know falls back to its
    compute capability (sm_XY); a node with several GPU models is judged by the oldest one."""
    notes = []
    driver = node.driver if node.driver and node.driver != "unknown" else None
    gpu = None
    if node.gpus:
        models = sorted({(g.compute_cap, g.name) for g in node.gpus},
                        key=lambda m: tuple(int(x) for x in m[0].split(".")))
        if len(models) > 1:
            notes.append("GPU models differ (" + ", ".join(n for _, n in models) +
                         f"): judged by the oldest, {models[0][1]}")
        cc, name = models[0]
        if k.gpu_by_name(name) is not None:
            gpu = name
        else:
            sm = "sm_" + cc.replace(".", "")
            if k.gpu_by_name(sm) is not None:
                gpu = sm
                notes.append(f"{name} is not in the knowledge base: judged by its compute "
                             f"capability {cc} ({sm})")
            else:
                notes.append(f"{name} (compute capability {cc}) is not in the knowledge base")
    elif node.driver is None:      # no NVIDIA kernel module at all (not: a version not parsed)
        gpu = "none"
    from .hostfit import platform_id
    return HostFacts(driver=driver, gpu=gpu, kernel=kernel_version(node.kernel),
                     open_kernel_modules=node.open_kernel_module if driver else None,
                     ofed=node.ofed, platform=platform_id(k, node.platform), notes=notes)


@dataclass(frozen=True)
class Missing:
    what: str
    fix: str
    optional: bool = False      # GPUDirect RDMA works without it, only slower

    def to_json(self) -> dict:
        return {"what": self.what, "fix": self.fix, "optional": self.optional}


def gpudirect_status(node: Node) -> tuple[str, list[Missing]]:
    """(one line on GPUDirect RDMA, what is missing for it with the fix)."""
    p = node.probe
    if node.driver is None:
        return "not applicable: no NVIDIA driver", []
    if not p.rdma_devices:
        return ("not possible: no RDMA device (/sys/class/infiniband is empty); NCCL's network "
                "between nodes is TCP sockets"), [
            Missing("an InfiniBand or RoCE NIC with its RDMA driver (mlx5_ib for ConnectX)",
                    "nothing to load on this node: GPUDirect RDMA needs RDMA hardware")]
    missing: list[Missing] = []
    active = [q for q in p.ports if q.active]
    if not active:
        states = ", ".join(f"{q.name} {q.state or 'unknown'}" for q in p.ports) or "no ports"
        missing.append(Missing(f"an ACTIVE RDMA port ({states})",
                               "check the cable and the switch port; on InfiniBand a subnet "
                               "manager must be running (`ibstat` shows the port state)"))
    if p.path == "none":
        kernel_ok = gdr.kernel_version(p.kernel) >= gdr.DMABUF_MIN_KERNEL
        if node.open_kernel_module and not kernel_ok:
            missing.append(Missing(
                f"DMA-BUF: the open kernel module needs Linux >= 5.12, this kernel is {p.kernel}",
                "upgrade the kernel to 5.12 or later, or load nvidia-peermem "
                "(needs MLNX_OFED/DOCA-OFED): modprobe nvidia-peermem"))
        elif node.open_kernel_module:
            missing.append(Missing(
                f"DMA-BUF: driver {node.driver} is older than R{gdr.DMABUF_MIN_DRIVER}",
                f"upgrade the driver to R{gdr.DMABUF_MIN_DRIVER} or later, or load "
                "nvidia-peermem: modprobe nvidia-peermem"))
        else:
            missing.append(Missing(
                "a GPU peer-memory path: nvidia-peermem is not loaded and the proprietary kernel "
                "module offers no DMA-BUF",
                "load nvidia-peermem: modprobe nvidia-peermem (it ships with the driver from R470 "
                "and needs MLNX_OFED or DOCA-OFED); or switch to NVIDIA's open kernel modules "
                "(R515 and later) on Linux >= 5.12 for DMA-BUF"))
        line = "missing: NCCL stages inter-node transfers through host memory"
    else:
        line = f"ready: {p.path}" + (f" (also {', '.join(p.available[1:])})"
                                     if len(p.available) > 1 else "")
    if not node.modules.get("gdrdrv"):
        missing.append(Missing("gdrdrv (gdrcopy's kernel module): UCX's gdr_copy transport is off, "
                               "small GPU-memory copies are slower",
                               "install gdrcopy's kernel module on the host and load it: "
                               "modprobe gdrdrv", optional=True))
    return line, missing


@dataclass
class Diagnosis:
    node: Node
    facts: HostFacts
    fits: list                     # hostfit.Fit, best first
    misfits: list                  # hostfit.Misfit
    gpudirect: str
    missing: list[Missing]
    env: dict[str, str]            # NCCL/UCX settings for this node's fabric
    fabric_notes: list[str] = field(default_factory=list)
    # what NVIDIA's container runtime makes of the best image's NVIDIA_REQUIRE_* here: None when
    # there is nothing to judge (no driver, a CPU image), "" when it would start it, else its error
    runtime: str | None = None

    @property
    def best(self):
        return self.fits[0] if self.fits else None

    def to_json(self) -> dict:
        return {"node": self.node.to_json(), "host": self.facts.to_json(),
                "resolve_flags": self.facts.flags(), "host_notes": list(self.facts.notes),
                "best": self.best.to_json() if self.best else None,
                "runs": [{"image": f.spec.id, "mode": f.mode, **({"package": f.package}
                                                                  if f.package else {})}
                         for f in self.fits],
                "does_not_run": len(self.misfits),
                "gpudirect": {"status": self.gpudirect,
                              "missing": [m.to_json() for m in self.missing]},
                "env": dict(sorted(self.env.items())), "fabric_notes": list(self.fabric_notes),
                "runtime": None if self.runtime is None else
                {"starts": self.runtime == "", "message": self.runtime or None}}


def diagnose(k, specs, node: Node) -> Diagnosis:
    """The node's host facts, the matrix's images that run there (best first), GPUDirect RDMA
    and the NCCL/UCX settings its fabric calls for."""
    from .hostfit import fits
    facts = host_facts(k, node)
    good, bad = fits(k, specs, facts.host(), facts.platform)
    status, missing = gpudirect_status(node)
    env = dict(node.probe.nccl_env)
    if node.driver is None:     # no GPU: only the MPI/UCX settings matter
        env = {key: v for key, v in env.items() if not key.startswith("NCCL_")}
    elif not node.probe.rdma_devices:   # no NIC to read GPU memory: GPUDirect settings are moot
        env = {key: v for key, v in env.items()
               if key not in ("NCCL_NET_GDR_LEVEL", "NCCL_DMABUF_ENABLE")}
    _, fabric_notes = gdr.fabric_env(node.probe.ports, node.root)
    return Diagnosis(node=node, facts=facts, fits=good, misfits=bad, gpudirect=status,
                     missing=missing, env=env, fabric_notes=fabric_notes,
                     runtime=_runtime(k, good[0].spec, node) if good else None)


def _runtime(k, spec, node: Node) -> str | None:
    """NVIDIA's runtime on the best image here (runtimecheck): None with nothing to judge."""
    from ..render.requires import image_requires
    from .runtimecheck import gpu_of, refusal
    env = image_requires(spec, k)
    if not env or node.driver is None:
        return None
    gpus = [gpu_of(k, g.name, g.compute_cap) for g in node.gpus or []]
    return refusal(k, env, node.driver, [g for g in gpus if g]) or ""


# ------------------------------------------------------------------------------------ capturing


def capture(dest: str, root: str = "/", *, nvml: bool = True) -> list[str]:
    """Copy the files doctor reads from the node at ``root`` into ``dest`` (a captured tree for
    `doctor --root`), with the GPU list as ``nvidia-smi.csv`` and each command found as an empty
    file in ``usr/bin``. Returns the files written, relative to ``dest``, sorted."""
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise UsageError(f"{dest!r} exists and is not an empty folder", argument="--capture")
    node = read_node(root, nvml=nvml)
    files: dict[str, str] = {}
    for rel in ("proc/driver/nvidia/version", "proc/sys/kernel/osrelease", "proc/sys/kernel/arch",
                "proc/modules", "proc/net/route"):
        text = _read(root, rel)
        if text is not None:
            files[rel] = text
    for port in node.probe.ports:
        base = f"sys/class/infiniband/{port.device}/ports/{port.port}"
        for name in ("link_layer", "state", "rate"):
            text = _read(root, f"{base}/{name}")
            if text is not None:
                files[f"{base}/{name}"] = text
        for netdev in port.netdevs:
            rel = f"sys/class/infiniband/{port.device}/device/net/{netdev}/operstate"
            files[rel] = _read(root, rel) or "unknown\n"
    if node.gpus:
        files[SMI_CAPTURE] = "".join(f"{g.name}, {g.compute_cap}, {g.driver}\n" for g in node.gpus)
    for rel in _plugstack_files(root):
        text = _read(root, rel)
        if text is not None:
            files[rel] = text
    for name, path in sorted(node.commands.items()):
        if path:
            folder = os.path.dirname(path).strip("/")
            files[f"{folder if folder in COMMAND_DIRS else 'usr/bin'}/{name}"] = ""
    for rel, text in files.items():
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text)
    return sorted(files)
