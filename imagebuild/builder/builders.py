"""An image another builder made from a generated context, described as BuildKit describes it.

`imagebuild normalize` brings an image a site's own builder made from an `imagebuild context`
folder to the image ID `imagebuild build` gives (BuildKit on Docker 20.10). Its layers are
rewritten by reproducible.normalize_layer, which leaves out what only says which builder made a
layer (:func:`builder_noise`, given what the layers below hold: :class:`Lower`). What remains is
the config, which a builder writes in its own words:

- buildah (and podman, which builds with it) writes its own history (``/bin/sh -c #(nop) COPY
  file:<hash> in /dest``, the base named in each entry's comment), every container field even
  when empty, its version as the label ``io.buildah.version``, a ``parent`` and a ``container``,
  and sorts the environment differently.
- BuildKit writes, for each instruction of the last stage, an entry whose ``created_by`` is made
  from the instruction itself (:func:`buildkit_history`), and only the config fields that are set.

:func:`as_buildkit` rewrites a buildah config from the Dockerfile the image was built from and
the base image's config: history from the instructions, the environment in BuildKit's order,
only the fields BuildKit writes. Every instruction the generated recipes use in a last stage is
known (FROM, SHELL, RUN with or without --mount, COPY with or without --from, ENV, LABEL,
ENTRYPOINT, CMD); any other is refused in one line rather than guessed, as is an image whose
layers do not match the instructions."""

from __future__ import annotations

import json
import os
import re
import tarfile

from ..errors import ImagebuildError

#: BuildKit's comment on every history entry an instruction made
BUILDKIT_COMMENT = "buildkit.dockerfile.v0"
BUILDAH_LABEL = "io.buildah.version"

#: instructions that make a layer (the others only change the config)
_LAYER = {"RUN", "COPY"}
_KNOWN = {"FROM", "SHELL", "RUN", "COPY", "ENV", "LABEL", "ENTRYPOINT", "CMD"}
_FLAG = re.compile(r"--([a-z-]+)=(\S+)\s+")
_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_.-]*)=(?:"((?:[^"\\]|\\.)*)"|(\S*))\s*')


def built_by_buildah(config: dict) -> bool:
    labels = (config.get("config") or {}).get("Labels") or {}
    return BUILDAH_LABEL in labels


def _logical_lines(text: str) -> list[str]:
    """The Dockerfile's instructions, one per line: comment lines dropped, a line ending in a
    backslash joined to the next without the backslash and the line break (as BuildKit's parser
    records the instruction)."""
    out, current = [], None
    for line in text.splitlines():
        if line.lstrip().startswith("#") or (current is None and not line.strip()):
            continue
        current = line if current is None else current + line
        if current.endswith("\\"):
            current = current[:-1]
            continue
        out.append(current.strip())
        current = None
    if current is not None:
        out.append(current.strip())
    return out


def last_stage(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, the rest) of each instruction of the Dockerfile's last stage, FROM first."""
    stage: list[tuple[str, str]] = []
    for line in _logical_lines(text):
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            stage = []
        stage.append((word, rest.strip()))
    if not stage or stage[0][0] != "FROM":
        raise ImagebuildError("the Dockerfile has no FROM")
    return stage


def _without_flags(rest: str, allowed: set[str], what: str) -> str:
    """The instruction's arguments after its --flags (which BuildKit leaves out of the history),
    each flag one of ``allowed``."""
    rest += " "
    while (m := _FLAG.match(rest)) is not None:
        if m.group(1) not in allowed:
            raise ImagebuildError(f"{what} --{m.group(1)}: how BuildKit records it is not known here")
        rest = rest[m.end():]
    return rest


def _pairs(rest: str, what: str) -> list[tuple[str, str]]:
    pairs, pos = [], 0
    while pos < len(rest):
        m = _PAIR.match(rest, pos)
        if m is None:
            raise ImagebuildError(f"{what}: cannot read {rest[pos:pos + 40]!r} as KEY=value")
        value = m.group(3) if m.group(2) is None else re.sub(r"\\(.)", r"\1", m.group(2))
        pairs.append((m.group(1), value))
        pos = m.end()
    return pairs


def _json_list(rest: str, what: str) -> list[str]:
    try:
        value = json.loads(rest)
    except ValueError:
        value = None
    if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        raise ImagebuildError(f"{what}: only the JSON form is known here")
    return value


def _go_quoted(args: list[str]) -> str:
    """Go's %q of a []string, which BuildKit uses for ENTRYPOINT and CMD: ["a" "b"]."""
    if not all(a.isascii() and a.isprintable() for a in args):
        raise ImagebuildError("ENTRYPOINT/CMD with characters other than printable ASCII")
    return "[" + " ".join(json.dumps(a) for a in args) + "]"


def buildkit_history(dockerfile_text: str, base_shell: list[str] | None = None) -> list[dict]:
    """The history entries BuildKit writes for the last stage's instructions after FROM, without
    ``created``: [{created_by, comment, empty_layer?}]."""
    return _history(last_stage(dockerfile_text), base_shell)


def _history(stage: list[tuple[str, str]], base_shell: list[str] | None) -> list[dict]:
    shell = list(base_shell or ["/bin/sh", "-c"])
    entries = []
    for word, rest in stage[1:]:
        what = f"Dockerfile instruction {word}"
        if word not in _KNOWN or word == "FROM":
            raise ImagebuildError(f"{what}: how BuildKit records it in the history is not known here")
        if word == "SHELL":
            shell = _json_list(rest, what)
            text = "SHELL [" + " ".join(shell) + "]"
        elif word == "RUN":
            cmd = _without_flags(rest, {"mount"}, what)
            if cmd.lstrip().startswith("["):
                raise ImagebuildError(f"{what}: the exec form is not known here")
            text = "RUN " + " ".join(shell + [cmd.strip()]) + " # buildkit"
        elif word == "COPY":
            args = _without_flags(rest, {"from"}, what)
            text = "COPY " + " ".join(args.split()) + " # buildkit"
        elif word in ("ENV", "LABEL"):
            text = word + " " + " ".join(f"{k}={v}" for k, v in _pairs(rest, what))
        else:
            text = f"{word} {_go_quoted(_json_list(rest, what))}"
        entry = {"created_by": text, "comment": BUILDKIT_COMMENT}
        if word not in _LAYER:
            entry["empty_layer"] = True
        entries.append(entry)
    return entries


def _environment(base_env: list[str], stage: list[tuple[str, str]]) -> list[str]:
    """BuildKit's Env: the base's, each ENV of the last stage setting its key in place or
    appending it."""
    env = [str(e) for e in base_env]
    for word, rest in stage[1:]:
        if word != "ENV":
            continue
        for key, value in _pairs(rest, "Dockerfile instruction ENV"):
            item = f"{key}={value}"
            at = next((i for i, e in enumerate(env) if e.partition("=")[0] == key), None)
            if at is None:
                env.append(item)
            else:
                env[at] = item
    return env


#: the container-config fields BuildKit writes when they are set (OnBuild always, as null)
_FIELDS = ("User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir", "Labels",
           "StopSignal", "Healthcheck", "Shell")


def as_buildkit(config: dict, dockerfile_text: str, base_config: dict, *, base_layers: int,
                what: str) -> dict:
    """The image config a buildah build of ``dockerfile_text`` would have had from BuildKit.
    ``base_config``: the base image's container config as the engine reports it;
    ``base_layers``: how many of the image's layers are the base's. ImagebuildError (naming
    ``what``) when the image does not match the Dockerfile."""
    try:
        stage = last_stage(dockerfile_text)
        entries = _history(stage, base_config.get("Shell"))
    except ImagebuildError as exc:
        raise ImagebuildError(f"{what}: built by buildah; {exc}") from None
    diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
    made = sum(1 for e in entries if not e.get("empty_layer"))
    if len(diff_ids) - base_layers != made:
        raise ImagebuildError(
            f"{what}: {len(diff_ids) - base_layers} layer(s) above its base, but the Dockerfile's last "
            f"stage makes {made}: not a `buildah bud --layers` build of this context")
    history = list(config.get("history") or [])
    first = len(history) - len(entries)          # buildah writes one entry per instruction
    if first < 0 or not str(history[first].get("comment", "")).startswith("FROM "):
        raise ImagebuildError(f"{what}: built by buildah, but its history is not one entry per "
                              "instruction of the Dockerfile's last stage")
    created = config.get("created")
    out = {k: v for k, v in config.items() if k not in ("container", "container_config", "parent",
                                                         "docker_version", "author", "history")}
    out["history"] = history[:first] + [dict(e, created=created) for e in entries]
    inner = dict(config.get("config") or {})
    labels = {k: v for k, v in (inner.get("Labels") or {}).items() if k != BUILDAH_LABEL}
    env = _environment(base_config.get("Env") or [], stage)
    if sorted(env) != sorted(inner.get("Env") or []):
        raise ImagebuildError(f"{what}: its environment is not the one its base and Dockerfile give")
    inner.update(Env=env, Labels=labels)
    canon = {k: inner[k] for k in _FIELDS if inner.get(k)}
    canon["OnBuild"] = inner.get("OnBuild") or None
    words = {word for word, _ in stage}
    if base_config.get("ArgsEscaped") or words & {"CMD", "ENTRYPOINT"}:
        canon["ArgsEscaped"] = True          # BuildKit sets it with every CMD and ENTRYPOINT
    out["config"] = canon
    return out


# -- layers ---------------------------------------------------------------------------------

def clean_name(name: str) -> str:
    """A tar member's name as a path in the image: no ./ in front, no slashes around."""
    name = name[2:] if name.startswith("./") else name
    return name.strip("/")


#: the files a builder bind-mounts over in every step; one that made an empty file for the mount
#: point leaves it in the layer (buildah does, BuildKit does not)
MOUNT_STUBS = frozenset({"etc/hosts", "etc/hostname", "etc/resolv.conf"})
_OPAQUE = ".wh..wh..opq"


def is_whiteout(name: str) -> bool:
    return name.rsplit("/", 1)[-1].startswith(".wh.")


class Lower:
    """What the layers below a layer hold, whiteouts applied: path -> (is a directory, mode, uid,
    gid). Filled layer by layer (:meth:`add_tar`, :meth:`add`) as normalising goes up."""

    def __init__(self):
        self.paths: dict[str, tuple[bool, int, int, int]] = {}

    def _drop_under(self, folder: str) -> None:
        prefix = folder + "/" if folder else ""
        for name in [n for n in self.paths if n.startswith(prefix)]:
            del self.paths[name]

    def add(self, members) -> None:
        """One layer's tar members, on top of what is below."""
        entries = [(clean_name(m.name), m) for m in members]
        for name, _ in entries:           # a layer's whiteouts apply to the layers below it only
            if not is_whiteout(name):
                continue
            folder, _, leaf = name.rpartition("/")
            if leaf == _OPAQUE:
                if folder in self.paths or not folder:
                    self._drop_under(folder)
            else:
                gone = f"{folder}/{leaf[4:]}" if folder else leaf[4:]
                if gone in self.paths:
                    del self.paths[gone]
                    self._drop_under(gone)
        for name, m in entries:
            if name and not is_whiteout(name):
                self.paths[name] = (m.isdir(), m.mode & 0o7777, m.uid, m.gid)

    def add_tar(self, path: str | os.PathLike) -> None:
        with tarfile.open(path, "r:") as tf:
            self.add(tf.getmembers())

    def same_dir(self, name: str, m) -> bool:
        # the permission bits only: buildah's tars carry the file type in the mode as well
        return self.paths.get(name) == (True, m.mode & 0o7777, m.uid, m.gid)


def builder_noise(members, lower: Lower) -> set[str]:
    """The names in one layer's ``members`` that only say which builder made it (see
    reproducible's docstring), given what the layers below hold."""
    parents = set()
    for m in members:
        name = clean_name(m.name)
        while "/" in name:
            name = name.rsplit("/", 1)[0]
            if name in parents:
                break
            parents.add(name)
    noise = set()
    for m in members:
        name = clean_name(m.name)
        folder, _, leaf = name.rpartition("/")
        if leaf == _OPAQUE and folder not in lower.paths:
            noise.add(name)
        elif m.isdir() and name not in parents and lower.same_dir(name, m):
            noise.add(name)
        elif name in MOUNT_STUBS and m.isreg() and m.size == 0 and name not in lower.paths:
            noise.add(name)
    return noise
