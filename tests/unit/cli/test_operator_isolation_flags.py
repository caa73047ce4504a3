"""``trainguard operator``'s isolation flags: one mode at a time (``--isolation-mode`` or ``--no-isolation``),
and the node checker's bound a share of the nodes, each refused with the fix and no traceback; and its
``--agent-delivery``."""

from __future__ import annotations

import pytest

from trainguard.cli.main import build_parser, main


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        ([], "agents"),
        (["--isolation-mode", "node-checker"], "node-checker"),
        (["--no-isolation"], "off"),
        (["--isolation-mode", "off"], "off"),
    ],
)
def test_each_mode_is_one_flag(argv: list[str], mode: str) -> None:
    assert build_parser().parse_args(["operator", *argv]).isolation_mode == mode


def test_two_modes_at_once_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["operator", "--no-isolation", "--isolation-mode", "node-checker"]) != 0
    err = capsys.readouterr().err
    assert "not allowed with argument --no-isolation" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("share", ["0", "1.5", "-0.1"])
def test_the_node_checkers_bound_is_a_share_of_the_nodes(
    share: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["operator", "--isolation-mode", "node-checker", "--node-checker-max-isolated-share", share])
        != 0
    )
    err = capsys.readouterr().err
    assert "--node-checker-max-isolated-share" in err
    assert "at most 1, e.g. 0.1" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "workers", "in_flight"), [([], 4, 20), (["--workers", "2", "--requests-in-flight", "0"], 2, 0)]
)
def test_workers_and_requests_in_flight(argv: list[str], workers: int, in_flight: int) -> None:
    args = build_parser().parse_args(["operator", *argv])
    assert (args.workers, args.requests_in_flight) == (workers, in_flight)


def test_a_negative_bound_on_requests_in_flight_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["operator", "--requests-in-flight", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--requests-in-flight: -1 is negative" in err
    assert "or 0 for no bound" in err
    assert "Traceback" not in err


def test_the_agents_delivery_takes_exactly_the_operators_choices(capsys: pytest.CaptureFixture[str]) -> None:
    """The flag's choices are spelled where no Kubernetes module is imported yet; they are ``AgentDelivery``'s."""
    from trainguard.backends.k8s.delivery import AgentDelivery

    assert build_parser().parse_args(["operator"]).agent_delivery == AgentDelivery.AUTO.value
    for how in AgentDelivery:
        assert (
            AgentDelivery(
                build_parser().parse_args(["operator", "--agent-delivery", how.value]).agent_delivery
            )
            is how
        )
    assert main(["operator", "--agent-delivery", "copy"]) != 0
    err = capsys.readouterr().err
    assert "--agent-delivery" in err
    assert "image-volume" in err
    assert "Traceback" not in err
