"""Executable: checks inputs, binds dynamic dims, keeps one Plan per concrete input shape,
and runs the plan's thunks as a flat loop over pre-resolved kernel calls."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..config import Config
from ..ir.graph import Graph
from ..ir.shape import fmt_shape
from .arena import ArenaPool
from .in_place import IN_PLACE
from .layout import PLAIN
from .backend import Backend
from .plan import Plan, build_plan
from .records import Thunk
from .rewrite import flush_denormals, fold_batch_norms, fuse_epilogues, fuse_gelu
from .segments import depth_first, image_thunk

# explain() before any run binds each dynamic non-batch dim to the first of these sizes for
# which every shape rule of the graph holds (a 5x5 kernel refuses an image of 1)
REPRESENTATIVE_SIZES = (1, 8, 16, 32, 64, 128, 224, 256, 512, 1024)


CONV_FAMILY = ("Conv", "Conv3d", "ConvTranspose2d", "ConvTranspose3d", "Conv2dBackwardInput", "Conv2dBackwardWeight", "Pool")


def check_algos(graph: Graph, algos) -> Dict[str, str]:
    """Per-node overrides: every name a conv-family node of the graph, every algo a known name."""
    from ..config import CONV_ALGOS
    ops = {n.name: n.op for n in graph.nodes}
    for name, algo in dict(algos).items():
        if name not in ops:
            raise ValueError(f"algos: no node named {name!r} in the graph")
        if ops[name] not in CONV_FAMILY:
            raise ValueError(f"algos: node {name!r} ({ops[name]}) is not a conv-family node; overrides take "
                             f"{', '.join(CONV_FAMILY)}")
        if algo not in CONV_ALGOS:
            raise ValueError(f"algos[{name!r}]={algo!r} is not a known algo; known: {', '.join(CONV_ALGOS)}")
    return dict(algos)


# Below this many bytes an input is copied into the arena even where its reader could read
# it in place: rebinding the call costs about 0.5 us a run, copying 256 bytes 0.2 (a 3x3 conv
# on 1x1x8x8, Zen5: 7.1 us a run in place, 6.8 copied); MobileNetV2's 600 KB input costs 28.
IN_PLACE_MIN_BYTES = 16 << 10


def _readable_in_place(x) -> bool:
    """Whether a kernel reads input x where it is: a C-contiguous, writable, aligned float32
    array is the arena's own numba type (a read-only or misaligned one would need another
    compiled overload) and is read in place from IN_PLACE_MIN_BYTES up; any other is copied
    into the arena."""
    if x.nbytes < IN_PLACE_MIN_BYTES:
        return False
    f = x.flags
    return f.c_contiguous and f.writeable and f.aligned


def _empty(shapes) -> Optional[str]:
    """The first input with a zero-size dim (an empty batch), or None."""
    return next((name for name, shape in shapes.items() if 0 in shape), None)


@dataclass(frozen=True)
class Compiled:
    """A plan with what runs it: its arenas, each with the thunks bound to it."""
    plan: Plan
    pool: ArenaPool


class Executable:
    def __init__(self, graph: Graph, backend: Backend, config: Optional[Config] = None,
                 plan_memory: bool = True, guard_bytes: int = 0, algos: Optional[Dict[str, str]] = None,
                 autotune: Optional[bool] = None):
        """backend: where the kernels run (rlxpy.compile picks it from `device`).
        guard_bytes > 0 (tests, with plan_memory=False): guard zones around every tensor.
        algos: {node name: conv-family algo}, before RLX_CONV_ALGO.
        autotune: time the candidates of every conv-family node per plan (None: RLX_AUTOTUNE)."""
        if not graph.outputs:
            raise ValueError("the graph has no outputs: mark at least one value with g.output(name, value)")
        self.algos = check_algos(graph, algos or {})
        self.config = Config.from_env() if config is None else config
        self.autotune = self.config.autotune if autotune is None else bool(autotune)
        if self.autotune and not hasattr(backend, "tuning_host"):
            raise NotImplementedError(f"autotune: the {backend.name} backend does not tune its kernels")
        self.tuned: Dict[Tuple, Dict[str, object]] = {}     # input shapes -> {node: autotune.Tuned}
        self.plan_memory = plan_memory
        self.guard_bytes = guard_bytes
        self.backend = backend
        # whose reference kernels validate() runs: this backend's, unless a subclass says otherwise
        self.reference_backend = backend
        self.threads = backend.threads(self.config)
        # A snapshot: nodes added to the graph later do not change this executable.
        self._outputs = dict(graph.outputs)
        self._nodes, self._params, folded = fold_batch_norms(graph.nodes, graph.params, self._outputs)
        self._nodes = fuse_gelu(self._nodes, self._params, self._outputs)
        if getattr(backend, "fuses_epilogues", False):
            self._nodes, fused = fuse_epilogues(self._nodes, self._outputs)
            folded.update({name: folded.get(conv, conv) for name, conv in fused.items()})
        # an override of a conv that took its batch norm (or its epilogue) in applies to the new node
        self.algos.update({name: self.algos[conv] for name, conv in folded.items() if conv in self.algos})
        self._input_dims = {name: self._nodes[v].shape for name, v in graph.inputs.items()}
        # PyTorch users lost 5-100x to denormal weights: params are flushed to zero once, here
        self._params, self.denormals_flushed = flush_denormals(self._params, self._nodes)
        self._start()

    def _start(self) -> None:
        """What an executable holds besides its graph and choices: plan caches, their lock, and
        (for a graph without dynamic dims) its one plan. Made anew when unpickled."""
        self._static_shapes = None if self.is_dynamic else {n: tuple(d) for n, d in self._input_dims.items()}
        static_key = None if self._static_shapes is None else tuple(sorted(self._static_shapes.items()))
        # (shapes, plan key) check_inputs answers at once for arrays of exactly these shapes: a
        # static graph's, or a dynamic graph's last run's (fully checked then: 4.5 -> 0.6 us a run)
        self._recent = None if self._static_shapes is None else (self._static_shapes, static_key)
        # plans per input shapes, least recently used first, at most config.plan_cache (RLX_PLAN_CACHE)
        self._compiled: "OrderedDict[Tuple, Compiled]" = OrderedDict()
        self._references: "OrderedDict[Tuple, Compiled]" = OrderedDict()   # validate(): reference plans
        self._lock = threading.Lock()
        self._last: Optional[Compiled] = None
        if not self.is_dynamic:
            self._compile_for(self._static_shapes)

    # -- pickling: the graph as rewritten, params once, config and choices; plans are rebuilt
    _STATE = ("algos", "config", "autotune", "plan_memory", "guard_bytes", "_outputs", "_nodes", "_params",
              "_input_dims", "denormals_flushed")

    def __getstate__(self):
        from .persist import executable_state
        return executable_state(self)

    def __setstate__(self, state):
        from .persist import restore_executable
        restore_executable(self, state)

    def save(self, path) -> None:
        """Store this executable (graph, config, chosen algos; not numba code): rx.load(path)."""
        from .persist import save
        save(self, path)

    @property
    def is_dynamic(self) -> bool:
        return not all(isinstance(d, int) for dims in self._input_dims.values() for d in dims)

    # -- plans ----------------------------------------------------------------------
    def _compile_for(self, shapes: Dict[str, Tuple[int, ...]], remember: bool = True,
                     per_image: bool = True) -> Compiled:
        """The plan (and its arenas) for these input shapes, made once. per_image=False: one
        without segments (segments.py), every thunk one call over the whole batch (validate
        reads every value whole)."""
        recent = self._recent
        known = recent is not None and shapes is recent[0] and per_image
        if known:
            key = recent[1]                  # check_inputs' answer for the recent shapes: its key, made once
        else:
            key = tuple(sorted(shapes.items())) + ((("per_image", False),) if not per_image else ())
        with self._lock:
            hit = self._compiled.get(key)
            if hit is not None:
                self._compiled.move_to_end(key)
        if hit is None:
            algos, tuned = self.algos, self._tune(shapes, key)
            if tuned:
                algos = {**{name: t.algo for name, t in tuned.items()}, **self.algos}
            plan = build_plan(self._nodes, self._params, self._outputs, shapes, self.config, self.backend,
                              self.threads, self.plan_memory, self.guard_bytes, algos, per_image)
            if tuned:
                plan = replace(plan, thunks=tuple(replace(t, why=tuned[t.node].why()) if t.node in tuned else t
                                                  for t in plan.thunks))
            order = depth_first(len(plan.thunks), plan.segments)
            seg_of = {k: seg for seg in plan.segments for k in range(seg.start, seg.stop)}
            call_thunks = [plan.thunks[k] if image < 0 else
                           image_thunk(plan.thunks[k], image, seg_of[k], plan.shapes, images)
                           for k, image, images in order]
            binders = [_bind_nothing if t.algo == IN_PLACE else self.backend.binder(t) for t in call_thunks]
            prepares = [(fn, t) for t in plan.thunks
                        if t.algo != IN_PLACE and (fn := self.backend.prepare(t)) is not None]
            direct = [(name, i, fn) for name, (i, role) in plan.sole_outputs.items()
                      if not self.guard_bytes and
                      (fn := self.backend.output_binder(plan.thunks[i], role, plan.outputs[name][1])) is not None]
            feeder = getattr(self.backend, "input_feeder", None)
            feeds = [(name, i, fn) for name, (i, role) in plan.sole_inputs.items()
                     if feeder is not None and not self.guard_bytes
                     and (fn := feeder(plan.thunks[i], role)) is not None]
            pool = ArenaPool(plan, self.backend, binders, prepares, direct, [k for k, _, _ in order], call_thunks,
                             feeds)
            with self._lock:
                hit = self._compiled.setdefault(key, Compiled(plan, pool))
                self._evict(self._compiled)
        if remember:
            self._last = hit
            if per_image and not known and self._static_shapes is None:
                self._recent = (shapes, key)     # a dynamic graph's shapes, remembered once their plan exists
        return hit

    def _evict(self, plans: "OrderedDict") -> None:
        """Least recently used plans beyond RLX_PLAN_CACHE go, with their arenas (freed once
        no run holds them) and their autotuning record. The caller holds the lock."""
        while len(plans) > self.config.plan_cache:
            key, _ = plans.popitem(last=False)
            if plans is self._compiled:
                self.tuned.pop(key, None)

    def held_bytes(self) -> int:
        """Bytes of the arenas this executable keeps for reuse, over every cached plan."""
        with self._lock:
            pools = [c.pool for c in list(self._compiled.values()) + list(self._references.values())]
        return sum(p.plan.arena_bytes * len(p.idle()) for p in pools)

    def _tune(self, shapes, key) -> Dict[str, object]:
        """Autotuned algos for these shapes ({} when autotuning is off, or the user forced
        every kernel with RLX_CONV_ALGO or RLX_FAST_CONV=0)."""
        if not self.autotune or self.config.conv_algo != "auto" or not self.config.fast_conv:
            return {}
        from .autotune import autotune
        tuned = autotune(self, shapes, skip=set(self.algos))
        with self._lock:
            self.tuned[key] = tuned
        return tuned

    def plan(self, input_shapes: Optional[Dict[str, Tuple[int, ...]]] = None) -> Plan:
        """The plan for these input shapes; default: the last one run, else (a graph with
        dynamic dims never run) a representative one (see representative_shapes)."""
        if input_shapes is not None:
            return self._compile_for({k: tuple(v) for k, v in input_shapes.items()}).plan
        if self._last is not None:
            return self._last.plan
        return self._compile_for(self.representative_shapes(), remember=False).plan

    def representative_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """Dynamic batch dims bound to 1, other dynamic dims to the smallest of
        REPRESENTATIVE_SIZES for which the whole graph's shapes are valid."""
        from .plan import infer_concrete, needed_nodes
        names = sorted({d for dims in self._input_dims.values() for d in dims if isinstance(d, str)})
        order = needed_nodes(self._nodes, self._outputs.values())
        error = None
        for size in REPRESENTATIVE_SIZES:
            binding = {d: (1 if d == "N" else size) for d in names}
            shapes = {n: tuple(binding.get(d, d) for d in dims) for n, dims in self._input_dims.items()}
            try:
                infer_concrete(self._nodes, self._params, shapes, order)
                return shapes
            except ValueError as e:
                error = e
        raise ValueError(f"no representative binding of the dynamic dims {names} up to "
                         f"{REPRESENTATIVE_SIZES[-1]} is valid for this graph; pass input_shapes "
                         f"(last error: {error})")

    @property
    def thunks(self) -> Tuple[Thunk, ...]:
        return self.plan().thunks

    def explain(self, input_shapes=None) -> str:
        from .explain import explain_plan
        if input_shapes is not None:
            label = "plan for the given input shapes"
        elif self._last is not None:
            label = "plan of the last run" if self.is_dynamic else "plan"
        else:
            label = "representative plan (dynamic dims bound by explain(); no run yet)"
        plan = self.plan(input_shapes)
        inputs = ", ".join(f"{n} {fmt_shape(s)}" for n, (_, s) in plan.inputs.items())
        text = f"{label}: {inputs}\n" + explain_plan(plan, self._nodes)
        if self.denormals_flushed:
            text += (f"\nparams: {sum(self.denormals_flushed.values())} denormal values flushed to zero when bound ("
                     + ", ".join(f"{name}: {n}" for name, n in self.denormals_flushed.items()) + ")")
        return text

    # -- running --------------------------------------------------------------------
    def check_inputs(self, inputs) -> Dict[str, Tuple[int, ...]]:
        """Every check a run needs, done before any kernel runs: names, types, dtypes, ranks,
        static dims and consistent dynamic dims. Returns the concrete input shapes."""
        recent = self._recent
        if recent is not None and type(inputs) is dict and len(inputs) == len(recent[0]):
            # the common case, checked whole: the right names, float32 arrays of the declared
            # shapes, or of the shapes the last run's full check accepted
            known = recent[0]
            for name, a in inputs.items():    # a loop, not all(<generator>): 0.2 us less a run
                if type(a) is not np.ndarray or a.dtype != np.float32 or a.shape != known.get(name):
                    break                     # the full check below says what is wrong
            else:
                return known
        if not isinstance(inputs, Mapping):
            raise TypeError(f"run() takes a dict of input name -> array, got {type(inputs).__name__}")
        expected = list(self._input_dims)
        extra = [k for k in inputs if k not in self._input_dims]
        if extra:
            raise ValueError(f"unknown input {extra[0]!r}; this graph's inputs are {expected}")
        missing = [k for k in expected if k not in inputs]
        if missing:
            raise ValueError(f"missing input {missing[0]!r}; this graph's inputs are {expected}")
        bound: Dict[str, Tuple[int, str]] = {}
        shapes = {}
        for name, dims in self._input_dims.items():
            shape = self.array_shape(name, inputs[name])
            if len(shape) != len(dims):
                raise ValueError(f"input {name!r}: expected rank {len(dims)} {fmt_shape(dims)}, "
                                 f"got shape {shape}")
            for i, (d, actual) in enumerate(zip(dims, shape)):
                if isinstance(d, int):
                    if actual != d:
                        raise ValueError(f"input {name!r}: dim {i} must be {d} {fmt_shape(dims)}, "
                                         f"got shape {shape}")
                    continue
                if actual < 0:
                    raise ValueError(f"input {name!r}: dynamic dim {i} ({d}) must be >= 0, got shape {shape}")
                prev = bound.setdefault(d, (actual, name))
                if prev[0] != actual:
                    raise ValueError(f"input {name!r}: dim {i} ({d}) is {actual}, but input {prev[1]!r} "
                                     f"bound {d} to {prev[0]}")
            shapes[name] = shape
        return shapes

    def array_shape(self, name: str, arr) -> Tuple[int, ...]:
        """The shape of an acceptable input array; TypeError for anything else."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"input {name!r}: expected a numpy array, got {type(arr).__name__}")
        if arr.dtype != np.float32:
            raise TypeError(f"input {name!r}: dtype must be float32, got {arr.dtype}")
        return tuple(int(d) for d in arr.shape)

    def run(self, inputs) -> Dict[str, np.ndarray]:
        """Outputs are fresh float32 arrays; a failed run leaves the executable usable."""
        compiled, empty = self._start_run(inputs)
        if compiled is None:
            return empty
        self.backend.threads(self.config)   # numba's pool size is per calling thread
        b = self.backend
        bound = compiled.pool.acquire()
        try:
            calls, out, fed = bound.calls, {}, set()
            feeds = compiled.pool.input_feeds
            if bound.direct or feeds:
                calls = list(calls)
            for name, i, make in bound.direct:     # these thunks write straight into the arrays returned
                out[name], fn = make()
                calls[i] = (fn, calls[i][1])
            for name, i, feed in feeds:            # and these read an input where the caller holds it
                x = inputs[name]
                fn = feed(calls[i][0], x.reshape(-1)) if _readable_in_place(x) else None
                if fn is not None:
                    calls[i] = (fn, calls[i][1])
                    fed.add(name)
            self._copy_inputs(bound, inputs, fed)
            if self.config.profile:
                self._launch_profiled(calls, compiled.plan)
            else:
                self._launch_each(calls)
            for name, view in bound.outputs:
                if name not in out:
                    out[name] = b.copy_out(view)
            return out
        finally:
            compiled.pool.release(bound)

    def _start_run(self, inputs):
        """What every device's run does before any kernel: the input checks, then (compiled
        plan, None) after RLX_VALIDATE's check, or (None, the empty outputs) for an empty batch."""
        shapes = self.check_inputs(inputs)
        if _empty(shapes):
            return None, self._empty_run(shapes)
        compiled = self._compile_for(shapes)
        if self.config.validate:
            self._raise_if_invalid(inputs)
        return compiled, None

    @staticmethod
    def _nonempty(shapes, what: str):
        """profile() and validate() time and check kernels: an empty batch runs none."""
        name = _empty(shapes)
        if name:
            raise ValueError(f"{what}: input {name!r} has shape {shapes[name]}: an empty batch runs no kernel to "
                             f"{what}")
        return shapes

    def _empty_run(self, shapes) -> Dict[str, np.ndarray]:
        """A dynamic dim bound to 0 (an empty batch, as Dask's meta probe sends): no kernel
        runs; the outputs are empty arrays of the shapes the graph's shape rules give, as
        PyTorch returns. A rule that can't take the empty size says so, naming its node."""
        from .plan import infer_concrete, needed_nodes
        order = needed_nodes(self._nodes, self._outputs.values())
        concrete = infer_concrete(self._nodes, self._params, shapes, order)
        return {name: np.zeros(concrete[v], np.float32) for name, v in self._outputs.items()}

    def _copy_inputs(self, bound, inputs, skip=()) -> None:
        b = self.backend
        for (name, view), layout in zip(bound.inputs, bound.input_layouts):
            if name in skip:
                continue
            if layout == PLAIN:
                b.copy_into(view, inputs[name])
            else:
                b.copy_into_layout(view, inputs[name], layout)

    # hooks a device's executable overrides: a section its launches share, waiting for them, and a copy to the host
    def _shared(self):
        return nullcontext()

    def _sync(self) -> None:
        pass

    def _to_host(self, view) -> np.ndarray:
        return np.array(view)

    def _launch_profiled(self, calls, plan) -> None:
        """RLX_PROFILE=1: each thunk timed and printed to stderr as it finishes."""
        from .profile import ProfileLine
        line = ProfileLine(plan, self._nodes, self._sync)
        self._launch_each([(line.wrap(fn, th), th) for fn, th in calls])

    # -- seeing and checking ----------------------------------------------------------------
    def profile(self, inputs, repeat: int = 10):
        """Every thunk timed: the median over `repeat` runs after a warm-up run (which
        compiles the kernels and makes the arena). Returns a rlxpy.thunks.profile.Profile."""
        from .profile import Profile, time_thunks
        if not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"profile: repeat must be a positive integer, got {repeat!r}")
        compiled = self._compile_for(self._nonempty(self.check_inputs(inputs), "profile"))
        self.run(inputs)
        with self._shared():
            bound = compiled.pool.acquire()
        try:
            with self._shared():
                self._copy_inputs(bound, inputs)
                seconds = time_thunks(bound.calls, repeat, self._sync)
        finally:
            compiled.pool.release(bound)
        per_thunk = [0.0] * len(compiled.plan.thunks)      # a segment's thunk: its images' calls summed
        for k, s in zip(compiled.pool.order, seconds):
            per_thunk[k] += s
        return Profile.of(compiled.plan, self._nodes, per_thunk, repeat)

    def validate(self, inputs, tolerances: Optional[Dict[str, float]] = None):
        """Every thunk's kernel against its record's reference kernel on the same inputs (the
        fast path's upstream values). Returns a rlxpy.thunks.validate.Report: per output the
        max absolute and relative error and the tolerance; report.ok, report.first_failure.
        tolerances: {algo: bound on max_rel} over the defaults (rlxpy.thunks.validate.TOLERANCE)."""
        from .validate import Report, Validation
        shapes = self._nonempty(self.check_inputs(inputs), "validate")
        # the plan without segments: each value whole after its thunk, to compare whole
        compiled = self._compile_for(shapes, remember=False, per_image=False)
        ref = self._reference_for(shapes)
        with self._shared():
            bound = compiled.pool.acquire()
        ref_bound = ref.pool.acquire()
        try:
            with self._shared():
                self._copy_inputs(bound, inputs)
                bounds = {**getattr(self.backend, "tolerances", {}), **(tolerances or {})}
                rows = Validation(self, compiled.plan, bound, ref.plan, ref_bound, bounds).run()
        finally:
            ref.pool.release(ref_bound)
            compiled.pool.release(bound)
        inputs_text = ", ".join(f"{n} {fmt_shape(s)}" for n, s in shapes.items())
        return Report(rows, inputs_text)

    def _reference_for(self, shapes) -> Compiled:
        """The plan of every record on its reference kernel (RLX_FAST_CONV=0) for these input
        shapes, on the reference backend, with its arenas: made once per shape."""
        key = tuple(sorted(shapes.items()))
        with self._lock:
            hit = self._references.get(key)
        if hit is None:
            rb = self.reference_backend
            config = self.config.replace(fast_conv=False, conv_algo="auto", validate=False, profile=False)
            plan = build_plan(self._nodes, self._params, self._outputs, shapes, config, rb,
                              rb.threads(config), True, 0, {})
            pool = ArenaPool(plan, rb, [rb.binder(t) for t in plan.thunks],
                             [(fn, t) for t in plan.thunks if (fn := rb.prepare(t)) is not None])
            with self._lock:
                hit = self._references.setdefault(key, Compiled(plan, pool))
                self._evict(self._references)
        return hit

    def _raise_if_invalid(self, inputs) -> None:
        """RLX_VALIDATE=1: a run validates first and stops at the first node over tolerance."""
        report = self.validate(inputs)
        if not report.ok:
            bad = report.failures()[0]
            raise RuntimeError(f"RLX_VALIDATE: node {bad['node']!r} ({bad['op']}, algo {bad['algo']}) differs "
                               f"from its reference kernel ({bad['reference']}): max abs error "
                               f"{bad['max_abs']:.3g}, relative {bad['max_rel']:.3g} > tolerance {bad['tol']:.0e}")

    @staticmethod
    def _launch_each(calls):
        """The bound calls in order; a failure names the node, its record type and its kernel."""
        for fn, th in calls:
            try:
                fn()
            except Exception as e:
                raise RuntimeError(f"{th.node} ({type(th.record).__name__}, algo {th.algo}) failed: {e}") from e

    def guard_violations(self) -> List[Tuple[int, int]]:
        """Tests (guard_bytes > 0): (offset, bytes) of every guard zone that no longer holds
        GUARD_VALUE, in every idle arena of every plan."""
        from .arena import GUARD_VALUE
        bad = []
        for compiled in list(self._compiled.values()):
            for bound in compiled.pool.idle():
                for off, n in compiled.plan.guards:
                    zone = np.asarray(self.backend.copy_out(self.backend.view(bound.arena, off, (n // 4,))))
                    if not (zone == np.float32(GUARD_VALUE)).all():
                        bad.append((off, n))
        return bad


def _nothing() -> None:
    """An in-place thunk's call (in_place.py): its output's bytes are already written."""


def _bind_nothing(arena):
    return _nothing
