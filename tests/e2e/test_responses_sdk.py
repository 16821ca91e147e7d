"""OpenAI's Responses API (/v1/responses) with the official `openai` SDK on
SmolLM2, directly and through weft router: responses.create streamed and
not, with a tool, with text.format json_schema, a follow-up by
previous_response_id (a function_call_output answering the call), and the
refusals by name."""
import json

import pytest

from conftest import Router, Server

openai = pytest.importorskip("openai")

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                         "required": ["city"], "additionalProperties": False}}]
PERSON = {"type": "json_schema", "name": "person", "strict": True,
          "schema": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                      "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                     "required": ["name", "age"], "additionalProperties": False}}


@pytest.fixture(scope="module")
def targets():
    srv = Server(threads=2)
    r = Router([srv])
    r.wait_ready(n_up=1)
    out = {}
    for name, t in (("serve", srv), ("router", r)):
        c = openai.OpenAI(base_url=t.base + "/v1", api_key="none", max_retries=0, timeout=120)
        c.weft_model = c.models.list().data[0].id
        out[name] = c
    yield out
    r.stop()
    srv.stop()


@pytest.fixture(params=["serve", "router"])
def client(request, targets):
    return targets[request.param]


def test_create_and_follow_up(client):
    m = client.weft_model
    r = client.responses.create(model=m, input="Name the capital of France.", max_output_tokens=24, temperature=0)
    assert r.object == "response" and r.status == "completed" and r.id.startswith("resp_")
    assert "Paris" in r.output_text and r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    # the follow-up sees the first exchange: its prompt holds it
    r2 = client.responses.create(model=m, input="And of Italy?", previous_response_id=r.id, max_output_tokens=24,
                                 temperature=0)
    assert r2.status == "completed" and r2.previous_response_id == r.id
    assert r2.usage.input_tokens > r.usage.input_tokens + r.usage.output_tokens
    # instructions are the system message; a cut reply is incomplete
    r3 = client.responses.create(model=m, instructions="Answer in French.", input="Hello!", max_output_tokens=3,
                                 temperature=0)
    assert r3.status == "incomplete" and r3.incomplete_details.reason == "max_output_tokens"


def test_streamed_events_add_up(client):
    m = client.weft_model
    kinds, text = [], ""
    with client.responses.stream(model=m, input="Name the capital of France.", max_output_tokens=24,
                                 temperature=0) as s:
        for e in s:
            kinds.append(e.type)
            if e.type == "response.output_text.delta":
                text += e.delta
        final = s.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.done" in kinds and final.output_text == text and "Paris" in text
    plain = client.responses.create(model=m, input="Name the capital of France.", max_output_tokens=24, temperature=0)
    assert plain.output_text == text


def test_a_tool_call_and_its_output(client):
    m = client.weft_model
    r = client.responses.create(model=m, input="What is the weather in Oslo?", tools=TOOLS,
                                tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=48,
                                temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather", r.output
    assert set(json.loads(calls[0].arguments)) == {"city"} and calls[0].call_id
    # the call's output, by previous_response_id
    r2 = client.responses.create(model=m, previous_response_id=r.id, tools=TOOLS, max_output_tokens=16,
                                 temperature=0, input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                                        "output": "3 degrees and snow"}])
    assert r2.status in ("completed", "incomplete") and r2.usage.input_tokens > r.usage.input_tokens
    # streamed: the same call, as function_call events
    kinds, args = [], None
    with client.responses.stream(model=m, input="What is the weather in Oslo?", tools=TOOLS,
                                 tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=48,
                                 temperature=0) as s:
        for e in s:
            kinds.append(e.type)
            if e.type == "response.function_call_arguments.done":
                args = e.arguments
        final = s.get_final_response()
    assert args == calls[0].arguments and "response.output_item.added" in kinds
    assert [o.type for o in final.output] == ["function_call"]


def test_text_format_json_schema(client):
    r = client.responses.create(model=client.weft_model, input="Describe a person as JSON.", text={"format": PERSON},
                                max_output_tokens=40, temperature=0)
    p = json.loads(r.output_text)
    assert set(p) == {"name", "age"} and 0 <= p["age"] <= 120


def test_refusals_name_the_field(client):
    m = client.weft_model
    for kw, field in [({"tools": [{"type": "web_search"}]}, "tools"), ({"background": True}, "background"),
                      ({"previous_response_id": "resp_nope"}, "previous_response_id"),
                      ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
                       "input")]:
        args = {"model": m, "input": "Hi", "max_output_tokens": 4, **kw}
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(**args)
        assert e.value.body["param"] == field, (kw, e.value.body)
    # store false: nothing to follow up
    r = client.responses.create(model=m, input="Hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=m, input="Again", previous_response_id=r.id, max_output_tokens=2)
