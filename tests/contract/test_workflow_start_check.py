"""A dispatcher whose configuration holds a bad workflow does not start: exit 2 naming the workflow,
the node and the field (issue 46)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BAD = """
services:
  dispatcher: {port: 0}
workflows:
  definitions:
    - name: broken
      nodes:
        - {id: a, type: agent, agent: assistant, goal: "{{ nodes.b.output }}"}
        - {id: b, type: agent, agent: assistant, goal: "x", after: [a]}
"""


def test_a_dispatcher_with_a_bad_workflow_exits_2_naming_node_and_field(tmp_path: Path, redis_url: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(BAD, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "dispatcher_svc", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AGENTMESH_REDIS_URL": redis_url},
    )
    assert result.returncode == 2, result.stderr
    assert "invalid workflow: workflow 'broken': node 'a': goal:" in result.stderr
    assert "not an ancestor" in result.stderr
    assert "Traceback" not in result.stderr
