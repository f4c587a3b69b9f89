"""The console script (``vllm-advisor``, ``advisor``).

``--version`` alone is answered from the package's metadata without loading the commands (a
fast path: loading every stage takes about a second); anything else runs the command line in
:mod:`advisor.cli`. The late import below exists only for that fast path, not to break a cycle:
``advisor.cli`` imports nothing from here.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

from advisor import __version__


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        try:
            v = version("vllm-advisor")
        except PackageNotFoundError:  # run from a checkout that is not installed
            v = __version__
        print(f"vllm-advisor, version {v}")
        return
    from advisor import cli

    cli.main()
