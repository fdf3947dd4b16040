"""ferrocorn: a fast, complete ASGI server with a Rust (tokio + hyper) network core."""

from ._ferrocorn import ClientDisconnected
from ._ferrocorn import __version__ as __version__
from .config import Config
from .server import Server, run

__all__ = ["ClientDisconnected", "Config", "Server", "run", "__version__"]
