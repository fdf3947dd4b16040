"""CPU time a worker spends before it serves: a 2-worker supervisor is sent SIGHUP ROUNDS
times (fresh interpreters), or, with ``--limit-max-requests N`` among FLAGS, sent requests
until its workers were recycled ROUNDS times (forked from the template); each new worker's
CPU time (/proc/PID/task/*/schedstat) is read as it logs ``Started worker [pid]`` (an idle worker
spends nothing more meanwhile; a forked one counts from its fork).

usage: python startup_cpu.py PYTHON APP [FLAGS...]   (from the repo root)
"""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

ROUNDS = 5


def cpu_ms(pid):
    """CPU time of all of ``pid``'s threads so far (schedstat: nanoseconds on a CPU)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return round(total / 1e6, 1)


def main():
    python, app, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    # As deployed: the app's package has its bytecode cached (compileall writes it even under
    # PYTHONDONTWRITEBYTECODE), so a worker that imports the app does not compile it.
    package = app.partition(":")[0].split(".")[0]
    if os.path.isdir(package):
        subprocess.run(
            [python, "-m", "compileall", "-q", package], check=True, stdout=subprocess.DEVNULL
        )
    argv = [python, "-m", "ferrocorn", app, "--port", "0", "--workers", "2", "--no-access-log"]
    p = subprocess.Popen(argv + flags, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    samples = []
    seen = []

    first = b""
    while b"running on" not in first:
        first = p.stdout.readline()

    def pump():
        for raw in p.stdout:
            m = re.search(rb"Started worker \[(\d+)\]", raw)
            if m:
                pid = int(m.group(1))
                samples.append(cpu_ms(pid))
                seen.append(pid)

    threading.Thread(target=pump, daemon=True).start()
    while len(seen) < 2:
        time.sleep(0.05)
    if "--limit-max-requests" in flags:
        port = int(re.search(rb"running on http://[\d.]+:(\d+)", first).group(1))
        while len(seen) < 2 + 2 * ROUNDS:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                while sock.recv(65536):
                    pass
    for round_ in range(ROUNDS if "--limit-max-requests" not in flags else 0):
        p.send_signal(signal.SIGHUP)
        while len(seen) < 2 * (round_ + 2):
            time.sleep(0.05)
        time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    p.wait(60)
    samples.sort()
    print(f"{len(samples)} worker start-ups, CPU ms each: {samples}")
    print(f"median {samples[len(samples) // 2]:.0f} ms")


if __name__ == "__main__":
    main()
