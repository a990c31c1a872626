"""The user's TUI settings: `theme:` and `keymap: {binding_id: key}` from config.yaml (the ids: cuco_tui/actions.py).

Looked up in `<home>/config.yaml` (the project home, `$CUCO_HOME`), then `~/.config/cuco/config.yaml`.
`CUCO_THEME` overrides the theme.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .actions import keymap_problems


@dataclass
class TuiSettings:
    theme: str | None = None
    keymap: dict[str, str] = field(default_factory=dict)
    source: str | None = None
    problems: list[str] = field(default_factory=list)


def config_paths(home: Path | None) -> list[Path]:
    paths = []
    if home is not None:
        paths.append(Path(home) / "config.yaml")
    env_home = os.environ.get("CUCO_HOME")
    if env_home:
        paths.append(Path(env_home) / "config.yaml")
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    paths.append(Path(xdg) / "cuco" / "config.yaml")
    return paths


def load_settings(home: Path | None, env: Mapping[str, str] | None = None) -> TuiSettings:
    environ: Mapping[str, str] = os.environ if env is None else env
    settings = TuiSettings()
    for path in config_paths(home):
        if not path.is_file():
            continue
        try:
            data: Any = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            settings.problems.append(f"{path}: cannot read ({exc})")
            continue
        if not isinstance(data, dict):
            settings.problems.append(f"{path}: expected a mapping at the top level")
            continue
        settings.source = str(path)
        theme = data.get("theme")
        if theme is not None:
            settings.theme = str(theme)
        keymap = data.get("keymap") or {}
        if isinstance(keymap, dict):
            settings.keymap = {str(k): str(v) for k, v in keymap.items()}
            settings.problems += [f"{path}: {problem}" for problem in keymap_problems(settings.keymap)]
        else:
            settings.problems.append(f"{path}: keymap: expected a mapping of binding id -> key")
        break
    if environ.get("CUCO_THEME"):
        settings.theme = environ["CUCO_THEME"]
    return settings
