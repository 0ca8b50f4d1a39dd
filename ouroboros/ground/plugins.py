"""The features that plug in, by the names of their modules: `ouroboros/features.py` names them
(the package's `__init__` imports it, so any use of the package does), and a layer below the
features imports them by these names when it first needs them: a reader of a journal knows
every feature's kinds and parts (`RECORDS`, imported before the first record is parsed or a
run's state is made), `tail`, `status` and the report show every feature (`VIEWS`), and a
command that needs neither, or `import ouroboros`, pays for none of them. Light: nothing here
imports a feature until asked."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

RECORDS: list[str] = []
"""The modules of the features' records and their parts of the run's state."""
VIEWS: list[str] = []
"""The modules of what the features show (each a `SHOWN`), in the order of `status`'s rows and
the report's sections."""
_imported: set[str] = set()


def imported(names: list[str]) -> list[ModuleType]:
    """The modules named, imported now where they were not yet."""
    _imported.update(names)
    return [import_module(name) for name in names]


def import_all(names: list[str]) -> None:
    """`imported`, at the cost of a look once they all are (it runs for every record read)."""
    if not _imported.issuperset(names):
        imported(names)
