"""What torchrun tells the agent, and the agent's word to the operator: worker restarts that torchrun writes
down are reported (in the report file and upstream), the summary is POSTed with the token of the moment, again
until it is taken; the rounds live workers form are reported, and sent once per round; and a round being
formed (no worker runs) is no hang."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from agent_harness import wait_for

pytestmark = pytest.mark.integration


class Operator:
    """A loopback stand-in for the operator's endpoint: refuses the first ``fail`` POSTs with 503."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.posts: list[tuple[str, dict[str, Any]]] = []
        received = self.posts
        state = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if state.fail > 0:
                    state.fail -= 1
                    self.send_response(503)
                else:
                    received.append((self.headers["Authorization"], body))
                    self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/agent-report"


@pytest.fixture
def operator() -> Iterator[Operator]:
    server = Operator(fail=1)
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_worker_restarts_are_reported_and_sent_to_the_operator(
    start_agent: Any, operator: Operator, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("first-token\n")
    run = start_agent(
        ["--report-url", operator.url, "--report-token", str(token)], ["worker-restarts", "--count", "2"]
    )
    first = run.wait_event("workers-restarted")
    assert first["failures"] == [
        {"rank": 0, "local_rank": 0, "pid": 10_000, "exit_code": 137, "signal": "SIGKILL"}
    ]
    assert (first["restarts_left"], first["max_restarts"]) == (1, 2)
    token.write_text("second-token\n")  # the kubelet renewed it: the next POST shows the new one
    assert run.wait_exit() == 0
    assert len(run.events("workers-restarted")) == 2

    def complete() -> tuple[str, dict[str, Any]] | None:
        last = operator.posts[-1] if operator.posts else None
        return last if last and len(last[1]["report"].get("workerRestarts", [])) == 2 else None

    authorization, body = wait_for(
        complete, 10, "the summary with both restarts", lambda: str(operator.posts)
    )
    assert authorization == "Bearer second-token"
    summary = body["report"]
    assert (summary["attempt"], summary["hangs"], summary["inPlaceRestarts"]) == (1, 0, 0)
    assert [(r["exitCode"], r["rank"], r["restartsLeft"]) for r in summary["workerRestarts"]] == [
        (137, 0, 1),
        (137, 1, 0),
    ]
    assert "cannot report to the operator" in run.stderr.read_text()  # the refused first POST, said once


def test_live_rounds_are_reported_and_sent_to_the_operator_once_per_round(
    start_agent: Any, operator: Operator, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("token\n")
    run = start_agent(["--report-url", operator.url, "--report-token", str(token)], ["live-rounds"])
    assert run.wait_exit() == 0
    reformed = run.events("live-reformed")
    assert [(e["round"], e["rank"], e["worker_pid"]) for e in reformed] == [
        (1, 1, 20_001),
        (1, 0, 20_000),
        (2, 1, 20_001),
        (2, 0, 20_000),
    ]
    assert reformed[3]["cause"] == "RuntimeError: Connection closed by peer"
    assert (reformed[0]["origin"], reformed[0]["source"], reformed[0]["bytes"]) == (
        "peer",
        "host:20000",
        1024,
    )
    assert all(isinstance(e["at"], float) for e in reformed)
    (unused,) = run.events("live-unused")
    assert (unused["local_rank"], unused["exit_code"], unused["worker_pid"]) == (2, 1, 20_002)

    def complete() -> dict[str, Any] | None:
        last = operator.posts[-1][1]["report"] if operator.posts else None
        return last if last and last.get("liveUnused") else None

    summary = wait_for(complete, 10, "the summary with the rounds", lambda: str(operator.posts))
    # One entry per round, rank 0's (it came second).
    assert [(r["round"], r["rank"], r["origin"], r.get("cause")) for r in summary["liveRounds"]] == [
        (1, 0, "live", None),
        (2, 0, "live", "RuntimeError: Connection closed by peer"),
    ]
    assert summary["liveRoundsFrom"] == 0


def test_a_report_url_without_a_token_is_refused_before_anything_runs(start_agent: Any) -> None:
    run = start_agent(["--report-url", "http://127.0.0.1:9/v1/agent-report"], ["exit", "0"])
    assert run.wait_exit() == 2
    assert "--report-token" in run.stderr.read_text()
    assert not (run.directory / "marker").exists()


@pytest.mark.parametrize(("said", "hangs"), [(True, 0), (False, 1)], ids=["said to be forming", "silent"])
def test_a_round_being_formed_is_no_hang(start_agent: Any, said: bool, hangs: int) -> None:
    """Idle and silent for 2.5 s under a 1 s hang timeout: a hang, unless torchrun said it forms a round."""
    run = start_agent(
        ["--hang-timeout", "1", "--max-consecutive", "0"], ["forming", *(["--say"] if said else [])]
    )
    code = run.wait_exit()
    assert len(run.events("hang")) == hangs, run.describe()
    assert code == (0 if said else 137)
