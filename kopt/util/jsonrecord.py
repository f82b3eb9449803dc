"""The small JSON record files kopt writes and reads back outside the Parquet store (the
service record ``$KOPT_CACHE/service.json``, a detached try's ``submit-logs/*.json``).

Each is read in one place through a pydantic model of its fields (:func:`read_record`), so
that a damaged file -- truncated by a full disk, edited by hand, written by another version --
is one line naming the file, the field and the fix, never a traceback where a field is used.
Writes are atomic (:func:`write_record`): a reader never sees half a record.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)
MAX_PID = 4194304  # Linux's largest pid_max (2**22): no pid or process group is above it


class RecordModel(BaseModel):
    """Base of a record's model: strict types (``"5"`` is not a pid), unknown keys kept."""

    model_config = ConfigDict(strict=True, extra="allow")


class RecordError(ValueError):
    """A record file that is not what kopt writes; the message is one line."""


def read_record(path: Path, model: type[M], fix: str) -> M | None:
    """The record at ``path`` checked against ``model``; None when there is no such file.

    Raises:
        RecordError: the file is unreadable, not UTF-8 JSON, not an object, or a field has
            the wrong type or value; the line names ``path``, the field and ``fix``.
    """
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes().decode())
    except (OSError, ValueError, RecursionError) as e:
        raise RecordError(f"{path}: damaged record, not JSON ({type(e).__name__}); "
                          f"{fix}") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: damaged record, a JSON {type(data).__name__} where kopt "
                          f"writes an object; {fix}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "?"
        raise RecordError(f"{path}: damaged record, field {field!r}: {err['msg']}; "
                          f"{fix}") from None


def write_record(path: Path, data: dict[str, Any], mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` as JSON atomically (a temporary file renamed over it),
    readable per ``mode`` (0o600: this user only)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=1))
    tmp.replace(path)
