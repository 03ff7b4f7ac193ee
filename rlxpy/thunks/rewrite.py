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


# activations a conv's epilogue applies (rlxpy.ir.tensor_ops.UNARY, less identity)
EPILOGUE_ACTS = ("relu", "leaky_relu", "clip", "sigmoid", "hardsigmoid", "hardswish", "silu", "gelu", "gelu_tanh",
                 "tanh", "erf")


def fuse_epilogues(nodes, outputs) -> Tuple[tuple, Dict[str, str]]:
    """(nodes, {fused node name: the conv's name}): a forward conv whose only reader is an
    add of a same-shape value (the residual of a ResNet block) and/or an activation (whose
    only reader... the next) becomes one conv node with that epilogue, named after every
    node it covers ("conv+add+relu"). It takes the last covered node's place and value
    id; the nodes it covers, now unread, are dropped by the plan."""
    nodes = list(nodes)
    readers = _readers(nodes, outputs)
    consumer: Dict[int, int] = {}
    for k, n in enumerate(nodes):
        for v in n.inputs:
            consumer[v] = k
    fused: Dict[str, str] = {}

    def sole_reader(v):
        """The node that alone reads value v, where v is no graph output; else None."""
        return nodes[consumer[v]] if readers.get(v) == 1 and v in consumer and v not in outputs.values() else None

    for i, conv in enumerate(list(nodes)):
        if conv.op not in CONVS or conv.attrs.act or conv.attrs.has_residual:
            continue
        names, at, residual, act = [conv.name], i, None, None
        nxt = sole_reader(at)
        if nxt is not None and nxt.op == "Binary" and nxt.attrs.fn == "add":
            other = [v for v in nxt.inputs if v != at]
            if len(other) == 1 and tuple(nodes[other[0]].shape) == tuple(conv.shape):
                residual, at = other[0], nxt.output
                names.append(nxt.name)
                nxt = sole_reader(at)
        if nxt is not None and nxt.op == "Unary" and nxt.attrs.fn in EPILOGUE_ACTS:
            act, at = nxt.attrs, nxt.output
            names.append(nxt.name)
        if len(names) == 1:
            continue
        attrs = replace(conv.attrs, has_residual=residual is not None, act=act.fn if act else "",
                        act_alpha=act.alpha if act else 0.0, act_beta=act.beta if act else 0.0)
        name = "+".join(names)
        nodes[at] = Node(name, conv.op, attrs, conv.inputs + ((residual,) if residual is not None else ()), at,
                         nodes[at].shape)
        fused[name] = conv.name
    return tuple(nodes), fused


def flush_denormals(params: Dict[int, np.ndarray], nodes) -> Tuple[Dict[int, np.ndarray], Dict[str, int]]:
    """Params with their denormal (subnormal) values set to zero, keeping the sign: a kernel
    multiplying by denormals runs at a fraction of its speed on x86 (microcode assists), and
    their contribution is below float32's resolution of any normal output. Returns the new
    params (arrays changed are copies) and {param name: values flushed}."""
    tiny = np.finfo(np.float32).tiny
    out, flushed = dict(params), {}
    for vid, arr in params.items():
        sub = (arr != 0) & (np.abs(arr) < tiny)
        n = int(np.count_nonzero(sub))
        if n:
            arr = arr.copy()
            arr[sub] = np.copysign(np.float32(0), arr[sub])
            out[vid] = arr
            flushed[nodes[vid].name] = n
    return out, flushed
