"""`python -m tool_svc [config.yaml]` starts tool_svc alone."""

import sys

from agentmesh.rpc.host import run_service
from tool_svc.server import SPEC

if __name__ == "__main__":
    sys.exit(run_service(SPEC))
