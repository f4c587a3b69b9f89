"""Where the repository and the committed fixtures are, for every test module at any depth."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


def validation_module(name: str) -> ModuleType:
    """A script of validation/ by its own name, imported as its scripts import each other
    (``import predictions``): one copy per process, so what they cache is shared."""
    if str(REPO / "validation") not in sys.path:
        sys.path.insert(0, str(REPO / "validation"))
    return importlib.import_module(name)
