"""`python -m agentmesh.cli`: the `agentmesh` command."""

import sys

from agentmesh.cli import main

sys.exit(main())
