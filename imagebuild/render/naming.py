"""How an image is named from its resolved stack (README: "Tags"): its id in the matrix
(`pytorch-2.13.0-cu130-ubuntu24.04-runtime`) and its tag (`2.13.0-cuda13.0-cudnn9-nccl2.30-...`)."""

from __future__ import annotations


from ..versions import NONE, major_minor, parse_version


def _tag(stack: dict, flavor: str, os_id: str, rdma=None) -> str:
    """2.4.1-cuda12.4-cudnn9-nccl2.21-ubuntu22.04-runtime; comms-cuda12.8-nccl2.27-ompi5.0.10-..."""
    parts = []
    if stack["pytorch"] != NONE:
        parts.append(stack["pytorch"])
    else:
        parts.append("comms")
    if stack["cuda"] != NONE:
        parts.append(f"cuda{major_minor(stack['cuda'])}")
    else:
        parts.append("cpu")
    if stack["cudnn"] != NONE:
        parts.append(f"cudnn{parse_version(stack['cudnn']).major}")
    if stack["nccl"] != NONE:
        parts.append(f"nccl{major_minor(stack['nccl'])}")
    parts.append(f"ompi{stack['openmpi']}")
    parts.append(f"ucx{stack['ucx']}")
    parts.append(os_id)
    if rdma:
        parts.append(_rdma_part(rdma))
    parts.append(flavor)
    return "-".join(parts)


def _rdma_part(rdma) -> str:
    """doca3.2.0 for DOCA-OFED 3.2.0 (an id's first word, then the version)."""
    return f"{rdma.id.split('-')[0]}{rdma.version}"


def _image_id(family: str, stack: dict, variant_tag: str, os_id: str, flavor: str,
              rdma=None) -> str:
    if family == "smoke-cpu" or (stack["pytorch"] == NONE and stack["cuda"] == NONE):
        return family
    parts = [family]
    if stack["pytorch"] != NONE:
        parts.append(stack["pytorch"])
    parts.append(variant_tag or f"cu{major_minor(stack['cuda']).replace('.', '')}")
    if stack["pytorch"] == NONE and stack["nccl"] != NONE:
        parts.append(f"nccl{stack['nccl']}")
    parts.append(os_id)
    if rdma:
        parts.append(_rdma_part(rdma))
    parts.append(flavor)
    return "-".join(parts)
