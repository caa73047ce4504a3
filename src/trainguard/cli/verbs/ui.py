"""``trainguard ui [--url]``: the job pages of the local control plane (starting it when needed).

The control plane serves them on 127.0.0.1 (an ephemeral port unless ``TRAINGUARD_UI_PORT`` is set when it
starts). The address printed carries the control plane's secret: whoever opens it may act (scale, chaos), as
this user may with the CLI; the same address without ``?token=...`` is read-only.
"""

from __future__ import annotations

import argparse
import webbrowser
from typing import Any

from trainguard.cli.errors import CliError
from trainguard.cli.verbs._local import call


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ui",
        help="open the job pages (status as it changes, fault-recovery history, what-if), or print their address",
        description="Open the local control plane's job pages in a browser, or print their address with --url. "
        "The address carries a secret that allows actions (scale, chaos); keep it to yourself. Served on "
        "127.0.0.1; set TRAINGUARD_UI_PORT before the control plane starts for a fixed port (off: none).",
    )
    parser.add_argument("--url", action="store_true", help="print the address only")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    served = call("ui")
    url = served.get("secret_url") if isinstance(served, dict) else None
    if not url:
        problem = served.get("problem") if isinstance(served, dict) else None
        raise CliError(
            f"the control plane serves no job pages: {problem or 'unknown reason'} (it reads "
            "TRAINGUARD_UI_PORT when it starts: a free port, 0 or unset for any free one; see docs/ui.md)",
            1,
        )
    print(url)
    if not args.url:
        webbrowser.open(str(url))
    return 0
