"""A second Docker engine beside the session's, for the shared-cache tests and benchmark: its own
data root, exec root, pid file, socket and bridge (../shared/MACHINE.md: a second engine started
with no bridge of its own once took the first one's docker0 away). It changes no iptables rule
(--iptables=false), so its containers reach nothing outside: a build there that had to run a step
which downloads would fail, which is what the shared-cache test wants to see (every step from the
registry's cache). It reaches the local registry on 127.0.0.1 as any engine does (the daemon
pulls and pushes from the host's network).

``network=True`` gives its containers the way out a builder has (a shard's builder downloads its
packages): this module adds the masquerading and forwarding rules the engine was told not to
write (its own subnet only, at the head of the host's FORWARD chain) and removes them when the
engine stops, so the first engine's rules are never touched."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

BRIDGE = "ib-docker2"
ADDRESS = "172.31.254.1/24"
SUBNET = "172.31.254.0/24"
# (table, chain, rule): what `network=True` adds, and removes after
_WAY_OUT = (("nat", "POSTROUTING", ["-s", SUBNET, "!", "-o", BRIDGE, "-j", "MASQUERADE"]),
            ("filter", "FORWARD", ["-i", BRIDGE, "!", "-o", BRIDGE, "-j", "ACCEPT"]),
            ("filter", "FORWARD", ["-o", BRIDGE, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED",
                                   "-j", "ACCEPT"]))


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _iptables(table: str, action: str, chain: str, rule: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "-t", table, action, chain, *rule], capture_output=True, text=True)


def _open_way_out() -> list[tuple[str, str, list[str]]]:
    """The rules of _WAY_OUT inserted (each once); returns those this call added."""
    added = []
    for table, chain, rule in _WAY_OUT:
        if _iptables(table, "-C", chain, rule).returncode == 0:
            continue
        done = _iptables(table, "-I", chain, rule)
        if done.returncode != 0:
            _close_way_out(added)
            raise RuntimeError(f"iptables -t {table} -I {chain} failed: {done.stderr.strip()[-300:]}")
        added.append((table, chain, rule))
    return added


def _close_way_out(added) -> None:
    for table, chain, rule in added:
        _iptables(table, "-D", chain, rule)


@contextlib.contextmanager
def second_engine(root: Path, *, network: bool = False):
    """Start the second engine under ``root`` (removed after); yields its DOCKER_HOST. With
    ``network``, its containers (and build steps) reach what the host reaches."""
    needs = ("dockerd", "ip") + (("iptables",) if network else ())
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in needs):
        raise RuntimeError(f"a second Docker engine needs root and {', '.join(needs)}")
    root.mkdir(parents=True, exist_ok=True)
    sock = root / "engine.sock"
    if _ip("link", "show", BRIDGE, check=False).returncode != 0:
        _ip("link", "add", "name", BRIDGE, "type", "bridge")
        _ip("addr", "add", ADDRESS, "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 - the daemon writes it until it stops
    proc = subprocess.Popen(
        ["dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
         "--pidfile", str(root / "dockerd.pid"), "--host", f"unix://{sock}", "--bridge", BRIDGE,
         "--iptables=false", "--ip-masq=false"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    host = f"unix://{sock}"
    opened: list = []
    try:
        if network:
            opened = _open_way_out()
        for _ in range(120):
            if proc.poll() is not None:
                raise RuntimeError(f"the second dockerd exited {proc.returncode}: "
                                   f"{(root / 'dockerd.log').read_text(errors='replace')[-600:]}")
            if subprocess.run(["docker", "-H", host, "info"], capture_output=True).returncode == 0:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("the second dockerd did not answer within 60 s")
        yield host
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        _close_way_out(opened)
        _ip("link", "delete", BRIDGE, check=False)
        subprocess.run(["umount", "-R", str(root / "exec")], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def copy_image(ref: str, source_host: str, target_host: str) -> None:
    """`docker save | docker load` of ``ref`` from one engine into the other (same ID)."""
    save = subprocess.Popen(["docker", "-H", source_host, "save", ref], stdout=subprocess.PIPE)
    load = subprocess.run(["docker", "-H", target_host, "load", "-q"], stdin=save.stdout,
                          capture_output=True, text=True)
    save.stdout.close()
    if save.wait() != 0 or load.returncode != 0:
        raise RuntimeError(f"copying {ref} between engines failed: {load.stderr.strip()[-300:]}")
