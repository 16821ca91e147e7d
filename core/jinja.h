/* Chat templates in Jinja: the subset real models' templates use, run the
 * way Hugging Face's apply_chat_template runs them (an immutable sandbox,
 * trim_blocks and lstrip_blocks, the loopcontrols extension, the
 * {% generation %} block, raise_exception and strftime_now, a tojson that
 * keeps non-ASCII text), so that a model's own template renders what
 * Python's jinja2 renders, byte for byte.
 *
 * A template is compiled once (weft_jinja_compile): a construct outside the
 * subset (an unknown statement, filter, test or global, include/extends) is
 * refused there, named. Rendering (weft_jinja_render) takes the variables
 * as one JSON object (messages, tools, add_generation_prompt, bos_token,
 * the request's chat_template_kwargs, ...) and is bounded: steps, nesting
 * and output size; it has no I/O. A template's raise_exception fails the
 * render with WEFT_ERR_INVALID_ARG and exactly the template's message;
 * other runtime faults (a sandboxed method, an undefined attribute of an
 * undefined value, a type error) fail it with a message naming them.
 * Thread-safe: a compiled template is read-only; each render has its own
 * state. */
#ifndef WEFT_JINJA_H
#define WEFT_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct weft_jinja;

/* Compile template text (n bytes). *out is NULL on failure. */
weft_status weft_jinja_compile(const char *src, size_t n, struct weft_jinja **out);
void weft_jinja_free(struct weft_jinja *t);

struct weft_jinja_limits {
    uint64_t max_steps;        /* evaluation steps (0: 10 million) */
    size_t max_output;         /* bytes of output (0: 4 MiB) */
    int64_t now;               /* strftime_now's time, seconds since the epoch, UTC (0: the clock's) */
};

/* Render with the variables of the JSON object vars (its members are the
 * template's top-level names). *out is malloc'd text (NUL-ended; *n_out its
 * length), NULL on failure. limits may be NULL. */
weft_status weft_jinja_render(const struct weft_jinja *t, const char *vars_json, size_t vars_len,
                              const struct weft_jinja_limits *limits, char **out, size_t *n_out);

#endif
