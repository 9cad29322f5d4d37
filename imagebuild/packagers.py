"""The OS families recipes are written for, and each one's package manager, as data.

Pure data, below both `grammar` (which refuses a matrix whose CUDA images sit on an OS family
without a row here, or lack the row's repository key tool) and `render` (which writes every
package step from a row: one `packages` fragment for any package manager).

A row says how its package manager installs (the update before, the install command, the
clean-up after, how a pinned version is written), the OS packages of each role a recipe installs
(`packages`, each a template with {python}, {cuda_dash} where the name holds them): the run-time
stage's, the devel stage's build tools, OpenSSH, the distribution's RDMA user space and headers,
CUDA's run-time and development packages from NVIDIA's repository, the autogen tools a git
archive needs (flex, m4; PRRTE's autogen.pl runs `git submodule status`), Open MPI's Fortran
compiler and run time (build.fortran), and what the compiled components' rows name by role
(components.py: UCX's OpenMP run time, the hwloc and libevent a git-form Open MPI builds
against), the fragments that add NVIDIA's
repositories (`repo_fragments`: key and repository files differ in kind, not only in name), the
NVIDIA key tool (tools.cuda-repo-key[-dnf]), the repository files the run-time stage copies from
the devel stage, and how Python is named. A new package manager is a row here, its two
repository fragments and an OS of its family in matrix.yaml (tests/render/test_packagers.py plants one)."""

from __future__ import annotations

from .errors import ImagebuildError


class PackagerError(ImagebuildError):
    """A package manager row lacks what a recipe asks of it (one line naming the row and role)."""

# OS family -> its package manager's row
PACKAGERS = {
    "ubuntu": {
        "name": "apt", "key": "cuda-repo-key",
        "update": ("apt-get update",),
        "install": "apt-get install -y --no-install-recommends",
        "clean": ("rm -rf /var/lib/apt/lists/*",),
        "pin": "{name}={version}",
        "packages": {
            "os-runtime": ("ca-certificates", "libnuma1", "openssh-client", "python3", "python3-venv"),
            "os-devel": ("autoconf", "automake", "bzip2", "ca-certificates", "curl", "file", "g++",
                         "gcc", "gnupg", "libnuma-dev", "libtool", "make", "patch", "pkg-config",
                         "python3", "python3-dev", "python3-venv"),
            "openssh": ("openssh-client", "openssh-server"),
            "rdma-runtime": ("ibverbs-providers", "ibverbs-utils", "libibverbs1", "librdmacm1",
                             "rdmacm-utils"),
            "cuda-compat": ("cuda-compat-{cuda_dash}",),
            "cuda-runtime": ("cuda-libraries-{cuda_dash}",),
            "cuda-devel": ("cuda-libraries-dev-{cuda_dash}", "cuda-minimal-build-{cuda_dash}"),
            "rdma-devel": ("libibverbs-dev", "librdmacm-dev"),
            "autogen-tools": ("flex", "git", "m4"),
            "fortran-devel": ("gfortran",),
            "fortran-runtime": ("libgfortran5",),
            "openmp-runtime": ("libgomp1",),
            "c-compiler": ("gcc", "libc6-dev"),
            "hwloc-devel": ("libhwloc-dev",),
            "hwloc-runtime": ("libhwloc15",),
            "libevent-devel": ("libevent-dev",),
            "libevent-runtime": ("libevent-core-2.1-7", "libevent-pthreads-2.1-7"),
        },
        "repo_fragments": {"cuda": "cuda-repo", "doca": "doca-repo"},
        "repo_files": ("/usr/share/keyrings/cuda-archive-keyring.gpg",
                       "/etc/apt/sources.list.d/cuda.list"),
        "doca_files": ("/usr/share/keyrings/doca-archive-keyring.gpg",
                       "/etc/apt/sources.list.d/doca.list", "/etc/apt/preferences.d/doca"),
        "python": "python3"},
    "rhel": {
        "name": "dnf", "key": "cuda-repo-key-dnf",
        "update": (),
        "install": "dnf install -y --setopt=install_weak_deps=False --nodocs",
        "clean": ("dnf clean all", "rm -rf /var/cache/dnf"),
        "pin": "{name}-{version}",
        "packages": {
            "os-runtime": ("ca-certificates", "numactl-libs", "openssh-clients", "python{python}"),
            # curl comes as the base image's curl-minimal (installing curl would conflict with it
            # on EL9)
            "os-devel": ("autoconf", "automake", "bzip2", "ca-certificates", "file", "findutils",
                         "gcc", "gcc-c++", "gnupg2", "gzip", "libtool", "make", "numactl-devel",
                         "patch", "pkgconf-pkg-config", "python{python}", "python{python}-devel",
                         "tar"),
            "openssh": ("openssh-clients", "openssh-server"),
            "rdma-runtime": ("libibverbs", "libibverbs-utils", "librdmacm", "librdmacm-utils",
                             "rdma-core"),
            "cuda-compat": ("cuda-compat-{cuda_dash}",),
            "cuda-runtime": ("cuda-libraries-{cuda_dash}",),
            "cuda-devel": ("cuda-libraries-devel-{cuda_dash}", "cuda-minimal-build-{cuda_dash}"),
            "rdma-devel": ("rdma-core-devel",),
            "autogen-tools": ("flex", "git", "m4"),
            "fortran-devel": ("gcc-gfortran",),
            "fortran-runtime": ("libgfortran",),
            "openmp-runtime": ("libgomp",),
            "c-compiler": ("gcc", "glibc-devel"),
            "hwloc-devel": ("hwloc-devel",),
            "hwloc-runtime": ("hwloc-libs",),
            "libevent-devel": ("libevent-devel",),
            "libevent-runtime": ("libevent",),
        },
        "repo_fragments": {"cuda": "cuda-repo-dnf", "doca": "doca-repo-dnf"},
        "repo_files": ("/etc/pki/rpm-gpg/RPM-GPG-KEY-NVIDIA-CUDA", "/etc/yum.repos.d/cuda.repo"),
        "doca_files": ("/etc/pki/rpm-gpg/RPM-GPG-KEY-DOCA", "/etc/yum.repos.d/doca.repo"),
        "python": "python{python}"},
}
# Debian: apt like Ubuntu; no NVIDIA repository is confirmed for it, so its CUDA images take CUDA
# from NVIDIA's wheels (cuda_from: wheels), and the repository keys and files are never used.
PACKAGERS["debian"] = dict(PACKAGERS["ubuntu"])


def packages(pm: dict, role: str, **values: str) -> list[str]:
    """The OS packages of ``role`` in package manager row ``pm``, their {python} and {cuda_dash}
    filled in from ``values``; PackagerError when the row has no such role."""
    if role not in pm["packages"]:
        raise PackagerError(f"packagers.py: the {pm['name']} row names no {role!r} packages "
                            f"(roles it has: {', '.join(sorted(pm['packages']))})")
    return [p.format(**values) for p in pm["packages"][role]]


def pinned(pm: dict, names: list[str], version: str) -> list[str]:
    """``names`` pinned to ``version`` as the package manager writes it (apt: name=1.2-1, dnf:
    name-1.2-1)."""
    return [pm["pin"].format(name=n, version=version) for n in names]
