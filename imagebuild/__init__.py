"""imagebuild: reproducible, tested container images for GPU clusters.

This module stays import-free on purpose: the smoke suite (imagebuild.smoke) is copied into
every image together with this file and must run there on the standard library alone.
"""

__version__ = "0.1.0"
