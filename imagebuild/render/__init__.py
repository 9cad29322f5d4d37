"""Stage 3 of the pipeline: from the matrix's `images:` section to recipes.

- `images`: expands the image families into `ImageSpec`s (stack, OS, flavour, tags, labels,
  image.json), one resolved stack each, and the order they are built in (`depends_on`);
- `imageneeds`: what an image's stack asks of its recipe (the CUDA layout, the compiled parts);
- `wheellock`: the hash-pinned wheel locks an image installs (`locks/wheels/`);
- `sources`: the source tarballs a recipe compiles and the checksummed cache they are read from;
- `blocks`: the compiled building blocks (gdrcopy, UCX, Open MPI, nccl-tests), one entry each:
  tarball, fragment values, install prefix, search paths, build order;
- `checked`: the grammar of every value that reaches a shell line;
- `renderer`: an `ImageSpec` as stages of steps, each step one Jinja fragment, laid out as a
  Dockerfile or a Singularity definition;
- `output`: the rendered recipes written as a tree (`generate`, `generate --check`) and an image's
  build context;
- `combos`, `expandcache`, `fingerprint`, `naming`, `project`: the families' combinations before
  they are resolved, the expansion done as `resolve` needs it and remembered across processes,
  the hashes of its inputs, image ids and tags, the project's labels.

Reads `knowledge` and `resolve`; knows no engine."""
