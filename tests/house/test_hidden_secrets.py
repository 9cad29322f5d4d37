"""Secrets stay where they belong (issue 23, item 10): authorization values a server echoes are
hidden in every message, a docker credential helper (a real child process here) never sees
imagebuild's own secrets, and an RDMA device name that is no kernel's name never reaches doctor's
`export` lines."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from imagebuild import cli
from imagebuild.deliver import publish
from imagebuild.errors import RegistryError
from imagebuild.redact import redact
from imagebuild.smoke import gdr

from conftest import ROOT

ROCE = ROOT / "tests" / "fixtures" / "doctor" / "roce-h100-open"
TOKEN = "Q2ktdXNlcjpQdy05ZjNrUXo3LXNlY3JldA"          # base64 of a user:password pair


@pytest.mark.parametrize("echoed", [
    f"unauthorized: Authorization: Basic {TOKEN}",
    f'{{"errors":[{{"detail":{{"authorization":"Bearer {TOKEN}"}}}}]}}',
    f"header 'Proxy-Authorization': 'Basic {TOKEN}'",
    f"retrying with Bearer {TOKEN}",
])
def test_an_echoed_authorization_value_is_hidden(echoed):
    assert TOKEN not in redact(echoed) and "***" in redact(echoed)
    # and in the one line every error prints
    assert TOKEN not in str(RegistryError(f"registry answered HTTP 400: {echoed}"))


def test_ordinary_words_are_left_alone():
    for text in ("Authorization required", "basic auth failed", "a bearer of news"):
        assert redact(text) == text


def test_a_credential_helper_gets_none_of_imagebuilds_secrets(tmp_path, monkeypatch):
    """A docker config with `credsStore`: the helper runs (as docker runs it) and records its
    environment; the signing key's password and the registry password are not in it."""
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen-env.json"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-imgtest"
    helper.write_text("#!/usr/bin/env python3\nimport json, os, sys\n"
                      f"json.dump(dict(os.environ), open({str(seen)!r}, 'w'))\n"
                      "host = sys.stdin.read().strip()\n"
                      "print(json.dumps({'ServerURL': host, 'Username': 'helper-user', 'Secret': 'helper-secret'}))\n")
    helper.chmod(0o755)
    (tmp_path / "config.json").write_text(json.dumps({"credsStore": "imgtest"}))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("IMAGEBUILD_SIGN_KEY_PASSWORD", "sign-key-password-7d1")
    monkeypatch.setenv("IMAGEBUILD_REGISTRY_PASSWORD", "registry-password-5c2")   # no user: not used
    monkeypatch.delenv("IMAGEBUILD_REGISTRY_USER", raising=False)
    creds = publish.find_credentials("registry.example.org:5000", docker_config=tmp_path / "config.json")
    assert creds is not None and creds.user == "helper-user"
    env = json.loads(seen.read_text())
    assert "IMAGEBUILD_SIGN_KEY_PASSWORD" not in env and "IMAGEBUILD_REGISTRY_PASSWORD" not in env
    assert env["PATH"].startswith(str(bin_dir))            # what it needs, it still gets
    # and the variables are back for imagebuild itself afterwards
    assert os.environ["IMAGEBUILD_SIGN_KEY_PASSWORD"] == "sign-key-password-7d1"


def test_an_rdma_name_with_a_newline_never_reaches_the_export_lines(tmp_path, capsys):
    tree = tmp_path / "node"
    shutil.copytree(ROCE, tree)
    ib = tree / "sys" / "class" / "infiniband"
    good = sorted(p.name for p in ib.iterdir())[0]
    evil = ib / "mlx5_9\nexport LD_PRELOAD=/tmp/x.so"
    shutil.copytree(ib / good, evil, symlinks=True)
    probe = gdr.probe(str(tree))
    assert all("\n" not in d for d in probe.rdma_devices) and good in probe.rdma_devices
    code = cli.main(["doctor", "--root", str(tree), "--matrix", str(ROOT / "matrix.yaml")])
    out = capsys.readouterr().out
    assert code == 0 and "LD_PRELOAD" not in out
    exports = [line for line in out.splitlines() if line.startswith("  export")]
    assert exports and all(re.fullmatch(r"  export [A-Z_]+=\S+", line) for line in exports), exports
    assert "mlx5_9" not in out
