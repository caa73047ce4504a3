"""``--control FILE``: the runtime asks the agent to end the pod with a chosen exit code."""

from __future__ import annotations

import pytest
from agent_harness import wait_for
from test_agent_process import _assert_all_gone, _tree_pids

from trainguard.agent.control import take_exit_request, write_exit_request

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("code", [1, 129, 0])
def test_an_exit_request_ends_the_pod_with_that_code(start_agent, code: int) -> None:
    run = start_agent(
        ["--grace", "1", "--control", "control.json"], ["tree", "--pids", "pids", "--then", "sleep"]
    )
    control = run.directory / "control.json"
    processes = _tree_pids(run)
    run.wait_output(b"ready")
    write_exit_request(control, code)
    assert run.wait_exit() == code
    exited = run.events()[-1]
    assert (exited["event"], exited["exit_code"], exited.get("injected")) == ("exited", code, True)
    assert not control.exists()
    _assert_all_gone(processes)


def test_a_bad_request_is_ignored_and_the_command_keeps_running(start_agent) -> None:
    run = start_agent(["--control", "control.json"], ["chatty", "--interval", "0.05"])
    control = run.directory / "control.json"
    run.wait_output(b"\n")
    control.write_text('{"exit_code": "soon"}')
    wait_for(lambda: b"ignoring a request" in run.stderr.read_bytes(), 10, "the agent to refuse the request")
    assert run.process.poll() is None
    write_exit_request(control, 7)
    assert run.wait_exit() == 7


@pytest.mark.parametrize("code", [-1, 256])
def test_requests_outside_0_255_are_refused_at_the_source(tmp_path, code: int) -> None:
    with pytest.raises(ValueError, match="0-255"):
        write_exit_request(tmp_path / "c.json", code)
    assert take_exit_request(tmp_path / "c.json") is None
