"""Graph rewrites done once when an executable is made, before any plan: batch norm folded
into the conv before it, a conv's residual add and activation fused into its store, and
GELU written out as x * (1 + erf(x / sqrt 2)) * 0.5 (ONNX before opset 20) taken back to
one gelu node.

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

from ..ir import tensor_ops as T
from ..ir.graph import Node

CONVS = ("Conv", "Conv3d")


def _live(nodes, outputs) -> set:
    """The values the outputs depend on (nodes a rewrite left unread are not among them)."""
    live, todo = set(), list(outputs.values())
    while todo:
        v = todo.pop()
        if v is not None and v not in live:
            live.add(v)
            todo.extend(nodes[v].inputs)
    return live


def _reads(nodes, outputs) -> Tuple[Dict[int, int], Dict[int, int]]:
    """(readers, consumer) over the live nodes: how many of them (and the outputs) read each
    value, and the index of one that does. A node an earlier rewrite covered (a GELU's div,
    now unread) does not count, so the conv before it may still fuse."""
    live = _live(nodes, outputs)
    count: Dict[int, int] = {}
    consumer: Dict[int, int] = {}
    for k, n in enumerate(nodes):
        if n.output not in live:
            continue
        for v in n.inputs:
            count[v] = count.get(v, 0) + 1
            consumer[v] = k
    for v in outputs.values():
        count[v] = count.get(v, 0) + 1
    return count, consumer


def _sole_reader_of(nodes: list, outputs):
    """sole_reader(v): the node of `nodes` (as it is when asked) that alone reads value v,
    where v is no graph output; else None."""
    readers, consumer = _reads(nodes, outputs)
    outs = set(outputs.values())
    return lambda v: nodes[consumer[v]] if readers.get(v) == 1 and v in consumer and v not in outs else None


def fold_batch_norms(nodes, params: Dict[int, np.ndarray], outputs) -> Tuple[tuple, Dict[int, np.ndarray], Dict[str, str]]:
    """(nodes, params, {folded node name: the conv's name}). Params added for the folded
    weights get new value ids after every node (params are sources: order does not matter)."""
    nodes: List[Node] = list(nodes)
    params = dict(params)
    readers, _ = _reads(nodes, outputs)
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
    sole_reader = _sole_reader_of(nodes, outputs)
    fused: Dict[str, str] = {}

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


SQRT2 = float(np.float32(np.sqrt(2.0)))


def _scalar(v, params) -> float:
    """The value of a one-element param, else NaN (equal to nothing)."""
    a = params.get(v)
    return float(a.reshape(-1)[0]) if a is not None and a.size == 1 else float("nan")


def fuse_gelu(nodes, params: Dict[int, np.ndarray], outputs) -> tuple:
    """The nodes, where div(x, sqrt 2) -> erf -> add(1) -> mul(x) -> mul(0.5), each step the
    only reader of the one before (constants in either operand order; the two muls in
    either order), became one gelu node on x, named after the nodes it covers. It takes
    the last node's place and value id; the others, now unread, are dropped by the plan.
    (Five passes over the tensor, three of them reorders out of and back into the blocked
    layout, were 2.3 ms of the 1-D CNN's 9 at batch 8; onnxruntime fuses the same pattern.)"""
    nodes = list(nodes)
    sole_reader = _sole_reader_of(nodes, outputs)

    def next_binary(v, fn):
        """The node that alone reads value v if it is Binary `fn`, with v's partner; else None."""
        n = sole_reader(v)
        if n is None or n.op != "Binary" or n.attrs.fn != fn or list(n.inputs).count(v) != 1:
            return None
        return n, n.inputs[1] if n.inputs[0] == v else n.inputs[0]

    for div in list(nodes):
        if div.op != "Binary" or div.attrs.fn != "div" or _scalar(div.inputs[1], params) != SQRT2:
            continue
        x = div.inputs[0]
        erf = sole_reader(div.output)
        if erf is None or erf.op != "Unary" or erf.attrs.fn != "erf":
            continue
        step = next_binary(erf.output, "add")
        if step is None or _scalar(step[1], params) != 1.0:
            continue
        chain, at = [div, erf, step[0]], step[0].output
        muls = {"x": False, "half": False}
        for _ in range(2):
            step = next_binary(at, "mul")
            if step is None:
                break
            if step[1] == x and not muls["x"]:
                muls["x"] = True
            elif _scalar(step[1], params) == 0.5 and not muls["half"]:
                muls["half"] = True
            else:
                break
            chain.append(step[0])
            at = step[0].output
        if not all(muls.values()) or tuple(nodes[at].shape) != tuple(nodes[x].shape):   # scalars broadcast x up
            continue
        nodes[at] = Node("+".join(n.name for n in chain), "Unary", T.UnaryAttrs("gelu", 0.0, 0.0), (x,), at,
                         nodes[at].shape)
    return tuple(nodes)


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
