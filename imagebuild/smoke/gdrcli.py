"""`imagebuild-gdr-check`: the GPUDirect probe's command line (gdr.main), run as
`python -m imagebuild.smoke.gdrcli`. A module of its own because the smoke package imports gdr:
running gdr itself with -m made Python print runpy's RuntimeWarning ("found in sys.modules ...
prior to execution") at the top of every Slurm node's log."""

import sys

from .gdr import main

if __name__ == "__main__":
    sys.exit(main())
