"""Where verifications and multi-turn environments run: in this process (fleet=none) or on Ray actors (fleet=ray),
behind one interface (`verify(items) -> [(Verdict, error)]`). docs/fleet.md."""

from rlpt.fleet.core import FleetBase, LocalFleet, Ticket, VerifyItem, current, make_fleet, use
from rlpt.fleet.scheduler import CostModel, Item, Scheduler

__all__ = ["CostModel", "FleetBase", "Item", "LocalFleet", "Scheduler", "Ticket", "VerifyItem", "current",
           "make_fleet", "use"]
