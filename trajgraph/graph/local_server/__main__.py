"""``python -m trajgraph.graph.local_server fetch|start|stop|status|ping``."""

import sys

from trajgraph.graph.local_server.cli import main

sys.exit(main())
