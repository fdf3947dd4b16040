"""The Python that runs only under PyPy, where it stands in for work the core does in Rust on
CPython.

Under PyPy every call between the extension and Python, and every object the extension makes or
reads, costs a C-API (cpyext) crossing, while plain Python is JIT-compiled. So there the request
path is Python: the ``http`` scope is unpacked here from one bytearray (``scope.py``),
``receive()`` and ``send()`` build and take apart their messages here (``http.py``), and a
request task is set up only if it must be (``starter.py``, whose ``pypy_starter`` the core calls
once per loop).

Nothing here is imported on CPython: the modules that use it import it only when
``sys.implementation.name == "pypy"``, and the core imports ``starter`` only in its PyPy build.
"""
