"""What every benchmark here ends with: its JSON report written and its summary printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_report(out: Path, name: str, report: dict[str, Any]) -> None:
    """Write ``report`` to ``out/NAME.json`` (``out`` made if missing) and print it without
    its per-candidate ``rows``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=1,
                     default=str))
