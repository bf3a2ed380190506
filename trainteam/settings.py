"""Process-wide settings, read from the environment (``TRAINTEAM_*``) and flags.

Kept free of heavy imports: every short CLI command loads this module.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRAINTEAM_", extra="ignore")

    home: Path = Field(default=Path(".trainteam"), description="workspace folder")
    database_url: str | None = Field(
        default=None, description="app database; default sqlite:///<home>/trainteam.db"
    )
    dbos_database_url: str | None = Field(
        default=None,
        description="DBOS system database; default sqlite:///<home>/dbos.sqlite. "
        "For Postgres give the same URL as database_url.",
    )
    # Pinned so that editing the source never strands pending runs (DBOS's default
    # application version is a hash of the source).
    app_version: str = "trainteam-1"
    notification_polling_s: float = Field(default=0.05, gt=0, le=0.1)
    approval_wait_s: float = Field(
        default=7 * 24 * 3600, gt=0, description="how long a run waits for a decision"
    )
