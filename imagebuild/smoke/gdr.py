"""Which GPUDirect RDMA path the host offers, and how NCCL should be set for it.

GPUDirect RDMA lets the NIC read and write GPU memory directly. The image carries only user
space; the kernel side comes from the host, in one of three forms:

* ``nvidia-peermem`` (driver >= 465's module, /sys/module/nvidia_peermem or /proc/modules),
* ``nv_peer_mem`` (the older Mellanox module, /sys/module/nv_peer_mem or /proc/modules),
* ``dma-buf``: NVIDIA's open kernel modules (/proc/driver/nvidia/version says
  "Open Kernel Module", R515 and later) on Linux >= 5.12, no extra module needed.

Without any of them NCCL stages network transfers through host memory. Every path is read below
a ``root`` directory, so tests can point the probe at a fake /sys and /proc tree (the kernel
release too: ``root``/proc/sys/kernel/osrelease).

The RDMA ports (/sys/class/infiniband/<dev>/ports/<n>/{link_layer,state,rate}) decide the NIC
settings: the ACTIVE ports become ``NCCL_IB_HCA`` (``=dev:port,...``, exact names) and
``UCX_NET_DEVICES``; ``NCCL_SOCKET_IFNAME`` (NCCL's bootstrap sockets) is the network interface of
an active port (/sys/class/infiniband/<dev>/device/net/*) that has an IPv4 route
(/proc/net/route), else the interface of the default route; without an active port it is not set
(NCCL's own choice stands).

``python -m imagebuild.smoke.gdrcli [--json] [--root DIR]`` (installed as ``imagebuild-gdr-check``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field

from . import rootfs

DMABUF_MIN_KERNEL = (5, 12)
DMABUF_MIN_DRIVER = 515        # the first branch with open kernel modules (and DMA-BUF export)


@dataclass
class RdmaPort:
    device: str                    # mlx5_0
    port: int
    link_layer: str                # InfiniBand | Ethernet (RoCE) | "" when not readable
    state: str                     # ACTIVE, DOWN, INIT, ... (the number before ':' dropped)
    rate: str                      # "400 Gb/sec (4X NDR)"
    netdevs: list[str]             # the device's network interfaces (ib0, ens1f0np0)

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def fabric(self) -> str:
        return {"InfiniBand": "InfiniBand", "Ethernet": "RoCE"}.get(self.link_layer,
                                                                    self.link_layer or "unknown")

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}"


@dataclass
class GdrProbe:
    path: str                      # dma-buf | nvidia-peermem | nv_peer_mem | none
    available: list[str]           # every path the host offers, best first
    nvidia_driver: str | None      # the kernel module version, None without a driver
    open_kernel_module: bool
    kernel: str
    rdma_devices: list[str]        # /sys/class/infiniband entries
    nccl_env: dict[str, str]
    notes: list[str] = field(default_factory=list)
    ports: list[RdmaPort] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        lines = [f"GPUDirect RDMA path: {self.path}",
                 f"available: {', '.join(self.available) or 'none'}",
                 f"NVIDIA kernel module: {self.nvidia_driver or 'not loaded'}"
                 + (" (open)" if self.open_kernel_module else ""),
                 f"kernel: {self.kernel}",
                 f"RDMA devices: {', '.join(self.rdma_devices) or 'none'}"]
        lines += [f"  {p.name}: {p.fabric}, {p.state or 'state unknown'}"
                  + (f", {p.rate}" if p.rate else "") for p in self.ports]
        if self.nccl_env:
            lines.append("NCCL settings: " + " ".join(f"{k}={v}" for k, v in sorted(self.nccl_env.items())))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def kernel_version(release: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _read(root: str, rel: str) -> str | None:
    return rootfs.read_text(root, rel)


def _listdir(root: str, rel: str) -> list[str]:
    return rootfs.listdir(root, rel)


#: what the kernel names RDMA devices and network interfaces (mlx5_0, ib0, ens1f0np0, rxe_eth0)
DEVICE_NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}\Z")


def _names(root: str, rel: str) -> list[str]:
    """The entries of a /sys folder that are device names: one with a newline, a quote or a
    space is no kernel's name, and it would reach a job's `export` lines: left out."""
    return [n for n in _listdir(root, rel) if DEVICE_NAME_RE.match(n)]


def loaded_modules(root: str = "/") -> set[str]:
    """Names of the loaded kernel modules (first column of /proc/modules)."""
    text = _read(root, "proc/modules") or ""
    return {line.split()[0] for line in text.splitlines() if line.split()}


def module_loaded(root: str, name: str, modules: set[str] | None = None) -> bool:
    mods = loaded_modules(root) if modules is None else modules
    return name in mods or rootfs.is_dir(root, f"sys/module/{name}")


def read_kernel_release(root: str = "/") -> str:
    """The running kernel's release: ``root``/proc/sys/kernel/osrelease, else uname."""
    text = (_read(root, "proc/sys/kernel/osrelease") or "").strip()
    return text or os.uname().release


def driver_version(version_text: str | None) -> tuple[str | None, bool]:
    """(driver version, open kernel module) from /proc/driver/nvidia/version's text."""
    if not version_text:
        return None, False
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", version_text)
    return (m.group(1) if m else "unknown"), "Open Kernel Module" in version_text


def rdma_ports(root: str = "/") -> list[RdmaPort]:
    """Every port of every /sys/class/infiniband device, in name order."""
    out = []
    for dev in _names(root, "sys/class/infiniband"):
        netdevs = _names(root, f"sys/class/infiniband/{dev}/device/net")
        for port in sorted(_listdir(root, f"sys/class/infiniband/{dev}/ports"),
                           key=lambda p: (not p.isdigit(), int(p) if p.isdigit() else 0, p)):
            if not port.isdigit():
                continue
            base = f"sys/class/infiniband/{dev}/ports/{port}"
            state = (_read(root, f"{base}/state") or "").strip()
            out.append(RdmaPort(device=dev, port=int(port),
                                link_layer=(_read(root, f"{base}/link_layer") or "").strip(),
                                state=state.split(":", 1)[-1].strip(),
                                rate=(_read(root, f"{base}/rate") or "").strip(),
                                netdevs=netdevs))
    return out


def routed_interfaces(root: str = "/") -> tuple[set[str], str | None]:
    """(interfaces with an IPv4 route, the default route's interface) from /proc/net/route."""
    text = _read(root, "proc/net/route") or ""
    routed, default = set(), None
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 2:
            continue
        routed.add(cols[0])
        if cols[1] == "00000000" and default is None:
            default = cols[0]
    return routed, default


def fabric_env(ports: list[RdmaPort], root: str = "/") -> tuple[dict[str, str], list[str]]:
    """NCCL/UCX NIC settings from the active RDMA ports, and notes on what was left unset."""
    env: dict[str, str] = {}
    notes: list[str] = []
    active = [p for p in ports if p.active]
    if ports and not active:
        notes.append("no RDMA port is ACTIVE (" + ", ".join(f"{p.name} {p.state or 'unknown'}"
                                                         for p in ports) + "): NCCL falls back to sockets")
    if active:
        names = ",".join(p.name for p in active)
        env["NCCL_IB_HCA"] = "=" + names
        env["UCX_NET_DEVICES"] = names
    if any(p.fabric == "RoCE" for p in active):
        notes.append("RoCE: NCCL_IB_GID_INDEX is left unset: NCCL >= 2.21 picks the RoCE v2 GID "
                     "itself")
    routed, default = routed_interfaces(root)
    ifs = sorted({n for p in active for n in p.netdevs if n in routed})
    if ifs:
        env["NCCL_SOCKET_IFNAME"] = "=" + ",".join(ifs)
    elif default and active:
        env["NCCL_SOCKET_IFNAME"] = "=" + default
        notes.append(f"no interface of an active RDMA port has an IPv4 route: NCCL's bootstrap "
                         f"uses the default route's {default}")
    return env, notes


def probe(root: str = "/", kernel_release: str | None = None) -> GdrProbe:
    kernel = kernel_release if kernel_release is not None else read_kernel_release(root)
    driver, open_km = driver_version(_read(root, "proc/driver/nvidia/version"))
    modules = loaded_modules(root)
    peermem = module_loaded(root, "nvidia_peermem", modules)
    nv_peer = module_loaded(root, "nv_peer_mem", modules)
    rdma = _names(root, "sys/class/infiniband")
    ports = rdma_ports(root)
    notes: list[str] = []
    available: list[str] = []
    driver_major = int(driver.split(".")[0]) if driver and driver[0].isdigit() else None
    if driver and open_km and kernel_version(kernel) >= DMABUF_MIN_KERNEL and \
            (driver_major is None or driver_major >= DMABUF_MIN_DRIVER):
        available.append("dma-buf")
    elif driver and open_km and kernel_version(kernel) < DMABUF_MIN_KERNEL:
        notes.append(f"open kernel modules, but kernel {kernel} is older than 5.12: no DMA-BUF")
    elif driver and open_km:
        notes.append(f"driver {driver} is older than R{DMABUF_MIN_DRIVER}: no DMA-BUF")
    if peermem:
        available.append("nvidia-peermem")
    if nv_peer:
        available.append("nv_peer_mem")
    if not driver:
        notes.append("no NVIDIA kernel module loaded (/proc/driver/nvidia/version missing)")
    path = available[0] if available else "none"
    if path == "dma-buf":
        env = {"NCCL_DMABUF_ENABLE": "1", "NCCL_NET_GDR_LEVEL": "PHB"}
        notes.append("NCCL registers GPU buffers with the NIC through DMA-BUF (NCCL >= 2.19)")
    elif path in ("nvidia-peermem", "nv_peer_mem"):
        env = {"NCCL_DMABUF_ENABLE": "0", "NCCL_NET_GDR_LEVEL": "PHB"}
        notes.append(f"NCCL uses GPUDirect RDMA through {path}")
    else:
        env = {"NCCL_NET_GDR_LEVEL": "LOC"}
        notes.append("no GPUDirect RDMA: NCCL uses host-staged copies")
    if not rdma:
        notes.append("no RDMA device in /sys/class/infiniband: NCCL's network is sockets (NET/Socket)")
    nic_env, nic_notes = fabric_env(ports, root)
    env.update(nic_env)
    notes += nic_notes
    return GdrProbe(path=path, available=available, nvidia_driver=driver, open_kernel_module=open_km,
                    kernel=kernel, rdma_devices=rdma, nccl_env=env, notes=notes, ports=ports)


# NCCL_DEBUG=INFO lines that name the transport really used
_TRANSPORTS = {
    "net_ib": re.compile(r"NET/IB\b"),
    "net_socket": re.compile(r"NET/Socket\b"),
    "gdrdma": re.compile(r"GDRDMA|GPU Direct RDMA Enabled", re.I),
    "p2p": re.compile(r"via P2P/"),
    "shm": re.compile(r"via SHM/"),
    "dmabuf": re.compile(r"DMA-?BUF", re.I),
}


def parse_nccl_log(text: str) -> dict[str, int]:
    """Count the NCCL_DEBUG=INFO lines naming each transport; 0 for transports never seen."""
    counts = {key: 0 for key in _TRANSPORTS}
    for line in text.splitlines():
        if "NCCL" not in line:
            continue
        for key, pattern in _TRANSPORTS.items():
            if pattern.search(line):
                counts[key] += 1
    return counts


def transport_summary(counts: dict[str, int]) -> str:
    used = [k for k, v in sorted(counts.items()) if v]
    return ", ".join(used) if used else "no transport lines in the NCCL log"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="imagebuild-gdr-check",
                                 description="report the GPUDirect RDMA path this host offers")
    ap.add_argument("--json", action="store_true", help="print JSON instead of text")
    ap.add_argument("--env", action="store_true",
                    help="print the NCCL settings as shell `export` lines (for eval in job scripts)")
    ap.add_argument("--root", default="/", help="read /sys and /proc below this folder (tests)")
    args = ap.parse_args(argv)
    result = probe(args.root)
    if args.env:
        import shlex
        for key, value in sorted(result.nccl_env.items()):
            print(f"export {key}={shlex.quote(value)}")
        return 0
    if args.json:
        print(json.dumps(result.to_dict(), sort_keys=True, indent=2))
    else:
        print(result.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
