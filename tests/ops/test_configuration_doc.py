"""docs/configuration.md names every setting the settings class reads."""

from __future__ import annotations

from pathlib import Path

from worker.platform.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_every_setting_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    prefix = Settings.model_config.get("env_prefix", "")
    missing = [
        f"{prefix}{name}".upper()
        for name in Settings.model_fields
        if f"`{prefix}{name}`".upper() not in text.upper()
    ]
    assert missing == []
