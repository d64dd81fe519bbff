"""Framework-neutral core: graph model, memory simulator, lower bounds, baseline orders.

Imports only numpy and networkx (lazily), never TVM.
"""

from .bounds import LowerBound, lower_bound, lower_bound_details, must_live_bounds
from .errors import (BudgetError, GraphError, InputFileError, MemschedError, OrderError,
                     UnsupportedError)
from .generators import cell_network, coral_dag, example_graph, layered_dag, random_dag
from .graph import Graph, Op, Tensor, bitset
from .io import (from_networkx, graph_from_dict, graph_to_dict, load_graph, load_order, save_graph,
                 to_networkx)
from .orders import BASELINE_ORDERS, kahn_order, program_order, rpo_order
from .simulate import SimulationResult, lifetimes, peak_bytes, simulate

__all__ = [
    "Graph", "Op", "Tensor", "bitset", "simulate", "SimulationResult", "peak_bytes", "lifetimes",
    "lower_bound", "lower_bound_details", "LowerBound", "must_live_bounds",
    "program_order", "kahn_order", "rpo_order", "BASELINE_ORDERS",
    "graph_from_dict", "graph_to_dict", "load_graph", "save_graph", "load_order",
    "to_networkx", "from_networkx", "random_dag", "layered_dag", "coral_dag", "cell_network", "example_graph",
    "MemschedError", "GraphError", "OrderError", "BudgetError", "UnsupportedError", "InputFileError",
]
