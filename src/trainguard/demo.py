"""The README's first command. Until the local runtime exists it validates, converts and explains the
example jobs; afterwards it runs a real job."""

from __future__ import annotations

import sys


def main() -> int:
    print("trainguard demo: nothing to show yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
