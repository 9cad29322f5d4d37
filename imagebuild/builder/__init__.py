"""Stage 4 of the pipeline: build contexts to local images on an engine.

- `scheduler`: dependency order (graphlib), parallel jobs, keep-going, logs;
- `reproducible`: normalising a built image so the same inputs give the same image ID;
- `pinning`: building FROM the base an images.lock records;
- `baseimage`: debootstrap base images for sites with no registry.

Talks to an engine only through `imagebuild.engines`."""
