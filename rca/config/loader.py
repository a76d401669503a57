"""The one YAML -> model loader: the config file, serving profiles and the cause taxonomy are all
read through it, so every bad file is reported the same way (the setting, the file, the key)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from rca.config.errors import ConfigError, first_error

Model = TypeVar("Model", bound=BaseModel)


def read_yaml(path: Path, setting: str) -> object:
    """A YAML file's data (None for an empty file); a one-line `ConfigError` that names `setting`
    when it cannot be read or parsed."""
    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{setting}: {path} is not valid YAML: {exc}".replace("\n", " ")) from None


def load_yaml(path: Path, model: type[Model], setting: str) -> Model:
    """A YAML file validated as `model` (an empty file is the model's defaults)."""
    raw = read_yaml(path, setting) or {}
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{setting}: {path}: {first_error(exc)}") from None
