"""A crashed worker costs only its own in-flight requests (issue 34): while a killed worker's
replacement starts, the connections the kernel hashes to its slot's socket are accepted by a
live worker the supervisor handed that socket to (python/ferrocorn/slot_handover.py), which
lets go of it once the replacement serves.

The app's lifespan startup waits for a gate file (tests/apps/workers.py), so "during the
replacement's startup" is a state the test holds, not a time it guesses.
"""

import os
import signal

from tests.support.helpers import wait_until
from tests.test_workers import APP, get, serving_pids, started_pids, wait_started

_TCP_LISTEN = "0A"


def listening_sockets(pid, port):
    """How many listening TCP (IPv4) sockets on ``port`` process ``pid`` holds a descriptor of."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == _TCP_LISTEN and int(local.split(":")[1], 16) == port:
                inodes.add(inode)
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            held.add(target)
    return len(held)


def test_new_connections_are_served_while_a_killed_workers_replacement_starts(
    server_factory, tmp_path
):
    gate = tmp_path / "startup-gate"
    gate.touch()
    server = server_factory(APP, "--workers", "2", env={"TEST_WORKERS_STARTUP_WAIT": str(gate)})
    victim, survivor = wait_started(server, 2)
    assert wait_until(lambda: listening_sockets(survivor, server.port) == 1, timeout=10)
    gate.unlink()  # from now on a starting worker waits in its lifespan startup

    os.kill(victim, signal.SIGKILL)
    assert server.wait_for_output(
        rf"Worker \[{victim}\] was killed by signal SIGKILL", timeout=10
    ), server.output()
    assert wait_until(lambda: listening_sockets(survivor, server.port) == 2, timeout=10), (
        "the survivor was not handed the dead slot's socket"
    )
    # 64 new connections (the kernel spreads them over both slots' sockets by their ports):
    # every one is answered, by the survivor, while the replacement has not started serving.
    pids = [int(get(server.port)) for _ in range(64)]
    assert set(pids) == {survivor}
    assert started_pids(server) == [victim, survivor], server.output()

    gate.touch()
    replacement = wait_started(server, 3)[2]
    # Serving again, the slot's own worker takes its socket back from the survivor.
    assert wait_until(lambda: listening_sockets(survivor, server.port) == 1, timeout=10)
    assert serving_pids(server.port, 2) == {survivor, replacement}
    assert server.proc.poll() is None
    assert server.stop(signal.SIGTERM, timeout=30) == 0, server.output()
