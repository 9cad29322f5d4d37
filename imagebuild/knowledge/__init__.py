"""Load and validate matrix.yaml into typed, immutable knowledge.

Every fact keeps its source id and the line it came from, so the resolver can cite both. Validation
is strict: an unknown key, a malformed version, a reference to something that does not exist or two
facts that contradict each other raise KnowledgeError naming file, line and column.

The sections are compiled into one list of generic `Rule`s (when these components match, these must
match too). The solver evaluates rules and knows nothing about CUDA; the only other kind of fact, the
CUDA compatibility modes, is interpreted from the `cuda.modes` data by `Knowledge.cuda_mode`.

The package: `schema` (the components and the top-level sections), `yamlfile` (YAML that keeps
positions, bounded by grammar), `matchers` (what a rule asks of one component), `model` (the typed
facts, `Rule` and `Knowledge`), `context` (`_Ctx`: checks and failures with file:line, the rules
collected so far), `sections/` (one module per section of matrix.yaml, each with one `load`) and
`loader` (`load` and `build`, which calls the sections in a fixed order). Callers import from here.
"""

from __future__ import annotations

from .loader import load
from .matchers import (Matcher, any_of, arch_matcher, bool_matcher, category_matcher,
                       driver_max_branch, driver_min, driver_min_branch, matcher_for, mm_range,
                       version_matcher)
from .model import (Availability, Branch, Compat, CudaRelease, Gpu, Knowledge, Mode, Rule, Source,
                    Variant)
from .schema import (BOOLEAN, CATEGORY, COMPONENTS, DEFAULT_PLATFORM, DRIVER, HOST, RULE_TAGS,
                     STACK, TOP)
from .yamlfile import _List, _Map  # noqa: F401 - positioned nodes


def __getattr__(name):
    # what only a command that reads the YAML itself needs (and a cache miss): imported on first use,
    # so that a command whose knowledge comes from the cache never imports the grammar or PyYAML
    if name == "build":
        from .loader import build
        return build
    if name == "load_yaml":
        from .yamlfile import load_yaml
        return load_yaml
    if name == "_Ctx":              # for callers that check nodes the way sections do
        from .context import _Ctx
        return _Ctx
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "BOOLEAN", "CATEGORY", "COMPONENTS", "DEFAULT_PLATFORM", "DRIVER", "HOST", "RULE_TAGS", "STACK",
    "TOP", "Availability", "Branch", "Compat", "CudaRelease", "Gpu", "Knowledge", "Matcher", "Mode",
    "Rule", "Source", "Variant", "any_of", "arch_matcher", "bool_matcher", "build", "category_matcher",
    "driver_max_branch", "driver_min", "driver_min_branch", "load", "load_yaml", "matcher_for",
    "mm_range", "version_matcher",
]
