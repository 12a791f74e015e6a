"""What a tensor-parallel transformer program keeps for its backward pass, as the plan
prices it: a sequence-parallel column linear's input as this rank's slice, gathered again
in backward (:func:`regather_in_backward`), and a sharded weight's gradient as its shard
(:func:`keep_grads_sharded`). Used by :mod:`.transformer`.

May import: ``.audit``.
"""

from __future__ import annotations


class _Regather:
    """A rank's slice of a gathered input (packed by the saved-tensor hooks outside, if
    any), and its gather while the backward pass uses it."""

    def __init__(self, mine, outer) -> None:
        self.outer = outer
        self.mine = outer[0](mine) if outer else mine
        self.whole = None
        self.uses = 0

    def slice(self):
        return self.outer[1](self.mine) if self.outer else self.mine


def _outer_hooks():
    """The saved-tensor hooks in force outside (an audit's meter, a user's offload): only
    the innermost pair runs, so ours pass what they do not regather on to these."""
    import torch
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return top(False) if top is not None else None


def regather_in_backward(module, tp_mesh, key: tuple[str, str]) -> None:
    """Keep only this rank's sequence slice of the input ``module`` all-gathers (a
    sequence-parallel column linear's), and all-gather it again where the backward pass
    needs it (the weight gradient): Megatron-LM's sequence parallelism, what the plan
    prices. The gathered input arrives from ``module``'s input re-layout (a ``Shard(1) ->
    Replicate`` DTensor); every tensor the forward pass saves on its storage (views of it)
    is packed as the slice and rebuilt from the gather, counted under ``key``. Saved-tensor
    hooks already in force (an audit's :meth:`.audit.MemoryMeter.saving`, a user's
    offloading) still see every tensor saved, the slice in place of the gathered input."""
    import torch
    from torch.distributed.tensor import DTensor, Replicate, Shard

    from .audit import label

    t = tp_mesh.size()
    state: dict = {}

    def pack(x):
        full, outer = state.get("full"), state.get("outer")
        if full is None or not isinstance(x, DTensor) or \
                _storage_key(x._local_tensor) != full[0]:
            return ("outer", outer, outer[0](x)) if outer else x
        loc = x._local_tensor
        if "slice" not in state:
            # one slice, gathered once for all the linears that read it (q, k, v; gate, up)
            state["slice"] = _Regather(full[1].chunk(t, dim=1)[tp_mesh.get_local_rank()]
                                       .clone(), outer)
        state["slice"].uses += 1
        return ("regather", state["slice"], loc.size(), loc.stride(), loc.storage_offset(),
                x.placements, x.shape, x.stride())

    def unpack(x):
        if isinstance(x, tuple) and x and x[0] == "outer":
            return x[1][1](x[2])
        if not (isinstance(x, tuple) and x and x[0] == "regather"):
            return x
        _, piece, size, stride, offset, placements, gshape, gstride = x
        if piece.whole is None:
            with torch.no_grad(), label(*key):
                piece.whole = DTensor.from_local(piece.slice(), tp_mesh, (Shard(1),),
                                                 run_check=False).redistribute(
                    tp_mesh, (Replicate(),)).to_local().contiguous()
        whole = piece.whole
        piece.uses -= 1
        if piece.uses == 0:
            piece.whole = None
        view = whole.as_strided(size, stride, offset)
        return DTensor.from_local(view, tp_mesh, placements, run_check=False, shape=gshape,
                                  stride=gstride)

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)

    def before(mod, args, kwargs):
        x = kwargs.get("hidden_states", args[0] if args else None)
        if isinstance(x, DTensor) and x._local_tensor.is_contiguous():
            loc = x._local_tensor
            state.clear()
            state["full"] = (_storage_key(loc), loc)
            state["outer"] = _outer_hooks()
            hooks.__enter__()
            state["on"] = True

    def after(mod, args, kwargs, out):
        if state.pop("on", False):
            hooks.__exit__(None, None, None)
        state.pop("full", None)     # the slice stays with the packed tensors
        state.pop("outer", None)

    module.register_forward_pre_hook(before, with_kwargs=True)
    module.register_forward_hook(after, with_kwargs=True, always_call=True)


def _storage_key(t) -> int | None:
    """The data pointer of the storage behind ``t`` (inside a pending collective's
    result)."""
    from .audit import _storages
    keys = _storages(t)
    return keys[0][0] if len(keys) == 1 else None


def keep_grads_sharded(module) -> None:
    """Hold each sharded weight's gradient as its shard, as the plan prices it.

    DTensor's embedding backward returns the whole (replicated) gradient of a
    vocabulary-split table; taking this rank's rows of it is local (no collective), and the
    whole one is freed at once instead of living until the optimizer step."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    def to_shard(p) -> None:
        g = p.grad
        if isinstance(g, DTensor) and g.placements != p.placements and all(
                isinstance(a, Replicate) and isinstance(b, Shard)
                for a, b in zip(g.placements, p.placements)):
            mine = g.redistribute(p.device_mesh, p.placements).to_local().clone()
            p.grad = DTensor.from_local(mine, p.device_mesh, p.placements, run_check=False)

    for prm in module.parameters():
        if isinstance(prm, DTensor) and any(isinstance(a, Shard) for a in prm.placements):
            prm.register_post_accumulate_grad_hook(to_shard)
