"""docs/errors.md cannot drift from agentmesh/errors.py and agentmesh/rpc/status.py."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest

from agentmesh.dev import errordoc
from agentmesh.errors import ERROR_CLASS, ErrorCode, default_retryable
from agentmesh.rpc.status import GRPC_STATUS, code_for_grpc_status

DOC = errordoc.DOC_PATH


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first table under `## heading`, cells stripped."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows[2:]]


def test_committed_guide_is_what_the_code_generates() -> None:
    assert DOC.read_text(encoding="utf-8") == errordoc.render(), "run `python -m agentmesh.dev.errordoc`"


def test_every_code_row_agrees_with_the_tables_in_the_code() -> None:
    """Read back from the committed markdown, independently of the generator."""
    rows = table_rows(DOC.read_text(encoding="utf-8"), "Codes")
    by_name = {row[1].strip("`"): row for row in rows}
    expected = [code for code in ErrorCode if code is not ErrorCode.UNSPECIFIED]
    assert sorted(by_name) == sorted(code.name for code in expected)
    assert len(rows) == len(expected), "a code is listed twice"
    for code in expected:
        number, _, klass, status, retryable, advice = by_name[code.name]
        assert int(number) == code.value
        assert klass == ERROR_CLASS[code].name
        assert status == GRPC_STATUS[code].name
        assert retryable == ("yes" if default_retryable(code) else "no")
        assert advice, f"{code.name}: no advice for clients"


def test_class_table_covers_every_class() -> None:
    rows = table_rows(DOC.read_text(encoding="utf-8"), "Classes")
    assert [row[0] for row in rows] == ["CONTRACT", "ENGINEERING", "FATAL"]


def test_bare_status_table_matches_the_python_client() -> None:
    rows = table_rows(DOC.read_text(encoding="utf-8"), "Statuses without agentmesh details")
    by_status = {row[0]: row[1].strip("`") for row in rows}
    for status in grpc.StatusCode:
        if status is not grpc.StatusCode.OK:
            assert by_status[status.name] == code_for_grpc_status(status).name


def test_every_code_needs_advice(monkeypatch: pytest.MonkeyPatch) -> None:
    partial = {k: v for k, v in errordoc.CODE_ADVICE.items() if k is not ErrorCode.LOOP_DETECTED}
    monkeypatch.setattr(errordoc, "CODE_ADVICE", partial)
    with pytest.raises(ValueError, match="LOOP_DETECTED: no advice"):
        errordoc.render()


def test_check_mode_reports_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "errors.md"
    stale.write_text("old\n", encoding="utf-8")
    assert errordoc.main(["--check", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert errordoc.main([str(stale)]) == 0
    assert errordoc.main(["--check", str(stale)]) == 0
