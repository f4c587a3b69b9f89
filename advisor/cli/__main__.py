"""``python -m advisor.cli``: the console script."""

from advisor.cli import main

main()
