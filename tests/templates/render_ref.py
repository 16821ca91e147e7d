#!/usr/bin/env python3
"""The oracle for weft's chat templates: renders every template of a folder
(../shared/templates) over the conversations of conversations.json with
Python's jinja2 the way Hugging Face's apply_chat_template does (an
ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks, loopcontrols,
the {% generation %} block, raise_exception, strftime_now at a fixed date,
a tojson that keeps non-ASCII text), each with add_generation_prompt false
and true. Prints one JSON object:
  {"now": epoch seconds of the fixed date,
   "cases": [the variables of each render, as JSON text],
   "templates": {file: {"compile_error": message} or
                       {"results": [{"ok": text} or {"error": message}, ...]}}}
  render_ref.py TEMPLATE_DIR CONVERSATIONS_JSON"""
import json
import os
import sys
from datetime import datetime, timezone

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime(2026, 7, 26, 10, 30, 0, tzinfo=timezone.utc)


class Generation(Extension):
    """{% generation %}...{% endgeneration %}: its body, unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return NOW.strftime(fmt)


def main():
    folder, conv_path = sys.argv[1], sys.argv[2]
    with open(conv_path, encoding="utf-8") as f:
        convs = json.load(f)
    cases = []
    for c in convs:
        for gen in (False, True):
            v = {"bos_token": "<s>", "eos_token": "</s>", **c["vars"], "add_generation_prompt": gen}
            cases.append(v)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    out = {"now": int(NOW.timestamp()), "cases": [json.dumps(v, ensure_ascii=False) for v in cases], "templates": {}}
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            src = f.read()
        try:
            t = env.from_string(src)
        except Exception as e:  # noqa: BLE001 (the reference's refusal is the answer)
            out["templates"][name] = {"compile_error": str(e)}
            continue
        results = []
        for v in cases:
            try:
                results.append({"ok": t.render(**v)})
            except Exception as e:  # noqa: BLE001
                results.append({"error": str(e)})
        out["templates"][name] = {"results": results}
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
