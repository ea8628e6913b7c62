"""The fallback every routed call can take: SGLang's default ``linear_bf16_fp32`` path, never rounded to 16 bits."""

from __future__ import annotations

import torch


def mm_fp32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """out[..., N] fp32 = x[..., K] @ w[N, K]^T."""
    if x.dim() != 2:
        lead = x.shape[:-1]
        return mm_fp32(x.reshape(-1, x.shape[-1]), w).reshape(*lead, w.shape[0])
    if x.is_cuda and x.dtype == torch.bfloat16 and w.dtype == torch.bfloat16:
        return torch.mm(x, w.t(), out_dtype=torch.float32)
    return torch.mm(x.float(), w.float().t())
