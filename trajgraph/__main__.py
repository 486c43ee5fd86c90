"""``python -m trajgraph``: the ``trajgraph`` command, where its script is not on PATH."""

import sys

from trajgraph.console import main

if __name__ == "__main__":
    sys.exit(main())
