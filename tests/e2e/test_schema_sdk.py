"""JSON Schema constraints through the official openai SDK's
chat.completions.parse(response_format=PydanticModel) against `weft serve`:
a Field(pattern=...), ge/le/gt bounds on int and float fields, an EmailStr,
and nested models ($defs, a list of models, an Optional). Each model gets 20
different prompts; every reply must parse (the SDK validates it with
Pydantic) and the parsed values must satisfy the constraints, which the
server's grammar (server/json_schema.c) enforces while the model writes."""
import re
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("email_validator")   # EmailStr: pip install 'pydantic[email]' (scripts/install-deps.sh)
from pydantic import BaseModel, EmailStr, Field  # noqa: E402

from conftest import Server  # noqa: E402

N = 20
NAMES = ["Ann", "Bob", "Chloe", "Dan", "Eve", "Finn", "Gia", "Hugo", "Ivy", "Jon",
         "Kim", "Leo", "Mia", "Ned", "Olga", "Pia", "Quinn", "Rui", "Sam", "Tess"]
CITIES = ["Oslo", "Lyon", "Rome", "Kyoto", "Lima"]
CODE = r"^[A-Z]{3}-\d{4}$"
ZIP = r"^\d{5}$"


class Ticket(BaseModel):
    code: str = Field(pattern=CODE)
    zip: str = Field(pattern=ZIP)


class Reading(BaseModel):
    floor: int = Field(ge=-2, le=40)
    rooms: int = Field(ge=1, le=120)
    temp: float = Field(gt=-10.5, le=45.0)
    share: float = Field(ge=0, lt=1)


class Contact(BaseModel):
    name: str = Field(max_length=16)
    email: EmailStr


class Customer(BaseModel):
    name: str = Field(max_length=12)


class Item(BaseModel):
    name: str = Field(max_length=12)
    qty: int = Field(ge=1, le=9)


class Order(BaseModel):
    customer: Customer
    items: List[Item] = Field(min_length=1, max_length=2)
    note: Optional[str] = Field(default=None, max_length=12)


@pytest.fixture(scope="module")
def client():
    s = Server(threads=2)
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=300)
        c.weft_model = c.models.list().data[0].id
        yield c
    finally:
        s.stop()


def parse_all(client, model, prompts, max_tokens):
    """The parsed choice of each prompt, 8 requests at a time (batched by the server)."""
    def one(p):
        r = client.chat.completions.parse(model=client.weft_model, response_format=model, temperature=0,
                                          max_tokens=max_tokens, messages=[{"role": "user", "content": p}])
        return r.choices[0]

    with ThreadPoolExecutor(8) as ex:
        choices = list(ex.map(one, prompts))
    for c in choices:
        assert c.finish_reason == "stop", c.message.content
        assert isinstance(c.message.parsed, model), c.message.content
    return [c.message.parsed for c in choices]


def test_pattern_fields(client):
    prompts = [f"Make a support ticket for {NAMES[i]} in {CITIES[i % 5]}: a code like ABC-1234 and a 5-digit zip."
               for i in range(N)]
    for t in parse_all(client, Ticket, prompts, 64):
        assert re.fullmatch(CODE, t.code) and re.fullmatch(ZIP, t.zip), t


def test_integer_and_float_bounds(client):
    prompts = [f"Describe floor {i * 3 - 2} of a hotel in {CITIES[i % 5]} with {10 + 7 * i} rooms: give the floor, "
               f"the rooms, a temperature of {i * 2.5 - 8} degrees and the share of rooms taken." for i in range(N)]
    for r in parse_all(client, Reading, prompts, 64):
        assert -2 <= r.floor <= 40 and 1 <= r.rooms <= 120, r
        assert -10.5 < r.temp <= 45.0 and 0 <= r.share < 1, r


def test_email_str(client):
    prompts = [f"Give the contact details of {NAMES[i]}, who works in {CITIES[i % 5]}: a name and an email address."
               for i in range(N)]
    for c in parse_all(client, Contact, prompts, 80):
        assert "@" in c.email and len(c.name) <= 16, c


def test_nested_models_and_lists(client):
    schema = Order.model_json_schema()
    assert "$defs" in schema and "Item" in schema["$defs"]
    prompts = [f"Order for {NAMES[i]} ({CITIES[i % 5]}): {i % 3 + 1} pens, {i % 4 + 1} cups." for i in range(N)]
    # 66..90 tokens each (the model spends some on newlines between members)
    for o in parse_all(client, Order, prompts, 128):
        assert isinstance(o.customer, Customer) and len(o.customer.name) <= 12, o
        assert 1 <= len(o.items) <= 2, o
        for it in o.items:
            assert isinstance(it, Item) and 1 <= it.qty <= 9 and len(it.name) <= 12, o
        assert o.note is None or len(o.note) <= 12, o
