"""The agent's settings, from its options or, for each one not given, from the environment.

The environment lets a runtime configure the agent without touching the command line:

| option | environment | default |
|---|---|---|
| ``--hang-timeout SECONDS`` | ``TRAINGUARD_HANG_TIMEOUT`` | off: the agent only supervises |
| ``--max-consecutive N`` | ``TRAINGUARD_HANG_MAX_CONSECUTIVE`` | 3 |
| ``--signals heartbeat,log,cpu,io`` | ``TRAINGUARD_HANG_SIGNALS`` | heartbeat,log,cpu |
| ``--report-only`` | ``TRAINGUARD_HANG_REPORT_ONLY=1`` | off: a hang stops the command |
| ``--grace SECONDS`` | ``TRAINGUARD_HANG_GRACE`` | 10 |
| ``--report FILE`` | ``TRAINGUARD_REPORT_FILE`` | none |
| ``--termination-log FILE`` | ``TRAINGUARD_TERMINATION_LOG`` | ``/dev/termination-log`` if writable |
| ``--control FILE`` | ``TRAINGUARD_CONTROL_FILE`` | none: see ``trainguard.agent.control`` |
| ``--nudge-file FILE`` | ``TRAINGUARD_NUDGE_FILE`` | none: see ``trainguard.agent.nudge`` |
| ``--release-file FILE`` | ``TRAINGUARD_RELEASE_FILE`` | none: see ``trainguard.agent.release`` |
| ``--report-url URL`` | ``TRAINGUARD_REPORT_URL`` | none: see ``trainguard.agent.upstream`` |
| ``--report-token FILE`` | ``TRAINGUARD_REPORT_TOKEN`` | none (needed with a report URL) |
| ``--lease-url URL`` | ``TRAINGUARD_LEASE_URL`` | none: see ``trainguard.agent.lease`` |
| ``--fence-after SECONDS`` | ``TRAINGUARD_FENCE_AFTER`` | none (needed with a lease URL) |
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainguard.agent.report import default_termination_log
from trainguard.pod import contract
from trainguard.pod.checks import Settings
from trainguard.pod.hangsignal import HangSignal

#: The signals when none are named: ``io`` is chosen, never implied (it makes the fallback stricter).
ALL_SIGNALS = frozenset({HangSignal.HEARTBEAT, HangSignal.LOG, HangSignal.CPU})


@dataclass(frozen=True)
class AgentConfig:
    command: tuple[str, ...]
    hang_timeout: float | None = None
    max_consecutive: int = 3
    signals: frozenset[HangSignal] = ALL_SIGNALS
    grace: float = 10.0
    #: Detect only: a hang is reported as suspected, and its end when progress resumes; nothing is stopped.
    report_only: bool = False
    report_file: Path | None = None
    termination_log: Path | None = None
    #: Where the runtime leaves requests for the agent (an exit code to end the pod with).
    control_file: Path | None = None
    #: Where the runtime says that another pod of the job failed (``<token> <time>``): restart the workers.
    nudge_file: Path | None = None
    #: Where the runtime says that a peer pod is lost (``<token> <addresses>``): close connections to it.
    release_file: Path | None = None
    #: The operator's agent-report endpoint, and the file holding the token to show it.
    report_url: str | None = None
    report_token: Path | None = None
    #: Fencing: where the agent renews its lease (with ``report_token``), and how long its workers run on
    #: without a renewal (``trainguard.agent.lease``). None: no fencing.
    lease_url: str | None = None
    fence_after: float | None = None
    #: How often the agent looks at heartbeats (and, at most once a second, at the tree's CPU time).
    poll_interval: float = 0.25
    #: The fault tolerance check (``contract.ENV_FAULT_CHECK``): None, no check.
    fault_check: Settings | None = None

    @classmethod
    def resolve(
        cls,
        command: list[str] | tuple[str, ...],
        *,
        hang_timeout: str | None = None,
        max_consecutive: str | None = None,
        signals: str | None = None,
        report_only: bool | None = None,
        grace: str | None = None,
        report: str | None = None,
        termination_log: str | None = None,
        control: str | None = None,
        nudge_file: str | None = None,
        release_file: str | None = None,
        report_url: str | None = None,
        report_token: str | None = None,
        lease_url: str | None = None,
        fence_after: str | None = None,
        env: Mapping[str, str] = os.environ,
    ) -> AgentConfig:
        """Options win over the environment; raises ValueError naming the option or variable and the fix."""
        if not command:
            raise ValueError(
                "no command to run: write it after '--', e.g. trainguard agent -- python train.py"
            )
        timeout_text, timeout_name = _pick(hang_timeout, "--hang-timeout", env, contract.ENV_HANG_TIMEOUT)
        count_text, count_name = _pick(
            max_consecutive, "--max-consecutive", env, contract.ENV_HANG_MAX_CONSECUTIVE
        )
        signals_text, signals_name = _pick(signals, "--signals", env, contract.ENV_HANG_SIGNALS)
        grace_text, grace_name = _pick(grace, "--grace", env, contract.ENV_HANG_GRACE)
        report_text, _ = _pick(report, "--report", env, contract.ENV_REPORT_FILE)
        log_text, _ = _pick(termination_log, "--termination-log", env, contract.ENV_TERMINATION_LOG)
        control_text, _ = _pick(control, "--control", env, contract.ENV_CONTROL_FILE)
        nudge_text, _ = _pick(nudge_file, "--nudge-file", env, contract.ENV_NUDGE_FILE)
        release_text, _ = _pick(release_file, "--release-file", env, contract.ENV_RELEASE_FILE)
        url_text, url_name = _pick(report_url, "--report-url", env, contract.ENV_REPORT_URL)
        token_text, _ = _pick(report_token, "--report-token", env, contract.ENV_REPORT_TOKEN)
        if url_text is not None and not url_text.startswith(("http://", "https://")):
            raise ValueError(f"{url_name}: expected an http:// or https:// URL, got {url_text!r}")
        if url_text is not None and token_text is None:
            raise ValueError(
                f"{url_name} needs a token: give --report-token FILE (or {contract.ENV_REPORT_TOKEN})"
            )
        lease_text, lease_name = _pick(lease_url, "--lease-url", env, contract.ENV_LEASE_URL)
        fence_text, fence_name = _pick(fence_after, "--fence-after", env, contract.ENV_FENCE_AFTER)
        if lease_text is not None and not lease_text.startswith(("http://", "https://")):
            raise ValueError(f"{lease_name}: expected an http:// or https:// URL, got {lease_text!r}")
        if (lease_text is None) != (fence_text is None):
            given, missing = (
                (lease_name, "--fence-after SECONDS")
                if fence_text is None
                else (fence_name, "--lease-url URL")
            )
            raise ValueError(f"{given} needs {missing} too (fencing takes both), or neither")
        if lease_text is not None and token_text is None:
            raise ValueError(
                f"{lease_name} needs a token: give --report-token FILE (or {contract.ENV_REPORT_TOKEN})"
            )
        return cls(
            fault_check=_fault_check(env),
            lease_url=lease_text,
            fence_after=None if fence_text is None else _seconds(fence_text, fence_name, positive=True),
            command=tuple(command),
            hang_timeout=None
            if timeout_text is None
            else _seconds(timeout_text, timeout_name, positive=True),
            max_consecutive=3 if count_text is None else _count(count_text, count_name),
            signals=ALL_SIGNALS if signals_text is None else parse_signals(signals_text, signals_name),
            report_only=report_only
            if report_only is not None
            else env.get(contract.ENV_HANG_REPORT_ONLY, "").strip() in ("1", "true"),
            grace=10.0 if grace_text is None else _seconds(grace_text, grace_name, positive=False),
            report_file=Path(report_text) if report_text else None,
            termination_log=Path(log_text) if log_text else default_termination_log(),
            control_file=Path(control_text) if control_text else None,
            nudge_file=Path(nudge_text) if nudge_text else None,
            release_file=Path(release_text) if release_text else None,
            report_url=url_text,
            report_token=Path(token_text) if token_text else None,
        )


def _fault_check(env: Mapping[str, str]) -> Settings | None:
    text = env.get(contract.ENV_FAULT_CHECK, "").strip()
    if not text:
        return None
    try:
        return Settings.from_json(text)
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"{contract.ENV_FAULT_CHECK}: {error}; it is the control plane's JSON of the job's faultCheck "
            "(unset it to run without the check)"
        ) from None


def parse_signals(text: str, where: str = "--signals") -> frozenset[HangSignal]:
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    allowed = ",".join(signal.value for signal in HangSignal)
    if not names:
        raise ValueError(f"{where}: name at least one signal, e.g. {allowed}")
    try:
        return frozenset(HangSignal(name) for name in names)
    except ValueError:
        bad = next(name for name in names if name not in {signal.value for signal in HangSignal})
        raise ValueError(f"{where}: {bad!r} is not a hang signal; use a comma list of {allowed}") from None


def _pick(value: str | None, option: str, env: Mapping[str, str], variable: str) -> tuple[str | None, str]:
    if value is not None:
        return value, option
    text = env.get(variable, "").strip()
    return (text or None), f"{variable}={text}"


def _seconds(text: str, where: str, *, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isnan(value) or math.isinf(value) or value < 0 or (positive and value == 0):
        kind = "a positive" if positive else "a non-negative"
        raise ValueError(f"{where}: expected {kind} number of seconds, e.g. 600, got {text!r}")
    return value


def _count(text: str, where: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{where}: expected a whole number of restarts, 0 or more, e.g. 3, got {text!r}")
    return value
