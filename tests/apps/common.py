"""Pure-Python helpers shared by the test apps (server side) and the tests (client side).

No third-party imports: this module is imported inside the server process, which may be PyPy.
"""

import hashlib

# The logical stream of N bytes is a 1 MiB block of a fixed, non-trivial pattern, repeated:
# byte i of the block is i % 251 (a period never aligned with chunk sizes).
BLOCK_SIZE = 1 << 20
_PERIOD = bytes(range(251))


def pattern_chunk(offset, size):
    """Bytes [offset, offset+size) of the infinite repeated pattern (size <= 1 MiB).

    Built per call rather than sliced from a prebuilt block: every server process imports
    this module (each forked worker too), and megabytes written at import are an app's cost
    that a benchmark of worker start-up should not carry."""
    assert size <= BLOCK_SIZE
    out = bytearray()
    pos = offset
    while len(out) < size:
        in_block = pos % BLOCK_SIZE
        n = min(size - len(out), BLOCK_SIZE - in_block)
        phase = in_block % 251
        out += (_PERIOD * ((phase + n) // 251 + 1))[phase : phase + n]
        pos += n
    return bytes(out)


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
