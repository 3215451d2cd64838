"""How long a test waits before it calls something hung. Never a speed check: every wait ends
as soon as what it waits for happens, so the limit matters only when that never comes, and
it is set for a shared machine loaded many times over (a step of a few seconds there takes
minutes). $CEILING_TEST_HANG_S changes it."""

from __future__ import annotations

import os

HANG_S = float(os.environ.get("CEILING_TEST_HANG_S") or 900)
