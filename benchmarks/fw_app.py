"""The framework apps of the benchmark suite's `fastapi-json` and `starlette-plaintext` scenarios.

What users run: a framework on top of the server, so each request also pays for routing,
request/response objects and (FastAPI) validation and serialization. Every server serves the
same app object, as with `benchmarks/app.py`.

Targets
-------
benchmarks.fw_app:fastapi_app    GET /items/{item_id}  -> an `Item` pydantic model as JSON
                                 (path parameter parsed and validated as int, response
                                 validated and serialized through `response_model=Item`)
                                 GET /plaintext        -> PlainTextResponse (readiness probe)
benchmarks.fw_app:starlette_app  GET /plaintext        -> PlainTextResponse("Hello, World!")

The hyper floor server (benchmarks/floor, `--app fastapi` / `--app starlette`) sends the same
bodies and headers as these; `python_floor.py` runs these apps' coroutines without a server.
"""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

PLAINTEXT = "Hello, World!"


class Item(BaseModel):
    item_id: int
    name: str
    price: float
    tags: list[str]


fastapi_app = FastAPI()


@fastapi_app.get("/items/{item_id}", response_model=Item)
async def read_item(item_id: int) -> Item:
    return Item(item_id=item_id, name=f"Item {item_id}", price=9.99, tags=["bench", "floor"])


@fastapi_app.get("/plaintext", response_class=PlainTextResponse)
async def fastapi_plaintext() -> str:
    return PLAINTEXT


async def plaintext(request) -> PlainTextResponse:
    return PlainTextResponse(PLAINTEXT)


starlette_app = Starlette(routes=[Route("/plaintext", plaintext)])
