"""The app of the file scenarios (`file-*`, `static-*` in run.py; `file_rss.py`): Starlette's
`FileResponse` for files of `benchmarks/.work/files/` (run.py `ensure_bench_files` makes
them), which a server with `http.response.pathsend` sends itself. In the `static-*`
scenarios the server's own static route answers `/static/...` and this app only the
readiness probe.

Targets
-------
benchmarks.file_app:app   GET /files/{name}  -> FileResponse(benchmarks/.work/files/name)
                          GET /plaintext     -> PlainTextResponse (readiness probe)
"""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Route

FILES = Path(__file__).resolve().parent / ".work" / "files"


async def file(request: Request) -> Response:
    name = request.path_params["name"]
    if "/" in name or name.startswith("."):
        return PlainTextResponse("Not Found", status_code=404)
    return FileResponse(FILES / name)


async def plaintext(request: Request) -> Response:
    return PlainTextResponse("Hello, World!")


app = Starlette(routes=[Route("/files/{name}", file), Route("/plaintext", plaintext)])
