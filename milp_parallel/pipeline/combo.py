"""One ``(p, m, v, t, schedule)``: each stage's options and the stage MILP picking one each.

Also the exact evaluation of a choice under the same formulas, the bounds the search prunes
with (least memory, the untied bound) and a quick first choice.

May import: ``errors``, ``solvers.result``, ``.space``, ``.stages``, ``.milp``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import SolverError
from ..solvers.result import INFEASIBLE, OPTIMAL
from .milp import _SparseMilp
from .space import end_chunk_counts, in_flight_micro_batches, message_counts
from .stages import _StageTables
from .training_memory import pipeline_boundary_bytes, pipeline_receive_bytes

#: Relative slack of the memory rows and of the bound tests (rounding of sums).
_REL_TOL = 1e-9


@dataclass
class _Combo:
    """One point of the outer search."""

    p: int
    t: int
    m: int
    v: int
    schedule: str
    b: int
    lower_bound: float


@dataclass(frozen=True)
class _Choice:
    """A pipeline: per stage its block count and block point; the pre and post points."""

    k: tuple[int, ...]
    point: tuple[int, ...]
    pre: int
    post: int


def _minplus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``out[n] = min_i a[i] + b[n - i]`` over the common length."""
    n = len(a)
    out = np.full(n, np.inf)
    for i in np.flatnonzero(np.isfinite(a)):
        np.minimum(out[i:], a[i] + b[:n - i], out=out[i:])
    return out


class _ComboProblem:
    """One ``(p, m, v, t, schedule)``: each stage's options (block count and assignment with
    its time, flush time and memory) and the MILP choosing one option per stage; and the
    exact evaluation of a choice under the same formulas."""

    def __init__(self, tables: _StageTables, combo: _Combo, n_blocks: int, n_devices: int,
                 budget: float | None):
        self.T, self.c, self.L, self.budget = tables, combo, n_blocks, budget
        p, v = combo.p, combo.v
        self.f = in_flight_micro_batches(combo.schedule, p, combo.m, v)
        Ds = n_devices // p
        n_in, n_out = len(tables.in_classes), tables.n_out
        self.send, self.recv = [], []
        for s in range(p):
            snd, rcv = np.zeros(n_out), np.zeros(n_in)
            n_send, n_recv = message_counts(p, v, s)
            if n_send:
                snd += n_send * tables.send_table((s * Ds, (s + 1) % p * Ds))
            if n_recv:
                rcv += n_recv * tables.recv_table(((s - 1) % p * Ds, s * Ds))
            self.send.append(snd)
            self.recv.append(rcv)
        # the pre / post layers (embedding; final norm, head, loss) keep their activations
        # only for the in-flight micro-batches of the model's first / last chunk
        self.f_pre = self._end_chunk_counts(0)[0] if p > 1 else self.f[0]
        self.f_post = self._end_chunk_counts(p - 1)[1] if p > 1 else self.f[-1]
        self.boundary = [self._boundary_table(s) for s in range(p)]

    def _end_chunk_counts(self, s: int) -> tuple[int, int]:
        c = self.c
        return end_chunk_counts(c.schedule, c.p, c.m, c.v, s)

    def _boundary_table(self, s: int) -> np.ndarray:
        """``(P,)`` bytes stage ``s`` holds in its chunks' received inputs and sent outputs
        at its peak, by block point (:func:`~.training_memory.pipeline_boundary_bytes` per
        in-flight chunk micro-batch: the inputs of those not of the model's first chunk, the
        outputs of those not of its last one), and in its receive buffers
        (:func:`~.training_memory.pipeline_receive_bytes`). Nothing without a pipeline."""
        T, c = self.T, self.c
        B = T.block
        if c.p == 1:
            return np.zeros(len(B))
        first, last = self._end_chunk_counts(s)
        st = T.struct
        ins = T.block_in_class(B)
        # the chunks that receive: activations (all but the model's first), gradients (all
        # but its last)
        receiving = 2 * c.v - (s == 0) - (s == c.p - 1)
        out = np.zeros(len(B))
        buffers = pipeline_receive_bytes(
            T.stream_bytes, c.t, micro_batches=c.m, receiving_chunks=receiving,
            in_flight=self.f[s] - first, buffers=T.pricing.receive_buffers)
        for j in range(len(B)):
            cls = T.in_classes[int(ins[j])]
            in_layouts = [T.block_kinds[e][cls[n]].ins[i] for n, (e, i) in enumerate(st.entry)]
            in_b, out_b = pipeline_boundary_bytes(T.stream_bytes, c.t, in_layouts)
            out[j] = (self.f[s] - first) * in_b + (self.f[s] - last) * out_b + buffers
        return out

    # ------------------------------------------------------------------ exact evaluation
    def stage_values(self, ch: _Choice) -> list[tuple[float, float, float]]:
        """``(t_s, y_s, memory_s)`` of every stage of a choice."""
        T, p, v = self.T, self.c.p, self.c.v
        B, pre, post = T.block, T.pre, T.post
        ins, outs = T.block_in_class(B), T.block_out_class(B)
        out = []
        for s in range(p):
            j, k = ch.point[s], ch.k[s]
            c = B.crit[j]
            ts = v * (k * c[0] + (k - 1) * B.wrap[j]) + B.c_tau[j]
            ts += self.send[s][outs[j]] + self.recv[s][ins[j]]
            ys = v * k * c[1] + B.c_psi[j]
            mem = v * k * c[2] + self.f[s] * k * c[3] + c[4] + self.boundary[s][j]
            if s == 0:
                q = pre.crit[ch.pre]
                ts, ys = ts + q[0], ys + q[1]
                mem += q[2] + self.f_pre * q[3] + q[4]
            if s == p - 1:
                r = post.crit[ch.post]
                ts, ys = ts + r[0], ys + r[1]
                mem += r[2] + self.f_post * r[3] + r[4]
            out.append((float(ts), float(ys), float(mem)))
        return out

    def iteration_seconds(self, values) -> float:
        m, v = self.c.m, self.c.v
        ts = [x[0] for x in values]
        return (m - 1.0 / v) * max(ts) + sum(ts) / v + max(x[1] for x in values)

    def valid(self, ch: _Choice) -> bool:
        """Block counts add up; the pre / post layers agree with the first / last stage's
        classes and ZeRO stage."""
        T, v = self.T, self.c.v
        B = T.block
        if sum(ch.k) * v != self.L or min(ch.k) < 1:
            return False
        j0, jl = ch.point[0], ch.point[-1]
        return bool(T.pre.cls[ch.pre] == T.block_in_class(B)[j0]
                    and T.pre.zero[ch.pre] == B.zero[j0]
                    and T.post.cls[ch.post] == T.block_out_class(B)[jl]
                    and T.post.zero[ch.post] == B.zero[jl])

    # ------------------------------------------------------------------ options
    def _pairs(self, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Block points of stage ``s`` with the pre / post points they may go with
        (``-1``: none): arrays ``j, q, r``."""
        T, p = self.T, self.c.p
        B = T.block
        j = np.arange(len(B))
        q = np.full(len(B), -1)
        r = np.full(len(B), -1)
        for first, pts, cls in ((True, T.pre, T.block_in_class(B)),
                                (False, T.post, T.block_out_class(B))):
            if (s != 0) if first else (s != p - 1):
                continue
            key_b = B.zero[j] * 100_000 + cls[j]
            key_p = pts.zero * 100_000 + pts.cls
            order = np.argsort(key_p, kind="stable")
            lo = np.searchsorted(key_p[order], key_b, "left")
            hi = np.searchsorted(key_p[order], key_b, "right")
            cnt = hi - lo
            rep = np.repeat(np.arange(len(j)), cnt)
            offs = np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            pick = order[np.repeat(lo, cnt) + offs]
            j, q, r = j[rep], q[rep], r[rep]
            if first:
                q = pick
            else:
                r = pick
        return j, q, r

    def options(self, s: int, t_cap: float = math.inf, only=None) -> dict[str, np.ndarray]:
        """Feasible options of stage ``s`` with ``t_s <= t_cap``: arrays ``k, t, y, mem, j,
        q, r`` (``q`` / ``r``: the pre / post point, -1 when the stage has none), for each
        block count (``only``: these counts) only those not dominated in (time, flush)."""
        T, c = self.T, self.c
        p, v = c.p, c.v
        B, pre, post = T.block, T.pre, T.post
        j, q, r = self._pairs(s)
        ins, outs = T.block_in_class(B), T.block_out_class(B)
        cr = B.crit[j]
        a_t = v * (cr[:, 0] + B.wrap[j])
        c_t = B.c_tau[j] - v * B.wrap[j] + self.send[s][outs[j]] + self.recv[s][ins[j]]
        a_y, c_y = v * cr[:, 1], B.c_psi[j].copy()
        a_m = v * cr[:, 2] + self.f[s] * cr[:, 3]
        c_m = cr[:, 4] + self.boundary[s][j]
        for pts, idx, f in ((pre, q, self.f_pre), (post, r, self.f_post)):
            has = idx >= 0
            if has.any():
                u = pts.crit[idx[has]]
                c_t[has] += u[:, 0]
                c_y[has] += u[:, 1]
                c_m[has] += u[:, 2] + f * u[:, 3] + u[:, 4]
        kmax = self.L // v - (p - 1)
        ks = np.arange(1, kmax + 1) if only is None else np.asarray(only, np.int64)
        t = ks[:, None] * a_t[None, :] + c_t[None, :]                     # (K, J)
        ok = t <= t_cap
        if self.budget is not None:
            ok &= ks[:, None] * a_m[None, :] + c_m[None, :] <= self.budget * (1 + _REL_TOL)
        y = ks[:, None] * a_y[None, :] + c_y[None, :]
        tt = np.where(ok, t, np.inf)
        order = np.argsort(tt, axis=1, kind="stable")
        ys = np.take_along_axis(np.where(ok, y, np.inf), order, axis=1)
        best = np.minimum.accumulate(ys, axis=1)
        front = np.ones_like(ys, bool)
        front[:, 1:] = ys[:, 1:] < best[:, :-1]
        front &= np.take_along_axis(ok, order, axis=1)
        rows, cols = np.nonzero(front)
        pick = order[rows, cols]
        kk = ks[rows]
        out = {"k": kk, "t": t[rows, pick], "y": y[rows, pick],
               "mem": kk * a_m[pick] + c_m[pick], "j": j[pick], "q": q[pick], "r": r[pick]}
        return out

    def least_memory(self) -> float:
        """The least peak memory over every choice of this combination (no budget): the
        least memory of each stage for each block count, then the allocation of blocks
        whose largest stage is smallest (exact, by a min-max program over stages)."""
        c = self.c
        p, v = c.p, c.v
        T = self.T
        B = T.block
        total = self.L // v
        g = np.full((p, total + 1), np.inf)
        for s in range(p):
            j, q, r = self._pairs(s)
            cr = B.crit[j]
            a_m = v * cr[:, 2] + self.f[s] * cr[:, 3]
            c_m = cr[:, 4] + self.boundary[s][j]
            for pts, idx, f in ((T.pre, q, self.f_pre), (T.post, r, self.f_post)):
                has = idx >= 0
                if has.any():
                    u = pts.crit[idx[has]]
                    c_m[has] += u[:, 2] + f * u[:, 3] + u[:, 4]
            for k in range(1, total - p + 2):
                g[s, k] = float((k * a_m + c_m).min())
        best = np.r_[0.0, np.full(total, np.inf)]
        for s in range(p):
            nxt = np.full(total + 1, np.inf)
            for k in range(1, total + 1):
                if np.isfinite(g[s, k]):
                    nxt[k:] = np.minimum(nxt[k:], np.maximum(best[:total + 1 - k], g[s, k]))
            best = nxt
        return float(best[total])

    # ------------------------------------------------------------------ the MILP
    def _milp(self, opts):
        """One option per stage (binaries ``z``), block counts adding up, ``top >= t_s``,
        ``ymax >= y_s``; times in units of ``scale`` (the largest option time) so that the
        solver's tolerances are relative."""
        c = self.c
        p, v, m = c.p, c.v, c.m
        scale = max(float(max(o["t"].max(), o["y"].max())) for o in opts) or 1.0
        M = _SparseMilp()
        z = [M.var(integer=True, hi=1, n=len(o["k"])) for o in opts]
        ts = [M.var() for _ in range(p)]
        ys = [M.var() for _ in range(p)]
        top, ymax = M.var(), M.var()
        kk, kv = [], []
        for s, o in enumerate(opts):
            M.row(z[s], 1.0, 1, 1)
            M.row(np.r_[z[s], ts[s]], np.r_[o["t"] / scale, -1.0], 0, 0)
            M.row(np.r_[z[s], ys[s]], np.r_[o["y"] / scale, -1.0], 0, 0)
            M.row([top, ts[s]], [1.0, -1.0], lo=0)
            M.row([ymax, ys[s]], [1.0, -1.0], lo=0)
            kk.extend(z[s].tolist())
            kv.extend(o["k"].tolist())
        M.row(kk, kv, self.L // v, self.L // v)
        M.cost[top] = m - 1.0 / v
        M.cost[ymax] = 1.0
        for s in range(p):
            M.cost[ts[s]] = 1.0 / v
        return M, dict(z=z, t=ts, y=ys, top=top, ymax=ymax, scale=scale)

    def _start(self, opts, ref, model: _SparseMilp, ch: _Choice) -> np.ndarray | None:
        """The MILP's column values of a choice (None when it is not among the options)."""
        x = np.zeros(len(model.cost))
        vals = self.stage_values(ch)
        for s, o in enumerate(opts):
            hit = np.flatnonzero((o["k"] == ch.k[s]) & (o["j"] == ch.point[s])
                                 & (o["q"] == (ch.pre if s == 0 else -1))
                                 & (o["r"] == (ch.post if s == self.c.p - 1 else -1)))
            if len(hit) == 0:
                return None
            x[ref["z"][s][hit[0]]] = 1.0
            x[ref["t"][s]] = vals[s][0] / ref["scale"]
            x[ref["y"][s]] = vals[s][1] / ref["scale"]
        x[ref["top"]] = max(v[0] for v in vals) / ref["scale"]
        x[ref["ymax"]] = max(v[1] for v in vals) / ref["scale"]
        return x

    def _tighten(self, opts, upper: float):
        """Drop options that no choice faster than ``upper`` can use.

        With ``g_s(k)`` the least time of stage ``s`` holding ``k`` blocks, an option ``(k,
        t)`` of stage ``s`` needs ``m t + R_s(total - k) / v + max_s min y <= upper``, where
        ``R_s(n)`` is the least total time of the other stages holding ``n`` blocks (a
        min-plus convolution of their ``g``): ``T >= (m - 1/v) t_s + sum_s t_s / v``. Options
        whose block count the others cannot complement go too. ``None`` when a stage has no
        option left."""
        c = self.c
        m, v, p = c.m, c.v, c.p
        total = self.L // v
        tol = 1 + _REL_TOL
        while True:
            if any(len(o["k"]) == 0 for o in opts):
                return None
            g = np.full((p, total + 1), np.inf)
            for s, o in enumerate(opts):
                np.minimum.at(g[s], o["k"].astype(np.int64), o["t"])
            ymin = max(o["y"].min() for o in opts)
            pre = [np.r_[0.0, np.full(total, np.inf)]]
            for s in range(p - 1):
                pre.append(_minplus(pre[-1], g[s]))
            suf = [np.r_[0.0, np.full(total, np.inf)]]
            for s in range(p - 1, 0, -1):
                suf.append(_minplus(suf[-1], g[s]))
            suf = suf[::-1]
            changed = False
            for s, o in enumerate(opts):
                rest = _minplus(pre[s], suf[s])            # the other stages, by blocks
                need = rest[total - o["k"].astype(np.int64)]
                keep = np.isfinite(need)
                if math.isfinite(upper):
                    keep &= m * o["t"] + need / v + ymin <= upper * tol
                if not keep.all():
                    opts[s] = {n: a[keep] for n, a in o.items()}
                    changed = True
            if not changed:
                return opts

    def untied_bound(self) -> float:
        """A lower bound on ``T`` of this combination without tying: each stage's blocks may
        mix any non-dominated assignments (an LP over how many blocks use each; every block
        pays at least the cheapest re-layout into it, the first one none; per-stage
        constants, messages and pre / post layers at their least; the largest working set at
        its least). ``inf`` when even that does not fit the memory."""
        T, c = self.T, self.c
        p, v, m = c.p, c.v, c.m
        B = T.block
        ins = T.block_in_class(B)
        wmin_cls = np.full(len(T.in_classes), np.inf)
        np.minimum.at(wmin_cls, ins, B.wrap)
        w_in = wmin_cls[ins]
        pre_t, pre_y = T.pre.crit[:, 0].min(), T.pre.crit[:, 1].min()
        pre_m = (T.pre.crit[:, 2] + self.f_pre * T.pre.crit[:, 3]).min()
        post_t, post_y = T.post.crit[:, 0].min(), T.post.crit[:, 1].min()
        post_m = (T.post.crit[:, 2] + self.f_post * T.post.crit[:, 3]).min()
        scale = max(float(B.crit[:, 0].max()) * self.L, 1e-30)
        M = _SparseMilp()
        top, ymax = M.var(), M.var()
        counts = []
        for s in range(p):
            lam = M.var(n=len(B))
            counts.extend(lam.tolist())
            ts, ys = M.var(), M.var()
            M.row(lam, 1.0, lo=1)
            const_t = B.c_tau.min() + self.send[s].min() + self.recv[s].min() \
                - v * float(w_in.max()) + (pre_t if s == 0 else 0) \
                + (post_t if s == p - 1 else 0)
            const_y = B.c_psi.min() + (pre_y if s == 0 else 0) + (post_y if s == p - 1 else 0)
            const_m = (B.crit[:, 4] + self.boundary[s]).min() + (pre_m if s == 0 else 0) \
                + (post_m if s == p - 1 else 0)
            M.row(np.r_[lam, ts], np.r_[v * (B.crit[:, 0] + w_in) / scale, -1.0],
                  hi=-max(const_t, 0.0) / scale)
            M.row(np.r_[lam, ys], np.r_[v * B.crit[:, 1] / scale, -1.0], hi=-const_y / scale)
            if self.budget is not None:
                M.row(lam, (v * B.crit[:, 2] + self.f[s] * B.crit[:, 3]) / self.budget,
                      hi=(self.budget - const_m) / self.budget)
            M.row([top, ts], [1.0, -1.0], lo=0)
            M.row([ymax, ys], [1.0, -1.0], lo=0)
            M.cost[ts] = 1.0 / v
        M.row(counts, 1.0, self.L / v, self.L / v)
        M.cost[top] = m - 1.0 / v
        M.cost[ymax] = 1.0
        ans = M.solve()
        if ans.status == INFEASIBLE:
            return math.inf
        return float(min(ans.objective, ans.bound)) * scale if ans.status == OPTIMAL else 0.0

    def heuristic(self) -> tuple[_Choice | None, float]:
        """A quick feasible choice: blocks spread evenly (extra blocks on the last stages,
        which keep fewer micro-batches in flight), each stage its best option for that
        count by ``m t + y``."""
        c = self.c
        p, v = c.p, c.v
        total = self.L // v
        ks = [total // p + (1 if s >= p - total % p else 0) for s in range(p)]
        pick = []
        for s in range(p):
            o = self.options(s, only=[ks[s]])
            sel = np.flatnonzero(o["k"] == ks[s]) if len(o["k"]) else np.zeros(0, int)
            if len(sel) == 0:
                return None, math.inf
            best = sel[np.argmin(c.m * o["t"][sel] + o["y"][sel])]
            pick.append((int(o["j"][best]), int(o["q"][best]), int(o["r"][best])))
        ch = _Choice(tuple(ks), tuple(x[0] for x in pick), pick[0][1], pick[-1][2])
        return ch, self.iteration_seconds(self.stage_values(ch))

    def solve(self, time_limit: float | None = None, upper: float = math.inf,
              start: _Choice | None = None):
        """``(status, choice or None, iteration seconds, lower bound)``; only choices not
        slower than ``upper`` are looked for (``infeasible`` when there are none); ``start``
        (a choice not slower than ``upper``) seeds the MILP."""
        p = self.c.p
        cap = upper / self.c.m * (1 + _REL_TOL) if math.isfinite(upper) else math.inf
        opts = self._tighten([self.options(s, cap) for s in range(p)], upper)
        if opts is None:
            return INFEASIBLE, None, math.inf, math.inf
        model, ref = self._milp(opts)
        x0 = self._start(opts, ref, model, start) if start is not None else None
        ans = model.solve(time_limit, x0)
        status, vals = ans.status, ans.values
        obj, bound = ans.objective * ref["scale"], ans.bound * ref["scale"]
        if vals is None:
            return status, None, math.inf, bound
        pick = [int(np.argmax(vals[ref["z"][s]])) for s in range(p)]
        o = [opts[s] for s in range(p)]
        ch = _Choice(tuple(int(o[s]["k"][i]) for s, i in enumerate(pick)),
                     tuple(int(o[s]["j"][i]) for s, i in enumerate(pick)),
                     int(o[0]["q"][pick[0]]), int(o[-1]["r"][pick[-1]]))
        got = self.iteration_seconds(self.stage_values(ch))
        if not math.isclose(got, obj, rel_tol=1e-6, abs_tol=1e-9):
            raise SolverError(f"pipeline MILP: objective {obj} but its plan evaluates to "
                              f"{got} (p={p}, m={self.c.m}, t={self.c.t})")
        return status, ch, got, (got if status == OPTIMAL else bound)

