"""pytest configuration for the ferrocorn black-box suite.

Each test module starts its own server(s) through ``start_server`` (see support/helpers.py);
``server_factory`` starts servers that are stopped when the test ends.

Environment:
  FERROCORN_TEST_PYTHON  interpreter that runs the *server* (default: the one running pytest),
                         e.g. ``FERROCORN_TEST_PYTHON=pypy3 python -m pytest tests``.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.helpers import start_server  # noqa: E402

DEFAULT_TIMEOUT = 60


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT))


@pytest.fixture
def server_factory():
    """``server_factory(target, *flags, env=..., pass_fds=...)`` -> started ServerProcess.

    Every server started through it is stopped (SIGTERM, then SIGKILL) after the test."""
    started = []

    def factory(target, *flags, **kwargs):
        server = start_server(target, *flags, **kwargs)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.close()
