"""The features that plug into the run, in one place: each folder declares its journal records
(they register their kinds as they are defined), its part of the run's state (`fold.Part`), the
events its records make and its entries of `status.json` (its `records.py`), and what people are
shown of it (its `view.py`, registered here). What the run calls it at is built by the wiring
(`run.session.Feature`). The package's `__init__` imports this module, so every reader of a
journal knows every kind, and `tail`, `status` and `report` show every feature.

Cheap to import: the MCP client's SDK, an optional extra, is never loaded here. The loops and
the plan are the core's, not features: the policy decides on them every step, and the context
view carries the plan over."""

from __future__ import annotations

from ouroboros.checkpoints import records as checkpoints_records
from ouroboros.checkpoints import view as checkpoints
from ouroboros.deadends import records as deadends_records
from ouroboros.deadends import view as deadends
from ouroboros.mcp import records as mcp_records
from ouroboros.mcp import view as mcp
from ouroboros.observe.shown import SHOWN
from ouroboros.operator import records as operator_records
from ouroboros.operator import view as operator
from ouroboros.progress import records as progress_records
from ouroboros.progress import view as progress
from ouroboros.server import records as server_records
from ouroboros.server import view as server

RECORDS = (
    operator_records,
    checkpoints_records,
    deadends_records,
    mcp_records,
    server_records,
    progress_records,
)
"""Their records and parts: imported here, so that every reader of a journal has them."""
FEATURES = (operator, progress, checkpoints, deadends, mcp, server)
"""What people are shown of them, in the order of `status`'s rows and the report's sections."""
SHOWN.extend(feature.SHOWN for feature in FEATURES)
