"""POST /apply-template (llama-server's name) and /v1/models' chat_template on
weft serve: the model's Jinja chat template, or --chat-template FILE, rendered
as Python's jinja2 renders it (tests/templates/render_ref.py's environment is
the oracle); a template's raise_exception is a 400 with its message; a
template weft cannot run stops the server at start, naming the construct; a
model without a template gets ChatML when its vocabulary has ChatML's tokens,
and otherwise a 400 naming --chat-template (on /apply-template and on
/v1/chat/completions)."""
import json
import os
import subprocess
import sys
import urllib.request

import pytest

from conftest import ROOT, WEFT, Router, Server

sys.path.insert(0, os.path.join(ROOT, "tests", "templates"))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
TEMPLATES = os.path.join(SHARED, "templates")
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")
SYNTH_VOCAB = os.path.join(SHARED, "models", "synth-smollm2-vocab.gguf")  # SmolLM2's vocabulary, no template


def post(srv, path, body):
    req = urllib.request.Request(srv.base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def reference(name, **variables):
    jinja2 = pytest.importorskip("jinja2")  # noqa: F841
    import render_ref
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[render_ref.Generation, loopcontrols])
    env.filters["tojson"] = render_ref.tojson
    env.globals["raise_exception"] = render_ref.raise_exception
    env.globals["strftime_now"] = render_ref.strftime_now
    with open(os.path.join(TEMPLATES, name), encoding="utf-8") as f:
        return env.from_string(f.read()).render(**variables)


MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Grüße — 你好?"},
        {"role": "assistant", "content": "Hallo."}, {"role": "user", "content": "And now?"}]


def test_apply_template_renders_the_file_as_jinja2():
    name = "Qwen-Qwen3-0.6B.jinja"
    srv = Server("--chat-template", os.path.join(TEMPLATES, name), threads=1)
    try:
        st, models = 200, json.loads(urllib.request.urlopen(srv.base + "/v1/models", timeout=30).read())
        assert models["data"][0]["chat_template"] == "file"
        tools = [{"type": "function", "function": {"name": "f", "description": "d",
                                                   "parameters": {"type": "object", "properties": {}}}}]
        for body, kw in [({"messages": MSGS}, {}),
                         ({"messages": MSGS, "add_generation_prompt": False}, {"add_generation_prompt": False}),
                         ({"messages": MSGS, "chat_template_kwargs": {"enable_thinking": False}},
                          {"enable_thinking": False}),
                         ({"messages": MSGS, "tools": tools}, {"tools": tools})]:
            st, got = post(srv, "/apply-template", body)
            assert st == 200, got
            want = reference(name, messages=MSGS, bos_token=got.get("bos", "<|endoftext|>"),
                             eos_token="<|im_end|>", **{"add_generation_prompt": True, **kw})
            assert got["prompt"] == want, (body, got["prompt"], want)
        assert post(srv, "/apply-template", {"messages": "hi"})[0] == 400
        assert post(srv, "/apply-template", {"messages": MSGS, "chat_template_kwargs": 3})[0] == 400
        # through weft router: an instance answers it
        r = Router([srv])
        try:
            r.wait_ready(n_up=1)
            assert post(r, "/apply-template", {"messages": MSGS}) == post(srv, "/apply-template", {"messages": MSGS})
        finally:
            r.stop()
    finally:
        srv.stop()


def test_raise_exception_is_a_400_with_its_message():
    srv = Server("--chat-template", os.path.join(TEMPLATES, "google-gemma-2-2b-it.jinja"), threads=1)
    try:
        # Gemma 2's template raises on roles out of turn: a 400 with its message
        st, got = post(srv, "/apply-template", {"messages": MSGS[1:2] + MSGS[1:2]})
        assert st == 400 and got["error"]["message"].startswith("Conversation roles must alternate"), got
        # it has no system role (it raises "System role not supported"): weft writes the system text
        # before the first user message's, as a request to such a model needs
        st, got = post(srv, "/apply-template", {"messages": MSGS})
        assert st == 200 and "<start_of_turn>user\nBe brief.\n\nGrüße" in got["prompt"], got
    finally:
        srv.stop()


def test_a_template_weft_cannot_run_stops_the_start(tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content | frobnicate }}{% endfor %}")
    p = subprocess.run([WEFT, "serve", "--port", "0", "--no-calibrate", "--chat-template", str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "frobnicate" in p.stderr and "--chat-template" in p.stderr, p.stderr


@pytest.mark.skipif(not os.path.exists(STORIES), reason=f"no {STORIES}")
def test_no_template_and_no_chatml_vocabulary_names_the_flag():
    srv = Server(model=STORIES, threads=1)
    try:
        models = json.loads(urllib.request.urlopen(srv.base + "/v1/models", timeout=30).read())
        assert models["data"][0]["chat_template"] == "none"
        st, got = post(srv, "/apply-template", {"messages": MSGS[1:2]})
        assert st == 400 and "--chat-template" in got["error"]["message"], got
        # a chat completion, streamed or not, is refused the same way before anything is generated
        for stream in (False, True):
            st, got = post(srv, "/v1/chat/completions", {"messages": MSGS[1:2], "max_tokens": 4, "stream": stream})
            assert st == 400 and "--chat-template" in got["error"]["message"], (stream, got)
            assert got["error"]["type"] == "invalid_request_error", got
    finally:
        srv.stop()


@pytest.mark.skipif(not os.path.exists(SYNTH_VOCAB), reason=f"no {SYNTH_VOCAB}")
def test_no_template_but_a_chatml_vocabulary_gets_chatml():
    srv = Server(model=SYNTH_VOCAB, threads=1)
    try:
        models = json.loads(urllib.request.urlopen(srv.base + "/v1/models", timeout=30).read())
        assert models["data"][0]["chat_template"] == "chatml", models
        msgs = [{"role": "user", "content": "Hi"}]
        chatml = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        st, got = post(srv, "/apply-template", {"messages": msgs})
        assert st == 200 and got["prompt"] == chatml, got
        # ChatML's markers are the vocabulary's own tokens, one each: what the chat's prompt counts
        _, toks = post(srv, "/tokenize", {"content": chatml, "add_special": False})
        _, marks = post(srv, "/tokenize", {"content": "<|im_start|><|im_end|>", "add_special": False})
        assert len(marks["tokens"]) == 2, marks
        st, r = post(srv, "/v1/chat/completions", {"messages": msgs, "max_tokens": 4, "temperature": 0})
        assert st == 200 and r["choices"][0]["message"]["role"] == "assistant", r
        assert r["usage"]["prompt_tokens"] == toks["count"] and r["usage"]["completion_tokens"] > 0, (r, toks)
    finally:
        srv.stop()


def test_weft_template_prints_what_apply_template_answers(server, tmp_path):
    # the default model's template has no tools: weft writes them in, the same in the CLI and on the server
    msgs = [{"role": "user", "content": "Weather in Oslo?"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "d",
                                               "parameters": {"type": "object", "properties": {}}}}]
    (tmp_path / "m.json").write_text(json.dumps(msgs))
    (tmp_path / "t.json").write_text(json.dumps(tools))
    cli = subprocess.run([WEFT, "template", "-m", server.model, "--messages", str(tmp_path / "m.json"), "--tools",
                          str(tmp_path / "t.json")], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    st, got = post(server, "/apply-template", {"messages": msgs, "tools": tools})
    assert st == 200 and cli.stdout == got["prompt"] and "<tools>" in got["prompt"]
    raw = subprocess.run([WEFT, "template", "--raw", "-m", server.model, "--messages", str(tmp_path / "m.json"),
                          "--tools", str(tmp_path / "t.json")], capture_output=True, text=True, timeout=120)
    assert raw.returncode == 0 and "<tools>" not in raw.stdout  # the template itself ignores tools
