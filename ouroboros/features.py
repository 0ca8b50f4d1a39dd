"""The features that plug into the run, in one place: each folder declares its journal records
(they register their kinds as they are defined), its part of the run's state (`fold.Part`), the
events its records make and its entries of `status.json` (its `records.py`), and what people are
shown of it (its `view.py`, a `SHOWN`). What the run calls it at is built by the wiring
(`run.session.Feature`).

Named here, not imported (`ground/plugins.py`): the package's `__init__` imports this module, so
every reader of a journal knows every kind (the records are imported when the first record is
read or a run's state made) and `tail`, `status` and `report` show every feature (the views are
imported when the first is shown); a command imports what it needs, and `import ouroboros` none
of it. The MCP client's SDK, an optional extra, is loaded by neither. The loops and the plan are
the core's, not features: the policy decides on them every step, and the context view carries
the plan over."""

from __future__ import annotations

from ouroboros.ground import plugins

FEATURES = ("operator", "progress", "checkpoints", "deadends", "mcp", "server")
"""By their folders, in the order of `status`'s rows and the report's sections."""
plugins.RECORDS.extend(f"ouroboros.{feature}.records" for feature in FEATURES)
plugins.VIEWS.extend(f"ouroboros.{feature}.view" for feature in FEATURES)
