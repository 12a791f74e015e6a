"""The audit of a plan's program: its values, the collective counter and the memory meter.

:class:`PlanAudit` (with :class:`CollectiveRow` and :class:`MemoryRow`) is a frozen value
that prints as a table and saves as JSON (:mod:`milp_parallel.io`); it needs no torch. The
measuring tools need torch and import it when used:

- :func:`comm_counter` makes a ``TorchDispatchMode`` that records every c10d collective
  (functional ones, which DTensor's ``redistribute`` issues too, and the in-place
  ``torch.distributed`` ones) that runs while it is active, forward and backward, with its
  bytes: an all-to-all counts what the rank sends to others, a receive nothing (its sender
  counts it), every other collective its input buffer once per rank.
- :func:`label` names the collectives a piece of the program issues (``layer``, ``kind``);
  outside an active counter it does nothing.
- :class:`MemoryMeter` measures a rank's parameters, gradients and optimizer state from the
  tensors themselves, and the activation peak from the storages of the tensors the autograd
  graph saves (each once, parameters and buffers excluded).
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass, field, fields
from typing import Any, Iterator, Mapping

from ..errors import FormatError, InvalidOptionError
from ..io import Fields, decode, encode, read_document, write_json

__all__ = ["CollectiveRow", "MemoryRow", "PlanAudit", "comm_counter", "label",
           "labelled_module", "labelled_call", "MemoryMeter", "AUDIT_FORMAT"]

AUDIT_FORMAT = "milp_parallel.plan_audit"
AUDIT_FORMAT_VERSION = 1


# ---------------------------------------------------------------------- values
@dataclass(frozen=True)
class CollectiveRow:
    """Bytes one layer's (or transition's) collectives move, predicted and counted.

    Attributes
    ----------
    layer : str
        The layer (a transition is attributed to its consumer, as the cost model does).
    kind : str
        ``"transfer"`` (redistribution into the layer, halos included), ``"sync"`` (gradient
        all-reduce) or what the runtime labelled.
    predicted_bytes, counted_bytes : float
        Summed over the ranks, forward and backward.
    """

    layer: str
    kind: str
    predicted_bytes: float
    counted_bytes: float

    @property
    def rel_error(self) -> float:
        """``|counted - predicted| / predicted`` (0 when both are 0, inf when only the
        prediction is)."""
        if self.predicted_bytes == 0:
            return 0.0 if self.counted_bytes == 0 else float("inf")
        return abs(self.counted_bytes - self.predicted_bytes) / self.predicted_bytes


@dataclass(frozen=True)
class MemoryRow:
    """One rank's memory, predicted by the plan's cost model and measured in the program.

    Attributes
    ----------
    rank : int
    predicted_bytes, measured_bytes : float
        Totals (the sums of the splits).
    predicted, measured : mapping
        ``{"parameters", "gradients", "optimizer", "activations": bytes}``; measured
        activations are the peak of the tensors saved for the backward pass, or of all the
        step allocates (:class:`MemoryMeter`; the runtime's hooks say which).
    peak_by_op : mapping
        The measured activation peak by the op that allocated each storage alive at that
        moment (``mm.default``, ``all_gather_into_tensor.default``, ...); empty for a
        saved-tensor peak.
    """

    rank: int
    predicted_bytes: float
    measured_bytes: float
    predicted: Mapping[str, float] = field(default_factory=dict)
    measured: Mapping[str, float] = field(default_factory=dict)
    peak_by_op: Mapping[str, float] = field(default_factory=dict)

    @property
    def rel_error(self) -> float:
        """``|measured - predicted| / predicted``."""
        if self.predicted_bytes == 0:
            return 0.0 if self.measured_bytes == 0 else float("inf")
        return abs(self.measured_bytes - self.predicted_bytes) / self.predicted_bytes


@dataclass(frozen=True)
class PlanAudit:
    """What one training step of a plan's program did, against what the plan claims.

    Attributes
    ----------
    plan_kind : str
        ``"layerwise"`` or ``"pipeline"``.
    world_size : int
    backend : str
    max_rel_error : float
        The largest relative error (``max |a - b| / max |b|`` per tensor) of the outputs,
        the loss and every parameter's gradient against the single-process run.
    errors : mapping
        That error per compared tensor (``"output"``, ``"loss"``, ``"grad:<name>"``).
    collectives : tuple of CollectiveRow
    memory : tuple of MemoryRow
    step_seconds : tuple of float
        The measured step (forward, loss, backward, optimizer step) per rank: the audited
        step's, or the median of ``verify_plan(timed_steps=...)`` plain steps.
    """

    plan_kind: str
    world_size: int
    backend: str
    max_rel_error: float
    errors: Mapping[str, float]
    collectives: tuple[CollectiveRow, ...]
    memory: tuple[MemoryRow, ...]
    step_seconds: tuple[float, ...]

    @property
    def max_collective_error(self) -> float:
        """The largest :attr:`CollectiveRow.rel_error`."""
        return max((r.rel_error for r in self.collectives), default=0.0)

    @property
    def max_memory_error(self) -> float:
        """The largest :attr:`MemoryRow.rel_error`."""
        return max((r.rel_error for r in self.memory), default=0.0)

    def __str__(self) -> str:
        return format_audit(self)

    # -------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        """JSON-ready data; :meth:`from_dict` gives back an equal audit."""
        out: dict[str, Any] = {"format": AUDIT_FORMAT, "version": AUDIT_FORMAT_VERSION}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("collectives", "memory"):
                v = [{g.name: (dict(getattr(r, g.name)) if isinstance(getattr(r, g.name),
                                                                          Mapping)
                               else getattr(r, g.name)) for g in fields(r)} for r in v]
            elif isinstance(v, Mapping):
                v = dict(v)
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = encode(v)
        return out

    @classmethod
    def from_dict(cls, data: Mapping, *, source: str = "<dict>") -> "PlanAudit":
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        FormatError
            When the data is not a plan-audit document.
        """
        data = read_document(source, AUDIT_FORMAT, AUDIT_FORMAT_VERSION, data=data,
                             what="plan audit")
        names = {f.name for f in fields(cls)}
        Fields(source).keys(data, names | {"format", "version"}, required=names)
        try:
            kw = {n: decode(data[n]) for n in names}
            kw["collectives"] = tuple(CollectiveRow(**r) for r in kw["collectives"])
            kw["memory"] = tuple(MemoryRow(**r) for r in kw["memory"])
            kw["step_seconds"] = tuple(float(x) for x in kw["step_seconds"])
            return cls(**kw)
        except (TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"{source}: malformed plan audit ({type(exc).__name__}: "
                              f"{exc})") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the audit as JSON (``.gz``: compressed)."""
        write_json(path, self.to_dict(), indent=2)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "PlanAudit":
        """Read an audit written by :meth:`save`."""
        return cls.from_dict(read_document(path, AUDIT_FORMAT, AUDIT_FORMAT_VERSION,
                                           what="plan audit"), source=str(path))


def _kib(b: float) -> str:
    return f"{b / 1024:.1f}"


def _pct(x: float) -> str:
    return "inf" if x == float("inf") else f"{100 * x:.1f}%"


def format_audit(a: PlanAudit) -> str:
    """The audit as a readable table."""
    lines = [f"plan audit ({a.plan_kind}, {a.world_size} ranks, {a.backend}): max relative "
             f"error {a.max_rel_error:.2e}",
             "", f"{'layer':<24} {'kind':<10} {'predicted KiB':>14} {'counted KiB':>12} "
             f"{'diff':>7}"]
    for r in a.collectives:
        lines.append(f"{r.layer:<24} {r.kind:<10} {_kib(r.predicted_bytes):>14} "
                     f"{_kib(r.counted_bytes):>12} {_pct(r.rel_error):>7}")
    lines += ["", f"{'rank':>4} {'predicted KiB':>14} {'measured KiB':>13} {'diff':>7}  "
              "measured: params / grads / optimizer / activation peak (KiB)"]
    for m in a.memory:
        split = " / ".join(_kib(m.measured.get(k, 0.0)) for k in
                           ("parameters", "gradients", "optimizer", "activations"))
        lines.append(f"{m.rank:>4} {_kib(m.predicted_bytes):>14} {_kib(m.measured_bytes):>13}"
                     f" {_pct(m.rel_error):>7}  {split}")
    steps = ", ".join(f"{s * 1e3:.1f}" for s in a.step_seconds)
    lines += ["", f"step per rank (ms): {steps}"]
    return "\n".join(lines)


# ---------------------------------------------------------------------- counting
@functools.cache
def _counter_class() -> type:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    try:
        from torch.distributed.tensor import DTensor as _DTensor
    except ImportError:  # pragma: no cover - a torch without distributed
        _DTensor = None

    class CommCounter(TorchDispatchMode):
        """Records ``(label, kind, op, bytes)`` for every c10d collective that runs."""

        def __init__(self, rank_of_group, group_labels=None, group_defaults=None) -> None:
            super().__init__()
            self.rows: list[tuple[str, str, str, float]] = []
            self.labels: list[tuple[str, str]] = []
            self._rank_of_group = rank_of_group
            #: process group name -> (layer, kind): every collective on that group (a
            #: data-parallel or pipeline group) is counted there, whatever the label
            self.group_labels = dict(group_labels or {})
            #: process group name -> (layer, kind) of its collectives issued under no label
            self.group_defaults = dict(group_defaults or {})

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if _DTensor is not None and any(issubclass(t, _DTensor) for t in types):
                # a tensor subclass's op (a DTensor's): let the subclass run it, with this
                # counter still seeing the collectives it issues on the local pieces
                return NotImplemented
            ns = func.namespace
            if ns in ("_c10d_functional", "c10d", "_c10d_functional_autograd"):
                name = func._opname
                if name in _BASE_OPS or (name != "wait_tensor" and not name.startswith("_")):
                    self._record(name, args)
            return func(*args, **kwargs)

        def _record(self, name: str, args) -> None:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            for a in args:
                if isinstance(a, (list, tuple)):
                    tensors += [t for t in a if isinstance(t, torch.Tensor)]
            if not tensors or "recv" in name or name == "barrier":
                nbytes = 0.0
            elif name in _BASE_OPS:            # (output, input, group, ...): the input
                nbytes = float(args[1].numel() * args[1].element_size())
            elif "all_to_all" in name or "alltoall" in name:
                x = tensors[0] if "all_to_all" in name else tensors[1]
                split = args[2] if "all_to_all" in name else args[3]
                group = args[3] if "all_to_all" in name else None
                per = x.numel() // max(x.shape[0], 1) if x.dim() else 1
                me = self._rank_of_group(group)
                own = (split[me] * per if split and me is not None else 0)
                nbytes = float((x.numel() - own) * x.element_size())
            elif name in ("allgather_", "reduce_scatter_", "alltoall_"):
                nbytes = float(sum(t.numel() * t.element_size() for t in tensors[-1:]))
            else:
                nbytes = float(tensors[0].numel() * tensors[0].element_size())
            group = _group_name(args) if (self.group_labels or self.group_defaults) else None
            fixed = self.group_labels.get(group)
            if fixed is not None:
                layer, kind = fixed
            elif self.labels:
                layer, kind = self.labels[-1]
            else:
                layer, kind = self.group_defaults.get(group, ("(unlabelled)", name))
            self.rows.append((layer, kind, name, nbytes))

        def totals(self) -> dict[tuple[str, str], float]:
            """Bytes by ``(layer, kind)``."""
            out: dict[tuple[str, str], float] = {}
            for layer, kind, _, b in self.rows:
                out[(layer, kind)] = out.get((layer, kind), 0.0) + b
            return out

    return CommCounter


#: The c10d ops FSDP2 issues (``all_gather_into_tensor``, ``reduce_scatter_tensor``):
#: ``(output, input, process group, ...)``.
_BASE_OPS = ("_allgather_base_", "_reduce_scatter_base_")


def _group_name(args) -> str | None:
    """The process group a collective runs on: a functional op's group name (its last
    string argument) or a c10d op's ``ProcessGroup``."""
    import torch

    for a in reversed(args):
        if isinstance(a, str):
            return a
        if isinstance(a, torch.ScriptObject):       # a c10d op's boxed ProcessGroup
            try:
                a = torch.distributed.ProcessGroup.unbox(a)
            except (RuntimeError, TypeError):  # pragma: no cover - another script object
                continue
        name = getattr(a, "group_name", None)
        if isinstance(name, str):
            return name
    return None


def _group_rank(group) -> int | None:
    import torch.distributed as dist

    if group is None:
        return dist.get_rank()
    if isinstance(group, str):
        from torch.distributed.distributed_c10d import _resolve_process_group
        group = _resolve_process_group(group)
    r = dist.get_rank(group)
    return None if r < 0 else r


def comm_counter(group_labels: Mapping[str, tuple[str, str]] | None = None,
                 group_defaults: Mapping[str, tuple[str, str]] | None = None) -> Any:
    """A new collective counter (a ``TorchDispatchMode``: use it as ``with counter:``).

    ``counter.rows`` lists ``(layer, kind, op, bytes)``; ``counter.totals()`` sums them by
    ``(layer, kind)``. A collective on a process group named in ``group_labels`` is counted
    under that ``(layer, kind)``; one issued under a :func:`label` (or a
    :func:`labelled_module` region) under the innermost label; any other under its group's
    entry in ``group_defaults``, else ``("(unlabelled)", op)``.
    """
    return _counter_class()(_group_rank, group_labels, group_defaults)


def _active_counter() -> Any:
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    cls = _counter_class()
    for mode in reversed(_get_current_dispatch_mode_stack()):
        if isinstance(mode, cls):
            return mode
    return None


@contextlib.contextmanager
def label(layer: str, kind: str) -> Iterator[None]:
    """Attribute the collectives issued inside to ``(layer, kind)`` in an active counter.

    Examples
    --------
    >>> with label("conv1", "transfer"):  # no counter active: nothing happens
    ...     pass
    """
    counter = _active_counter()
    if counter is None:
        yield
        return
    counter.labels.append((layer, kind))
    try:
        yield
    finally:
        counter.labels.pop()


@functools.cache
def _marks() -> tuple[type, type]:
    """Identity autograd functions whose backward opens / closes a label: the backward of a
    region runs between them (the autograd engine runs a region's nodes after its output's
    and before its input's)."""
    import torch

    class _Mark(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, counter, key):
            ctx.counter, ctx.key = counter, key
            return x.view_as(x)

    class Open(_Mark):
        @staticmethod
        def backward(ctx, g):
            ctx.counter.labels.append(ctx.key)
            return g, None, None

    class Close(_Mark):
        @staticmethod
        def backward(ctx, g):
            labels = ctx.counter.labels
            for i in range(len(labels) - 1, -1, -1):
                if labels[i] == ctx.key:
                    del labels[i]
                    break
            return g, None, None

    return Open, Close


def _mark(value, fn, counter, key):
    """``fn`` applied to every tensor that needs a gradient in ``value`` (nested in tuples,
    lists and dicts)."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn.apply(value, counter, key) if value.requires_grad else value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_mark(v, fn, counter, key) for v in value)
    if isinstance(value, list):
        return [_mark(v, fn, counter, key) for v in value]
    if isinstance(value, dict):
        return {k: _mark(v, fn, counter, key) for k, v in value.items()}
    return value


def labelled_module(module, key: tuple[str, str], where: str) -> None:
    """Label the collectives of the hooks already on ``module``, forward and backward.

    ``where="input"``: its forward pre-hooks (e.g. a ``PrepareModuleInput``'s input
    redistribution); ``"output"``: its forward hooks (e.g. a ``RowwiseParallel``'s output
    reduction). Hooks are added on both sides of the existing ones; they do nothing unless
    a counter (:func:`comm_counter`) is active when the module runs.
    """
    Open, Close = _marks()
    state: dict[str, Any] = {}

    def enter(value):
        counter = _active_counter()
        state["counter"] = counter
        if counter is None:
            return value
        counter.labels.append(key)
        return _mark(value, Close, counter, key)

    def leave(value):
        counter = state.pop("counter", None)
        if counter is None:
            return value
        if counter.labels and counter.labels[-1] == key:
            counter.labels.pop()
        return _mark(value, Open, counter, key)

    if where == "input":
        module.register_forward_pre_hook(lambda m, a, k: enter((a, k)), prepend=True,
                                         with_kwargs=True)
        module.register_forward_pre_hook(lambda m, a, k: leave((a, k)), with_kwargs=True)
    elif where == "output":
        module.register_forward_hook(lambda m, a, out: enter(out), prepend=True)
        module.register_forward_hook(lambda m, a, out: leave(out))
    else:
        raise InvalidOptionError(f"labelled_module(where={where!r}): expected 'input' or "
                                 "'output'")


def labelled_call(key: tuple[str, str], fn, *args):
    """``fn(*args)`` with its collectives labelled ``key``, forward and backward."""
    counter = _active_counter()
    if counter is None:
        return fn(*args)
    Open, Close = _marks()
    args = _mark(args, Close, counter, key)
    counter.labels.append(key)
    try:
        out = fn(*args)
    finally:
        counter.labels.pop()
    return _mark(out, Open, counter, key)


# ---------------------------------------------------------------------- memory
class MemoryMeter:
    """One rank's memory, measured from its tensors.

    Use :meth:`saving` around the training step's passes: it records the storages of the
    tensors autograd saves for the backward pass, each storage once at its full size (a
    saved view keeps its whole storage alive; two views of one storage hold it once),
    parameters and buffers left out (they are the model's state, not activations), and
    follows them until the last saved tensor on each storage is freed. The activation peak
    is the most bytes alive at once (a pipeline schedule's in-flight micro-batches; the end
    of the forward pass of a plain step). Then :meth:`measure` counts the parameters,
    gradients and optimizer state.
    """

    def __init__(self) -> None:
        self._refs: dict[int, int] = {}
        self._bytes: dict[int, int] = {}
        self._now = 0
        self._peak = 0
        self._state: set[int] = set()
        #: bytes alive at the peak of :meth:`allocating`, by the op that allocated them
        self.peak_by_op: dict[str, int] = {}

    def _release(self, key: int) -> None:
        n = self._refs.get(key, 0) - 1
        if n > 0:
            self._refs[key] = n
            return
        self._refs.pop(key, None)
        self._now -= self._bytes.pop(key, 0)

    @contextlib.contextmanager
    def saving(self, *modules) -> Iterator[None]:
        """Record the storages saved for backward while the block runs (the parameters and
        buffers of ``modules`` excluded)."""
        import weakref

        import torch

        self._state = {ptr for m in modules for t in [*m.parameters(), *m.buffers()]
                       for ptr, _ in _storages(t)}

        def pack(t):
            for key, nbytes in _storages(t):
                if key in self._state:
                    continue
                if key not in self._refs:
                    self._refs[key] = 0
                    self._bytes[key] = nbytes
                    self._now += nbytes
                    self._peak = max(self._peak, self._now)
                self._refs[key] += 1
                weakref.finalize(t, self._release, key)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield

    @contextlib.contextmanager
    def allocating(self, *modules) -> Iterator[None]:
        """Follow every storage the ops allocate while the block runs (forward, backward,
        recomputation, communication buffers, a schedule's received messages), and record the
        most bytes alive at once, leaving out the parameters and buffers of ``modules`` and the
        parameters' gradients (those are :meth:`measure`'s). A storage counts at its current
        size, so one released by ``resize_(0)`` (FSDP's resharded weights) counts nothing.
        The peak replaces :meth:`saving`'s."""
        import weakref

        import torch
        from torch._subclasses.fake_tensor import is_fake
        from torch.utils._python_dispatch import (
            TorchDispatchMode,
            is_traceable_wrapper_subclass,
            is_traceable_wrapper_subclass_type,
        )
        from torch.utils._pytree import tree_leaves

        params = [p for m in modules for p in m.parameters()]
        state = {ptr for m in modules for t in [*m.parameters(), *m.buffers()]
                 for ptr, _ in _storages(t)}
        # storage objects by id (a storage keeps its Python object while it lives; its
        # data pointer does not stay its own: a storage resized to 0 gives it up)
        live: dict[int, tuple[weakref.ref, str]] = {}
        meter = self

        def sample() -> None:
            grads = {ptr for p in params if p.grad is not None for ptr, _ in _storages(p.grad)}
            now, by_op = 0, {}
            for key, (ref, op) in list(live.items()):
                st = ref()
                if st is None:
                    del live[key]
                elif st.nbytes() and st.data_ptr() not in grads:
                    now += st.nbytes()
                    by_op[op] = by_op.get(op, 0) + st.nbytes()
            if now > meter._peak:
                meter._peak, meter.peak_by_op = now, by_op

        class _Allocations(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if any(is_traceable_wrapper_subclass_type(t) for t in types):
                    return NotImplemented     # a subclass's op: follow its local pieces
                out = func(*args, **(kwargs or {}))
                for t in tree_leaves(out):
                    # a subclass's result holds pieces counted when they were made; fake
                    # and meta tensors (DTensor's sharding propagation) hold no memory
                    if isinstance(t, torch.Tensor) and t.numel() \
                            and not is_traceable_wrapper_subclass(t) and not is_fake(t) \
                            and t.device.type != "meta":
                        st = t.untyped_storage()
                        old = live.get(id(st))
                        if st.data_ptr() not in state and (old is None or old[0]() is not st):
                            live[id(st)] = (weakref.ref(st), func.__name__)
                sample()
                return out

        self._peak, self.peak_by_op = 0, {}
        with _Allocations():
            yield

    @property
    def activation_bytes(self) -> float:
        """The most bytes alive at once so far: of the step's allocations (:meth:`allocating`),
        else of the saved storages (:meth:`saving`)."""
        return float(self._peak)

    def measure(self, module, optimizer) -> dict[str, float]:
        """``{"parameters", "gradients", "optimizer", "activations": bytes}``."""
        import torch

        params = [_local(p) for p in module.parameters()]
        grads = [_local(p.grad) for p in module.parameters() if p.grad is not None]
        state = [_local(v) for s in optimizer.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor) and v.dim() > 0]
        return {
            "parameters": float(sum(p.numel() * p.element_size() for p in params)),
            "gradients": float(sum(g.numel() * g.element_size() for g in grads)),
            "optimizer": float(sum(v.numel() * v.element_size() for v in state)),
            "activations": self.activation_bytes,
        }


def _local(t):
    """This rank's piece of a DTensor (a plain tensor as it is)."""
    return t.to_local() if hasattr(t, "to_local") else t


def _storages(t) -> list[tuple[int, int]]:
    """``(data pointer, bytes)`` of the storages behind ``t``: its own, or those of the
    plain tensors inside a wrapper subclass (a DTensor's local piece, a functional
    collective's pending result)."""
    import torch
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if not isinstance(t, torch.Tensor) or not t.numel():
        return []
    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        return [x for n in names for x in _storages(getattr(t, n))]
    st = t.untyped_storage()
    return [(st.data_ptr(), st.nbytes())]
