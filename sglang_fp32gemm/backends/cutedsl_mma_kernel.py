"""The CuTe-DSL kernel of the ``cutedsl-mma`` backend: out[M, N] fp32 = x[M, K] @ w[N, K]^T for M <= 32.

Imported only when the backend binds a kernel (cutlass is imported lazily).

Swap-AB tensor-core split-K for decode (M 4-32), where the dot-product
kernel runs out of CUDA-core throughput and re-reads x once per W row:

- W rows sit on the MMA's M side (``mma.sync`` m16n8k16, bf16 in, fp32
  accumulate), x rows on its N side (8 per n-tile), so a CTA reads x once
  for 16 x ``rg`` W rows.
- A thread loads 16 bytes (8 consecutive K) of a W row straight into the
  registers the MMA reads. The MMA's K order is a permutation of the
  physical K; x is loaded with the same permutation, so the products pair
  up. Every W load of a thread (into registers, or with ``staged`` by
  cp.async into its own slots of shared memory) is issued before
  ``griddepcontrol.wait`` (W does not depend on the kernel before), x after
  it; launched without PDL the wait stays, as a fence that keeps the loads
  issued together.
- Streamed forms (``depth``) keep only ``depth - 1`` steps of W in flight,
  through a ring in the thread's own slots of shared memory (``streamed``):
  a long K per CTA, one wave of CTAs.
- K is split over the warps of a CTA (interleaved 32 K at a time, so the
  CTA reads long runs of each row) and over the ``cs`` CTAs of a cluster.
  Warps are summed through shared memory in warp order, then the cluster's
  CTAs through distributed shared memory in rank order: one launch, no
  workspace, no atomics. Each CTA finishes one share of the tile: it reads
  the peers' partial sums of that share from their shared memory (pull),
  or (``push``) each CTA stores its partial sums of every share into the
  share owner's shared memory first. Pull needs a cluster barrier before
  the reads and another before any CTA may leave (a peer may still read
  it); push needs one after the stores, and one at the start (set early,
  waited on just before the stores) so that no CTA is stored into before
  it runs. Both add the same values in the same order: the same bits.

Exact: every product is bf16 x bf16 (exact in fp32), accumulated in fp32 by
the tensor core, then summed in fp32 in an order fixed by the config:
deterministic.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.memory
from cutlass import const_expr

_MMA = ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{{$w0}, {$w1}, {$w2}, {$w3}}, {{$r0}, {$r1}, {$r2}, {$r3}}, {{$r4}, {$r5}}, "
        "{{$r6}, {$r7}, {$r8}, {$r9}};")

# 16 bytes global -> shared, bypassing L1 (W is read once).
_CP_ASYNC = "cp.async.cg.shared.global [{$r0}], [{$r1}], 16;"
# A float of CTA `$r1`'s shared memory at this CTA's shared address `$r0`.
_DSMEM_LOAD = ("{ .reg .b32 ra; mapa.shared::cluster.u32 ra, {$r0}, {$r1}; "
               "ld.shared::cluster.f32 {$w0}, [ra]; }")
# Store the float `$r2` there.
_DSMEM_STORE = ("{ .reg .b32 ra; mapa.shared::cluster.u32 ra, {$r0}, {$r1}; "
                "st.shared::cluster.f32 [ra], {$r2}; }")


class MmaKernel:
    """One compiled form: (N, K) fixed, M <= 8 x ``nt`` at run time."""

    def __init__(self, n: int, k: int, warps: int, rg: int, nt: int, cs: int, pdl: bool, staged: bool,
                 depth: int = 0, push: bool = False) -> None:
        if k % (cs * warps * 32) or n % (16 * rg):
            raise ValueError(f"warps={warps}, rg={rg}, cs={cs} do not tile N={n}, K={k}")
        self.n, self.k, self.warps, self.rg, self.nt, self.cs, self.pdl = n, k, warps, rg, nt, cs, pdl
        self.staged = staged
        self.push = push
        self.depth = depth                        # streamed: a ring of `depth` steps (0: all W at once)
        self.chunks = k // (cs * warps * 32)      # 32-K steps per warp
        if depth and not 2 <= depth < self.chunks:
            raise ValueError(f"depth={depth}: must be 2..{self.chunks - 1} at {self.chunks} steps")
        self.slots = rg * nt * 4                  # accumulator floats per thread
        self.tile = self.slots * 32               # floats of a CTA's output tile
        self.wvecs = self.chunks * rg * 2         # 16-byte W vectors per thread
        self.per_step = rg * 2 + nt               # ring vectors of one step: W, then x
        self.stage_bytes = (self.wvecs * 16 * warps * 32 if staged else
                            depth * self.per_step * 16 * warps * 32 if depth else 0)
        self.grid = (cs, n // (16 * rg), 1)       # a cluster of cs CTAs for each 16 x rg rows of W

    @cute.jit
    def __call__(self, x: cute.Tensor, w: cute.Tensor, out: cute.Tensor, stream):
        self.kernel(x, w, out).launch(
            grid=self.grid, block=(self.warps * 32, 1, 1),
            cluster=(self.cs, 1, 1), smem=self.stage_bytes + (self.warps + 1) * self.tile * 4 + 64, stream=stream,
            use_pdl=self.pdl,
        )

    # -- the phases of ``kernel``: plain Python, traced inline (so range, not range_constexpr) --------
    def vector(self, rank, warp, c, i):
        """Index of the 8-K vector lane column ``c`` of ``warp`` reads at its step ``i``: step i of a warp
        covers K [32 q, 32 q + 32), q = (rank x chunks + i) x warps + warp; column c reads 8 K at 32 q + 8 c."""
        return ((rank * self.chunks + i) * self.warps + warp) * 4 + c

    def w_vec(self, w, rank, warp, g, c, row0, i, r, h):
        """The 16 bytes of W lane (g, c) reads at step i for half h of row group r: row g (+ 8 h)."""
        return cute.zipped_divide(w[row0 + 16 * r + 8 * h + g, None], (8,))[None, self.vector(rank, warp, c, i)]

    def x_vec(self, x, rank, warp, g, c, i, t):
        """The 16 bytes of x lane (g, c) reads at step i for n-tile t: row g + 8 t, or row M - 1 past M."""
        return cute.zipped_divide(x[cutlass.min(g + 8 * t, x.shape[0] - 1), None],
                                  (8,))[None, self.vector(rank, warp, c, i)]

    def issue_w(self, w, stage, tid, rank, warp, g, c, row0):
        """Every W vector of this thread in flight: into registers, or (``stage``) by cp.async into this
        thread's own slots of shared memory, which hold more. Lane (g, c) reads rows g and g + 8 of each
        16-row group. Returns the vectors (register tensors, or the slots), in (step, group, half) order."""
        wr = []
        for i in range(self.chunks):
            for r in range(self.rg):
                for h in range(2):
                    src = self.w_vec(w, rank, warp, g, c, row0, i, r, h)
                    if stage is not None:
                        mine = stage[None, tid, len(wr)]
                        self.copy16(mine, src)
                        wr.append(mine)
                    else:
                        wr.append(self.load16(src))
        if stage is not None:
            cute.arch.cp_async_commit_group()
        return wr

    def load_x(self, x, rank, warp, g, c):
        """Every x vector of this thread, before any MMA, in (step, n-tile) order. A row past M reads row
        M - 1 instead (no branch, so the loads issue together): its MMA column is computed, never written."""
        xr = []
        for i in range(self.chunks):
            for t in range(self.nt):
                xr.append(self.load16(self.x_vec(x, rank, warp, g, c, i, t)))
        return xr

    def multiply(self, wr, xr):
        """The thread's accumulators: words 2j, 2j + 1 of each vector feed MMA j (K 4j..4j+3 of the 8), the
        same permutation on both sides; accumulator s = (r x nt + t) x 4 + f is the MMA's D fragment f of
        row group r and n-tile t."""
        rg, nt = self.rg, self.nt
        acc = self.zeroed_acc()
        for i in range(self.chunks):
            self.mma_step(acc, wr[i * rg * 2:(i + 1) * rg * 2], xr[i * nt:(i + 1) * nt])
        return acc

    def load16(self, src):
        """16 bytes of global memory, into registers, as the four 32-bit words the MMA reads."""
        dst = cute.make_rmem_tensor_like(src)
        cute.autovec_copy(src, dst)
        return cute.recast_tensor(dst, cutlass.Int32)

    def zeroed_acc(self):
        """This thread's accumulators, zeroed."""
        acc = cute.make_rmem_tensor((self.slots,), cutlass.Float32)
        acc.fill(0.0)
        return acc

    def copy16(self, dst, src):
        """One 16-byte cp.async of this thread, global -> shared."""
        cute.arch.inline_ptx(_CP_ASYNC, read_only_args=[dst.iterator.toint(), src.iterator.toint()])

    def read16(self, mine):
        """One of this thread's 16-byte slots of shared memory, into registers."""
        dst = cute.make_rmem_tensor((4,), cutlass.Int32)
        cute.autovec_copy(mine, dst)
        return dst

    def mma_step(self, acc, wv, xv):
        """The MMAs of one 32-K step (``multiply``'s inner loops), into ``acc``."""
        rg, nt = self.rg, self.nt
        for j in range(2):
            for r in range(rg):
                lo = wv[r * 2]
                hi = wv[r * 2 + 1]
                for t in range(nt):
                    s = (r * nt + t) * 4
                    d = cute.arch.inline_ptx(
                        _MMA,
                        write_only_types=[cutlass.Float32] * 4,
                        read_only_args=[lo[2 * j], hi[2 * j], lo[2 * j + 1], hi[2 * j + 1],
                                        xv[t][2 * j], xv[t][2 * j + 1],
                                        acc[s], acc[s + 1], acc[s + 2], acc[s + 3]],
                    )
                    for e in range(4):
                        acc[s + e] = d[e]

    def streamed(self, x, w, ring, tid, rank, warp, g, c, row0):
        """W (and x, past the first steps) streamed through a ring of ``depth`` steps in this thread's own slots
        of shared memory: the copies of step i + depth - 1 go out while step i is multiplied, into the slot
        step i - 1 was read from (by this thread, a whole step earlier: no barrier). The first depth - 1
        steps' W go out before the wait, their x after it into registers. Same MMAs in the same order as
        ``multiply``: the same bits as the form with W at once."""
        rg, nt, depth, chunks, per = self.rg, self.nt, self.depth, self.chunks, self.per_step

        def w_src(i, r, h):
            return self.w_vec(w, rank, warp, g, c, row0, i, r, h)

        def x_src(i, t):
            return self.x_vec(x, rank, warp, g, c, i, t)

        def slot(i, q):
            return ring[None, tid, (i % depth) * per + q]

        for i in range(depth - 1):
            for r in range(rg):
                for h in range(2):
                    self.copy16(slot(i, r * 2 + h), w_src(i, r, h))
            cute.arch.cp_async_commit_group()
        cute.arch.griddepcontrol_wait()
        x_first = [[self.load16(x_src(i, t)) for t in range(nt)] for i in range(depth - 1)]
        acc = self.zeroed_acc()
        for i in range(chunks):
            nxt = i + depth - 1
            # Groups committed before this step's copies: min(chunks, i + depth - 1); step i's must be in.
            cute.arch.cp_async_wait_group(min(chunks, nxt) - i - 1)
            wv = [self.read16(slot(i, q)) for q in range(rg * 2)]
            if i < depth - 1:
                xv = x_first[i]
            else:
                xv = [self.read16(slot(i, rg * 2 + t)) for t in range(nt)]
            if nxt < chunks:
                for r in range(rg):
                    for h in range(2):
                        self.copy16(slot(nxt, r * 2 + h), w_src(nxt, r, h))
                for t in range(nt):
                    self.copy16(slot(nxt, rg * 2 + t), x_src(nxt, t))
                cute.arch.cp_async_commit_group()
            self.mma_step(acc, wv, xv)
        return acc

    @cute.kernel
    def kernel(self, x: cute.Tensor, w: cute.Tensor, out: cute.Tensor):
        tid, _, _ = cute.arch.thread_idx()
        rank, tile_idx, _ = cute.arch.block_idx()   # the cluster spans grid x: rank == block x
        warps, nt, cs = self.warps, self.nt, self.cs
        threads = warps * 32
        lane = tid % 32
        warp = tid // 32
        g = lane // 4
        c = lane % 4
        m_run = x.shape[0]
        row0 = tile_idx * (16 * self.rg)
        smem = cutlass.memory.SmemAllocator()
        if const_expr(self.push):
            # Peers store into this CTA's shared memory only after they wait on this arrival (step 4).
            cute.arch.cluster_arrive_relaxed()

        if const_expr(self.depth > 0):
            # 1-2. Streamed: W's first steps before the wait, the rest while multiplying.
            ring = smem.allocate_tensor(cutlass.Int32, cute.make_layout((4, threads, self.depth * self.per_step),
                                                                        stride=(1, 4, 4 * threads)),
                                        byte_alignment=16)
            acc = self.streamed(x, w, ring, tid, rank, warp, g, c, row0)
        else:
            # 1. W first: it does not depend on the kernel before this one.
            stage = None
            if const_expr(self.staged):
                stage = smem.allocate_tensor(cutlass.Int32, cute.make_layout((4, threads, self.wvecs),
                                                                             stride=(1, 4, 4 * threads)),
                                             byte_alignment=16)
            wr = self.issue_w(w, stage, tid, rank, warp, g, c, row0)

            # 2. x is written by the kernel before this one. The wait also stops the compiler from
            #    sinking W loads below it (where register pressure would put them, each next to its
            #    MMA, so their latencies add up); launched without PDL it returns at once.
            cute.arch.griddepcontrol_wait()
            xr = self.load_x(x, rank, warp, g, c)
            if const_expr(self.staged):
                # A thread reads back only its own slots: waiting for its own copies is enough.
                cute.arch.cp_async_wait_group(0)
                wr = [self.read16(mine) for mine in wr]
            acc = self.multiply(wr, xr)

        if const_expr(self.pdl):
            # Dependents still wait for this whole grid before they read out.
            cute.arch.griddepcontrol_launch_dependents()

        # 3. The warps in order, through shared memory.
        tile = self.tile
        share = tile // cs
        red = smem.allocate_tensor(cutlass.Float32, cute.make_layout((warps, tile), stride=(tile, 1)),
                                   byte_alignment=16)
        # Pull: this CTA's partial sums of the whole tile. Push: the cluster's partial sums of this CTA's
        # share, by rank (rank p's at [p x share, (p + 1) x share)), stored there by rank p.
        part = smem.allocate_tensor(cutlass.Float32, cute.make_layout((tile,)), byte_alignment=16)
        for s in cutlass.range_constexpr(self.slots):
            red[warp, s * 32 + lane] = acc[s]
        cute.arch.sync_threads()
        if const_expr(self.push):
            cute.arch.cluster_wait()  # every peer runs: its shared memory may be stored into
        for q in cutlass.range_constexpr((tile + threads - 1) // threads):
            e = q * threads + tid
            if e < tile:
                total = red[0, e]
                for p in cutlass.range_constexpr(1, warps):
                    total = total + red[p, e]
                if const_expr(self.push):
                    owner = e // share
                    mine = (part.iterator + rank * share + e - owner * share).toint()
                    cute.arch.inline_ptx(_DSMEM_STORE, read_only_args=[mine, owner, total])
                else:
                    part[e] = total

        # 4. The cluster's CTAs in rank order, through distributed shared memory: CTA `rank`
        #    finishes its share of the tile and writes it.
        if const_expr(cs > 1):
            cute.arch.cluster_arrive()  # release: this CTA's stores (push) or partial sums (pull) ...
            cute.arch.cluster_wait()    # acquire: ... and every peer's, seen here
        else:
            cute.arch.sync_threads()
        for q in cutlass.range_constexpr((share + threads - 1) // threads):
            e_local = q * threads + tid
            if e_local < share:
                e = rank * share + e_local
                if const_expr(self.push):
                    total = part[e_local]
                    for p in cutlass.range_constexpr(1, cs):
                        total = total + part[p * share + e_local]
                elif const_expr(cs > 1):
                    local = (part.iterator + e).toint()
                    total = cute.arch.inline_ptx(
                        _DSMEM_LOAD, write_only_types=[cutlass.Float32], read_only_args=[local, 0])
                    for p in cutlass.range_constexpr(1, cs):
                        total = total + cute.arch.inline_ptx(
                            _DSMEM_LOAD, write_only_types=[cutlass.Float32], read_only_args=[local, p])
                else:
                    total = part[e]
                # e = s x 32 + lane; accumulator s = (r x nt + t) x 4 + f; the MMA's D fragment: f 0-1
                # row g, f 2-3 row g + 8; x row 8 t + 2 c + f % 2.
                es = e // 32
                ln = e % 32
                ef = es % 4
                et = (es // 4) % nt
                er = es // (4 * nt)
                mrow = 8 * et + 2 * (ln % 4) + ef % 2
                if mrow < m_run:
                    out[mrow, row0 + 16 * er + ln // 4 + 8 * (ef // 2)] = total
        if const_expr(cs > 1 and not self.push):
            # No CTA leaves while a peer may still read its shared memory. (Push: after the barrier
            # above no CTA touches another's.)
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()
