"""Stage 5, the host side of the smoke suite: starts `imagebuild.smoke` inside containers of a
built image (one, or several on a private network for the multi-container checks), reads the
reports back and compares the image's labels with what it really holds (`runner`). The in-image
half, `imagebuild.smoke`, is standard-library code copied into every image and imports nothing
from here."""
