"""The features that plug into the run, in one place: each folder declares its journal records
(they register their kinds as they are defined), its part of the run's state (`fold.Part`), the
lines its records make and its entries of `status.json`. Importing this module loads them; the
package's `__init__` does, so every reader of a journal knows every kind.

Only their records here: cheap to import (the MCP client's SDK, an optional extra, is never
loaded by it). The loops and the plan are the core's: the policy decides on them every step."""

from __future__ import annotations

from ouroboros.checkpoints import records as checkpoints
from ouroboros.mcp import records as mcp
from ouroboros.operator import records as operator

FEATURES = (checkpoints, operator, mcp)
