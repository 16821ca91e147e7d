"""Client libraries as users run them against weft (SmolLM2, directly and
through weft router): LangChain's bind_tools, instructor's TOOLS mode and
llama-index's structured_predict each get a tool call they can use; the
openai SDK's chat.completions gets exactly one call for a named tool_choice,
and a reply cut by max_tokens keeps its finished calls and says "length"
(test_chat_formats.py has the same over raw HTTP)."""
import json
import urllib.request

import pytest
from pydantic import BaseModel, Field

from conftest import Router, Server


class User(BaseModel):
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=120)


@pytest.fixture(scope="module")
def bases():
    srv = Server(threads=2)
    r = Router([srv])
    r.wait_ready(n_up=1)
    import openai
    mid = openai.OpenAI(base_url=srv.base + "/v1", api_key="none").models.list().data[0].id
    yield {"serve": (srv.base, mid), "router": (r.base, mid)}
    r.stop()
    srv.stop()


@pytest.fixture(params=["serve", "router"])
def target(request, bases):
    return bases[request.param]


def test_langchain_bind_tools(target):
    lc = pytest.importorskip("langchain_openai")
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """The weather of a city."""
        return "sunny"

    base, mid = target
    llm = lc.ChatOpenAI(base_url=base + "/v1", api_key="none", model=mid, temperature=0, max_tokens=48,
                        max_retries=0)
    msg = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("What is the weather in Oslo?")
    assert len(msg.tool_calls) == 1 and msg.tool_calls[0]["name"] == "get_weather", msg
    assert isinstance(msg.tool_calls[0]["args"].get("city"), str)
    # the call's result goes back and the model answers
    from langchain_core.messages import HumanMessage, ToolMessage
    follow = llm.bind_tools([get_weather]).invoke([
        HumanMessage("What is the weather in Oslo?"), msg,
        ToolMessage("3 degrees and snow", tool_call_id=msg.tool_calls[0]["id"])])
    assert follow.content or follow.tool_calls


def test_instructor_tools_mode(target):
    instructor = pytest.importorskip("instructor")
    import openai
    base, mid = target
    client = instructor.from_openai(openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0),
                                    mode=instructor.Mode.TOOLS)
    u = client.chat.completions.create(model=mid, response_model=User, max_retries=0, max_tokens=64, temperature=0,
                                       messages=[{"role": "user", "content": "Extract: John is 30 years old."}])
    assert isinstance(u, User) and 0 <= u.age <= 120


def test_llama_index_structured_predict(target):
    pytest.importorskip("llama_index.llms.openai_like")
    from llama_index.core.prompts import PromptTemplate
    from llama_index.llms.openai_like import OpenAILike
    base, mid = target
    llm = OpenAILike(model=mid, api_base=base + "/v1", api_key="none", is_chat_model=True,
                     is_function_calling_model=True, temperature=0, max_tokens=64, max_retries=0)
    u = llm.structured_predict(User, PromptTemplate("Extract the user: {text}"), text="John is 30 years old.")
    assert isinstance(u, User) and 0 <= u.age <= 120


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                   "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Time of a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def test_openai_sdk_named_tool_choice_and_a_cut_reply(target):
    openai = pytest.importorskip("openai")
    base, mid = target
    c = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)
    kw = dict(model=mid, messages=[{"role": "user", "content": "What is the weather in Oslo?"}], tools=TOOLS,
              temperature=0)
    r = c.chat.completions.create(**kw, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                  max_tokens=60)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and len(ch.message.tool_calls) == 1, ch
    assert ch.message.tool_calls[0].function.name == "get_weather" and ch.message.tool_calls[0].id
    assert isinstance(json.loads(ch.message.tool_calls[0].function.arguments)["city"], str)
    # one call's length, then the end-of-text tokens banned: "required" leaves the model only a next call,
    # which max_tokens cuts
    one = c.chat.completions.create(**kw, tool_choice="required", parallel_tool_calls=False,
                                    max_tokens=60).usage.completion_tokens
    req = urllib.request.Request(base + "/tokenize", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"content": "<|im_end|><|endoftext|>", "add_special": False}).encode())
    with urllib.request.urlopen(req, timeout=30) as t:
        ban = {str(i): -100 for i in json.loads(t.read())["tokens"]}
    cut = dict(kw, tool_choice="required", max_tokens=one + 6, logit_bias=ban)
    ch = c.chat.completions.create(**cut).choices[0]
    assert ch.finish_reason == "length" and ch.message.tool_calls, ch
    assert all(json.loads(k.function.arguments) is not None for k in ch.message.tool_calls), ch
    assert "<tool_call>" not in (ch.message.content or "")
    # streamed: the SDK's chunks add up to the same finished calls and the same finish
    calls, finish = {}, None
    for chunk in c.chat.completions.create(**cut, stream=True):
        if not chunk.choices:
            continue
        for d in chunk.choices[0].delta.tool_calls or []:
            k = calls.setdefault(d.index, {"name": "", "arguments": ""})
            k["name"] += (d.function and d.function.name) or ""
            k["arguments"] += (d.function and d.function.arguments) or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "length"
    assert [calls[i] for i in sorted(calls)] == [{"name": k.function.name, "arguments": k.function.arguments}
                                                 for k in ch.message.tool_calls]
