"""Pure-Python helpers shared by the test apps (server side) and the tests (client side).

No third-party imports: this module is imported inside the server process, which may be PyPy.
"""

import hashlib

# 1 MiB of a fixed, non-trivial pattern; the logical stream of N bytes is this block repeated.
BLOCK = (bytes(range(251)) * 4200)[: 1 << 20]  # period 251: never aligned with chunk sizes
_DOUBLE = BLOCK + BLOCK


def pattern_chunk(offset, size):
    """Bytes [offset, offset+size) of the infinite repeated pattern (size <= 1 MiB)."""
    assert size <= len(BLOCK)
    start = offset % len(BLOCK)
    return _DOUBLE[start : start + size]


def iter_pattern(total, chunk=1 << 20):
    """Yield the first ``total`` bytes of the pattern in chunks of at most ``chunk`` bytes."""
    pos = 0
    while pos < total:
        n = min(chunk, total - pos)
        yield pattern_chunk(pos, n)
        pos += n


def pattern_sha256(total):
    h = hashlib.sha256()
    for piece in iter_pattern(total):
        h.update(piece)
    return h.hexdigest()


async def lifespan(scope, receive, send, on_startup=None):
    """The ASGI lifespan protocol for an app with nothing to set up: answers startup (after
    ``on_startup(scope)``, when given) and shutdown, then returns. Apps whose lifespan fails,
    raises or waits keep their own."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if on_startup is not None:
                on_startup(scope)
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
