"""Response models derived from the nouns they show (rca.domain, the store's result rows), so a
field is declared once: the dataclass says what it is, the API adds only its name and description."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model
from pydantic.fields import FieldInfo


def model_of(
    source: type,
    *,
    rename: dict[str, str] | None = None,
    exclude: tuple[str, ...] = (),
    fields: dict[str, FieldInfo] | None = None,
) -> type[BaseModel]:
    """A pydantic base model with `source`'s dataclass fields in their order and types, all
    required. `rename` gives a field its public name; `fields` gives one a default or a
    description. Subclass it to name the model (mypy cannot follow a computed base: the
    subclass line carries `type: ignore[misc]`)."""
    rename, fields = rename or {}, fields or {}
    hints = typing.get_type_hints(source)
    definitions: dict[str, Any] = {}
    for field in dataclasses.fields(source):
        if field.name in exclude:
            continue
        public = rename.get(field.name, field.name)
        definitions[public] = (hints[field.name], fields.get(public, ...))
    return create_model(f"{source.__name__}Fields", __config__=ConfigDict(from_attributes=True), **definitions)


def public(source: Any, rename: dict[str, str]) -> dict[str, Any]:
    """A dataclass instance's fields under their public names."""
    data = dataclasses.asdict(source)
    return {rename.get(name, name): value for name, value in data.items()}
