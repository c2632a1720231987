"""The config's JSON Schema (``chat-gateway schema``), for editors and CI validators.

It is pydantic's schema of :class:`~gateway.config.GatewayConfig`, with the field docstrings as
descriptions, a ``$schema`` key, and one change: wherever a value is a number, a boolean or one
of a fixed set of words, a string holding a ``${VAR}`` reference is allowed too, because the config
loader replaces those from the environment before it validates (``port: ${PORT}`` is valid).
Plain string values need no change: any string, references included, is a string.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from gateway.config import ENV_REFERENCE_SCHEMA, GatewayConfig

__all__ = ["ENV_REFERENCE_SCHEMA", "config_json_schema"]

def _or_env(schema: JsonSchemaValue) -> JsonSchemaValue:
    # Inline rather than a shared $ref: pydantic's generator owns $defs and its references.
    return {"anyOf": [schema, dict(ENV_REFERENCE_SCHEMA)]}


class _ConfigSchema(GenerateJsonSchema):
    """pydantic's generator, with the environment branch on every non-string scalar."""

    def generate(self, schema: CoreSchema, mode: JsonSchemaMode = "validation") -> JsonSchemaValue:
        return {"$schema": self.schema_dialect, **super().generate(schema, mode)}

    def int_schema(self, schema: core_schema.IntSchema) -> JsonSchemaValue:
        return _or_env(super().int_schema(schema))

    def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
        return _or_env(super().float_schema(schema))

    def bool_schema(self, schema: core_schema.BoolSchema) -> JsonSchemaValue:
        return _or_env(super().bool_schema(schema))

    def literal_schema(self, schema: core_schema.LiteralSchema) -> JsonSchemaValue:
        return _or_env(super().literal_schema(schema))

    def enum_schema(self, schema: core_schema.EnumSchema) -> JsonSchemaValue:
        return _or_env(super().enum_schema(schema))


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the config file."""
    return GatewayConfig.model_json_schema(schema_generator=_ConfigSchema)
