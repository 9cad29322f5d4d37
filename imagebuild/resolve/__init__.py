"""Stage 2 of the pipeline: from the Knowledge and a host's facts and wishes to one consistent
stack, its CUDA compatibility mode, and when nothing fits the shortest chain of facts that rules
it out (`solver`). Reads `imagebuild.knowledge` only; nothing here knows images, recipes or
engines."""
