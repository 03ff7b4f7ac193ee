"""The IR: dims and shapes, one attrs type per op, and the graph builder."""
from .graph import Graph, Node, Value
from .shape import Dim, Shape

__all__ = ["Graph", "Node", "Value", "Dim", "Shape"]
