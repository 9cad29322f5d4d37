"""Which GPUDirect RDMA path the host offers, and how NCCL should be set for it.

GPUDirect RDMA lets the NIC read and write GPU memory directly. The image carries only user
space; the kernel side comes from the host, in one of three forms:

* ``nvidia-peermem`` (driver >= 465's module, /sys/module/nvidia_peermem),
* ``nv_peer_mem`` (the older Mellanox module, /sys/module/nv_peer_mem),
* ``dma-buf``: NVIDIA's open kernel modules (/proc/driver/nvidia/version says
  "Open Kernel Module") on Linux >= 5.12, no extra module needed.

Without any of them NCCL stages network transfers through host memory. Every path is read below
a ``root`` directory, so tests can point the probe at a fake /sys and /proc tree.

``python -m imagebuild.smoke.gdr [--json] [--root DIR]`` (installed as ``imagebuild-gdr-check``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field

DMABUF_MIN_KERNEL = (5, 12)


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

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        lines = [f"GPUDirect RDMA path: {self.path}",
                 f"available: {', '.join(self.available) or 'none'}",
                 f"NVIDIA kernel module: {self.nvidia_driver or 'not loaded'}"
                 + (" (open)" if self.open_kernel_module else ""),
                 f"kernel: {self.kernel}",
                 f"RDMA devices: {', '.join(self.rdma_devices) or 'none'}"]
        if self.nccl_env:
            lines.append("NCCL settings: " + " ".join(f"{k}={v}" for k, v in sorted(self.nccl_env.items())))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def kernel_version(release: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _read(root: str, rel: str) -> str | None:
    try:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def probe(root: str = "/", kernel_release: str | None = None) -> GdrProbe:
    kernel = kernel_release if kernel_release is not None else os.uname().release
    version_text = _read(root, "proc/driver/nvidia/version")
    driver = None
    open_km = False
    if version_text:
        m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", version_text)
        driver = m.group(1) if m else "unknown"
        open_km = "Open Kernel Module" in version_text
    peermem = os.path.isdir(os.path.join(root, "sys/module/nvidia_peermem"))
    nv_peer = os.path.isdir(os.path.join(root, "sys/module/nv_peer_mem"))
    ib_dir = os.path.join(root, "sys/class/infiniband")
    try:
        rdma = sorted(os.listdir(ib_dir))
    except OSError:
        rdma = []
    notes: list[str] = []
    available: list[str] = []
    if driver and open_km and kernel_version(kernel) >= DMABUF_MIN_KERNEL:
        available.append("dma-buf")
    elif driver and open_km:
        notes.append(f"open kernel modules, but kernel {kernel} is older than 5.12: no DMA-BUF")
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
    return GdrProbe(path=path, available=available, nvidia_driver=driver, open_kernel_module=open_km,
                    kernel=kernel, rdma_devices=rdma, nccl_env=env, notes=notes)


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
