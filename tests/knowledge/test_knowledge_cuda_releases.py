"""Issue 25, class 5: a CUDA release's availability per OS repository and per image is a fact of its
own (`cuda.availability`), not a consequence of how the release became known (NVIDIA's wheels).

- A stack without PyTorch takes CUDA from NVIDIA's repository for its OS: it may choose a release
  that repository (or its nvidia/cuda images) is known to carry, and the chain says which OS lacks
  it. A PyTorch stack takes CUDA from the wheels, as before.
- The facts read so far for 13.4.1 are third-party reports (CUDAREPODEB13, CUDAREPOIMG134):
  unverified, so the default answer refuses 13.4.x without PyTorch and says why, and
  --allow-unverified answers it (in minor-version mode on an R580 host: no Table 3 driver is known,
  the per-major floor decides; forward compatibility only on a branch cuda.compat lists).
- The loader checks the new grammar and names the line of a mistake.
"""

from __future__ import annotations

import re
import shutil

import pytest

from conftest import ROOT

from imagebuild import cli, knowledge
from imagebuild.resolve import solver as R

MATRIX = ROOT / "matrix.yaml"
H100_R580 = {"driver": "580.95.05", "gpu": "H100"}
NO_TORCH_134 = {"pytorch": "none", "cuda": "==13.4.*"}


def _chain(res) -> str:
    assert not res.ok, res.stack
    return "\n".join(res.explanation)


def _repo_chain(res) -> str:
    """A host answer CUDA from an OS repository cannot give: given with CUDA from NVIDIA's wheels
    (no PyTorch, no cuda-compat), with the facts that rule the repository out beside it."""
    assert res.ok and res.cuda_from == "wheels" and res.stack["pytorch"] == "none", res.explanation
    assert res.explanation[0].startswith(f"CUDA {res.stack['cuda']} from NVIDIA's wheels")
    assert res.mode.mode != "forward-compat" and not res.mode.package
    return "\n".join(res.repository_chain)


# --- the facts and their sources -------------------------------------------------------------------


def test_the_13_4_facts_name_their_sources(k):
    for sid, url in (("CUDAREL134", "/cuda/archive/13.4.1/cuda-toolkit-release-notes/"),
                     ("CUDAREL1342", "/cuda/archive/13.4.2/cuda-toolkit-release-notes/"),
                     ("CUDAREL1341RD", "/cuda/redist/redistrib_13.4.1.json"),
                     ("CUDAREL1342RD", "/cuda/redist/redistrib_13.4.2.json"),
                     ("CUDAREPODEB13", "/cuda/repos/debian13/x86_64/"),
                     ("CUDAREPOKY11", "/cuda/repos/kylin11/x86_64/")):
        assert url in k.sources[sid].url, sid
    rel = k.releases["13.4.1"]
    # no Table 3 driver was read: left out, not guessed
    assert rel.driver is None and rel.wheels_only
    facts = {(a.kind, a.source): a for a in rel.availability}
    assert set(facts) == {("repos", "CUDAREPODEB13"), ("images", "CUDAREPOIMG134")}
    assert all(not a.verified and a.platforms == ("x86_64",) for a in facts.values())
    assert facts[("repos", "CUDAREPODEB13")].names == ("debian13",)
    # no repository of an OS here is confirmed for any release known from the wheels
    for v in ("12.8.2", "12.9.2", "13.0.3", "13.1.2", "13.2.2", "13.4.1", "13.4.2", "13.4.3",
              "13.5.0"):
        assert not k.releases[v].in_repository, v


# --- stacks without PyTorch --------------------------------------------------------------------------


def test_13_4_without_pytorch_comes_from_the_wheels_by_default_with_the_reason(k):
    res = R.resolve(k, R.Host(**H100_R580), NO_TORCH_134)
    chain = _repo_chain(res)
    assert res.stack["cuda"] == "13.4.3" and res.mode.mode == "minor-version"
    # an image recipe that installs CUDA from the repository still cannot have it
    assert _chain(R.check(k, R.Host(**H100_R580), {"pytorch": "none", "cuda": "13.4"}, image=True))
    assert "13.4.1, 13.4.2, 13.4.3" in chain and "known from NVIDIA's wheels (cuda-toolkit) only" in chain
    assert "13.4.1: only unverified reports, which --allow-unverified uses" in chain
    assert "[S10]" in chain


def test_13_4_without_pytorch_on_r580_is_minor_version_under_allow_unverified(k):
    res = R.resolve(k, R.Host(**H100_R580), NO_TORCH_134, allow_unverified=True)
    assert res.ok, res.explanation
    assert res.stack["cuda"] == "13.4.1" and res.stack["pytorch"] == "none"
    # no Table 3 driver: native cannot be judged; the 13.x floor 580.65.06 decides [S5]
    assert res.mode.mode == "minor-version" and "580.65.06" in res.mode.text and res.mode.source == "S5"
    assert res.min_driver == "580.65.06"
    line = next(x for x in res.explanation if x.startswith("cuda 13.4.1"))
    assert "[CUDAREPOIMG134], unverified" in line or "[CUDAREPODEB13], unverified" in line
    assert any("--allow-unverified" in w for w in res.warnings)


def test_13_4_from_debian13_s_repository_under_allow_unverified(k):
    res = R.resolve(k, R.Host(**H100_R580), {**NO_TORCH_134, "os": "debian13"},
                    allow_unverified=True)
    assert res.ok, res.explanation
    assert res.stack["cuda"] == "13.4.1" and res.stack["os"] == "debian13"
    line = next(x for x in res.explanation if x.startswith("cuda 13.4.1"))
    assert "published for Debian 13 (trixie): NVIDIA's repository [CUDAREPODEB13], unverified" in line


def test_an_os_whose_repository_lacks_13_4_says_so(k):
    chain = _repo_chain(R.resolve(k, R.Host(**H100_R580), {**NO_TORCH_134, "os": "rockylinux8"},
                                  allow_unverified=True))
    assert "NVIDIA's CUDA repository for Rocky Linux 8 carries CUDA >=11.0.3 except" in chain
    assert "13.4.1" in chain.split("Rocky Linux 8", 1)[1]


def test_13_4_images_seen_for_x86_64_only(k):
    # a Grace node is aarch64: the Ubuntu 24.04 facts for 13.4.1 name x86_64 only
    chain = _repo_chain(R.resolve(k, R.Host(driver="580.95.05", gpu="GH200"),
                                  {**NO_TORCH_134, "os": "ubuntu24.04"}, allow_unverified=True))
    assert "13.4.1 on x86_64 (nvidia/cuda images [CUDAREPOIMG134], unverified)" in chain
    assert "[CUDAREPODEB13]" not in chain      # debian13's repository is not Ubuntu's


@pytest.mark.parametrize("driver,day,mode,words", [
    ("570.124.06", "2026-01-15", "forward-compat", "cuda-compat-13-4"),   # R570 supported until 2026-02
    ("535.104.05", "2026-05-15", "forward-compat", "cuda-compat-13-4"),   # R535 until 2026-06 (S6)
    ("595.71.05", None, "minor-version", "580.65.06"),
])
def test_the_mode_of_13_4_without_its_own_driver(k, driver, day, mode, words):
    res = R.resolve(k, R.Host(driver=driver, gpu="H100", date=day), NO_TORCH_134, allow_unverified=True)
    assert res.ok, res.explanation
    assert res.stack["cuda"] == "13.4.1" and res.mode.mode == mode and words in res.mode.text


@pytest.mark.parametrize("driver", ["570.124.06", "535.104.05"])
def test_13_4_through_cuda_compat_ends_with_the_branch(k, driver):
    """On the matrix's as_of (2026-11-21) both branches are past their end of life (S6): the
    compat libraries need a supported branch (S4), so 13.4 does not run there."""
    res = R.resolve(k, R.Host(driver=driver, gpu="H100"), NO_TORCH_134, allow_unverified=True)
    assert not res.ok and "cuda-compat cannot help" in _chain(res)


def test_13_4_needs_a_branch_its_cuda_compat_lists(k):
    # R550: below the 13.x floor, and cuda-compat-13-4 lists R595, R580, R570, R535 only [FWD615]
    chain = _chain(R.resolve(k, R.Host(driver="550.54.15", gpu="H100"), NO_TORCH_134,
                             allow_unverified=True))
    assert "not the host's R550 [FWD615]" in chain and "580.65.06" in chain


# --- stacks with PyTorch and image recipes --------------------------------------------------------


def test_a_pytorch_stack_keeps_its_wheels_cuda(k):
    res = R.resolve(k, R.Host(driver="595.71.05", gpu="H100"), {"pytorch": "==2.15.0"})
    assert res.ok and res.stack["cuda"] == "13.2.2" and res.mode.mode == "native"


def test_a_recipe_from_the_repository_never_takes_an_unconfirmed_release(k):
    res = R.resolve(k, R.Host(), {"pytorch": "none", "cuda": "==13.4.1", "os": "ubuntu24.04"},
                    repo_cuda=True)
    assert not res.ok
    assert any("known from NVIDIA's wheels (cuda-toolkit) only" in x for x in res.explanation)


def test_releases_in_an_os_range_keep_their_repository(k):
    # 13.3.1 has no availability facts: Ubuntu 24.04's range (NVCI) still carries it
    res = R.resolve(k, R.Host(**H100_R580), {"pytorch": "none", "cuda": "==13.3.1",
                                             "os": "ubuntu24.04", "python": "3.12"})
    assert res.ok and res.stack["cuda"] == "13.3.1", res.explanation


# --- a verified fact moves a release out of the wheels-only group ---------------------------------


def _edited(tmp_path, *edits: tuple[str, str]) -> tuple[str, dict[str, int]]:
    """A copy of the matrix with each line matching a pattern rewritten; (path, pattern -> line)."""
    lines = MATRIX.read_text().splitlines(keepends=True)
    where = {}
    for pattern, replacement in edits:
        hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
        assert len(hits) == 1, (pattern, hits)
        lines[hits[0]] = re.sub(pattern, replacement, lines[hits[0]])
        where[pattern] = hits[0] + 1
    path = tmp_path / "matrix.yaml"
    path.write_text("".join(lines))
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    return str(path), where


DEB13 = r'\{cuda: "13\.4\.1", repos: \[debian13\], platforms: \[x86_64\], verified: false,'
IMAGES = r'\{cuda: "13\.4\.1", images: \[ubuntu24\.04, ubuntu26\.04, ubuntu22\.04, rockylinux9\], platforms: \[x86_64\], verified: false,'
WHEELS_134 = r'- \{version: "13\.4\.1", wheels_only: true, '


def test_a_verified_repository_fact_makes_the_release_a_repository_release(tmp_path):
    path, _ = _edited(tmp_path, (WHEELS_134, '- {version: "13.4.1", '),
                      (DEB13, '{cuda: "13.4.1", repos: [debian13], platforms: [x86_64],'))
    k2 = knowledge.load(path)
    assert k2.releases["13.4.1"].in_repository
    res = R.resolve(k2, R.Host(**H100_R580), NO_TORCH_134)
    assert res.ok and res.stack["cuda"] == "13.4.1" and res.stack["os"] == "debian13", \
        res.explanation
    assert res.mode.mode == "minor-version"
    # only Debian 13's repository: Ubuntu 24.04's (its images unverified) still lacks it
    chain = _repo_chain(R.resolve(k2, R.Host(**H100_R580), {**NO_TORCH_134, "os": "ubuntu24.04"}))
    assert "NVIDIA's CUDA repository for Ubuntu 24.04 carries CUDA >=12.5.1 except" in chain
    # and an image recipe on Debian 13 may now install it from the repository
    assert R.resolve(k2, R.Host(), {"pytorch": "none", "cuda": "==13.4.1", "os": "debian13"},
                     repo_cuda=True).ok


# --- the loader's checks, each naming its line ------------------------------------------------------


def _refused(capsys, path: str, line: int, words: str):
    code = cli.main(["knowledge", "validate", "--matrix", path])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert f"{path}:{line}:" in err[0] and words in err[0], err[0]


@pytest.mark.parametrize("pattern,replacement,words", [
    (DEB13, '{cuda: "13.4.1", repos: [debian13], platforms: [x86_64],',
     "CUDA 13.4.1 is marked wheels_only: true"),
    (DEB13, '{cuda: "13.4.1", repos: [ubuntu2044], platforms: [x86_64], verified: false,',
     "repos: 'ubuntu2044' is no os[].nvidia_repo of this matrix"),
    (DEB13, '{cuda: "13.4.1", repos: ["Ubuntu 24.04"], platforms: [x86_64], verified: false,',
     "is not a repository folder such as ubuntu2404"),
    (DEB13, '{cuda: "13.4", repos: [debian13], platforms: [x86_64], verified: false,',
     "CUDA 13.4 is not a release under cuda.releases"),
    (DEB13, '{cuda: "13.4.1", repos: [debian13], images: [debian13], verified: false,',
     "give either repos"),
    (DEB13, '{cuda: "13.4.1", repos: [], platforms: [x86_64], verified: false,',
     "repos is an empty list"),
    (DEB13, '{cuda: "13.4.1", repos: [debian13], platforms: [aarch64], verified: false,',
     "debian13 is not built for aarch64"),
    (DEB13, '{cuda: "13.4.1", repos: [debian13], platforms: [x86_64], seen: "2026-13-01", verified: false,',
     "seen must be a day"),
    (IMAGES, '{cuda: "13.4.1", images: [ubuntu24.04, ubuntu99.04], platforms: [x86_64], verified: false,',
     "images: 'ubuntu99.04' is no OS of this matrix"),
    (IMAGES, '{cuda: "13.4.1", images: [ubuntu26.04], platforms: [aarch64], verified: false,',
     "ubuntu26.04 is not built for aarch64"),
])
def test_a_malformed_availability_fact_is_refused_on_its_line(tmp_path, capsys, pattern,
                                                             replacement, words):
    path, where = _edited(tmp_path, (pattern, replacement))
    _refused(capsys, path, where[pattern], words)


def test_a_release_without_driver_wheels_or_availability_is_refused(tmp_path, capsys):
    path, where = _edited(tmp_path, (r'- \{version: "13\.4\.2", wheels_only: true, ',
                                     '- {version: "13.4.2", '))
    _refused(capsys, path, where[r'- \{version: "13\.4\.2", wheels_only: true, '],
             "CUDA 13.4.2 needs a driver (or verified: false, or wheels_only: true")
