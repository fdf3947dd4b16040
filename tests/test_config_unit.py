"""Unit tests for the import-string resolver, Config and the command line (no server needed)."""

from __future__ import annotations

import asyncio
import errno
import importlib
import json
import logging
import os
import platform
import socket
import stat
import sys
import textwrap
import types
import uuid
from importlib import metadata
from typing import Any

import pytest


def _stub_extension() -> None:
    """Let ``import ferrocorn`` succeed before the Rust extension has been built."""
    stub = types.ModuleType("ferrocorn._ferrocorn")
    stub.__version__ = "0.0.0+stub"  # type: ignore[attr-defined]
    # Any name the package imports from the extension becomes a placeholder class.
    stub.__getattr__ = lambda name: type(name, (OSError,), {})  # type: ignore[attr-defined]
    sys.modules["ferrocorn._ferrocorn"] = stub


try:
    import ferrocorn  # noqa: F401
except ImportError:
    _stub_extension()

from click.testing import CliRunner  # noqa: E402
from ferrocorn import cli  # noqa: E402
from ferrocorn.config import Config, ConfigError, socket_kind  # noqa: E402
from ferrocorn.importer import ImportFromStringError, import_from_string  # noqa: E402

# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def _restore_global_state() -> Any:
    """Config() configures logging and may load env files: undo both after each test."""
    saved_env = dict(os.environ)
    saved_path = list(sys.path)
    loggers = [logging.getLogger(n) for n in ("ferrocorn", "ferrocorn.error", "ferrocorn.access")]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate, lg.disabled) for lg in loggers]
    yield
    for lg, handlers, level, propagate, disabled in saved:
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate
        lg.disabled = disabled
    sys.path[:] = saved_path
    os.environ.clear()
    os.environ.update(saved_env)


@pytest.fixture
def make_module(tmp_path: Any) -> Any:
    """Write a uniquely named module into a directory on sys.path; return its name."""
    sys.path.insert(0, str(tmp_path))
    created: list[str] = []

    def make(source: str) -> str:
        name = f"fc_test_{uuid.uuid4().hex[:10]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        created.append(name)
        return name

    yield make
    for name in created:
        sys.modules.pop(name, None)


ASGI3_SOURCE = """
    async def app(scope, receive, send):
        pass
"""

# --------------------------------------------------------------------------- importer


@pytest.mark.parametrize("bad", ["nocolon", ":app", "module:", ".relative:app"])
def test_import_string_bad_format(bad: str) -> None:
    with pytest.raises(ImportFromStringError) as info:
        import_from_string(bad)
    assert str(info.value) == f'Import string "{bad}" must be in format "<module>:<attribute>".'


@pytest.mark.parametrize("module", ["fc_no_such_module_xyz", "fc_no_such_pkg_xyz.sub"])
def test_import_string_module_not_found(module: str) -> None:
    with pytest.raises(ImportFromStringError) as info:
        import_from_string(f"{module}:app")
    assert str(info.value) == f'Could not import module "{module}".'
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_import_string_attribute_not_found(make_module: Any) -> None:
    name = make_module("app = object()\n")
    with pytest.raises(ImportFromStringError) as info:
        import_from_string(f"{name}:missing")
    assert str(info.value) == f'Attribute "missing" not found in module "{name}".'
    with pytest.raises(ImportFromStringError) as info:
        import_from_string(f"{name}:app.inner")
    assert str(info.value) == f'Attribute "app.inner" not found in module "{name}".'


def test_import_string_missing_dependency_inside_module(make_module: Any) -> None:
    # The named module exists; what is missing is something *it* imports.
    name = make_module("import fc_missing_dependency_xyz\n")
    with pytest.raises(ImportFromStringError) as info:
        import_from_string(f"{name}:app")
    assert str(info.value) == (
        f'Error while importing module "{name}": '
        "ModuleNotFoundError: No module named 'fc_missing_dependency_xyz'"
    )
    assert "\n" not in str(info.value)


def test_import_string_import_error_inside_module(make_module: Any) -> None:
    name = make_module("from os import fc_no_such_name\n")
    with pytest.raises(ImportFromStringError) as info:
        import_from_string(f"{name}:app")
    message = str(info.value)
    assert message.startswith(f'Error while importing module "{name}": ImportError: ')
    assert "fc_no_such_name" in message


def test_import_string_other_errors_propagate(make_module: Any) -> None:
    name = make_module("raise RuntimeError('broken at import')\n")
    with pytest.raises(RuntimeError, match="broken at import"):
        import_from_string(f"{name}:app")


def test_import_string_nested_attribute(make_module: Any) -> None:
    name = make_module(
        """
        class Holder:
            class Inner:
                value = 42
        """
    )
    assert import_from_string(f"{name}:Holder.Inner.value") == 42


# --------------------------------------------------------------------------- Config.load


def test_load_asgi3_from_string(make_module: Any) -> None:
    name = make_module(ASGI3_SOURCE)
    config = Config(f"{name}:app")
    assert not config.loaded
    config.load()
    assert config.loaded
    assert config.loaded_app is sys.modules[name].app
    assert config.asgi_version == "3.0"


def test_load_uses_app_dir(tmp_path: Any) -> None:
    app_dir = tmp_path / "elsewhere"
    app_dir.mkdir()
    name = f"fc_test_{uuid.uuid4().hex[:10]}"
    (app_dir / f"{name}.py").write_text(textwrap.dedent(ASGI3_SOURCE))
    config = Config(f"{name}:app", app_dir=str(app_dir))
    try:
        config.load()
        assert sys.path[0] == str(app_dir)
        assert config.loaded_app is sys.modules[name].app
    finally:
        sys.modules.pop(name, None)


def test_load_errors_are_one_line(make_module: Any) -> None:
    with pytest.raises(ConfigError) as info:
        Config("fc_nope_xyz:app").load()
    assert str(info.value) == 'Error loading ASGI app. Could not import module "fc_nope_xyz".'

    name = make_module(ASGI3_SOURCE)
    with pytest.raises(ConfigError) as info:
        Config(f"{name}:x").load()
    assert str(info.value) == f'Error loading ASGI app. Attribute "x" not found in module "{name}".'

    with pytest.raises(ConfigError) as info:
        Config("nocolon").load()
    assert str(info.value) == (
        'Error loading ASGI app. Import string "nocolon" must be in format "<module>:<attribute>".'
    )


def test_load_factory(make_module: Any) -> None:
    name = make_module(
        """
        async def app(scope, receive, send):
            pass

        def create_app():
            return app

        def broken():
            raise RuntimeError("database is down")

        async def async_factory():
            return app

        not_callable = 3
        """
    )
    config = Config(f"{name}:create_app", factory=True)
    config.load()
    assert config.loaded_app is sys.modules[name].app

    with pytest.raises(ConfigError) as info:
        Config(f"{name}:broken", factory=True).load()
    assert str(info.value) == (
        f'Error loading ASGI app factory. "{name}:broken" raised RuntimeError: database is down'
    )
    assert isinstance(info.value.__cause__, RuntimeError)

    with pytest.raises(ConfigError, match="is not callable"):
        Config(f"{name}:not_callable", factory=True).load()
    with pytest.raises(ConfigError, match="coroutine function"):
        Config(f"{name}:async_factory", factory=True).load()

    # Forgetting --factory is caught at load time, not at the first request.
    with pytest.raises(ConfigError, match="takes no arguments.*--factory"):
        Config(f"{name}:create_app").load()


def _drive(app: Any, scope: dict[str, Any], body: bytes) -> list[dict[str, Any]]:
    """Run an ASGI3 callable to completion with a fake receive/send."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


ASGI2_SOURCE = """
    class App:
        def __init__(self, scope):
            self.scope = scope

        async def __call__(self, receive, send):
            message = await receive()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({
                "type": "http.response.body",
                "body": self.scope["path"].encode() + b":" + message["body"],
            })

    def closure_app(scope):
        async def instance(receive, send):
            await send({"type": "http.response.body", "body": scope["path"].encode()})
        return instance
"""


def test_asgi2_class_is_adapted_end_to_end(make_module: Any) -> None:
    name = make_module(ASGI2_SOURCE)
    config = Config(f"{name}:App")
    config.load()
    assert config.asgi_version == "2.0"
    assert config.loaded_app is not sys.modules[name].App
    sent = _drive(config.loaded_app, {"type": "http", "path": "/echo"}, b"hello")
    assert sent == [
        {"type": "http.response.start", "status": 200, "headers": []},
        {"type": "http.response.body", "body": b"/echo:hello"},
    ]


def test_asgi2_function_and_forced_interface(make_module: Any) -> None:
    name = make_module(ASGI2_SOURCE)
    for interface in ("auto", "asgi2"):
        config = Config(f"{name}:closure_app", interface=interface)
        config.load()
        assert config.asgi_version == "2.0"
        sent = _drive(config.loaded_app, {"type": "http", "path": "/f"}, b"")
        assert sent == [{"type": "http.response.body", "body": b"/f"}]


def test_asgi3_detection() -> None:
    class Asgi3Object:
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "done", "path": scope["path"]})

    def sync_returning_awaitable(scope: Any, receive: Any, send: Any) -> Any:
        return send({"type": "done", "path": scope["path"]})

    for app in (Asgi3Object(), sync_returning_awaitable):
        config = Config(app)
        config.load()
        assert config.loaded_app is app
        assert config.asgi_version == "3.0"
        assert _drive(config.loaded_app, {"type": "http", "path": "/x"}, b"") == [
            {"type": "done", "path": "/x"}
        ]


def test_asgi3_app_with_wrong_signature_is_rejected() -> None:
    async def app(scope: Any) -> None:
        pass

    with pytest.raises(ConfigError, match=r"must accept \(scope, receive, send\)"):
        Config(app).load()


# --------------------------------------------------------------------------- options


def test_encoded_headers() -> None:
    config = Config(
        "m:app",
        headers=["X-Custom: some value", "X-Url:http://a/b", ("X-Pair", "v"), (b"X-Raw", b"r")],
    )
    assert config.encoded_headers == [
        (b"x-custom", b"some value"),
        (b"x-url", b"http://a/b"),
        (b"x-pair", b"v"),
        (b"x-raw", b"r"),
    ]
    assert Config("m:app").encoded_headers == []


@pytest.mark.parametrize(
    "bad",
    [
        "NoColon",
        ":value",
        "Bad Name:v",
        "X-Split:a\r\nInjected: 1",
        "X-Euro:\u20ac",
        ("only-one",),
    ],
)
def test_malformed_headers_rejected_at_construction(bad: Any) -> None:
    with pytest.raises(ConfigError) as info:
        Config("m:app", headers=[bad])
    message = str(info.value)
    assert message.startswith("Invalid header ")
    assert "\n" not in message and "\r" not in message


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"port": 70000}, "Invalid port 70000"),
        ({"loop": "tokio"}, "Invalid loop 'tokio'"),
        ({"lifespan": "maybe"}, "Invalid lifespan 'maybe'"),
        ({"interface": "wsgi"}, "Invalid interface 'wsgi'"),
        ({"log_level": "loud"}, "Invalid log_level 'loud'"),
        ({"uds_permissions": "rw"}, "Invalid uds_permissions 'rw'"),
        ({"runtime_threads": 0}, "Invalid runtime_threads 0"),
        ({"limit_request_body": -1}, "Invalid limit_request_body -1: must be >= 0"),
        ({"limit_request_body": "big"}, "Invalid limit_request_body 'big': expected an integer"),
        ({"limit_request_line": -1}, "Invalid limit_request_line -1: must be >= 0"),
        ({"timeout_request_body": -0.5}, "Invalid timeout_request_body -0.5: must be >= 0"),
        ({"uds": "/tmp/x.sock", "fd": 3}, "mutually exclusive"),
        ({"root_path": "api"}, "must start with '/'"),
    ],
)
def test_invalid_options(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        Config("m:app", **kwargs)


def test_option_normalisation() -> None:
    config = Config("m:app", uds_permissions="0660", root_path="/api/")
    assert config.uds_permissions == 0o660
    assert config.root_path == "/api"


def test_event_loop_choice() -> None:
    loop = Config("m:app", loop="asyncio").new_event_loop()
    try:
        assert type(loop).__module__.startswith("asyncio")
    finally:
        loop.close()
    if importlib.util.find_spec("uvloop") is None:
        with pytest.raises(ConfigError, match="requires uvloop"):
            Config("m:app", loop="uvloop")
        assert Config("m:app").get_loop_factory() is asyncio.new_event_loop


def test_uvloop_is_chosen_when_available(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("uvloop")
    fake.new_event_loop = asyncio.new_event_loop  # type: ignore[attr-defined]
    fake.EventLoopPolicy = asyncio.DefaultEventLoopPolicy  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "uvloop", fake)
    cpython = platform.python_implementation() == "CPython"
    expected = fake.new_event_loop if cpython else asyncio.new_event_loop
    assert Config("m:app").get_loop_factory() is expected
    assert Config("m:app", loop="uvloop").get_loop_factory() is fake.new_event_loop
    assert Config("m:app", loop="asyncio").get_loop_factory() is asyncio.new_event_loop


def test_coloured_level_prefix() -> None:
    from ferrocorn.config import DefaultFormatter

    record = logging.LogRecord("ferrocorn.error", logging.INFO, __file__, 1, "up", None, None)
    assert DefaultFormatter(use_colours=False).format(record) == "INFO:     up"
    assert DefaultFormatter(use_colours=True).format(record) == "\x1b[32mINFO\x1b[0m:     up"


def test_env_file(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    env = tmp_path / ".env"
    env.write_text(
        "# comment\nFC_A=1\nexport FC_B='two words'\nFC_C=\"x # y\"\nFC_D=plain # note\n"
        "FC_KEEP=from-file\n"
    )
    for use_dotenv in (True, False):
        for key in ("FC_A", "FC_B", "FC_C", "FC_D"):
            monkeypatch.delenv(key, raising=False)
        monkeypatch.setenv("FC_KEEP", "from-process")
        if not use_dotenv:
            monkeypatch.setitem(sys.modules, "dotenv", None)  # makes `import dotenv` fail
        Config("m:app", env_file=str(env))
        assert os.environ["FC_A"] == "1"
        assert os.environ["FC_B"] == "two words"
        assert os.environ["FC_C"] == "x # y"
        assert os.environ["FC_D"] == "plain"
        assert os.environ["FC_KEEP"] == "from-process"

    with pytest.raises(ConfigError, match='Could not read env file ".*missing.env"'):
        Config("m:app", env_file=str(tmp_path / "missing.env"))


# --------------------------------------------------------------------------- logging


def test_default_logging(capsys: pytest.CaptureFixture[str]) -> None:
    Config("m:app", log_level="debug")
    logging.getLogger("ferrocorn.error").debug("started %s", "ok")
    logging.getLogger("ferrocorn.error").warning("careful")
    logging.getLogger("ferrocorn.access").info('1.2.3.4:5 - "GET / HTTP/1.1" 200')
    captured = capsys.readouterr()
    # capsys is not a TTY: no colour codes.
    assert captured.err == "DEBUG:    started ok\nWARNING:  careful\n"
    assert captured.out == 'INFO:     1.2.3.4:5 - "GET / HTTP/1.1" 200\n'


def test_access_log_off_and_log_level(capsys: pytest.CaptureFixture[str]) -> None:
    Config("m:app", access_log=False, log_level="warning")
    access = logging.getLogger("ferrocorn.access")
    assert not access.isEnabledFor(logging.CRITICAL)
    access.critical("never shown")
    error = logging.getLogger("ferrocorn.error")
    assert not error.isEnabledFor(logging.INFO)
    assert error.isEnabledFor(logging.WARNING)
    assert capsys.readouterr().out == ""


def test_log_config_files(tmp_path: Any) -> None:
    log_file = tmp_path / "server.log"
    dict_config = {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(log_file)}},
        "loggers": {"ferrocorn.error": {"handlers": ["file"], "level": "INFO"}},
    }
    path = tmp_path / "log.json"
    path.write_text(json.dumps(dict_config))
    Config("m:app", log_config=str(path), log_level=None)
    logging.getLogger("ferrocorn.error").info("to the file")
    for handler in logging.getLogger("ferrocorn.error").handlers:
        handler.close()
    assert log_file.read_text() == "to the file\n"

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=r'Could not configure logging from ".*bad.json"'):
        Config("m:app", log_config=str(bad))
    with pytest.raises(ConfigError, match="Could not configure logging"):
        Config("m:app", log_config=str(tmp_path / "missing.ini"))


# --------------------------------------------------------------------------- sockets


def _listening(sock: socket.socket) -> bool:
    return bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))


def test_bind_tcp() -> None:
    sock = Config("m:app", host="127.0.0.1", port=0).bind_socket()
    with sock:
        assert sock.family == socket.AF_INET
        assert _listening(sock)
        assert not sock.getblocking()
        assert socket_kind(sock) == "tcp"
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)


def test_bind_tcp_ipv6() -> None:
    try:
        sock = Config("m:app", host="::1", port=0).bind_socket()
    except ConfigError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    with sock:
        assert sock.family == socket.AF_INET6
        assert socket_kind(sock) == "tcp"


def test_bind_address_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as info:
            Config("m:app", host="127.0.0.1", port=port).bind_socket()
    assert str(info.value) == (
        f"Could not bind to 127.0.0.1:{port}: "
        f"[Errno {errno.EADDRINUSE}] {os.strerror(errno.EADDRINUSE)}"
    )


@pytest.mark.parametrize(("permissions", "mode"), [(0o600, 0o600), ("660", 0o660)])
def test_bind_uds_permissions(tmp_path: Any, permissions: Any, mode: int) -> None:
    path = str(tmp_path / "s.sock")
    sock = Config("m:app", uds=path, uds_permissions=permissions).bind_socket()
    with sock:
        assert socket_kind(sock) == "unix"
        assert _listening(sock)
        assert not sock.getblocking()
        assert stat.S_IMODE(os.stat(path).st_mode) == mode
        assert sock.getsockname() == path


def test_bind_uds_replaces_stale_socket_only(tmp_path: Any) -> None:
    path = str(tmp_path / "s.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # the file stays behind, as after a crash
    Config("m:app", uds=path).bind_socket().close()

    os.unlink(path)
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(path)
        live.listen()
        with pytest.raises(ConfigError, match="another server is listening"):
            Config("m:app", uds=path).bind_socket()
        assert os.path.exists(path)

    regular = tmp_path / "data.txt"
    regular.write_text("keep me")
    with pytest.raises(ConfigError, match=r"Could not bind to unix:.*data.txt: .*not a socket"):
        Config("m:app", uds=str(regular)).bind_socket()
    assert regular.read_text() == "keep me"


def test_socket_from_fd(tmp_path: Any) -> None:
    with socket.socket() as inherited:
        inherited.bind(("127.0.0.1", 0))  # bound but not listening: bind_socket listens
        sock = Config("m:app", fd=inherited.fileno()).bind_socket()
        with sock:
            assert sock.fileno() != inherited.fileno()
            assert sock.family == socket.AF_INET
            assert sock.getsockname() == inherited.getsockname()
            assert _listening(sock)
            assert socket_kind(sock) == "tcp"

    with socket.socket(socket.AF_UNIX) as inherited:
        inherited.bind(str(tmp_path / "fd.sock"))
        inherited.listen()
        with Config("m:app", fd=inherited.fileno()).bind_socket() as sock:
            assert socket_kind(sock) == "unix"

    with open(tmp_path / "file", "w") as not_a_socket:
        fd = not_a_socket.fileno()
        with pytest.raises(ConfigError, match=rf"Could not use file descriptor {fd}: "):
            Config("m:app", fd=fd).bind_socket()


def _nonblocking(fd: int) -> bool:
    import fcntl

    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK)


def test_socket_from_fd_never_makes_a_shared_listener_blocking(monkeypatch: Any) -> None:
    """O_NONBLOCK is shared by every process holding the listener: a worker starting up must
    not clear it, even until its own setblocking(False), or a sibling's accept() blocks its
    I/O thread (PyPy's socket constructor clears it unless a default timeout says otherwise).
    Looked at right after each socket object is made over the inherited descriptor."""
    import ferrocorn.config as config_module

    seen = []
    real_fromfd, real_socket = socket.fromfd, socket.socket

    def fromfd(fd: int, *args: Any) -> socket.socket:
        sock = real_fromfd(fd, *args)
        seen.append(("fromfd", _nonblocking(fd)))
        return sock

    class ProbeSocket(real_socket):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if kwargs.get("fileno") is not None:
                seen.append(("socket(fileno=)", _nonblocking(kwargs["fileno"])))

    monkeypatch.setattr(config_module.socket, "fromfd", fromfd)
    monkeypatch.setattr(config_module.socket, "socket", ProbeSocket)
    with real_socket() as inherited:
        inherited.bind(("127.0.0.1", 0))
        inherited.listen()
        inherited.setblocking(False)
        with Config("m:app", fd=inherited.fileno()).bind_socket() as sock:
            assert _nonblocking(sock.fileno())
    assert seen == [("socket(fileno=)", True), ("fromfd", True)]
    assert socket.getdefaulttimeout() is None  # restored


# --------------------------------------------------------------------------- CLI


class _FakeServer:
    def __init__(self) -> None:
        self.configs: list[Config] = []
        self.exit_code = 0

    def run_config(self, config: Config) -> int:
        self.configs.append(config)
        return self.exit_code


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> _FakeServer:
    fake = _FakeServer()
    try:
        server = importlib.import_module("ferrocorn.server")
    except ImportError:  # not written (or not importable) yet: a throwaway module
        server = types.ModuleType("ferrocorn.server")
        monkeypatch.setitem(sys.modules, "ferrocorn.server", server)
    monkeypatch.setattr(server, "run_config", fake.run_config, raising=False)
    return fake


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        return CliRunner()  # click >= 8.2 always keeps stderr apart


def test_cli_reads_environment(fake_server: _FakeServer) -> None:
    env = {
        "FERROCORN_APP": "pkg.mod:app",
        "FERROCORN_HOST": "0.0.0.0",
        "FERROCORN_PORT": "9001",
        "FERROCORN_ACCESS_LOG": "false",
        "FERROCORN_FACTORY": "true",
        "FERROCORN_SERVER_HEADER": "0",
        "FERROCORN_HEADER": "X-A:1 X-B:2",
        "FERROCORN_TIMEOUT_GRACEFUL_SHUTDOWN": "none",
        "FERROCORN_LOG_LEVEL": "debug",
        "FERROCORN_LOOP": "asyncio",
        "FERROCORN_UDS_PERMISSIONS": "640",
        "FERROCORN_RUNTIME_THREADS": "3",
        "FERROCORN_LIMIT_CONCURRENCY": "10",
        "FERROCORN_LIMIT_REQUEST_BODY": "2048",
        "FERROCORN_LIMIT_REQUEST_LINE": "0",
        "FERROCORN_TIMEOUT_REQUEST_BODY": "none",
    }
    result = _runner().invoke(cli.main, [], env=env)
    assert result.exit_code == 0, result.output
    (config,) = fake_server.configs
    assert config.app == "pkg.mod:app"
    assert (config.host, config.port) == ("0.0.0.0", 9001)
    assert config.access_log is False
    assert config.factory is True
    assert config.server_header is False
    assert config.date_header is True
    assert config.encoded_headers == [(b"x-a", b"1"), (b"x-b", b"2")]
    assert config.timeout_graceful_shutdown is None
    assert config.log_level == "debug"
    assert config.loop == "asyncio"
    assert config.uds_permissions == 0o640
    assert config.runtime_threads == 3
    assert config.limit_concurrency == 10
    assert config.limit_request_body == 2048
    assert config.limit_request_line == 0
    assert config.timeout_request_body is None


def test_cli_defaults_and_flags_beat_environment(fake_server: _FakeServer) -> None:
    result = _runner().invoke(
        cli.main,
        ["m:app", "--port", "9002", "--header", "X-A: 1", "--no-date-header"],
        env={"FERROCORN_PORT": "9001"},
    )
    assert result.exit_code == 0, result.output
    (config,) = fake_server.configs
    assert config.port == 9002
    assert config.encoded_headers == [(b"x-a", b"1")]
    assert config.date_header is False
    reference = Config("m:app")
    for name in (
        "host",
        "backlog",
        "lifespan",
        "interface",
        "timeout_graceful_shutdown",
        "timeout_keep_alive",
        "max_header_size",
        "body_preread_limit",
        "limit_request_body",
        "limit_request_line",
        "timeout_request_body",
        "app_dir",
    ):
        assert getattr(config, name) == getattr(reference, name), name


def test_cli_returns_server_exit_code(fake_server: _FakeServer) -> None:
    fake_server.exit_code = 3
    assert _runner().invoke(cli.main, ["m:app"]).exit_code == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--header", "NoColon"], "Error: Invalid header 'NoColon': expected \"Name:Value\".\n"),
        (["--uds-permissions", "99"], "Error: Invalid uds_permissions '99': expected octal"),
    ],
)
def test_cli_config_error(fake_server: _FakeServer, args: list[str], message: str) -> None:
    result = _runner().invoke(cli.main, ["m:app", *args])
    assert result.exit_code == 1
    assert result.stderr.startswith(message)
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.output
    assert fake_server.configs == []


def test_cli_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "version", lambda name: "1.2.3")
    result = _runner().invoke(cli.main, ["--version"])
    assert result.exit_code == 0
    assert result.output == (
        f"ferrocorn 1.2.3 ({platform.python_implementation()} "
        f"{platform.python_version()}) on {platform.system()}\n"
    )

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    extension = types.ModuleType("ferrocorn._ferrocorn")
    extension.__version__ = "0.9.9"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ferrocorn._ferrocorn", extension)
    result = _runner().invoke(cli.main, ["--version"])
    assert result.output.startswith("ferrocorn 0.9.9 (")


def test_cli_help_shows_sections_and_env_vars() -> None:
    result = _runner().invoke(cli.main, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    for section in ("Binding options:", "Logging options:", "Other options:"):
        assert section in result.output
    assert "FERROCORN_TIMEOUT_GRACEFUL_SHUTDOWN" in result.output
    assert "FERROCORN_HEADER" in result.output
    assert "FERROCORN_LIMIT_REQUEST_BODY" in result.output
