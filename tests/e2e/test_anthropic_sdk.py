"""Anthropic's Messages API (POST /v1/messages), driven by the official
anthropic package against `weft serve` and against `weft router` in front of
it (the same calls must work through both): a plain message, a forced tool
call and the turn that sends its result back, messages.stream() for text and
for a tool call (the SDK's accumulated message must equal what its events
said), and refusals that name the field. The translation itself is
tests/test_shape_messages.c's."""
import json

import pytest

from conftest import Router, Server

anthropic = pytest.importorskip("anthropic")

WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "Rome"]}},
                     "required": ["city"]},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0}  # the SDK's create() takes no sampling arguments any more: sent as extra_body


@pytest.fixture(scope="module")
def instance():
    s = Server(threads=2)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def router(instance):
    r = Router([instance])
    r.wait_ready(n_up=1)
    yield r
    r.stop()


@pytest.fixture(params=["serve", "router"])
def target(request, instance):
    """A base URL: the instance, or the router in front of it."""
    if request.param == "serve":
        return instance
    return request.getfixturevalue("router")


def sdk(t):
    return anthropic.Anthropic(base_url=t.base, api_key="none", max_retries=0, timeout=120)


def model_of(t):
    status, text = t.get("/v1/models")
    assert status == 200, text
    return json.loads(text)["data"][0]["id"]


def test_create_plain(target):
    m = sdk(target).messages.create(model=model_of(target), max_tokens=16, extra_body=GREEDY,
                                    messages=[{"role": "user", "content": "Name the capital of France."}])
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.model == model_of(target)
    assert [b.type for b in m.content] == ["text"] and m.content[0].text.strip()
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 16


def test_forced_tool_call_then_its_result(target):
    c, model = sdk(target), model_of(target)
    m = c.messages.create(model=model, max_tokens=48, tools=[WEATHER], messages=ASK, extra_body=GREEDY,
                          tool_choice={"type": "tool", "name": "get_weather"})
    assert m.stop_reason == "tool_use", m
    assert [b.type for b in m.content] == ["tool_use"], m.content
    call = m.content[0]
    assert call.name == "get_weather" and call.id
    assert set(call.input) == {"city"} and call.input["city"] in ("Paris", "Oslo", "Rome")
    # the next turn: the call and its result sent back
    follow = c.messages.create(
        model=model, max_tokens=24, tools=[WEATHER], extra_body=GREEDY,
        messages=[*ASK, {"role": "assistant", "content": m.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                "content": "18 degrees and sunny"}]}])
    assert follow.stop_reason in ("end_turn", "max_tokens", "tool_use")
    # the prompt grew by the call and its result (input_tokens leaves out what the prefix cache held)
    total = lambda u: u.input_tokens + (u.cache_read_input_tokens or 0)  # noqa: E731
    assert follow.content and total(follow.usage) > total(m.usage)


def test_stream_text(target):
    with sdk(target).messages.stream(model=model_of(target), max_tokens=24, extra_body=GREEDY,
                                     messages=[{"role": "user", "content": "Tell me about Paris."}]) as st:
        texts = list(st.text_stream)
        final = st.get_final_message()
    assert texts and [b.type for b in final.content] == ["text"]
    assert final.content[0].text == "".join(texts)
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.input_tokens > 0 and 0 < final.usage.output_tokens <= 24


def test_stream_tool_call(target):
    with sdk(target).messages.stream(model=model_of(target), max_tokens=48, tools=[WEATHER], messages=ASK,
                                     tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY) as st:
        kinds = [e.type for e in st]
        final = st.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "input_json" in kinds
    assert final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["tool_use"]
    assert final.content[0].name == "get_weather" and final.content[0].input["city"] in ("Paris", "Oslo", "Rome")


@pytest.mark.parametrize("extra, field", [
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "web_search"),
    ({"frobnicate": 1}, "frobnicate"),
])
def test_refusal_names_the_field(target, extra, field):
    with pytest.raises(anthropic.BadRequestError) as e:
        sdk(target).messages.create(model=model_of(target), max_tokens=8, messages=ASK, extra_body=extra)
    assert e.value.status_code == 400
    body = e.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert field in body["error"]["message"]
