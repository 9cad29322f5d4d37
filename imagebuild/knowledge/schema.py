"""The vocabulary of matrix.yaml: the components a rule may name, which of them are the stack and
which the host's facts, how their values are compared, the rule tags and the top-level sections."""

from __future__ import annotations

from ..components import SWITCHES

# The stack's components, in the order the solver assigns them, and the host's facts.
STACK = ("pytorch", "cuda", "cudnn", "nccl", "python", "os", "platform", "openmpi", "ucx")
HOST = ("driver", "gpu", "gpu.cc", "gpu.datacenter", "kernel", "ofed", "open_kernel_modules")
CATEGORY = {"os", "gpu", "platform"}
# Rules that hold only in some readings of a stack: "repo-cuda" when CUDA comes from NVIDIA's package
# repository (image recipes), "wheel-cuda" when it comes from the PyTorch wheels (resolve, check),
# "cuda-aware" when UCX/Open MPI are built with CUDA (what imagebuild builds; `check` of an existing
# machine, whose UCX may be built without CUDA, reports them as warnings), "toolkit-repo" for "a stack
# without PyTorch takes CUDA from a repository" (an image whose CUDA toolkit comes from NVIDIA's
# wheels, `cuda_from: wheels` without PyTorch, skips them).
RULE_TAGS = frozenset({"repo-cuda", "wheel-cuda", "cuda-aware", "toolkit-repo"})
# The platform a stack is for when the matrix lists none (every fact below was read for x86_64).
DEFAULT_PLATFORM = "x86_64"
BOOLEAN = {"gpu.datacenter", "ofed", "open_kernel_modules"}
DRIVER = {"driver"}
COMPONENTS = STACK + HOST


# `images[].build`: the build choices a family makes for what it compiles (recorded in the image's labels), with their
# defaults: UCX's GDA-KI module (GPU-initiated networking, needs the gpunetio submodule), Open MPI's
# Fortran bindings, ROMIO (MPI-IO) and OpenSHMEM; `cuda_arch` the GPU architectures nvcc compiles
# UCX's device code and nccl-tests for (default: each project's own list for the CUDA release).
# The defaults are chosen for PyTorch clusters: no Fortran bindings and no OpenSHMEM, which no
# PyTorch job calls (a family that needs them says `fortran: true`, `oshmem: true`); GDA-KI and
# ROMIO as upstream builds them.
# A component that only some families compile (components.py, its row's `when`) adds its own
# switch, off by default.
BUILD_SWITCHES = {"gda": True, "fortran": False, "romio": True, "oshmem": False,
                  **{name: False for name in SWITCHES}}

#: the flavors an image family may build (`images[].flavors`)
FLAVORS = ("runtime", "devel", "cpu")

#: the largest matrix.yaml read (the project's is about 100 KiB)
MATRIX_MAX_BYTES = 4 * 1024 * 1024


# The top-level sections matrix.yaml may have (loader.build checks them; each has its module under
# sections/, tools and images in recipe_inputs.py).
TOP = {"schema", "as_of", "sources", "preference", "cuda", "drivers", "architectures", "gpus",
       "cudnn", "nccl", "pytorch", "ucx", "openmpi", "os", "gpudirect", "constraints", "images",
       "tools", "rdma", "platforms", "project"}
