"""An app whose import starts a thread (a metrics exporter, a pool's reaper...): the supervisor
must not fork workers from a process that imported it (tests/test_workers_template.py).
Standard library only."""

import threading

_stop = threading.Event()
threading.Thread(target=_stop.wait, name="started-at-import", daemon=True).start()

from tests.apps.workers import app  # noqa: E402,F401 - the same routes (/pid)
