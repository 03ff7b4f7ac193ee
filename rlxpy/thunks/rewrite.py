"""Graph rewrites done once when an executable is made, before any plan: today one, batch
norm folded into the conv before it.

Inference batch norm after a conv is an affine map per output channel, so it folds into the
conv's weights and bias: w' = w * s, b' = (b - mean) * s + beta with s = gamma /
sqrt(var + eps), computed in float64. It folds when the conv's only reader is the batch
norm, and the conv's weight (and bias) and the four statistics are params. The folded node
is named "<conv>+<batch norm>", so explain() shows both; it keeps the batch norm's value
id, and the conv node, now unread, is dropped by the plan.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Tuple

import numpy as np

from ..ir.graph import Node

CONVS = ("Conv", "Conv3d")


def _readers(nodes, outputs) -> Dict[int, int]:
    count: Dict[int, int] = {}
    for n in nodes:
        for v in n.inputs:
            count[v] = count.get(v, 0) + 1
    for v in outputs.values():
        count[v] = count.get(v, 0) + 1
    return count


def fold_batch_norms(nodes, params: Dict[int, np.ndarray], outputs) -> Tuple[tuple, Dict[int, np.ndarray], Dict[str, str]]:
    """(nodes, params, {folded node name: the conv's name}). Params added for the folded
    weights get new value ids after every node (params are sources: order does not matter)."""
    nodes: List[Node] = list(nodes)
    params = dict(params)
    readers = _readers(nodes, outputs)
    folded: Dict[str, str] = {}
    for j, bn in enumerate(list(nodes)):
        if bn.op != "BatchNorm":
            continue
        x, mean, var, gamma, beta = bn.inputs
        conv = nodes[x]
        if conv.op not in CONVS or readers.get(x, 0) != 1:
            continue
        w = conv.inputs[1]
        b = conv.inputs[2] if len(conv.inputs) > 2 else None
        if not all(v in params for v in (mean, var, gamma, beta, w)) or (b is not None and b not in params):
            continue
        s = params[gamma].astype(np.float64) / np.sqrt(params[var].astype(np.float64) + bn.attrs.eps)
        wf = (params[w].astype(np.float64) * s.reshape((-1,) + (1,) * (params[w].ndim - 1))).astype(np.float32)
        b0 = params[b].astype(np.float64) if b is not None else 0.0
        bf = ((b0 - params[mean].astype(np.float64)) * s + params[beta].astype(np.float64)).astype(np.float32)
        name = f"{conv.name}+{bn.name}"
        ids = []
        for tag, arr in (("weight", wf), ("bias", bf)):
            vid = len(nodes)
            nodes.append(Node(f"{name}.{tag}", "Param", None, (), vid, arr.shape))
            params[vid] = arr
            ids.append(vid)
        nodes[j] = Node(name, conv.op, replace(conv.attrs, has_bias=True), (conv.inputs[0], ids[0], ids[1]), j,
                        bn.shape)
        folded[name] = conv.name
    return tuple(nodes), params, folded
