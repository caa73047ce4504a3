"""``trainguard metrics [--url]``: the local control plane's Prometheus metrics, or where it serves them.

The control plane serves them on the loopback interface (an ephemeral port unless
``TRAINGUARD_METRICS_PORT`` is set when it starts); ``--url`` prints that address for a scrape config or
a browser, and without it the current metrics are fetched and printed.
"""

from __future__ import annotations

import argparse
import urllib.error
import urllib.request
from typing import Any

from trainguard.cli.errors import CliError
from trainguard.cli.verbs._local import call

#: Seconds to wait for a scrape of our own control plane.
FETCH_TIMEOUT = 10.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "metrics",
        help="print the local control plane's Prometheus metrics, or their address with --url",
        description="Print the Prometheus metrics of the local control plane (starting it when needed). "
        "They are served on 127.0.0.1; set TRAINGUARD_METRICS_PORT before the control plane starts for a "
        "fixed port.",
    )
    parser.add_argument("--url", action="store_true", help="print only the address of the /metrics endpoint")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    url = metrics_url()
    if args.url:
        print(url)
        return 0
    print(fetch(url), end="")
    return 0


def metrics_url() -> str:
    served = call("metrics")
    url = served.get("url") if isinstance(served, dict) else None
    if not url:
        problem = served.get("problem") if isinstance(served, dict) else None
        raise CliError(
            f"the control plane serves no metrics: {problem or 'unknown reason'} "
            "(it reads TRAINGUARD_METRICS_PORT when it starts: a free port, 0 or unset for any free one; "
            "see docs/metrics.md)",
            1,
        )
    return str(url)


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as answer:
            return str(answer.read().decode())
    except (urllib.error.URLError, OSError) as error:
        raise CliError(f"cannot read {url}: {error}", 1) from None
