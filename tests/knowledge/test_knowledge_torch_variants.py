"""Published PyTorch CUDA variants beside the default build (issue 25, class 3): the cu132 builds of
2.12 and 2.13 that RELEASE.md and the pull requests adding its rows list with their cuDNN and NCCL
(TORCHREL213, TORCHRELNCCL, TORCHRELMD), and the cu126 builds kept for older GPUs when the default
build dropped them (the `arch` lists: S14, S18, TORCHREL29ARCH). A build RELEASE.md lists is
confirmed even where its NCCL is not (`nccl_verified: false`: none listed, or read only in
third-party copies, TORCHREL29BM). Each test names the source ids it checks."""

from __future__ import annotations

import pytest

from imagebuild.resolve import solver as R

from conftest import ROOT

MATRIX = str(ROOT / "matrix.yaml")
H100 = R.Host(driver="580.95.05", gpu="H100")


@pytest.mark.parametrize("torch, source", [("2.13.0", "TORCHREL213"), ("2.12.1", "TORCHRELNCCL")])
def test_cu132_builds_of_2_12_and_2_13_are_verified(k, torch, source):
    """TORCHREL213 (PR #187075): '| CUDA 13.2 (CUDNN 9.20.0.48) (NCCL 2.29.7) |' in the 2.13 row;
    TORCHRELNCCL (PR #190386): '2.12 | ... 13.0 / 13.2 -> 2.29.7', cuDNN of the 2.12 row: TORCHRELMD."""
    v = k.variants[(torch, "13.2")]
    assert v.verified and v.source == source
    assert (v.cudnn, v.nccl) == ("9.20.0.48", "2.29.7")
    assert v.arch == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
    res = R.resolve(k, H100, {"pytorch": "==" + torch, "cuda": "==13.2.*"})
    assert res.ok, res.explanation
    assert res.stack["cuda"].startswith("13.2.") and res.stack["cudnn"] == "9.20.0.48"
    assert res.stack["nccl"] == "2.29.7"
    assert any(f"[{source}]" in line for line in res.explanation)


def test_no_cu132_variant_says_cudnn_and_nccl_not_listed(k):
    """The 2.13 row lists both now (TORCHREL213); the stale note is gone from every release."""
    section = (ROOT / "matrix.yaml").read_text().split("\npytorch:", 1)[1].split("\nucx:", 1)[0]
    assert "cuDNN and NCCL not listed" not in section
    for (torch, cuda), v in k.variants.items():
        if cuda == "13.2":
            assert v.verified, torch


@pytest.mark.parametrize("gpu, torch, dropped_by", [
    ("V100", "2.13.0", "13.0"),   # default cu130: sm_75 and up (S10, TORCHRELMD)
    ("V100", "2.12.1", "13.0"),
    ("V100", "2.11.0", "12.8"),   # 2.11's cu128 dropped sm_70 (S14)
    ("P100", "2.14.1", "13.0"),
    ("P100", "2.10.0", "12.8"),   # 2.10's default cu128 keeps sm_70, drops sm_60 (S10)
])
def test_an_older_gpu_gets_the_cu126_build_that_keeps_its_arch(k, gpu, torch, dropped_by):
    """The cu126 arch list 5.0, 6.0, 7.0, ... (S14: '12.6.3 | Maxwell(5.0), Pascal(6.0), Volta(7.0)')
    serves Pascal and Volta where the default build's list does not."""
    host = R.Host(driver="580.95.05", gpu=gpu)
    cc = {"V100": "7.0", "P100": "6.0"}[gpu]
    assert cc not in (k.variants[(torch, dropped_by)].arch or ())
    assert cc in k.variants[(torch, "12.6")].arch
    res = R.resolve(k, host, {"pytorch": "==" + torch})
    assert res.ok, res.explanation
    assert res.stack["cuda"].startswith("12.6.")
    refused = R.resolve(k, host, {"pytorch": "==" + torch, "cuda": f"=={dropped_by}.*"})
    assert not refused.ok


def test_the_arch_list_alone_refuses_a_cuda_that_still_supports_the_gpu(k):
    """CUDA 12.8 still supports Volta, but 2.11's cu128 wheels are built for sm_75 and up (S14):
    the refusal names the variant's arch list, not the toolkit."""
    res = R.resolve(k, R.Host(driver="580.95.05", gpu="V100"), {"pytorch": "==2.11.0", "cuda": "==12.8.*"})
    assert not res.ok
    assert any("torch 2.11.0+cu128" in line and "sm 7.5" in line for line in res.explanation)


def test_2_9_builds_are_confirmed_and_their_third_party_nccl_is_not(k):
    """RELEASE.md (S14) lists 2.9's cu126 and cu130 builds, so they are offered by default
    (issue 25, class 3); it lists no NCCL for 2.9: nvidia-nccl-cu12==2.27.5 (cu126) and
    nvidia-nccl-cu13==2.27.7 (cu130) are read only in copies (TORCHREL29BM), a fact applied only
    under --allow-unverified and named in the answer's warning."""
    for cuda, nccl in (("12.6", "2.27.5"), ("13.0", "2.27.7")):
        v = k.variants[("2.9.1", cuda)]
        assert v.verified and not v.nccl_verified and v.nccl == nccl and v.nccl_source == "TORCHREL29BM"
        assert v.confirmed_nccl() is None and v.confirmed_nccl(allow_unverified=True) == nccl
    p100 = R.Host(driver="580.95.05", gpu="P100")   # sm_60: only the cu126 build serves it
    res = R.resolve(k, p100, {"pytorch": "==2.9.1"})
    # the copies' value ranks first (the likeliest match) and is said to be unconfirmed
    assert res.ok and res.stack["cuda"].startswith("12.6.") and res.stack["nccl"] == "2.27.5"
    assert any("torch 2.9.1+cu126's wheels bundle is not confirmed" in w and "2.27.5" in w
               and "[TORCHREL29BM]" in w for w in res.warnings), res.warnings
    assert any("nccl 2.27.5: what third-party copies say torch 2.9.1+cu126 bundles [TORCHREL29BM] "
               "(not confirmed)" in line for line in res.explanation), res.explanation
    # it constrains nothing by default: an older NCCL may be installed; the flag applies the floor
    older = R.resolve(k, p100, {"pytorch": "==2.9.1", "nccl": "<2.27"})
    assert older.ok and older.stack["nccl"].startswith("2.26.")
    refused = R.resolve(k, p100, {"pytorch": "==2.9.1", "nccl": "<2.27"}, allow_unverified=True)
    assert not refused.ok and any("torch 2.9.1+cu126 bundles nccl >= 2.27.5 (read only in third-party "
                                  "copies) [TORCHREL29BM]" in line for line in refused.explanation)
    res = R.resolve(k, p100, {"pytorch": "==2.9.1"}, allow_unverified=True)
    assert res.ok and res.stack["cuda"].startswith("12.6.") and res.stack["nccl"] == "2.27.5"


def test_a_build_without_a_confirmed_nccl_is_offered_but_never_built_into_an_image(k):
    """torch 2.7.1+cu128 (S14, experimental; RELEASE.md lists no NCCL) serves a consumer
    Blackwell card and a Grace host (PT27: aarch64 wheels); the images are made only from builds
    whose every library is confirmed."""
    from imagebuild.render import images
    rtx = R.resolve(k, R.Host(driver="575.57.08", gpu="RTX 5090"), {"pytorch": "==2.7.*"})
    assert rtx.ok and rtx.stack["pytorch"] == "2.7.1" and rtx.stack["cuda"].startswith("12.8.")
    v = k.variants[("2.7.1", "12.8")]     # RELEASE.md: no NCCL; a freeze's 2.26.2, unconfirmed
    assert (v.nccl, v.nccl_verified, v.nccl_source) == ("2.26.2", False, "TORCHREL27FREEZE")
    assert rtx.stack["nccl"] == "2.26.2"
    gh = R.resolve(k, R.Host(driver="580.95.05", gpu="GH200"), {"pytorch": "==2.7.*"})
    assert gh.ok and gh.stack["platform"] == "aarch64" and gh.stack["cudnn"] == "9.7.1.26"
    specs, _ = images.expand(k)
    assert not [s.id for s in specs if s.stack.get("pytorch") in ("2.7.1", "2.9.1")
                and not k.variants[(s.stack["pytorch"], s.stack["cuda"].rsplit(".", 1)[0])].nccl_verified]


def test_torchrel_sources_are_declared(k):
    for sid in ("TORCHREL213", "TORCHRELNCCL", "TORCHRELMD", "TORCHREL29ARCH", "TORCHREL29BM"):
        assert sid in k.document["sources"], sid


def test_knowledge_show_says_which_nccl_is_not_confirmed(k):
    """`imagebuild knowledge show pytorch`: a CUDA build's NCCL that no source gives is "not
    known" (never "none", the CPU build's), one read in third-party copies names them."""
    from imagebuild.knowledge.catalogue import section_tables
    (_, header, rows), = section_tables(k, "pytorch")
    cell = {(r[0], r[2]): r[header.index("nccl")] for r in rows}
    assert cell[("2.7.1", "cu128")] == "2.26.2 (unconfirmed: TORCHREL27FREEZE)"
    assert cell[("2.9.1", "cu126")] == "2.27.5 (unconfirmed: TORCHREL29BM)"
    assert cell[("2.8.0", "cu126")] == cell[("2.8.0", "cu129")] == "not known"
    assert cell[("2.8.0", "cu128")] == "2.27.3" and cell[("2.13.0", "cpu")] == "none"
