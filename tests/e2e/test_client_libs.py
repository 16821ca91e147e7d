"""Client libraries as users run them against weft (SmolLM2, directly and
through weft router): LangChain's bind_tools, instructor's TOOLS mode and
llama-index's structured_predict each get a tool call they can use."""
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
