"""Recycled workers (``--limit-max-requests``) are forked from a template process that has
imported ferrocorn (python/ferrocorn/template.py), and with ``--recycle-fork`` the app too,
instead of starting as fresh interpreters; SIGHUP (new code) replaces the template; a template
that imported an app which started a thread at import is never forked from; without
``--recycle-fork`` each forked worker imports the app itself."""

import signal

import pytest

from tests.support.helpers import wait_until
from tests.test_workers import child_pids, get, serving_pids, started_pids, wait_started


def ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


def templates(server):
    return {pid for pid in child_pids(server.pid) if "ferrocorn.template_process" in cmdline(pid)}


def recycle(server, count):
    """Requests on new connections until ``count`` workers have started; their pids."""
    for _ in range(5000):
        if len(started_pids(server)) >= count:
            break
        get(server.port)
    return wait_started(server, count)


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_recycled_workers_are_forked_from_the_template(server_factory, tmp_path):
    gate = tmp_path / "startup-gate"  # while it is missing, lifespan startup waits
    gate.touch()
    flags = ("--workers", "2", "--limit-max-requests", "20", "--recycle-fork")
    env = {"TEST_WORKERS_STARTUP_WAIT": str(gate)}
    server = server_factory("tests.apps.workers:app", *flags, env=env)
    first = wait_started(server, 2)
    assert all(ppid(pid) == server.pid for pid in first)
    assert wait_until(lambda: len(templates(server)) == 1, timeout=20), server.output()
    (template,) = templates(server)

    recycled = recycle(server, 5)[2:]
    for pid in recycled:
        if not gone(pid):
            assert ppid(pid) == template, (pid, cmdline(pid))
    assert any(not gone(pid) for pid in recycled), "every recycled worker is gone already"

    # A replacement forked and still starting when SIGHUP (new code) comes is replaced too:
    # after the roll no worker runs the old code and the old template has left.
    gate.unlink()
    forked = children_of(template)
    assert wait_until(lambda: (get(server.port), children_of(template) - forked)[1], timeout=20)
    before = set(child_pids(server.pid)) | children_of(template)
    server.proc.send_signal(signal.SIGHUP)
    assert server.wait_for_output(r"Received SIGHUP", timeout=10)
    gate.touch()
    assert server.wait_for_output(r"All workers replaced", timeout=40), server.output()
    assert wait_until(lambda: all(gone(pid) for pid in before), timeout=40), server.output()
    assert len(templates(server)) == 1 and templates(server) != {template}
    assert len(serving_pids(server.port, 2)) == 2

    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()
    assert all(gone(pid) for pid in templates(server) | set(started_pids(server)))


def children_of(pid):
    return {child for child in child_pids(pid) if not gone(child)}


def test_an_app_that_starts_a_thread_at_import_is_not_forked_from(server_factory):
    flags = ("--workers", "2", "--limit-max-requests", "20", "--recycle-fork")
    server = server_factory("tests.apps.thread_at_import:app", *flags)
    wait_started(server, 2)
    assert server.wait_for_output(
        r"Recycled workers start as fresh interpreters: importing the app started a thread",
        timeout=20,
    ), server.output()
    recycled = recycle(server, 4)[2:]
    assert any(ppid(pid) == server.pid for pid in recycled if not gone(pid)), server.output()
    assert not templates(server)
    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()


def imports(marker):
    """Pids of the processes that imported tests.apps.workers, in order."""
    if not marker.exists():
        return []
    return [int(line.split()[1]) for line in marker.read_text().split("\n") if line]


@pytest.mark.parametrize("preload", [False, True], ids=["default", "recycle-fork"])
def test_who_imports_the_app(server_factory, tmp_path, preload):
    marker = tmp_path / "imports"
    flags = ("--workers", "2", "--limit-max-requests", "20") + (
        ("--recycle-fork",) if preload else ()
    )
    server = server_factory(
        "tests.apps.workers:app", *flags, env={"TEST_WORKERS_IMPORT_MARKER": str(marker)}
    )
    wait_started(server, 2)
    assert wait_until(lambda: len(templates(server)) == 1, timeout=20), server.output()
    (template,) = templates(server)
    recycled = recycle(server, 5)[2:]
    forked = [pid for pid in recycled if not gone(pid) and ppid(pid) == template]
    assert forked, (recycled, server.output())
    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()
    imported = imports(marker)
    if preload:
        # Imported once by the template; its forks have it already.
        assert template in imported
        assert not set(forked) & set(imported), (forked, imported)
    else:
        # The template never imports the app; every forked worker imports it itself.
        assert template not in imported
        assert set(forked) <= set(imported), (forked, imported)


def test_an_app_that_starts_a_thread_at_import_is_forked_when_not_preloaded(server_factory):
    flags = ("--workers", "2", "--limit-max-requests", "20")
    server = server_factory("tests.apps.thread_at_import:app", *flags)
    wait_started(server, 2)
    assert wait_until(lambda: len(templates(server)) == 1, timeout=20), server.output()
    (template,) = templates(server)
    recycled = recycle(server, 4)[2:]
    assert any(ppid(pid) == template for pid in recycled if not gone(pid)), server.output()
    assert "fresh interpreters" not in server.output()
    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()
