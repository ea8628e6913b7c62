"""``python -m sglang_fp32gemm explain``: what the plugin would do here, and why."""

from __future__ import annotations

import collections
import io
import itertools
import os
from typing import Optional

import torch

from sglang_fp32gemm import config as config_mod
from sglang_fp32gemm import routing
from sglang_fp32gemm import settings as settings_mod
from sglang_fp32gemm.backends import default_backends, parsers, verdict_cache
from sglang_fp32gemm.errors import ConfigError
from sglang_fp32gemm.table import DeviceKey, device_key

# The compressor GEMMs: (N, K) -> who calls them. V4-Pro (hidden 7168), V4-Flash (4096), and
# DeepSeek-V4.1-Flash (5120), whose ratio-2 compressor runs wkv and wgate (N=512) or fused (N=1024).
_V4 = {512: "indexer kv_score", 1024: "HCA wkv_gate", 2048: "CSA wkv_gate", 2560: "fused CSA+indexer"}
SHAPES = {**{(n, k): f"V4-{name} {what}" for k, name in ((7168, "Pro"), (4096, "Flash")) for n, what in _V4.items()},
          (512, 5120): "V4.1-Flash ratio-2 wkv / wgate (kind v41)",
          (1024, 5120): "V4.1-Flash ratio-2 fused wkv_gate (kind v41)"}
#: A DeepSeek-V4 ratio-4 layer's pair: the indexer's compressor, the layer's (``pairs.py``).
PAIR_WIDTHS = (512, 2048)


def _kernel(r) -> Optional[str]:
    """``backend kernelName`` of an ``Entry`` or a ``Plan``; None for the fallback."""
    if isinstance(r, routing.Plan):
        return f"{r.backend.name} {r.backend.kernel_name(r.cfg)}" if r.backend is not None else None
    return f"{r.route} {r.detail}" if r.run is not None else None


def _shape_route(router: routing.Router, dev: Optional[DeviceKey], device: Optional[torch.device],
                 m: int, n: int, k: int) -> str:
    text = _one_route(router, dev, device, m, n, k, False)
    if router.serial_routes is not None:
        serial = _one_route(router, dev, device, m, n, k, True)
        if serial != text:
            text += f"; outside SGLang's multi-stream region: {serial}"
    return text


def _one_route(router: routing.Router, dev: Optional[DeviceKey], device: Optional[torch.device],
               m: int, n: int, k: int, serial: bool) -> str:
    # On this device, the route itself, resolved as a call would resolve it (bind and probe included).
    r = (router.resolve(device, m, n, k, serial) if device is not None
         else router.plan(dev, m, n, k, check_available=False, serial=serial))
    kernel = _kernel(r)
    text = f"{kernel} ({r.reason})" if kernel else f"torch ({r.reason})"
    if r.eager is not None:  # the eager table's row, or the row's backend launches slowly outside a graph
        a, kernel = r.eager, _kernel(r.eager)
        text += "; eager calls: " + (f"{kernel} (row {a.row.source})" if kernel else f"torch ({a.reason})")
    return text


def _compress(items: list[tuple[int, str]]) -> list[str]:
    out = []
    for route, group in itertools.groupby(items, key=lambda item: item[1]):
        ms = [m for m, _ in group]
        span = f"M={ms[0]}" if len(ms) == 1 else f"M={ms[0]}-{ms[-1]}"
        out.append(f"    {span:10s} {route}")
    return out


def explain(device_key_override: Optional[str] = None, max_m: int = 64) -> tuple[int, str]:
    """(exit code, report). Non-zero when a setting is bad."""
    buf = io.StringIO()
    p = lambda *a: print(*a, file=buf)  # noqa: E731
    backends = default_backends()
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
        # Load as if enabled, so a user sees what enabling would do.
        env = dict(os.environ, **{settings_mod.ENABLE_VAR: "1"})
        cfg = config_mod.load(env, parsers=parsers(backends), pair_parsers=parsers(backends, pair=True))
        serial = cfg.serial_table
        serial_files = [f for f in serial.files if f not in cfg.table.files] if serial is not None else []
        p(f"tables: {', '.join(cfg.table.files + cfg.det_table.files + cfg.eager_table.files + serial_files)} "
          f"({len(cfg.table)} rows, {len(cfg.det_table)} deterministic, {len(cfg.eager_table)} eager, "
          + ("the serial files laid over the fast table outside SGLang's multi-stream region, files of "
             f"{settings_mod.CONFIG_VAR} over the packaged ones)" if serial_files
             else "no serial table)"))
        if cfg.pair_table is not None:
            p(f"pair table: {', '.join(cfg.pair_table.files)} ({len(cfg.pair_table)} rows: a ratio-4 layer's two "
              "compressor GEMMs in one launch outside SGLang's multi-stream region)")
        tables = (cfg.table, cfg.det_table, cfg.eager_table, serial, cfg.pair_table)
        # By source: the serial table lies over the fast one, so a fast file's rows are in both.
        model_rows = {r.source: r.gfx for t in tables if t is not None for r in t.every_row() if r.model}
        if model_rows:
            counts = sorted(collections.Counter(model_rows.values()).items())
            p(f"rows for one GPU model: {', '.join(f'{g} ({n})' for g, n in counts)}, read only on a GPU "
              "of that model (docs/design.md, \"One GPU model's rows\")")
        p(f"layers: {cfg.selection.describe()}")
        # Where the child-process probes (gfx950 kernels) keep their passes.
        p(f"probe verdicts: {verdict_cache.describe_dir(settings_mod.probe_cache_dir())}")
    except ConfigError as e:
        p(f"error: {e}")
        return 2, buf.getvalue()
    try:
        from sglang_fp32gemm import plugin

        for line in plugin.describe():
            p(line)
    except Exception as e:  # explain must say what it can
        p(f"hooks: unknown ({type(e).__name__}: {e})")

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
        p("device: no GPU (CPU only): every call runs torch; --device-key sm90-h200:132 shows an H200's routes, "
          "sm90-h100:132 an H100's")

    router = routing.get_router()
    p("backends:")
    for name, (ok, why) in router.available().items():
        p(f"  {name:11s} {'available' if ok else 'unavailable'} - {why}")
    code = 0
    if router.error:
        p(f"error: {router.error}")
        code = 2
    # The process router when enabled, else one built from the same tables
    # with enablement forced on: the routes are computed by the same code.
    shown = router if router.enabled else routing.Router(cfg, backends)
    p("routes:" if router.enabled else "routes if enabled:")
    for (n, k), what in sorted(SHAPES.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
        p(f"  N={n} K={k} ({what}):")
        items = [(m, _shape_route(shown, dev, device, m, n, k)) for m in range(1, max_m + 1)]
        for line in _compress(items):
            p(line)
    if shown.pairs is not None:
        n1, n2 = PAIR_WIDTHS
        for k in (7168, 4096):
            items = [(m, shown.pairs.plan_text(dev, m, n1, n2, k) or "each call its own route")
                     for m in range(1, max_m + 1)]
            p(f"  N={n1}+{n2} K={k} (a ratio-4 layer's indexer and layer compressors, outside the multi-stream "
              "region, where their x is the same tensor):")
            for line in _compress(items):
                p(line)
    no_layer = shown.caller(None)
    p("  other callers of linear_bf16_fp32 (no compressor layer: DeepSeek's MoE gate, LongCat, ...): "
      + ("routed by the table alone, as above for their shape" if no_layer.selected
         else f"not routed: {no_layer.reason}"))
    kernels = shown.bound_kernels()
    if kernels:
        p("kernels bound on this device:")
        for b in kernels:
            state = "ok" if b.fn is not None else f"DISABLED: {b.error}"
            probe = b.probe.describe() if b.probe is not None else "no probe"
            p(f"  {b.backend} {b.kernel_name}: {state}; {probe}")
    counters = router.counters()
    if counters:
        p("calls in this process (route, kernel or reason: count):")
        for (route, reason), c in sorted(counters.items(), key=lambda kv: -kv[1]):
            p(f"  {route}, {reason}: {c}")
    return code, buf.getvalue()
