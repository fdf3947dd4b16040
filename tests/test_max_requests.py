"""``--limit-max-requests`` means what it says under load: the request that reaches the limit
starts the drain in the core, so a fast keep-alive client gets exactly that many responses,
the last with ``Connection: close``, instead of hundreds more until the server's next tick
(before this, one such client got 656, 1,037 and 1,298 responses in three runs for a limit
of 50)."""

from tests.support.helpers import RawConnection, request_bytes, start_server


def test_a_fast_keep_alive_client_gets_exactly_the_limit():
    limit = 50
    server = start_server(
        "tests.apps.basic:app", "--no-access-log", "--limit-max-requests", str(limit)
    )
    try:
        responses = []
        with RawConnection(server.port) as conn:
            for _ in range(limit * 20):
                try:
                    conn.send(request_bytes("GET", "/hello"))
                    response = conn.read_response()
                except (OSError, AssertionError):
                    break
                if response is None:
                    break
                responses.append(response)
                if (response.header("connection") or "").lower() == "close":
                    break
        assert len(responses) == limit, len(responses)
        assert all(r.status == 200 for r in responses)
        assert (responses[-1].header("connection") or "").lower() == "close"
        assert server.wait(timeout=30) == 0
        assert "Maximum request limit of 50 exceeded" in server.output()
    finally:
        server.close()
