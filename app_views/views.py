"""Every view of the app in one table: its name on the view selector -> its render(st, ctx) function.

Adding a view is one module in app_views/ and one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app_views import autoscale, compare, cost, fleet, memory, numbers, promise, roofline, simulator, summary, workloads
from app_views.context import Context

VIEWS: dict[str, Callable[[Any, Context], Any]] = {
    "Summary": summary.render,  # the landing view: text only, so the first number waits for no chart library
    "Memory": memory.render,
    "Roofline": roofline.render,
    "Promise": promise.render,
    "Cost": cost.render,
    "Fleet": fleet.render,
    "Autoscaling": autoscale.render,
    "Compare": compare.render,
    "Simulator": simulator.render,
    "Workloads": workloads.render,
    "All numbers": numbers.render,
}
