"""Django (ASGI) app for the framework matrix, with minimal settings in code (routes: see
_shared.py).  Django's ASGI handler serves only ``http``; a thin wrapper answers ``lifespan``
(the usual way to run startup/shutdown code with Django under ASGI)."""

import gc
import hashlib

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="ferrocorn-framework-matrix",
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["*"],
    INSTALLED_APPS=[],
    MIDDLEWARE=[],
    DATABASES={},
    USE_TZ=True,
    DATA_UPLOAD_MAX_MEMORY_SIZE=None,  # the 10 MB echo reads request.body
)
django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402
from django.http import (  # noqa: E402
    FileResponse,
    HttpResponse,
    JsonResponse,
    StreamingHttpResponse,
)
from django.urls import path  # noqa: E402

from tests.frameworks import _shared  # noqa: E402

NAME = "django"


async def plain(request):
    return HttpResponse(_shared.PLAIN_TEXT % NAME, content_type="text/plain; charset=utf-8")


async def json_route(request):
    return JsonResponse(_shared.json_doc(NAME))


async def echo(request):
    body = request.body
    response = HttpResponse(body, content_type="application/octet-stream")
    response["x-echo-sha256"] = hashlib.sha256(body).hexdigest()
    return response


async def stream(request):
    chunks = int(request.GET.get("chunks", "4"))
    size = int(request.GET.get("size", "1024"))
    return StreamingHttpResponse(
        _shared.stream_chunks(chunks, size), content_type="application/octet-stream"
    )


async def sse_events(n):
    for i in range(n):
        yield ("id: %d\nevent: tick\ndata: %s\n\n" % (i, _shared.sse_text(NAME, i))).encode()
        await _shared.anyio.sleep(_shared.SSE_INTERVAL)


async def sse(request):
    response = StreamingHttpResponse(
        sse_events(int(request.GET.get("n", "100"))), content_type="text/event-stream"
    )
    response["cache-control"] = "no-cache"
    return response


async def state(request):
    return HttpResponse(request.scope["state"]["startup_value"], content_type="text/plain")


async def error(request):
    raise RuntimeError("django app error route")


async def timeout(request):
    status, text = await _shared.timeout_probe()
    return HttpResponse(text, status=status, content_type="text/plain")


async def disconnect(request):
    return StreamingHttpResponse(
        _shared.disconnect_stream(request.GET["id"], NAME), content_type="text/plain"
    )


async def collect(request):
    """Django < 5 (the one PyPy 3.9 gets) neither watches for http.disconnect nor closes the
    view's async iterator when send() raises: the abandoned generator is finalized by the
    loop's async-generator hook, which on PyPy runs only at the next garbage collection."""
    gc.collect()
    return HttpResponse("collected", content_type="text/plain")


async def file(request, name):
    path_ = _shared.file_path(name)
    if path_ is None:
        return HttpResponse("no such file", status=404, content_type="text/plain")
    # Django streams the open file (FileResponse's block iterator, in a thread).
    return FileResponse(open(path_, "rb"), content_type="application/octet-stream")


urlpatterns = [
    path("file/<str:name>", file),
    path("gc", collect),
    path("plain", plain),
    path("json", json_route),
    path("echo", echo),
    path("stream", stream),
    path("sse", sse),
    path("state", state),
    path("error", error),
    path("timeout", timeout),
    path("disconnect", disconnect),
]

django_app = get_asgi_application()


async def app(scope, receive, send):
    if scope["type"] != "lifespan":
        await django_app(scope, receive, send)
        return
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            scope["state"]["startup_value"] = _shared.startup_value()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            _shared.record_shutdown(NAME)
            await send({"type": "lifespan.shutdown.complete"})
            return
