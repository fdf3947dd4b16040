"""What a ferrocorn process tells whoever runs it: its exit codes, the "Ferrocorn running on"
lines that users and tests wait for, and the handshake between the supervisor and a worker (the
payload in the environment, the ``ready`` and ``recycle`` lines on the pipe).

The single-process server (server.py), the supervisor (supervisor.py) and a worker (worker.py)
all keep to it; it imports none of them, so they depend on it and not on each other.
"""

from __future__ import annotations

import base64
import logging
import pickle
from typing import Any

logger = logging.getLogger("ferrocorn.error")

EXIT_OK = 0
EXIT_CONFIG_ERROR = 1
EXIT_STARTUP_FAILED = 3

# The pickled worker payload (see encode_payload); read and removed from the environment at once.
PAYLOAD_ENV = "_FERROCORN_WORKER"
READY_LINE = b"ready\n"
RECYCLE_LINE = b"recycle\n"


def encode_payload(payload: dict[str, Any]) -> str:
    """For the supervisor: ``payload`` as an environment-variable value."""
    return base64.b64encode(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)).decode()


def decode_payload(value: str) -> dict[str, Any]:
    """For the worker: the payload ``encode_payload`` made (ValueError if it is not one)."""
    payload = pickle.loads(base64.b64decode(value))
    if not isinstance(payload, dict):
        raise ValueError("not a worker payload")
    return payload


def log_listening(addresses: list[tuple[Any, ...]], scheme: str = "http") -> None:
    """The "Ferrocorn running on ..." lines (tests and users wait for them)."""
    for address in addresses:
        if len(address) == 1:
            logger.info("Ferrocorn running on unix socket %s (Press CTRL+C to quit)", address[0])
        else:
            host, port = address
            shown = f"[{host}]" if ":" in str(host) else host
            logger.info(
                "Ferrocorn running on %s://%s:%d (Press CTRL+C to quit)", scheme, shown, port
            )
