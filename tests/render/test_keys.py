"""The repository key check the recipes run (cuda-repo, doca-repo fragments, apt and dnf): the
fetched key file must hold exactly the expected key. Real gpg keys, made here, and the check lines
exactly as the renderer writes them, run by bash."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, need
from imagebuild.render import images, renderer as render
from imagebuild import knowledge

CASES = {  # fragment -> (a reference image that has it, the key file it fetches)
    "cuda-repo": ("pytorch-2.6.0-cu124-ubuntu22.04-runtime", "/tmp/cuda-repo.pub"),
    "cuda-repo-dnf": ("pytorch-2.13.0-cu130-rockylinux9-runtime", "/tmp/cuda-repo.pub"),
    "doca-repo": ("comms-cu130-nccl2.30.7-ubuntu24.04-doca3.2.0-runtime", "/tmp/doca.pub"),
    "doca-repo-dnf": ("comms-cu130-nccl2.30.7-rockylinux9-doca3.2.0-runtime", "/tmp/doca.pub"),
}


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Two real keys, A (with an encryption subkey, as NVIDIA's keys have) and B, exported alone
    and together in both orders."""
    if shutil.which("gpg") is None:
        need("gpg (Debian package gpg)", "not on PATH")
    home = tmp_path_factory.mktemp("gnupg")
    os.chmod(home, 0o700)
    env = dict(os.environ, GNUPGHOME=str(home))

    def gpg(*args: str) -> str:
        return subprocess.run(["gpg", "--batch", "--passphrase", "", *args], env=env, check=True,
                              capture_output=True, text=True).stdout

    info = {}
    for name in ("a", "b"):
        gpg("--quick-gen-key", f"imagebuild test {name} <{name}@imagebuild.test>", "ed25519", "sign", "never")
        colons = gpg("--with-colons", "--list-keys", f"{name}@imagebuild.test").splitlines()
        fpr = next(line.split(":")[9] for line in colons if line.startswith("fpr:"))
        info[name] = {"fpr": fpr, "keyid": fpr[-16:]}
    gpg("--quick-add-key", info["a"]["fpr"], "cv25519", "encr", "never")
    files = {}
    for label, who in (("a", ["a"]), ("b", ["b"]), ("ab", ["a", "b"]), ("ba", ["b", "a"])):
        path = home / f"{label}.asc"
        data = b"".join(subprocess.run(["gpg", "--export", "--armor", f"{w}@imagebuild.test"], env=env,
                                       check=True, capture_output=True).stdout for w in who)
        path.write_bytes(data)
        files[label] = path
    files["empty"] = home / "empty.asc"
    files["empty"].write_bytes(b"")
    return {"info": info, "files": files}


@pytest.fixture(scope="module")
def check_lines():
    k = knowledge.load(ROOT / "matrix.yaml")
    specs = {s.id: s for s in images.expand(k, allow_unverified=True)[0]}
    r = render.Renderer()
    lines = {}
    for frag, (image, keyfile) in CASES.items():
        for fmt in ("docker", "singularity"):
            text = r.fragment_texts(specs[image], k)[(frag, fmt)]
            [line] = [ln for ln in text.splitlines() if "gpg --show-keys" in ln]
            line = line.strip().removeprefix("&& ").removesuffix(" \\")
            lines[(frag, fmt)] = (line, keyfile)
    return lines


def _run(line: str, keyfile: str, expected_now: str, path, expected: str, tmp_path):
    """The rendered check with our key file and our expected value in place of NVIDIA's."""
    line = line.replace(keyfile, str(path)).replace(expected_now, expected)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    os.chmod(home, 0o700)
    return subprocess.run(["bash", "-o", "pipefail", "-c", line], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "GNUPGHOME": str(home)})


@pytest.mark.parametrize("frag", sorted(CASES))
@pytest.mark.parametrize("fmt", ["docker", "singularity"])
def test_key_file_must_hold_exactly_the_expected_key(keys, check_lines, frag, fmt, tmp_path):
    line, keyfile = check_lines[(frag, fmt)]
    # what the rendered line expects now: a 40-digit fingerprint, or a 64-bit key id
    expected_now = re.search(r'" = "([0-9A-F]{16}|[0-9A-F]{40})"', line).group(1)
    field = "fpr" if len(expected_now) == 40 else "keyid"
    a, b = keys["info"]["a"][field], keys["info"]["b"][field]
    files = keys["files"]

    ok = _run(line, keyfile, expected_now, files["a"], a, tmp_path)
    assert ok.returncode == 0, ok.stderr  # A alone (its subkey is no second key)
    for label, expected in (("ab", a), ("ba", a), ("b", a), ("empty", a), ("ab", b)):
        bad = _run(line, keyfile, expected_now, files[label], expected, tmp_path)
        assert bad.returncode != 0, f"{label} accepted for {expected}"
        said = [ln for ln in bad.stderr.splitlines() if "must hold exactly one key" in ln]
        assert len(said) == 1 and said[0].startswith(str(files[label])), bad.stderr
