"""The OCI runtime config of a bundle `imagebuild export --format oci-bundle` writes: the image's
config (entrypoint, environment, working folder, its USER resolved against the image's own
/etc/passwd and /etc/group, read without following links out of the root file system) made fit
for a batch job as enroot and pyxis run containers."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from ..errors import ExportError
from ..smoke import rootfs

MAX_LINKS = rootfs.MAX_LINKS

#: an /etc/passwd or /etc/group larger than this is refused (a real one is kilobytes; a site with
#: many local accounts stays far below it)
ACCOUNT_FILE_MAX = 4 << 20

_ID_RE = re.compile(r"[0-9]{1,10}")


def resolve_in_root(root: Path, path: str) -> Path:
    """``path`` inside the root file system ``root`` as a process chrooted there would see it:
    every symbolic link on the way is followed with ``root`` as "/" (an absolute target starts
    again at ``root``; ``..`` stops at it), so the result is always ``root`` or below it. Components
    that do not exist are kept as they are (nothing beyond them can be a link)."""
    try:
        return Path(rootfs.chroot_path(os.path.realpath(root), str(path), keep_missing=True))
    except rootfs.TooManyLinks:
        raise ExportError(f"/{str(path).lstrip('/')} of the image has more than {MAX_LINKS} "
                          "symbolic links on its way") from None


#: the host's files a container needs to resolve names as the node does (its own name first:
#: torchrun's rendezvous, MPI's and NCCL's bootstrap), bound read-only from the node the job runs
#: on, as enroot does by default; an image's own copies are empty placeholders a builder left
HOST_FILES = ("/etc/hosts", "/etc/resolv.conf")


def hpc_runtime_config(config: dict) -> dict:
    """A runtime config made fit for a batch job, as enroot and pyxis run containers: the host's
    network (MPI, NCCL and UCX reach the other nodes), hostname (the node's name in logs and
    reports) and name resolution (HOST_FILES), no terminal (a batch step has none), a writable
    root, /dev/shm without the 64 MiB cap (MPI and NCCL put their shared-memory segments there)
    and the job's own rlimits."""
    config = json.loads(json.dumps(config))
    linux = config.setdefault("linux", {})
    linux["namespaces"] = [ns for ns in linux.get("namespaces", []) if ns.get("type") not in ("network", "uts")]
    config.pop("hostname", None)
    mounts = [m for m in config.get("mounts", []) if m.get("destination") not in HOST_FILES]
    mounts += [{"destination": path, "type": "bind", "source": path,
                "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]} for path in HOST_FILES]
    config["mounts"] = mounts
    process = config.setdefault("process", {})
    process["terminal"] = False
    process.pop("rlimits", None)
    config.setdefault("root", {"path": "rootfs"})["readonly"] = False
    for mount in config.get("mounts", []):
        if mount.get("destination") == "/dev/shm":
            mount["options"] = [o for o in mount.get("options", []) if not o.startswith("size=")]
    return config


def read_account_file(rootfs: Path, table: str) -> list[list[str]] | None:
    """The lines of the image's /etc/``table`` ("passwd" or "group") split into fields; None when
    the image has no such regular file. Resolved inside the image (``resolve_in_root``), opened
    without following a last link, at most ACCOUNT_FILE_MAX bytes (a larger file is refused)."""
    path = resolve_in_root(rootfs, f"/etc/{table}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        data = f.read(ACCOUNT_FILE_MAX + 1)
    if len(data) > ACCOUNT_FILE_MAX or st.st_size > ACCOUNT_FILE_MAX:
        raise ExportError(f"the image's /etc/{table} is larger than {ACCOUNT_FILE_MAX >> 20} MiB; "
                          "refusing to read it for the image's USER")
    return [line.split(":") for line in data.decode("utf-8", "replace").split("\n")]


def _id(text: str) -> int | None:
    """A uid or gid: 1 to 10 ASCII digits, below 2**32; None otherwise."""
    if not _ID_RE.fullmatch(text):
        return None
    value = int(text)
    return value if value < 1 << 32 else None


def _lookup_id(rootfs: Path, table: str, name: str) -> tuple[int, int] | None:
    """(id, gid) of ``name`` in rootfs/etc/passwd (table "passwd") or (gid, gid) in etc/group."""
    for fields in read_account_file(rootfs, table) or []:
        if len(fields) >= 4 and fields[0] == name and _id(fields[2]) is not None:
            own = _id(fields[2])
            gid = _id(fields[3]) if table == "passwd" else own
            return own, gid if gid is not None else 0
    return None


def resolve_user(user: str, rootfs: Path) -> dict:
    """The image's USER ("", "uid", "uid:gid", "name", "name:group") as runtime-spec uid/gid."""
    name, _, group = str(user or "").partition(":")
    if not name:
        uid, gid = 0, 0
    elif _id(name) is not None:
        uid, gid = _id(name), 0
        if not group:
            for fields in read_account_file(rootfs, "passwd") or []:
                if len(fields) >= 4 and fields[2] == name and _id(fields[3]) is not None:
                    gid = _id(fields[3])
                    break
    elif name.isdigit():
        raise ExportError(f"image USER {name[:40]!r} is not a valid uid")
    else:
        found = _lookup_id(rootfs, "passwd", name)
        if found is None:
            raise ExportError(f"image USER {name[:40]!r} is not in the image's /etc/passwd")
        uid, gid = found
    if group:
        if _id(group) is not None:
            gid = _id(group)
        elif group.isdigit():
            raise ExportError(f"image group {group[:40]!r} is not a valid gid")
        else:
            found = _lookup_id(rootfs, "group", group)
            if found is None:
                raise ExportError(f"image group {group[:40]!r} is not in the image's /etc/group")
            gid = found[0]
    return {"uid": uid, "gid": gid}


def runtime_config(image_config: dict, defaults: dict, rootfs: Path) -> dict:
    """A runtime-spec config.json for an image: runc's defaults (``runc spec``) with the image's
    command, environment, working directory, user and labels, then hpc_runtime_config."""
    config = json.loads(json.dumps(defaults))
    entrypoint = list(image_config.get("Entrypoint") or [])
    cmd = list(image_config.get("Cmd") or [])
    process = config.setdefault("process", {})
    process["args"] = entrypoint + cmd if entrypoint or cmd else ["/bin/sh"]
    process["env"] = list(image_config.get("Env") or
                          ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    process["cwd"] = image_config.get("WorkingDir") or "/"
    process["user"] = resolve_user(image_config.get("User") or "", rootfs)
    config["root"] = {"path": "rootfs", "readonly": False}
    labels = image_config.get("Labels") or {}
    if labels:
        config["annotations"] = {str(k): str(v) for k, v in sorted(labels.items())}
    return hpc_runtime_config(config)
