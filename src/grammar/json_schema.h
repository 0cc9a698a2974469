#pragma once
// JSON Schema -> grammar, for structured output and tool-call arguments.
//
// Supported: type (and type arrays), properties, required, additionalProperties, items,
// prefixItems, minItems/maxItems, enum, const, minLength/maxLength, pattern, format (date,
// time, date-time, uuid, email, ipv4, uri; other formats are annotations), integer
// minimum/maximum/exclusiveMinimum/exclusiveMaximum exactly, number with integer-valued bounds,
// anyOf/oneOf (oneOf as anyOf), allOf of one schema, $ref to #, #/$defs/.., #/definitions/..
// (recursion allowed), and annotations (description, title, default, examples, $schema, $id,
// $comment, strict, nullable, deprecated, readOnly, writeOnly), ignored. Anything else throws
// splash::Error("unsupported JSON Schema keyword 'X' at /path").
//
// The output is compact-ish JSON: object members in declared order (required and optional
// alike; optional ones may be left out; extra members, when allowed, come last with keys that
// are not declared names), whitespace limited as described in json_schema.cpp.
#include <memory>
#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace splash::grammar {

// nlohmann::json sorts object keys, so properties are emitted alphabetically; pass an
// ordered_json to keep the schema's declared order.
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::json& schema);
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema);

}  // namespace splash::grammar
