"""The CuTe-DSL kernel of the ``cutedsl-dot`` backend: out[M, N] fp32 = x[M, K] @ w[N, K]^T for M <= 8.

Imported only when the backend binds a kernel (cutlass is imported lazily).

Why it is fast at small M: the call is a read of W, and this kernel has all
of its W loads in flight at once. A CTA owns ``rows`` rows of W over the
whole K; each of its ``threads`` threads loads ``iters`` 16-byte vectors of
each row (K = iters x threads x 8, every offset known when compiled), into
registers, before it multiplies anything. With ``pdl`` those loads are
issued before ``griddepcontrol.wait`` (W does not depend on the kernel
before this one) and x is read after it (``wait_first``: before any load;
``release_last``: dependents released after the store, not after the
multiply-adds; ``cutedsl_dot.PLACEMENTS``). There is no split-K: no
workspace, no atomics, no second kernel.

Why it is exact: every product is bf16 x bf16, exact in fp32 (fused
multiply-add of an exact product); every sum is an fp32 sum, in an order
fixed by the config: per thread along its K slots, then a butterfly over
the warp, then the warps in index order. Deterministic.

``cutedsl_dot.order_reference`` computes the same sums in the same order
with torch (that module imports no cutlass), so the GPU tests compare bits.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.memory
from cutlass import const_expr


class DotKernel:
    """One compiled form: (N, K) fixed, M <= ``max_m`` at run time; ``vec`` bf16 a load (8: 16 bytes)."""

    def __init__(self, n: int, k: int, threads: int, rows: int, max_m: int, pdl: bool, vec: int,
                 branchless_x: bool = False, min_blocks: bool = False, ctas_cap: int = 0,
                 wait_first: bool = False, release_last: bool = False) -> None:
        if threads % 32 or k % (vec * threads) or n % rows:
            raise ValueError(f"threads={threads}, rows={rows} do not tile N={n}, K={k}")
        if ctas_cap < 0:
            raise ValueError(f"ctas_cap={ctas_cap}: must be >= 0 (0: no cap)")
        self.n, self.k, self.threads, self.rows, self.max_m, self.pdl = n, k, threads, rows, max_m, pdl
        self.vec = vec
        self.branchless_x = branchless_x
        self.wait_first, self.release_last = wait_first, release_last  # with pdl only (DotConfig's rule)
        # ``_mb1``: at least one CTA an SM (``.minnctapersm 1``); otherwise no occupancy hint, as before.
        self.hints = {"min_blocks_per_mp": 1} if min_blocks else {}
        self.iters = k // (vec * threads)
        self.warps = threads // 32
        self.blocks = n // rows                   # `rows` rows of W each
        # A CTA for each block; ``_g<C>``: C CTAs, each taking every C-th block in turn.
        self.grid = (min(ctas_cap, self.blocks) if ctas_cap else self.blocks, 1, 1)

    def launch_options(self, stream) -> dict:
        """The launch's options, one place for both forms: a CTA per ``grid`` entry, the shared memory that
        ``reduction_buffer`` takes (rows * max_m x warps fp32, 16 bytes for its alignment), PDL, the hints."""
        return dict(grid=self.grid, block=(self.threads, 1, 1), smem=self.rows * self.max_m * self.warps * 4 + 16,
                    stream=stream, use_pdl=self.pdl, **self.hints)

    @cute.jit
    def __call__(self, x: cute.Tensor, w: cute.Tensor, out: cute.Tensor, stream):
        self.kernel(x, w, out).launch(**self.launch_options(stream))

    @cute.kernel
    def kernel(self, x: cute.Tensor, w: cute.Tensor, out: cute.Tensor):
        bid, _, _ = cute.arch.block_idx()
        self.wait_at_top()
        if const_expr(self.grid[0] == self.blocks):
            self.rows_of(x, w, out, bid * self.rows, self.reduction_buffer())
        else:
            # ``_g``: with a small cap every CTA is resident from the start, none queues, and the SMs keep room
            # for the kernels of SGLang's other streams (issue 15, overlapped region; run 26 measured it).
            red = self.reduction_buffer()
            for blk in cutlass.range(bid, self.blocks, self.grid[0], unroll=1):
                self.rows_of(x, w, out, blk * self.rows, red)
                cute.arch.sync_threads()  # the next block's rows write `red` again
        self.release_at_end()

    @cute.jit
    def wait_at_top(self):
        """``lw``: wait for the kernel before this one before any load (else ``rows_of`` waits after W)."""
        if const_expr(self.wait_first):
            cute.arch.griddepcontrol_wait()

    @cute.jit
    def release_at_end(self):
        """``ls``/``lw``: release the dependents after this CTA's stores (else ``rows_of`` does, after the
        multiply-adds); a CTA that exits without it releases them as it exits."""
        if const_expr(self.release_last):
            cute.arch.griddepcontrol_launch_dependents()

    @cute.jit
    def reduction_buffer(self) -> cute.Tensor:
        """The warps' partial sums, [rows * max_m, warps] fp32 in shared memory: what the launch's ``smem``
        holds (one per CTA, whichever rows it takes)."""
        smem = cutlass.memory.SmemAllocator()
        return smem.allocate_tensor(cutlass.Float32, cute.make_layout((self.rows * self.max_m, self.warps),
                                                                      stride=(self.warps, 1)), byte_alignment=16)

    @cute.jit
    def rows_of(self, x: cute.Tensor, w: cute.Tensor, out: cute.Tensor, row0: cutlass.Int32, red: cute.Tensor):
        """The CTA's ``rows`` rows of ``w`` from ``row0``: out[:, row0:row0 + rows], reduced through ``red``."""
        tid, _, _ = cute.arch.thread_idx()
        rows, iters, max_m, threads, warps, vec = self.rows, self.iters, self.max_m, self.threads, self.warps, self.vec
        m_run = x.shape[0]

        # 1. Every W vector this thread reads, into registers, before anything waits.
        wr = []
        for r in cutlass.range_constexpr(rows):
            w_vec = cute.zipped_divide(w[row0 + r, None], (vec,))  # ((vec), (K / vec))
            for i in cutlass.range_constexpr(iters):
                src = w_vec[None, i * threads + tid]
                dst = cute.make_rmem_tensor_like(src)
                cute.autovec_copy(src, dst)
                wr.append(dst)

        # 2. x is written by the kernel before this one.
        if const_expr(self.pdl and not self.wait_first):
            cute.arch.griddepcontrol_wait()

        acc = cute.make_rmem_tensor((rows * max_m,), cutlass.Float32)
        acc.fill(0.0)
        for mm in cutlass.range_constexpr(max_m):
            if const_expr(self.branchless_x):
                # A row past the call's M reads x's last row (its sums are never stored): no branch, so the
                # compiler may issue every row's loads before the first multiply. Behind `if mm < m_run` a
                # row's loads wait for the row before's multiplies (sm_90a SASS, stop 36).
                self.multiply_row(x, wr, acc, cutlass.min(mm, m_run - 1), mm)
            elif mm < m_run:
                self.multiply_row(x, wr, acc, mm, mm)

        if const_expr(self.pdl and not self.release_last):
            # Dependents still wait for this whole grid before they read out.
            cute.arch.griddepcontrol_launch_dependents()

        # 3. Butterfly over the warp, then the warps in index order.
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        for j in cutlass.range_constexpr(rows * max_m):
            v = cute.arch.warp_reduction_sum(acc[j])
            if lane == 0:
                red[j, warp] = v
        cute.arch.sync_threads()
        if tid < rows * max_m:
            mm = tid % max_m
            if mm < m_run:
                total = cutlass.Float32(0.0)
                for q in cutlass.range_constexpr(warps):
                    total = total + red[tid, q]
                out[mm, row0 + tid // max_m] = total

    @cute.jit
    def multiply_row(self, x: cute.Tensor, wr: list, acc: cute.Tensor, row, mm: int):
        """acc[r * max_m + mm] += (W row r) . (x row ``row``) over this thread's K slots, in slot order."""
        tid, _, _ = cute.arch.thread_idx()
        x_vec = cute.zipped_divide(x[row, None], (self.vec,))
        for i in cutlass.range_constexpr(self.iters):
            src = x_vec[None, i * self.threads + tid]
            xr = cute.make_rmem_tensor_like(src)
            cute.autovec_copy(src, xr)
            xf = xr.load().to(cutlass.Float32)
            for r in cutlass.range_constexpr(self.rows):
                wf = wr[r * self.iters + i].load().to(cutlass.Float32)
                s = acc[r * self.max_m + mm]
                for v in cutlass.range_constexpr(self.vec):
                    s = s + wf[v] * xf[v]
                acc[r * self.max_m + mm] = s


class DotPairKernel(DotKernel):
    """Two GEMMs on the same x in one launch: out[M, N] = x @ w^T and out2[M, N2] = x @ w2^T (DeepSeek-V4's
    ratio-4 layers: the indexer's compressor, N=512, and the layer's, N=2048). The first N / rows CTAs are
    ``DotKernel``'s CTAs on (w, out), the rest the same CTAs on (w2, out2): each output's bits are those of a
    ``DotKernel`` call of the same form, and one launch pays one launch's fixed cost for both."""

    def __init__(self, n: int, n2: int, k: int, threads: int, rows: int, max_m: int, pdl: bool, vec: int,
                 branchless_x: bool = False, min_blocks: bool = False, wait_first: bool = False,
                 release_last: bool = False) -> None:
        if n2 <= 0 or n2 % rows:
            raise ValueError(f"rows={rows} does not tile N2={n2}")
        super().__init__(n, k, threads, rows, max_m, pdl, vec, branchless_x, min_blocks, 0,  # no ``_g`` cap
                         wait_first, release_last)
        self.n2 = n2
        self.first = n // rows                    # the CTAs on (w, out)
        self.grid = (self.first + n2 // rows, 1, 1)

    @cute.jit
    def __call__(self, x: cute.Tensor, w: cute.Tensor, out: cute.Tensor, w2: cute.Tensor, out2: cute.Tensor,
                 stream):
        self.kernel(x, w, out, w2, out2).launch(**self.launch_options(stream))

    @cute.kernel
    def kernel(self, x: cute.Tensor, w: cute.Tensor, out: cute.Tensor, w2: cute.Tensor, out2: cute.Tensor):
        bid, _, _ = cute.arch.block_idx()
        # One buffer, allocated before the branch: each body allocating its own placed the second past the
        # launch's smem (H100, run 21: an illegal address at M >= 2).
        red = self.reduction_buffer()
        self.wait_at_top()
        if bid < self.first:
            self.rows_of(x, w, out, bid * self.rows, red)
        else:
            self.rows_of(x, w2, out2, (bid - self.first) * self.rows, red)
        self.release_at_end()
