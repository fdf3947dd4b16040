"""--config FILE: options from a TOML file; the command line and FERROCORN_* override it;
unknown keys and wrong types stop the start-up with one line naming the key."""

import json
import uuid

import httpx
import pytest

from tests.support.helpers import SERVER_PYTHON, ServerProcess, run_ferrocorn

APP = "tests.apps.access_log_app:app"


def write(tmp_path, text, name="ferrocorn.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def serve(*args, env=None):
    """``python -m ferrocorn *args`` (no APP, host or port added), ready."""
    server = ServerProcess([SERVER_PYTHON, "-m", "ferrocorn", *args], env=env)
    try:
        server.wait_ready()
    except BaseException:
        server.kill()
        raise
    return server


def one_line_error(proc, *needles):
    err = [line for line in proc.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    assert proc.returncode == 1, (proc.returncode, err)
    assert len(err) == 1, err
    assert all(needle in err[0] for needle in needles), err
    return err[0]


BASE = (
    """
app = "%s"
host = "127.0.0.1"
port = 0
"""
    % APP
)


def test_file_options_take_effect(tmp_path):
    config = write(
        tmp_path,
        BASE
        + """
log-format = "json"
header = ["X-From-File: 1", "X-Second: two"]
server-header = false
http = 1
timeout-keep-alive = 7
limit-request-body = 10
""",
    )
    marker = uuid.uuid4().hex
    with serve("--config", config) as server:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            response = client.get("/f", params={"m": marker})
            assert response.headers["x-from-file"] == "1"
            assert response.headers["x-second"] == "two"
            assert "server" not in response.headers
            assert client.post("/big", content=b"x" * 11).status_code == 413
        assert server.wait_for_output(marker, timeout=10), server.output()
        assert server.stop() == 0
        lines = [json.loads(line) for line in server.output().splitlines() if line.strip()]
    assert any(marker in r["message"] for r in lines if r["logger"] == "ferrocorn.access")


def test_command_line_overrides_the_file(tmp_path):
    # The file's port is taken by nothing but would be wrong; its app does not exist.
    config = write(
        tmp_path,
        """
app = "no_such_module:app"
host = "127.0.0.1"
port = 1
access-log = false
header = ["X-From-File: 1"]
""",
    )
    marker = uuid.uuid4().hex
    with serve(
        APP, "--config", config, "--port", "0", "--access-log", "--header", "X-Cli: 2"
    ) as server:
        response = httpx.get(server.url + "/c", params={"m": marker}, timeout=10)
        assert response.headers["x-cli"] == "2"
        assert "x-from-file" not in response.headers  # a repeatable option is replaced whole
        assert server.wait_for_output(r'"GET /c\?m=%s HTTP/1.1" 200' % marker, timeout=10), (
            server.output()
        )


def test_environment_overrides_the_file(tmp_path):
    config = write(tmp_path, BASE + 'log-format = "json"\naccess-log = false\n')
    marker = uuid.uuid4().hex
    env = {"FERROCORN_LOG_FORMAT": "text", "FERROCORN_ACCESS_LOG": "true"}
    with serve("--config", config, env=env) as server:
        httpx.get(server.url + "/e", params={"m": marker}, timeout=10)
        assert server.wait_for_output(
            r'INFO:     127\.0\.0\.1:\d+ - "GET /e\?m=%s HTTP/1.1" 200' % marker, timeout=10
        ), server.output()


def test_config_from_the_environment_variable(tmp_path):
    config = write(tmp_path, BASE + 'header = ["X-Env-Config: yes"]\n')
    with serve(env={"FERROCORN_CONFIG": config}) as server:
        response = httpx.get(server.url + "/v", timeout=10)
        assert response.headers["x-env-config"] == "yes"


def test_workers_from_the_file(tmp_path):
    config = write(tmp_path, BASE + 'workers = 2\nlog-format = "json"\n')
    marker = uuid.uuid4().hex
    with serve("--config", config) as server:
        # Both workers up (the supervisor is ready before they are).
        assert server.wait_for_output(r"(?s)(Started worker \[\d+\].*){2}", timeout=20), (
            server.output()
        )
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for _ in range(4):
                assert client.get("/w", params={"m": marker}).status_code == 200
        assert server.wait_for_output(r"(?s)(%s.*){4}" % marker, timeout=10), server.output()
        assert server.stop() == 0
        found = [json.loads(line) for line in server.output().splitlines() if line.strip()]
    assert any("with 2 workers" in r["message"] for r in found), found
    started = [r for r in found if r["message"].startswith("Started server process")]
    assert len(started) == 2, found


def test_unknown_key_is_an_error_naming_it(tmp_path):
    config = write(tmp_path, BASE + "no-such-option = 1\n")
    one_line_error(run_ferrocorn("--config", config), '"no-such-option"', "unknown key")


def test_underscore_key_suggests_the_option_name(tmp_path):
    config = write(tmp_path, BASE + "timeout_keep_alive = 3\n")
    line = one_line_error(run_ferrocorn("--config", config), '"timeout_keep_alive"')
    assert '"timeout-keep-alive"' in line


@pytest.mark.parametrize(
    "entry, key",
    [
        ('port = "8000"', "port"),
        ("port = 8000.5", "port"),
        ("access-log = 1", "access-log"),
        ('access-log = "false"', "access-log"),
        ('header = "X-A: 1"', "header"),
        ("header = [1, 2]", "header"),
        ("timeout-keep-alive = true", "timeout-keep-alive"),
        ('timeout-keep-alive = "soon"', "timeout-keep-alive"),
        ('loop = "nope"', "loop"),
        ("http = 3", "http"),
        ("http = 1.1", "http"),
        ("host = 127", "host"),
        ("ssl-certfile = [1]", "ssl-certfile"),
        ("lifespan = {on = true}", "lifespan"),
    ],
)
def test_wrong_type_is_an_error_naming_the_key(tmp_path, entry, key):
    config = write(tmp_path, 'app = "%s"\n%s\n' % (APP, entry))
    one_line_error(run_ferrocorn("--config", config), 'key "%s"' % key)


def test_a_value_config_rejects_is_its_one_line_error(tmp_path):
    config = write(tmp_path, 'app = "%s"\nport = 70000\n' % APP)
    one_line_error(run_ferrocorn("--config", config), "port", "70000")


def test_invalid_toml_and_missing_file(tmp_path):
    config = write(tmp_path, "port = [\n")
    one_line_error(run_ferrocorn("--config", config), config, "not valid TOML")
    missing = str(tmp_path / "absent.toml")
    one_line_error(run_ferrocorn("--config", missing), missing, "Could not read")


def test_the_config_key_is_not_an_option_of_the_file(tmp_path):
    config = write(tmp_path, BASE + 'config = "other.toml"\n')
    one_line_error(run_ferrocorn("--config", config), '"config"', "unknown key")


def test_every_cli_option_has_a_key_that_reaches_config():
    import inspect

    import click
    from ferrocorn.cli import main
    from ferrocorn.config import Config
    from ferrocorn.config_file import file_keys

    keys = file_keys(main.params)
    config_names = set(inspect.signature(Config.__init__).parameters)
    exposed = [p for p in main.params if p.expose_value]
    assert len(keys) == len(exposed)
    for key, param in keys.items():
        assert "_" not in key, key
        if isinstance(param, click.Option):
            assert "--" + key in param.opts, (key, param.opts)
        name = "headers" if param.name == "header" else param.name
        assert name in config_names, (key, param.name)
