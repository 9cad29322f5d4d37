"""One module per section of matrix.yaml. Each has one `load(c, doc, ...)` that validates its
section (through the _Ctx `c`, which names file, line and column on a refusal), adds the section's
rules with `c.add_rule` and returns its facts. loader.build calls them in a fixed order: later
sections refer to earlier ones (a GPU to its architecture, a PyTorch variant to a CUDA release, an
RDMA repository to an OS), and the order of the rules is the order of the resolver's explanations.
"""
