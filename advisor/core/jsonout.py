"""JSON as the advisor writes it: always valid JSON. Python's ``json`` writes NaN and infinities
as bare ``NaN``/``Infinity`` (not JSON: ``jq``, browsers and Prometheus's JSON readers refuse
them); here a number that is not finite is unknown and written ``null``, and ``allow_nan=False``
makes any that slipped through an error here rather than broken output elsewhere.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def finite(obj: Any) -> Any:
    """``obj`` with every float that is not finite replaced by None (dicts, lists and tuples
    walked; tuples come back as lists, as JSON writes them)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def dumps(obj: Any, **kw: Any) -> str:
    """``json.dumps`` of ``obj`` with non-finite numbers as null, never bare NaN/Infinity."""
    return json.dumps(finite(obj), allow_nan=False, **kw)
