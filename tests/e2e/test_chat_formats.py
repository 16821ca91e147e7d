"""Chats on the model's own template (issue 36, stage b): reasoning split
from content (SmolLM2 run with Qwen3's template: reasoning_content apart
from content, streamed and not, directly and through weft router;
chat_template_kwargs reach the template), and tool calls as the template's
format writes them: a named tool_choice gives exactly one call, and a reply
cut by max_tokens keeps its finished calls, drops the cut one and says
"length". Continue_final_message leaves the last assistant message open."""
import json
import os
import urllib.request

import pytest

from conftest import ROOT, Router, Server

SHARED = os.path.join(os.path.dirname(ROOT), "shared")
QWEN3 = os.path.join(SHARED, "templates", "Qwen-Qwen3-0.6B.jinja")

SYSTEM = ("You think before you answer. Write your thoughts between <think> and </think>, then the answer. "
          "Example: <think>The user wants 2+2. 2+2=4.</think>The answer is 4.")


def post(srv, path, body):
    req = urllib.request.Request(srv.base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def stream(srv, body):
    req = urllib.request.Request(srv.base + "/v1/chat/completions", data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    reasoning, content, calls, finish, order = "", "", [], None, []
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ch = json.loads(line[6:])["choices"]
            if not ch:
                continue
            d = ch[0]["delta"]
            if d.get("reasoning_content"):
                reasoning += d["reasoning_content"]
                order.append("r")
            if d.get("content"):
                content += d["content"]
                order.append("c")
            calls += d.get("tool_calls") or []
            finish = ch[0]["finish_reason"] or finish
    return reasoning, content, calls, finish, order


def thinking_request(q):
    # the assistant's turn opened with <think> (continue_final_message): the model goes on reasoning,
    # closes the block and answers
    return {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q},
                         {"role": "assistant", "content": "<think>"}],
            "continue_final_message": True, "add_generation_prompt": False, "max_tokens": 60, "temperature": 0}


@pytest.fixture(scope="module")
def qwen3():
    if not os.path.exists(QWEN3):
        pytest.skip(f"no {QWEN3}")
    s = Server("--chat-template", QWEN3, threads=1)
    yield s
    s.stop()


def test_reasoning_comes_apart_from_content(qwen3):
    _, models = 200, json.loads(urllib.request.urlopen(qwen3.base + "/v1/models", timeout=30).read())
    assert models["data"][0]["reasoning_format"] == "<think>" and models["data"][0]["tool_call_format"] == "hermes"
    st, r = post(qwen3, "/v1/chat/completions", thinking_request("What is 3+5?"))
    assert st == 200, r
    m = r["choices"][0]["message"]
    assert m.get("reasoning_content") and m["content"], m
    for part in (m["reasoning_content"], m["content"]):
        assert "<think>" not in part and "</think>" not in part, m
    # streamed: the same two texts, the reasoning first
    reasoning, content, _, finish, order = stream(qwen3, thinking_request("What is 3+5?"))
    assert (reasoning, content) == (m["reasoning_content"], m["content"])
    assert order.index("c") > order.index("r") and "r" not in order[order.index("c"):]
    assert finish == r["choices"][0]["finish_reason"]
    # the plain generation prompt: no reasoning block opened, none in the reply
    st, r = post(qwen3, "/v1/chat/completions", {"messages": [{"role": "user", "content": "What is 3+5?"}],
                                                 "max_tokens": 16, "temperature": 0})
    assert st == 200 and "reasoning_content" not in r["choices"][0]["message"], r


def test_chat_template_kwargs_reach_the_template(qwen3):
    msgs = [{"role": "user", "content": "What is 3+5?"}]
    st, on = post(qwen3, "/apply-template", {"messages": msgs})
    st2, off = post(qwen3, "/apply-template", {"messages": msgs, "chat_template_kwargs": {"enable_thinking": False}})
    assert st == st2 == 200
    assert off["prompt"] == on["prompt"] + "<think>\n\n</think>\n\n", off
    body = {"messages": msgs, "max_tokens": 4, "temperature": 0}
    _, a = post(qwen3, "/v1/chat/completions", body)
    _, b = post(qwen3, "/v1/chat/completions", {**body, "chat_template_kwargs": {"enable_thinking": False}})
    # the closed, empty reasoning block is in the prompt the model saw
    assert b["usage"]["prompt_tokens"] > a["usage"]["prompt_tokens"], (a["usage"], b["usage"])
    assert "reasoning_content" not in b["choices"][0]["message"]
    st, e = post(qwen3, "/v1/chat/completions", {**body, "chat_template_kwargs": {"messages": []}})
    assert st == 400 and e["error"]["param"] == "chat_template_kwargs", e


def test_continue_final_message_checks_its_request(qwen3):
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, I am"}]
    st, p = post(qwen3, "/apply-template", {"messages": msgs, "continue_final_message": True})
    # the turn left open (Qwen3's template writes an empty reasoning block into the last assistant turn)
    assert st == 200 and p["prompt"].endswith("\n\nHello, I am"), p
    assert p["prompt"].rindex("<|im_start|>assistant\n") > p["prompt"].rindex("<|im_end|>"), p
    st, e = post(qwen3, "/v1/chat/completions", {"messages": msgs[:1], "continue_final_message": True})
    assert st == 400 and e["error"]["param"] == "continue_final_message", e
    st, e = post(qwen3, "/v1/chat/completions", {"messages": msgs, "continue_final_message": True,
                                                 "add_generation_prompt": True})
    assert st == 400 and e["error"]["param"] == "continue_final_message", e


def test_reasoning_through_the_router(qwen3):
    r = Router([qwen3], "--chat-template", QWEN3)
    try:
        r.wait_ready(n_up=1)
        _, direct = post(qwen3, "/v1/chat/completions", thinking_request("What is 10 minus 4?"))
        st, via = post(r, "/v1/chat/completions", thinking_request("What is 10 minus 4?"))
        assert st == 200
        assert via["choices"][0]["message"] == direct["choices"][0]["message"]
        assert via["usage"]["prompt_tokens"] == direct["usage"]["prompt_tokens"]
        reasoning, content, _, _, _ = stream(r, thinking_request("What is 10 minus 4?"))
        assert reasoning == direct["choices"][0]["message"]["reasoning_content"]
        assert content == direct["choices"][0]["message"]["content"]
    finally:
        r.stop()


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                   "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Time of a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def router(server):
    r = Router([server])
    r.wait_ready(n_up=1)
    yield r
    r.stop()


@pytest.mark.parametrize("where", ["serve", "router"])
def test_named_choice_is_one_call_and_a_cut_reply_keeps_its_finished_calls(server, router, where):
    server = server if where == "serve" else router
    msgs = [{"role": "user", "content": "What is the weather in Oslo?"}]
    named = {"type": "function", "function": {"name": "get_weather"}}
    st, r = post(server, "/v1/chat/completions", {"messages": msgs, "tools": TOOLS, "tool_choice": named,
                                                  "max_tokens": 60, "temperature": 0})
    assert st == 200, r
    c = r["choices"][0]
    assert c["finish_reason"] == "tool_calls" and len(c["message"]["tool_calls"]) == 1, c
    assert c["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    # "required" without parallel calls: one call, as many tokens as the first call of a parallel reply
    st, r = post(server, "/v1/chat/completions", {"messages": msgs, "tools": TOOLS, "tool_choice": "required",
                                                  "parallel_tool_calls": False, "max_tokens": 60, "temperature": 0})
    assert st == 200 and len(r["choices"][0]["message"]["tool_calls"]) == 1, r
    one = r["usage"]["completion_tokens"]
    # "required" with the end-of-text tokens banned: after its first call the grammar leaves the model only
    # the next call; max_tokens cuts that one
    _, ids = post(server, "/tokenize", {"content": "<|im_end|><|endoftext|>", "add_special": False})
    ban = {str(t): -100 for t in ids["tokens"]}
    body = {"messages": msgs, "tools": TOOLS, "tool_choice": "required", "max_tokens": one + 6,
            "temperature": 0, "logit_bias": ban}
    st, r = post(server, "/v1/chat/completions", body)
    assert st == 200, r
    c = r["choices"][0]
    assert c["finish_reason"] == "length", c
    calls = c["message"]["tool_calls"]
    assert calls and all(json.loads(k["function"]["arguments"]) for k in calls), c
    assert "<tool_call>" not in (c["message"]["content"] or ""), c
    # streamed: the same finished calls, the same finish
    _, content, scalls, finish, _ = stream(server, body)
    assert finish == "length" and [k["function"] for k in scalls] == [k["function"] for k in calls]
    assert "<tool_call>" not in content


def test_tokenize_with_messages_counts_the_chat_prompt(server):
    msgs = [{"role": "user", "content": "Name the capital of France."}]
    st, t = post(server, "/tokenize", {"messages": msgs})
    assert st == 200, t
    _, r = post(server, "/v1/chat/completions", {"messages": msgs, "max_tokens": 1, "temperature": 0})
    assert t["count"] == len(t["tokens"]) == r["usage"]["prompt_tokens"]
    _, plain = post(server, "/tokenize", {"prompt": msgs[0]["content"]})
    assert plain["count"] < t["count"]  # the template's turns (and SmolLM2's system prompt) are in it
    st, e = post(server, "/tokenize", {"messages": msgs, "prompt": "x"})
    assert st == 400 and e["error"]["param"] == "messages", e


def test_suffix_needs_fill_in_the_middle_tokens(server):
    # SmolLM2-Instruct's vocabulary has none: a 400 naming suffix (tests/test_chat_format.c builds the
    # prefix-suffix-middle prompt on a vocabulary that has them)
    st, e = post(server, "/v1/completions", {"prompt": "def f(x):", "suffix": "    return y", "max_tokens": 4})
    assert st == 400 and e["error"]["param"] == "suffix" and "fill-in-the-middle" in e["error"]["message"], e
    st, e = post(server, "/v1/completions", {"prompt": "def f(x):", "suffix": 3, "max_tokens": 4})
    assert st == 400 and e["error"]["param"] == "suffix", e
