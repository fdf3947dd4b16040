"""Resolve ``"package.module:attribute.sub"`` strings to Python objects."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ImportFromStringError", "import_from_string"]


class ImportFromStringError(Exception):
    """The import string is malformed or does not name an existing object.

    ``str(exc)`` is a single line meant for the user; the original exception, when there is
    one, is chained as ``__cause__`` so a caller can still log its traceback.
    """


def _names_target(missing: str | None, module_str: str) -> bool:
    """True when the missing module is the named module or one of its parent packages."""
    if not missing:
        return False
    return missing == module_str or module_str.startswith(missing + ".")


def import_from_string(import_str: str) -> Any:
    module_str, sep, attrs_str = import_str.partition(":")
    # A leading dot would be a relative import, which has no anchor package here.
    if not sep or not module_str or not attrs_str or module_str.startswith("."):
        raise ImportFromStringError(
            f'Import string "{import_str}" must be in format "<module>:<attribute>".'
        )

    try:
        module = importlib.import_module(module_str)
    except ModuleNotFoundError as exc:
        if not _names_target(exc.name, module_str):
            # The named module exists but one of *its* imports failed: telling the user
            # that their module is missing would send them looking in the wrong place.
            raise ImportFromStringError(
                f'Error while importing module "{module_str}": {type(exc).__name__}: {exc}'
            ) from exc
        raise ImportFromStringError(f'Could not import module "{module_str}".') from exc
    except ImportError as exc:
        # e.g. "cannot import name 'x' from 'y'" raised while running the user's module.
        raise ImportFromStringError(
            f'Error while importing module "{module_str}": {type(exc).__name__}: {exc}'
        ) from exc

    instance: Any = module
    try:
        for attr in attrs_str.split("."):
            instance = getattr(instance, attr)
    except AttributeError as exc:
        raise ImportFromStringError(
            f'Attribute "{attrs_str}" not found in module "{module_str}".'
        ) from exc
    return instance
