"""The driver-upgrade workflow we ship (.github/workflows/images.yml), run as written: each job's
`run:` steps in order, in a copy of the checkout, with the job's variables set as the runner sets
them (`${{ }}` expressions evaluated from the matrix, the repository variables, the secrets and
the earlier steps' outputs), on the real engine and a real local registry. `uses:` steps are the
runner's: checkout is the copy, setup-python a virtual environment, upload-artifact a check that
every path it keeps exists (the job's artifacts).

- job `plan` on a driver change (the workflow_dispatch inputs): its matrix names images;
- job `broken` passes for that upgrade and fails for the downgrade that breaks images;
- job `images` for one image: install, generate --check, base, build, smoke test, lock, publish to
  the registry (digests verified), export to squashfs, sbatch script, artifacts kept. The image is
  smoke-cpu, the session's cheapest: the steps are the same for every image, and each Debian CUDA
  image's build and smoke tier are proven by its own module.

Then a node's journey from what the job left, with imagebuild installed from the wheel in a fresh
venv and run in an empty folder: `doctor --json`, `find --registry --from-doctor` (the registry's
index, no images.lock) names the pushed digest; and the researcher's: the image is pulled by that
digest and `imagebuild-check` runs inside. (`srun --container=` on the exported bundle is
tests/deliver/test_slurm.py's.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from imagebuild.deliver.lockfile import read_lock

from conftest import ROOT, answer
from registry_service import PASSWORD, USER, engine, registry  # noqa: F401 - fixtures

pytestmark = [pytest.mark.engine, pytest.mark.registry]

WORKFLOW = ROOT / ".github" / "workflows" / "images.yml"
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


class Runner:
    """Runs a job's steps the way GitHub's runner does, for the expressions this workflow uses."""

    def __init__(self, workspace: Path, venv: Path, shims: Path, context: dict):
        self.workspace, self.venv, self.shims = workspace, venv, shims
        self.context = context          # matrix, vars, secrets, inputs, needs, github
        self.temp = workspace.parent / "runner-temp"
        self.temp.mkdir(exist_ok=True)

    def value(self, text: str) -> str:
        def one(m: re.Match) -> str:
            node = self.context
            for part in m.group(1).split("."):
                assert isinstance(node, dict), f"{m.group(1)}: not an expression this runner knows"
                node = node.get(part, "") if node is not self.context else node[part]
            return str(node)
        return EXPR.sub(one, str(text))

    def run_job(self, job: dict, event: str = "workflow_dispatch") -> dict[str, str]:
        """Every step in order; returns the job's outputs. A failing step fails the job (the
        remaining steps do not run), as on the runner."""
        steps: dict[str, dict] = {}
        self.context["steps"] = steps
        job_env = {k: self.value(v) for k, v in (job.get("env") or {}).items()}
        for step in job["steps"]:
            if "uses" in step:
                self.uses(step)
                continue
            out_file = self.temp / "output"
            out_file.write_text("")
            env = {**self.base_env(event), **job_env,
                   **{k: self.value(v) for k, v in (step.get("env") or {}).items()},
                   "GITHUB_OUTPUT": str(out_file)}
            start = time.monotonic()
            proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                                  cwd=self.workspace, env=env, capture_output=True, text=True, timeout=900)
            # the seconds of each step, in the log: where this test's time goes
            print(f"workflow step {step.get('name', '?')!r}: {time.monotonic() - start:.1f} s")
            if proc.returncode != 0:
                raise StepFailed(step.get("name", step["run"][:40]), proc)
            outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines() if "=" in line)
            if "id" in step:
                steps[step["id"]] = {"outputs": outputs}
        return {k: self.value(v) for k, v in (job.get("outputs") or {}).items()}

    def base_env(self, event: str) -> dict[str, str]:
        keep = ("HOME", "DOCKER_HOST", "LANG", "TMPDIR", "SSL_CERT_FILE", "PIP_INDEX_URL",
                "PIP_TRUSTED_HOST", "PIP_CERT", "http_proxy", "https_proxy", "no_proxy")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env["PATH"] = f"{self.venv / 'bin'}:{self.shims}:{os.environ['PATH']}"
        env.update(GITHUB_EVENT_NAME=event, GITHUB_WORKSPACE=str(self.workspace),
                   GITHUB_STEP_SUMMARY=str(self.temp / "summary.md"), RUNNER_TEMP=str(self.temp),
                   CI="true", PIP_DISABLE_PIP_VERSION_CHECK="1")
        return env

    def uses(self, step: dict) -> None:
        action = step["uses"].split("@")[0]
        if action in ("actions/checkout", "actions/setup-python"):
            return      # the workspace is the copy; python is the venv's
        if action == "actions/download-artifact":
            # every artifact the earlier jobs kept, each under PATH/<its name>/ (v4's layout):
            # here the images job's lock, which it left in the shared workspace
            dest = self.workspace / self.value(step["with"]["path"])
            for name, paths in self.context.get("kept", {}).items():
                for path in paths:
                    target = dest / name / path.relative_to(self.workspace)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if path.is_file():
                        shutil.copy2(path, target)
            return
        assert action == "actions/upload-artifact", f"an action this runner does not know: {action}"
        kept = []
        for pattern in self.value(step["with"]["path"]).split():
            found = [p for p in self.workspace.glob(pattern.rstrip("/")) if p.exists()]
            assert found, f"artifact {self.value(step['with']['name'])}: nothing at {pattern}"
            kept += found
        self.context.setdefault("artifacts", []).extend(kept)
        self.context.setdefault("kept", {})[self.value(step["with"]["name"])] = kept


class StepFailed(AssertionError):
    def __init__(self, name: str, proc: subprocess.CompletedProcess):
        super().__init__(f"step {name!r} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        self.proc = proc


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A copy of the checkout (its tracked and unignored files, as a clean clone has them), a
    virtual environment that sees the system's packages (the runner's setup-python), and a `sudo`
    for a root user without one (the runner's user has sudo)."""
    base = tmp_path_factory.mktemp("runner")
    ws = base / "workspace"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        src, dst = ROOT / name, ws / name
        if not os.path.lexists(src):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    shims = base / "shims"
    shims.mkdir()
    if shutil.which("sudo") is None:
        assert os.geteuid() == 0, "no sudo, and not root: the workflow's sudo steps cannot run here"
        sudo = shims / "sudo"
        sudo.write_text('#!/bin/sh\n[ "$1" = "-E" ] && shift\nexec "$@"\n')
        sudo.chmod(0o755)
    return ws, venv, shims


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _wheel_venv(src: Path, tmp_path: Path) -> Path:
    """A fresh venv with imagebuild installed from a wheel built from ``src`` (no index: its
    dependencies come from the system site-packages the venv sees)."""
    dist, venv = tmp_path / "dist", tmp_path / "node-venv"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(dist), str(src)], check=True, capture_output=True, timeout=600)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    (wheel,) = dist.glob("imagebuild-*.whl")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, timeout=600)
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import imagebuild; print(imagebuild.__file__)"],
                           check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    assert where.startswith(str(venv)), where          # the package comes from the wheel
    return venv


def _runner(workspace, **context) -> Runner:
    ws, venv, shims = workspace
    return Runner(ws, venv, shims, {"github": {"ref": "refs/heads/main", "workspace": str(ws)},
                                    "vars": {}, "secrets": {}, "inputs": {}, "needs": {},
                                    "matrix": {}, **context})


def test_the_plan_and_broken_jobs_on_a_driver_change(workspace, workflow):
    driver = yaml.safe_load((ROOT / "cluster" / "driver.yaml").read_text())
    upgrade = {"driver-from": "550.54.15", "driver-to": str(driver["driver"])}
    plan = _runner(workspace, inputs=upgrade).run_job(workflow["jobs"]["plan"])
    matrix = json.loads(plan["matrix"])
    assert int(plan["count"]) == len(matrix["include"]) > 0
    assert plan["gpu"] == driver["gpu"] and plan["to"] == upgrade["driver-to"]
    _runner(workspace, needs={"plan": {"outputs": plan}}).run_job(workflow["jobs"]["broken"])
    # the guard can fail: back to the old driver breaks the images the new one made usable
    down = {**plan, "from": plan["to"], "to": plan["from"]}
    with pytest.raises(StepFailed) as failed:
        _runner(workspace, needs={"plan": {"outputs": down}}).run_job(workflow["jobs"]["broken"])
    assert failed.value.proc.returncode == 1 and "broken on the new driver" in failed.value.proc.stderr


def test_the_images_job_publishes_and_keeps_its_artifacts(workspace, workflow, registry, engine,  # noqa: F811
                                                          smoke_cpu_image, docker_client, tmp_path):
    ws = workspace[0]
    runner = _runner(workspace, matrix={"image": "smoke-cpu", "images": "smoke-cpu",
                                        "runner": "ubuntu-latest"},
                     vars={"IMAGEBUILD_REGISTRY": f"{registry}/ci", "IMAGEBUILD_SOURCES": "",
                           "CLUSTER_IMAGE_DIR": "/shared/images"},
                     secrets={"IMAGEBUILD_REGISTRY_USER": USER, "IMAGEBUILD_REGISTRY_PASSWORD": PASSWORD})
    runner.run_job(workflow["jobs"]["images"])
    lock = read_lock(ws / "images.lock")
    kept = {str(p.relative_to(ws)) for p in runner.context["artifacts"]}
    assert {"exports/smoke-cpu.sqsh", "exports/smoke-cpu.sbatch", "images.lock"} <= kept
    assert (ws / "exports" / "smoke-cpu.sqsh").read_bytes()[:4] == b"hsqs"     # a squashfs
    assert "/shared/images/smoke-cpu.sqsh" in (ws / "exports" / "smoke-cpu.sbatch").read_text()
    published = lock["smoke-cpu"]["published"]
    assert lock["smoke-cpu"]["smoke"]["passed"] and list(published) == [f"{registry}/ci/smoke-cpu"]
    # job `locks`: the jobs' locks (here the one job's) merged into one images.lock artifact
    (ws / "images.lock").rename(ws / "job.lock")
    merger = _runner(workspace, needs={"images": {"result": "success"}})
    merger.context["kept"] = {"image-smoke-cpu": [ws / "job.lock"]}
    (ws / "job.lock").rename(ws / "images.lock")
    merger.context["kept"] = {"image-smoke-cpu": [ws / "images.lock"]}
    merger.run_job(workflow["jobs"]["locks"])
    assert read_lock(ws / "images.lock")["smoke-cpu"] == lock["smoke-cpu"]
    assert {p.name for p in merger.context["artifacts"]} == {"images.lock"}

    # a node's journey: imagebuild installed from the wheel built from this checkout, in a fresh
    # venv, run in an empty folder (no checkout, no images.lock): the packaged knowledge; doctor
    # reads the node, find reads what was published from the registry's index
    node_venv = _wheel_venv(ws, tmp_path)
    node = tmp_path / "node"
    node.mkdir()
    env = {**runner.base_env("workflow_dispatch"), "IMAGEBUILD_REGISTRY_USER": USER,
           "IMAGEBUILD_REGISTRY_PASSWORD": PASSWORD}
    env["PATH"] = f"{node_venv / 'bin'}:{os.environ['PATH']}"
    doctor = subprocess.run(["imagebuild", "doctor", "--json"], cwd=node, env=env, capture_output=True,
                            text=True, timeout=300)
    assert doctor.returncode == 0, doctor.stderr
    (node / "node.json").write_text(doctor.stdout)
    found = subprocess.run(["imagebuild", "find", "--registry", f"{registry}/ci", "--from-doctor", "node.json",
                            "--json"], cwd=node, env=env, capture_output=True, text=True, timeout=300)
    assert found.returncode == 0, found.stderr
    assert sorted(p.name for p in node.iterdir()) == ["node.json"]       # nothing written there
    doc = answer(found.stdout, "find")
    assert doc["lock"] == f"{registry}/ci/imagebuild-index"
    best = doc["images"][0]
    assert best["image"] == "smoke-cpu" and best["registry"]["status"] == "ok"
    digest = best["registry"]["serves"]
    assert digest == published[f"{registry}/ci/smoke-cpu"]["digest"]
    by_digest = f"{registry}/ci/smoke-cpu@{digest}"
    docker_client.login(username=USER, password=PASSWORD, registry=registry)
    docker_client.images.pull(by_digest)
    # the researcher's journey: pull by the digest find printed, then check inside.
    # exit 0 (a non-zero exit raises): the CPU image runs on this GPU-less node, and says so
    out = docker_client.containers.run(by_digest, ["imagebuild-check"], remove=True, stderr=True)
    assert b"smoke-cpu" in out or b"CPU" in out, out
