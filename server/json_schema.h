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
 * "prefixItems", "minItems"/"maxItems", "enum", "const", "anyOf", "oneOf"
 * (as anyOf: exclusivity is not checked), "allOf" of one schema, "$ref" to
 * "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed),
 * "minLength"/"maxLength", "pattern" (weft_json_schema_regex below),
 * "minimum"/"maximum"/"exclusiveMinimum"/"exclusiveMaximum" on integers
 * (exact decimal ranges, any int64 bounds) and numbers (plain decimals of up
 * to 16 fraction digits, no exponent, inside the bounds as a double compares
 * them), string "format" date, time, date-time, uuid, email (dot-atom
 * local@domain.tld that email-validator, Pydantic's EmailStr, accepts), uri
 * (scheme://host[/path][?query][#fragment], valid for RFC 3986 and WHATWG)
 * and ipv4.
 * Annotations are ignored: title, description, default, examples, $schema,
 * $id, $comment, deprecated, readOnly, writeOnly, discriminator, and
 * "strict"-mode's own fields. Any other keyword (multipleOf, not, if, ...) is
 * refused, named in the error, and so is a supported one the grammar could
 * not enforce exactly (a lookahead in a pattern, "minimum" beside "enum"):
 * a constraint is never silently dropped.
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

/* The contents of a JSON string (between its quotes, as JSON text: '"' as
 * \", control characters escaped) whose decoded text the regular expression
 * pattern[0..len) matches, as one grammar expression appended to out. The
 * pattern is ECMA-262 / Python re / Rust regex: literals, escapes (\d \w \s
 * \D \W \S \. \t \n \xHH \uHHHH ...), classes with ranges and negation, '.',
 * groups ( ), (?: ), (?P<n> ), alternation, * + ? {n} {n,} {n,m} (a lazy '?'
 * after them tolerated), '^'/'$' (and \A, \z) at the ends of the pattern or
 * of a top-level alternative; an unanchored end takes any text (JSON Schema
 * patterns match anywhere). Where dialects differ, what every one accepts is
 * written (\d is [0-9]). min_len/max_len (-1: none) are minLength/maxLength:
 * kept when the pattern implies them, narrowed into one repetition of an
 * anchored pattern (^[a-z]+$), else refused. The expression refers to
 * j-char (weft_json_schema_common_rules). false, out as it was or longer,
 * with err naming the construct ("'pattern' '(?=a)': lookahead '(?=' is not
 * supported") for lookaround, backreferences, word boundaries, inline flags,
 * anchors inside the pattern and other constructs the grammar cannot say. */
bool weft_json_schema_regex(const char *pattern, size_t len, long long min_len, long long max_len,
                            struct weft_strbuf *out, char *err, size_t err_size);

/* The common rules the generated ones refer to (ws, string, number, ...),
 * once per grammar, names prefixed with "j-". */
extern const char weft_json_schema_common_rules[];

#endif
