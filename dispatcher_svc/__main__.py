"""`python -m dispatcher_svc [config.yaml]` starts dispatcher_svc alone."""

import sys

from agentmesh.rpc.host import run_service
from dispatcher_svc.server import SPEC

if __name__ == "__main__":
    sys.exit(run_service(SPEC))
