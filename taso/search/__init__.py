"""The search: rewriting a graph by rules, region by region, keeping the cheapest."""

from taso.search.backtrack import BUDGET, optimize_graph, search, searched_parts
from taso.search.regions import CYCLE, closes_cycle, outside_links, splice, windows
from taso.search.rewrite import Declined, apply, instantiate
from taso.search.variants import apply_everywhere, both_directions

__all__ = [
    "BUDGET",
    "CYCLE",
    "Declined",
    "apply",
    "apply_everywhere",
    "both_directions",
    "closes_cycle",
    "instantiate",
    "optimize_graph",
    "outside_links",
    "search",
    "searched_parts",
    "splice",
    "windows",
]
