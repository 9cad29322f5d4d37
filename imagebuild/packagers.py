"""The OS families CUDA recipes are written for, and what each one's packager needs.

Pure data, below both `grammar` (which refuses a matrix whose CUDA images sit on an OS family
without recipes, or lack the family's repository key tool) and `render` (which picks each family's
fragments, key, repository files and package names from here)."""

from __future__ import annotations

# OS family -> how its packages, repositories and keys are handled. Each packager has its own
# fragments (`<name>` for apt, `<name>-dnf` for dnf), its own NVIDIA key (tools.cuda-repo-key[-dnf])
# and its own repository files, which the runtime stage copies from the devel stage.
PACKAGERS = {
    "ubuntu": {"name": "apt", "suffix": "", "key": "cuda-repo-key",
               "repo_files": ("/usr/share/keyrings/cuda-archive-keyring.gpg",
                              "/etc/apt/sources.list.d/cuda.list"),
               "doca_files": ("/usr/share/keyrings/doca-archive-keyring.gpg",
                              "/etc/apt/sources.list.d/doca.list", "/etc/apt/preferences.d/doca"),
               "python": "python3"},
    "rhel": {"name": "dnf", "suffix": "-dnf", "key": "cuda-repo-key-dnf",
             "repo_files": ("/etc/pki/rpm-gpg/RPM-GPG-KEY-NVIDIA-CUDA", "/etc/yum.repos.d/cuda.repo"),
             "doca_files": ("/etc/pki/rpm-gpg/RPM-GPG-KEY-DOCA", "/etc/yum.repos.d/doca.repo"),
             "python": "python{python}"},
}
# Debian: apt like Ubuntu; no NVIDIA repository is confirmed for it, so its CUDA images take CUDA
# from NVIDIA's wheels (cuda_from: wheels), and the repository keys and files are never used.
PACKAGERS["debian"] = dict(PACKAGERS["ubuntu"])
# What compiling a git tag archive needs besides the release tarball's tools (autogen: flex, m4;
# PRRTE's autogen.pl runs `git submodule status`); what a component's git form builds against is
# its own row's (components.py, git_packages). The RDMA headers a devel stage installs
# (rdma-core's, unless the image's rdma: names others): with the CUDA packages (cuda-devel) or,
# CUDA coming from the wheels, with the OS's build tools.
GIT_FORM_TOOLS = {"apt": ["flex", "git", "m4"], "dnf": ["flex", "git", "m4"]}
RDMA_DEVEL = {"apt": ["libibverbs-dev", "librdmacm-dev"], "dnf": ["rdma-core-devel"]}
# Open MPI's Fortran bindings (build.fortran: true): the compiler for the devel stage, its run time
# for the run-time stage (libmpi_mpifh and libmpi_usempif08 link it).
FORTRAN = {"apt": ("gfortran", "libgfortran5"), "dnf": ("gcc-gfortran", "libgfortran")}
