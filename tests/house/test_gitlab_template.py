"""The GitLab CI template we ship (ci/gitlab/imagebuild.gitlab-ci.yml), its jobs' scripts run as a
GitLab runner runs them (the lines of `script:`, YAML anchors flattened, in one bash session, in a
copy of the checkout, with the pipeline's variables): `imagebuild:plan` writes the child pipeline,
whose image jobs run the same commands as the GitHub workflow's images job (run for real in
tests/house/test_workflow_run.py) and whose `locks` job is run here on the locks two jobs would leave."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest
import yaml

from conftest import ROOT
from imagebuild.cli import COMMANDS, _Parser
from imagebuild.deliver import lockfile
from test_workflow_run import workspace  # noqa: F401 - the checkout copy and its venv

TEMPLATE = ROOT / "ci" / "gitlab" / "imagebuild.gitlab-ci.yml"


def _flat(lines) -> list[str]:
    out = []
    for line in lines:
        out += _flat(line) if isinstance(line, list) else [line]
    return out


def _run_script(lines, cwd, env) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", "--noprofile", "--norc", "-e", "-c", "\n".join(_flat(lines))],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def _parses(line: str) -> None:
    import importlib
    words = shlex.split(line)
    assert words[0] == "imagebuild" and words[1] in COMMANDS, line
    parser = _Parser(prog="imagebuild " + words[1])
    importlib.import_module(f"imagebuild.cli.commands.{COMMANDS[words[1]][0]}").configure(parser)
    parser.parse_args([w for w in words[2:] if not w.startswith("$")])


def test_the_plan_and_locks_jobs_as_a_runner_runs_them(workspace, tmp_path):  # noqa: F811
    ws, venv, shims = workspace
    doc = yaml.safe_load(TEMPLATE.read_text())
    assert doc["imagebuild:images"]["trigger"]["include"][0] == {"artifact": "images.gitlab-ci.yml",
                                                                 "job": "imagebuild:plan"}
    keep = ("HOME", "DOCKER_HOST", "LANG", "TMPDIR", "SSL_CERT_FILE", "PIP_INDEX_URL",
            "PIP_TRUSTED_HOST", "PIP_CERT", "http_proxy", "https_proxy", "no_proxy")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(PATH=f"{venv / 'bin'}:{shims}:{os.environ['PATH']}", CI="true",
               DRIVER_FROM="570.172.08", DRIVER_TO="580.95.05", GPU="H100",
               IMAGEBUILD_X86_TAG="docker-amd64",
               IMAGEBUILD_PIP_ARGS="-q --no-deps -e .",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    _run_script(doc["imagebuild:plan"]["script"], ws, env)
    child = yaml.safe_load((ws / "images.gitlab-ci.yml").read_text())
    images = {n: j for n, j in child.items() if n.startswith("image:")}
    assert images and child["stages"] == ["images", "locks"]
    assert all(j["tags"] == ["docker-amd64"] for j in images.values())
    assert not any(n.endswith("-arm64") for n in images)          # no arm64 runner tag given
    assert {d["job"] for d in child["locks"]["needs"]} == set(images)
    for job in images.values():
        for line in _flat(job["script"]):
            if line.startswith("imagebuild "):
                _parses(line)
    # the broken guard passes for this upgrade
    _run_script(doc["imagebuild:broken"]["script"], ws, env)

    # the locks job on what two image jobs leave: their locks, merged into one
    job_dir = tmp_path / "locks-job"
    (job_dir / "job-locks").mkdir(parents=True)
    for image in ("smoke-cpu", "comms-cu130-nccl2.30.7-debian12-runtime"):
        subprocess.run([str(venv / "bin" / "imagebuild"), "lock", image, "--no-engine",
                        "--matrix", str(ws / "matrix.yaml"), "--lock", str(job_dir / "job-locks" / f"{image}.lock")],
                       check=True, capture_output=True, env=env, cwd=ws, timeout=300)
    env_locks = {**env, "IMAGEBUILD_PIP_ARGS": f"-q --no-deps -e {ws}",
                 "IMAGEBUILD_MATRIX": str(ws / "matrix.yaml")}
    _run_script(child["locks"]["script"], job_dir, env_locks)
    merged = lockfile.read_lock(job_dir / "images.lock")
    assert set(merged) == {"smoke-cpu", "comms-cu130-nccl2.30.7-debian12-runtime"}


@pytest.mark.parametrize("job", ["imagebuild:plan", "imagebuild:broken"])
def test_only_checked_values_reach_a_command_line(job):
    script = "\n".join(_flat(yaml.safe_load(TEMPLATE.read_text())[job]["script"]))
    assert "grep -Eq '^[0-9]{3}" in script and "not a GPU name" in script
