"""Process-wide settings, read from the environment (``TRAINTEAM_*``) and flags.

Kept free of heavy imports: every short CLI command loads this module.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from trainteam.core.errors import BadInput

# The databases trainteam runs on (SQLAlchemy dialects; a driver after '+').
_URL = re.compile(r"(sqlite|postgresql)(\+[a-z0-9_]+)?://.*", re.DOTALL)


class Settings(BaseSettings):
    """Raises BadInput (one line naming the variable) for a value that cannot work."""

    model_config = SettingsConfigDict(env_prefix="TRAINTEAM_", extra="ignore")

    def __init__(self, **values):
        try:
            super().__init__(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            name = "TRAINTEAM_" + str(err["loc"][0]).upper() if err.get("loc") else "TRAINTEAM_*"
            raise BadInput(f"{name}: {str(err['msg']).removeprefix('Value error, ')}") from None

    @field_validator("database_url", "dbos_database_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        if not _URL.fullmatch(v):
            raise ValueError("not a database URL (sqlite:///path/file.db or postgresql://user@host/db)")
        if v.startswith("sqlite") and "memory" not in v:
            path = Path(v.split(":///", 1)[-1].split("?", 1)[0])
            if not path.parent.is_dir():
                raise ValueError(f"the folder of {path} does not exist")
        return v

    home: Path = Field(default=Path(".trainteam"), description="workspace folder")
    database_url: str | None = Field(default=None, description="app database; default sqlite:///<home>/trainteam.db")
    dbos_database_url: str | None = Field(
        default=None,
        description="DBOS system database; default sqlite:///<home>/dbos.sqlite. "
        "For Postgres give the same URL as database_url.",
    )
    # Pinned so that editing the source never strands pending runs (DBOS's default
    # application version is a hash of the source). Raised when what a run records changes
    # shape: 2 = steps record ``needs`` (NeedsPerson) and take ``decided`` (StepInputs), so a
    # run started by version 1 is not replayed by code that would misread its records.
    app_version: str = "trainteam-2"
    notification_polling_s: float = Field(default=0.05, gt=0, le=0.1)
    approval_wait_s: float = Field(default=7 * 24 * 3600, gt=0, description="how long a run waits for a decision")
