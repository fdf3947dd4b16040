"""The socket ownership every raw test client shares: ``close()`` (errors ignored) and use as a
context manager. Subclasses set ``self.sock``."""


class SocketOwner:
    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
