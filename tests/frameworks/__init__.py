"""Small apps, one per ASGI framework, that the framework matrix (tests/test_frameworks.py)
runs through the real server.  Every app exposes the same routes (see ``_shared.py``)."""
