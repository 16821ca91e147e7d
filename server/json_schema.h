/* JSON Schema -> weft grammar text (core/grammar.h's format), for
 * response_format {"type":"json_schema"} and tool arguments.
 *
 * The subset real clients send (Pydantic, zod, the OpenAI SDK's strict
 * schemas): "type" (one or a list: object, array, string, number, integer,
 * boolean, null), "properties" + "required" (properties are generated in the
 * schema's order; optional ones may be left out), "additionalProperties"
 * (false, true or absent: only the declared properties are generated, which
 * every such schema accepts; a schema with no "properties" and a schema-valued
 * "additionalProperties" is a map of string keys to that schema), "items",
 * "prefixItems", "minItems"/"maxItems", "enum", "const", "anyOf" (and
 * "allOf" of one schema), "$ref" to "#", "#/$defs/NAME" or
 * "#/definitions/NAME" (recursion allowed), "minLength"/"maxLength", string
 * "format" date, time, date-time and uuid. Annotations are ignored: title,
 * description, default, examples, $schema, $id, $comment, deprecated,
 * readOnly, writeOnly, and "strict"-mode's own fields. Any other keyword
 * (pattern, minimum, multipleOf, oneOf, not, if, ...) is refused, named in
 * the error: a constraint is never silently dropped.
 *
 * The output matches compact or lightly indented JSON: whitespace runs are
 * bounded, so a model cannot spend its tokens on them. */
#ifndef WEFT_SERVER_JSON_SCHEMA_H
#define WEFT_SERVER_JSON_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

/* The grammar for one value of schema (root rule "root"), malloc'd text in
 * *out. false with err filled (the offending keyword and its path, e.g.
 * "unsupported keyword 'pattern' at #/properties/zip") on refusal. */
bool weft_json_schema_grammar(json_t *schema, char **out, char *err, size_t err_size);

/* The same, with the caller's rules: the root rule is named root_name and
 * every other rule gets prefix (so several schemas can share one grammar,
 * as tool calls do). Appends to out. */
bool weft_json_schema_rules(json_t *schema, const char *root_name, const char *prefix, struct weft_strbuf *out,
                            char *err, size_t err_size);

/* The common rules the generated ones refer to (ws, string, number, ...),
 * once per grammar, names prefixed with "j-". */
extern const char weft_json_schema_common_rules[];

#endif
