"""The ``@triton.jit`` kernels of the Triton backends and the K loop they share.

Imported only when a Triton backend builds its kernel (``get_kernel``), so
that triton is imported lazily. What each kernel is for, and why it is
exact, is said in its backend's module (``triton.py``: the epoch kernel;
``triton_det.py``: the ticket kernel).

Every product is a bf16 x bf16 product, exact in fp32, and every sum is an
fp32 sum: nothing is rounded to 16 bits.

PDL (``PDL=True``, launched with ``launch_pdl=True``): the first W tile is
loaded before ``gdc_wait`` (W does not depend on the kernel before this
one), everything else after it: x, the output, the counters. Dependents are
released after the K loop; a dependent that waits with ``gdc_wait`` still
waits for this grid to finish. (Releasing after the output's writes instead,
the placement that made the dot kernel faster alone in run 33, was 0.2-0.35 us
slower at all ten forms timed on an H200, run 34e, and was removed.)
``UPCAST`` (the CPU interpreter) skips the two PTX instructions, which the
interpreter cannot run.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def _mac(acc, w, x, SWAP: tl.constexpr, UPCAST: tl.constexpr):
    """``acc += w . x^T`` for a [BN, BK] W tile and a [BM, BK] x tile.

    ``SWAP``: acc is [BN, BM] (W rows on the MMA's M side), else [BM, BN].
    """
    if UPCAST:
        # Triton's CPU interpreter mis-multiplies bf16 dots; exact fp32
        # ("ieee", not tf32) products give the same result.
        w = w.to(tl.float32)
        x = x.to(tl.float32)
        if SWAP:
            acc = tl.dot(w, tl.trans(x), acc, input_precision="ieee", out_dtype=tl.float32)
        else:
            acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee", out_dtype=tl.float32)
    else:
        if SWAP:
            acc = tl.dot(w, tl.trans(x), acc, out_dtype=tl.float32)
        else:
            acc = tl.dot(x, tl.trans(w), acc, out_dtype=tl.float32)
    return acc


@triton.jit
def prefetch_w(w_ptrs, PDL: tl.constexpr, UPCAST: tl.constexpr):
    """With ``PDL``: the first W tile, loaded before ``gdc_wait``; else nothing (0)."""
    if PDL:
        w0 = tl.load(w_ptrs)
        if not UPCAST:
            gdc_wait()
        return w0
    else:
        return 0


@triton.jit
def k_loop(w0, w_ptrs, x_ptrs, mask_m, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
           K_ITERS: tl.constexpr, SWAP: tl.constexpr, UPCAST: tl.constexpr, PDL: tl.constexpr):
    """One split's K loop: W rows . x^T over ``K_ITERS`` steps of ``BK``, fp32.

    Returns [BN, BM] when ``SWAP``, else [BM, BN]. With ``PDL``, ``w0`` is
    ``prefetch_w``'s first W tile and dependents are released after the loop.
    """
    if SWAP:
        acc = tl.zeros((BN, BM), dtype=tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    if PDL:
        acc = _mac(acc, w0, tl.load(x_ptrs, mask=mask_m[:, None], other=0.0), SWAP, UPCAST)
        w_ptrs += BK
        x_ptrs += BK
    for _ in range(0, K_ITERS - PDL):
        acc = _mac(acc, tl.load(w_ptrs), tl.load(x_ptrs, mask=mask_m[:, None], other=0.0), SWAP, UPCAST)
        w_ptrs += BK
        x_ptrs += BK
    if PDL and not UPCAST:
        gdc_launch_dependents()
    return acc


# M is not specialised: one compile serves every M.
@triton.jit(do_not_specialize=["M"])
def epoch_splitk_fp32_kernel(
    x_ptr, w_ptr, out_ptr, flag_ptr, cnt_ptr,
    M, N, K,
    stride_xm, stride_wn, stride_om,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    SPLIT_K: tl.constexpr, K_ITERS: tl.constexpr,
    UPCAST: tl.constexpr, PDL: tl.constexpr,
):
    """The ``triton`` backend's kernel (``triton.py`` says how the epochs work)."""
    pid = tl.program_id(0)
    tiles = tl.num_programs(0) // SPLIT_K
    # Split-major program order: every split-0 program has a lower id.
    split = pid // tiles
    tile = pid - split * tiles
    n_tiles = N // BN
    tile_m = tile // n_tiles
    tile_n = tile - tile_m * n_tiles
    epoch_tile(x_ptr, w_ptr, out_ptr, flag_ptr, cnt_ptr, M, stride_xm, stride_wn, stride_om,
               split, tile, tile_m, tile_n, BM, BN, BK, SPLIT_K, K_ITERS, UPCAST, PDL)


# One launch for two GEMMs on the same x: out = x @ w^T [M, N] and out2 = x @ w2^T [M, N2].
@triton.jit(do_not_specialize=["M"])
def epoch_pair_fp32_kernel(
    x_ptr, w_ptr, out_ptr, w2_ptr, out2_ptr, flag_ptr, cnt_ptr,
    M, N, N2, K,
    stride_xm, stride_wn, stride_om, stride_om2,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    SPLIT_K: tl.constexpr, K_ITERS: tl.constexpr,
    UPCAST: tl.constexpr, PDL: tl.constexpr,
):
    """The ``triton`` backend's pair form: the tiles of N + N2 W rows in ``epoch_splitk_fp32_kernel``'s order,
    the first N // BN of each row of tiles on (w, out), the rest on (w2, out2); each tile's sums are those of
    the single kernel's tile."""
    pid = tl.program_id(0)
    tiles = tl.num_programs(0) // SPLIT_K
    split = pid // tiles
    tile = pid - split * tiles
    n_tiles = N // BN
    n_all = n_tiles + N2 // BN
    tile_m = tile // n_all
    tile_n = tile - tile_m * n_all
    if tile_n < n_tiles:
        epoch_tile(x_ptr, w_ptr, out_ptr, flag_ptr, cnt_ptr, M, stride_xm, stride_wn, stride_om,
                   split, tile, tile_m, tile_n, BM, BN, BK, SPLIT_K, K_ITERS, UPCAST, PDL)
    else:
        epoch_tile(x_ptr, w2_ptr, out2_ptr, flag_ptr, cnt_ptr, M, stride_xm, stride_wn, stride_om2,
                   split, tile, tile_m, tile_n - n_tiles, BM, BN, BK, SPLIT_K, K_ITERS, UPCAST, PDL)


@triton.jit
def epoch_tile(x_ptr, w_ptr, out_ptr, flag_ptr, cnt_ptr, M, stride_xm, stride_wn, stride_om,
               split, tile, tile_m, tile_n,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT_K: tl.constexpr,
               K_ITERS: tl.constexpr, UPCAST: tl.constexpr, PDL: tl.constexpr):
    """One program of the epoch kernels: split ``split`` of tile (``tile_m``, ``tile_n``) of out; ``tile``
    indexes its flag and counters."""
    offs_n = tile_n * BN + tl.arange(0, BN)   # W rows: the MMA's M side
    offs_m = tile_m * BM + tl.arange(0, BM)   # tokens: the MMA's N side
    offs_k = tl.arange(0, BK)
    mask_m = offs_m < M
    # out[m, n] = acc[n, m]: a [BN, BM] tile of out^T.
    out_ptrs = out_ptr + offs_m[None, :] * stride_om + offs_n[:, None]
    out_mask = tl.broadcast_to(mask_m[None, :], (BN, BM))
    # K_ITERS is a compile-time constant so k0 is a known multiple of BK
    # (a run-time K // SPLIT_K makes Triton fall back to narrow loads).
    k0 = split * (K_ITERS * BK)
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + (k0 + offs_k)[None, :]
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :]

    w0 = prefetch_w(w_ptrs, PDL, UPCAST)
    if SPLIT_K > 1:
        # One atomic per program per call: its epoch for this (tile, split).
        epoch = tl.atomic_add(cnt_ptr + tile * SPLIT_K + split, 1, sem="relaxed") + 1
        if split == 0:
            tl.store(out_ptrs, tl.zeros((BN, BM), dtype=tl.float32), mask=out_mask)
            # Every thread's zeros are written before the flag is released.
            tl.debug_barrier()
            tl.atomic_xchg(flag_ptr + tile, epoch, sem="release")
    acc = k_loop(w0, w_ptrs, x_ptrs, mask_m, BM, BN, BK, K_ITERS, True, UPCAST, PDL)

    if SPLIT_K == 1:
        tl.store(out_ptrs, acc, mask=out_mask)
    else:
        if split != 0:
            # Wait until split 0 has zeroed the tile in this call. Wrapping
            # int32 difference: ">= epoch", which in correct use is "== epoch".
            seen = tl.atomic_add(flag_ptr + tile, 0, sem="acquire")
            while seen - epoch < 0:
                seen = tl.atomic_add(flag_ptr + tile, 0, sem="acquire")
        tl.atomic_add(out_ptrs, acc, mask=out_mask, sem="relaxed")


# M is not specialised: one compile serves every M of a BM bucket.
@triton.jit(do_not_specialize=["M"])
def splitk_fp32_kernel(
    x_ptr, w_ptr, out_ptr, ws_ptr, cnt_ptr,
    M, N, K,
    stride_xm, stride_wn, stride_om,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    SPLIT_K: tl.constexpr, K_ITERS: tl.constexpr,
    UPCAST: tl.constexpr, PDL: tl.constexpr,
):
    """The ``triton-det`` backend's kernel (``triton_det.py`` says how the tickets work)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    n_tiles = tl.num_programs(0)
    m_tiles = tl.num_programs(2)

    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    mask_m = offs_m < M
    # K_ITERS is a compile-time constant so k0 is a known multiple of BK:
    # with a run-time K // SPLIT_K Triton cannot prove alignment and
    # falls back to narrow loads (10-40x slower at SPLIT_K=7 on an H200).
    k0 = pid_k * (K_ITERS * BK)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :]
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + (k0 + offs_k)[None, :]
    w0 = prefetch_w(w_ptrs, PDL, UPCAST)
    acc = k_loop(w0, w_ptrs, x_ptrs, mask_m, BM, BN, BK, K_ITERS, False, UPCAST, PDL)

    out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    if SPLIT_K == 1:
        tl.store(out_ptrs, acc, mask=mask_m[:, None])
    else:
        tile = pid_m * n_tiles + pid_n
        n_all_tiles = n_tiles * m_tiles
        tile_offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        ws_tile = ws_ptr + tile * (BM * BN) + tile_offs
        split_stride = n_all_tiles * BM * BN
        tl.store(ws_tile + pid_k * split_stride, acc)
        # Every thread's partial is written before the ticket is taken;
        # acq_rel publishes them to the program that draws the last one.
        tl.debug_barrier()
        ticket = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if ticket == SPLIT_K - 1:
            # Unrolled, so all partial loads are in flight at once (one L2
            # round trip), and summed in split order whichever program
            # arrived last: the result is deterministic.
            total = tl.zeros((BM, BN), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                total += tl.load(ws_tile + s * split_stride, cache_modifier=".cg")
            tl.store(out_ptrs, total, mask=mask_m[:, None])
            # Leave the counter at zero for the next call on this stream.
            tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")
