"""``python -m sglang_fp32gemm explain``: what the plugin would do here, and why."""

from __future__ import annotations

import io
from typing import Optional

import torch

from sglang_fp32gemm import layers as layers_mod
from sglang_fp32gemm import routing
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.errors import ConfigError
from sglang_fp32gemm.table import DeviceKey, TunedTable, device_key

K_DSV4 = 7168
N_DSV4 = {512: "indexer kv_score", 1024: "HCA wkv_gate", 2048: "CSA wkv_gate", 2560: "fused CSA+indexer"}


def _shape_route(router: routing.Router, dev: Optional[DeviceKey], device: Optional[torch.device],
                 m: int, n: int, k: int) -> str:
    if not router.enabled:
        return "torch (plugin disabled)"
    if device is not None:
        # A real call on this device: the routing decision itself.
        x = torch.randn(m, k, device=device).bfloat16()
        w = torch.randn(n, k, device=device).bfloat16()
        d = router.decide(x, w)
        return f"{d.route} ({d.reason})"
    row = router.table.lookup(dev, m, n, k) if (router.table is not None and dev is not None) else None
    if row is None:
        return "torch (no tuned row)"
    names = [b.name for b in router.backends.get(row.libtype, [])]
    return f"row {row.source} -> libtype {row.libtype} ({', '.join(names) or 'torch'}); {row.kernelName}"


def _compress(items: list[tuple[int, str]]) -> list[str]:
    out, i = [], 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1][1] == items[i][1]:
            j += 1
        ms = f"M={items[i][0]}" if i == j else f"M={items[i][0]}-{items[j][0]}"
        out.append(f"    {ms:10s} {items[i][1]}")
        i = j + 1
    return out


def explain(device_key_override: Optional[str] = None, max_m: int = 64) -> tuple[int, str]:
    """(exit code, report). Non-zero when a setting is bad."""
    buf = io.StringIO()
    p = lambda *a: print(*a, file=buf)  # noqa: E731
    code = 0
    given_key: Optional[DeviceKey] = None
    try:
        if device_key_override:
            given_key = DeviceKey.parse(device_key_override)
        s = settings_mod.reload()
        p(f"enabled: {s.enabled} (source: {s.enabled_source}; flag --enable-flydsl-fp32-gemm or "
          f"{settings_mod.ENABLE_VAR})")
        for problem in s.problems:
            p(f"warning: ignored while disabled, an error once enabled: {problem}")
        p(f"deterministic: {s.deterministic} (source: {s.deterministic_source})")
        table = TunedTable.load(s.config_paths)
        p(f"tables: {', '.join(table.files)} ({len(table)} rows)")
        sel = layers_mod.load(s.layers_path)
        p(f"layers: {sel.describe()}")
    except ConfigError as e:
        p(f"error: {e}")
        return 2, buf.getvalue()

    device = None
    if given_key is not None:
        dev = given_key
        p(f"device key: {dev} (given on the command line; no call is made)")
    elif torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
        dev = device_key(device)
        p(f"device: {torch.cuda.get_device_name(device)}; key {dev}")
    else:
        dev = None
        p("device: no GPU (CPU only): every call runs torch")

    from sglang_fp32gemm.backends import default_backends

    backends = default_backends()
    p("backends:")
    for libtype, bs in backends.items():
        for b in bs:
            ok, why = b.available()
            p(f"  {b.name:7s} (libtype {libtype}): {'available' if ok else 'unavailable'} - {why}")
    router = routing.get_router()
    router.ensure_ready()
    if router.error:
        p(f"error: {router.error}")
        code = 2
    probes = router.probes()
    if probes:
        p("probes:")
        for (name, d), r in probes.items():
            p(f"  {name} on {d}: {'passed' if r.ok else 'FAILED'} - {r.describe()}")
    for (name, d), why in router.broken().items():
        p(f"  {name} on {d}: disabled after a run-time error: {why}")
    # Show the table's decision even when disabled, so a user can see what
    # enabling would do.
    shown = router if router.enabled else routing.Router(
        settings_mod.Settings(True, "explain", s.config_paths, s.layers_path, s.deterministic, s.deterministic_source),
        table, backends, sel)
    if not router.enabled:
        p("routes if enabled:")
    else:
        p("routes:")
    for n, what in N_DSV4.items():
        p(f"  N={n} K={K_DSV4} ({what}):")
        items = [(m, _shape_route(shown, dev, device, m, n, K_DSV4)) for m in range(1, max_m + 1)]
        for line in _compress(items):
            p(line)
    counters = router.counters()
    if counters:
        p("calls in this process (backend, reason: count):")
        for (route, reason), c in sorted(counters.items(), key=lambda kv: -kv[1]):
            p(f"  {route}, {reason}: {c}")
    return code, buf.getvalue()
