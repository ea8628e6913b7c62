"""Run the plugin inside one installed SGLang release and print what happened as JSON.

Used by tests/test_releases.py, which starts it in a fresh interpreter whose
PYTHONPATH puts that release's folder (pip --target, see
scripts/setup_releases.sh) first, then the worktree, then tests/. The last
stdout line is ``REPORT {json}``; the test asserts on it.

CPU stand-ins (tests only), each reported in the output:
- releases 0.5.13-0.5.16 compute SGLang's default GEMM with
  ``torch.mm(x, w.t(), out_dtype=torch.float32)``, which has no CPU kernel:
  a CPU kernel for ``aten::mm.dtype`` (fp32 product of the given inputs) is
  registered when the op is missing;
- release 0.5.12 reads ``SGLANG_OPT_BF16_FP32_GEMM_ALGO`` at call time and
  would compile a CUDA extension by default: the test sets it to ``torch``;
- ``compute_kv_score`` asks SGLang's context-parallel predicate, which needs a
  running server's parallel context: the compressor module's
  ``nsa_use_prefill_cp`` / ``dsa_use_prefill_cp`` are replaced by "no CP";
- ROCm with aiter: SGLang's module globals (``_use_aiter``, ``tgemm``,
  ``_tgemm``) are set to the fake aiter of tests/fakes/fake_aiter.py in its
  bf16-rounding mode, as ``SGLANG_USE_AITER=1`` on ROCm would set them.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import time
import types

T0 = time.time()
REP: dict = {"stand_ins": []}

import torch  # noqa: E402

K = 7168
M = 4
# DeepSeek-V4-Pro: kind -> (layer_id, is_in_indexer, compress_ratio, head_dim, wkv_gate N)
KINDS = {"hca": (2, False, 128, 512, 1024), "csa": (3, False, 4, 512, 2048), "indexer": (3, True, 4, 128, 512)}
CFG = types.SimpleNamespace(hidden_size=K, rms_norm_eps=1e-6, qk_rope_head_dim=64)
COMP = "sglang.srt.layers.attention.dsv4.compressor"
# Modules that bind linear_bf16_fp32 by name in some release; imported before
# or after the plugin loads, where they exist and import on this CPU machine.
BEFORE = [COMP, "sglang.jit_kernel.dsv4", "sglang.kernels.ops.attention.dsv4"]
AFTER = ["sglang.srt.layers.attention.dsv4.dsv41_sparse", "sglang.srt.models.longcat_flash",
         "sglang.srt.layers.attention.dsv4.compressor_v2", "sglang.srt.layers.attention.dsv4.indexer"]


def _try_import(names):
    got, failed = [], {}
    for n in names:
        try:
            importlib.import_module(n)
            got.append(n)
        except ModuleNotFoundError as e:
            if e.name and (n == e.name or n.startswith(e.name + ".")):
                continue  # not in this release
            failed[n] = f"{type(e).__name__}: {e}"
        except Exception as e:  # noqa: BLE001
            failed[n] = f"{type(e).__name__}: {e}"
    return got, failed


def _cpu_mm_dtype_stand_in() -> None:
    try:
        torch.mm(torch.ones(1, 2, dtype=torch.bfloat16), torch.ones(2, 1, dtype=torch.bfloat16),
                 out_dtype=torch.float32)
        return
    except (NotImplementedError, RuntimeError):
        pass
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("mm.dtype", lambda a, b, out_dtype: torch.mm(a.float(), b.float()).to(out_dtype), "CPU")
    globals()["_MM_LIB"] = lib
    REP["stand_ins"].append("aten::mm.dtype CPU kernel")


def rel_err(out, x, w) -> float:
    ref = x.double() @ w.double().t()
    return float((out.double() - ref).norm() / ref.norm())


def main() -> None:
    os.environ.setdefault("SGLANG_OPT_BF16_FP32_GEMM_ALGO", "torch")  # 0.5.12: not the CUDA extension
    _cpu_mm_dtype_stand_in()
    import sglang

    REP["sglang"] = [sglang.__version__, os.path.dirname(sglang.__file__)]
    REP["plugin_preloaded"] = "sglang_fp32gemm.plugin" in sys.modules
    REP["before_imported"], REP["before_failed"] = _try_import(BEFORE)
    C = importlib.import_module(COMP)
    from importlib.metadata import entry_points

    REP["eps"] = sorted([e.name, e.value] for e in entry_points(group="sglang.srt.plugins"))
    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry

    # On when SGLang loads it (as in a launch with the flag): every hook is installed. The probe
    # switches the router on and off below; a plugin off at load installs no GEMM hook at all.
    os.environ["SGLANG_ENABLE_FLYDSL_FP32_GEMM"] = "1"
    load_plugins()  # SGLang's own loader: entry point -> register() -> apply_hooks()
    os.environ.pop("SGLANG_ENABLE_FLYDSL_FP32_GEMM")
    import sglang_fp32gemm
    from sglang_fp32gemm import plugin, routing
    from sglang_fp32gemm import settings as S
    from sglang_fp32gemm.layers import LayerSelection

    # register() built the process router (configuration loaded and validated) while the plugin loaded.
    REP["router_at_load"] = routing._router is not None and routing._router.error is None

    REP["plugin_file"] = sglang_fp32gemm.__file__
    lay = plugin.STATE["layout"]
    REP["layout"] = lay.as_dict() if lay is not None else None
    REP["state"] = {k: plugin.STATE[k] for k in ("registered", "linear_target", "compressor_target",
                                                 "layer_targets", "overlap_targets", "hooks", "errors")}
    REP["describe"] = plugin.describe()

    # -- every by-name binding of linear_bf16_fp32 is the hooked one ------------------------------
    G = importlib.import_module(lay.linear_module)
    hooked = G.linear_bf16_fp32
    original = getattr(hooked, "__wrapped__", None)
    REP["linear_hooked"] = original is not None and not hasattr(original, "__wrapped__")
    REP["after_imported"], REP["after_failed"] = _try_import(AFTER)

    def holders():
        out = {"hooked": [], "original": [], "other": []}
        for name, mod in list(sys.modules.items()):
            try:
                v = vars(mod).get("linear_bf16_fp32")
            except TypeError:
                continue
            if v is None:
                continue
            out["hooked" if v is hooked else "original" if v is original else "other"].append(name)
        return {k: sorted(v) for k, v in out.items()}

    REP["holders"] = holders()
    methods = lay.layer_methods
    REP["methods_hooked"] = {m: getattr(getattr(C.Compressor, m), "__wrapped__", None) is not None
                             for m in methods}

    # -- the hooked multi-stream prepare marks SGLang's overlapped region while it runs ------------
    seen = []

    class _Layer:  # the real method's first statement reads alt_streams: record, then stop it there
        @property
        def alt_streams(self):
            seen.append(routing.in_overlapped_region())
            raise RuntimeError("stub layer")

    MQA = importlib.import_module("sglang.srt.models.deepseek_v4").MQALayer
    try:
        MQA._forward_prepare_multi_stream(_Layer(), None, None, None, None)
    except RuntimeError:
        pass
    REP["overlap_marked"] = {"before": False, "inside": seen, "after": routing.in_overlapped_region()}

    # -- registering twice changes nothing --------------------------------------------------------
    snap = [G.linear_bf16_fp32, C.linear_bf16_fp32] + [C.Compressor.__dict__.get(m) for m in methods]
    plugin.register()
    load_plugins()
    plugin.install()
    HookRegistry.apply_hooks()
    snap2 = [G.linear_bf16_fp32, C.linear_bf16_fp32] + [C.Compressor.__dict__.get(m) for m in methods]
    REP["twice_same"] = all(a is b for a, b in zip(snap, snap2))
    REP["hook_counts"] = {t: len(HookRegistry._hooks[t]) for t in plugin.STATE["hooks"]}

    # -- real Compressor layers at DeepSeek-V4-Pro shapes -----------------------------------------
    for pred in ("nsa_use_prefill_cp", "dsa_use_prefill_cp"):
        if pred in vars(C):
            setattr(C, pred, lambda *a, **k: False)
            REP["stand_ins"].append(f"{COMP}.{pred} -> no context parallel")
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
    comps = {}
    for kind, (lid, indexer, ratio, hd, n) in KINDS.items():
        c = C.Compressor(CFG, layer_id=lid, is_in_indexer=indexer, freqs_cis=None, compress_ratio=ratio,
                         head_dim=hd)
        with torch.no_grad():
            c.wkv_gate.weight.copy_((torch.randn(n, K, generator=g) * 0.02).bfloat16())
        comps[kind] = c
    REP["shapes"] = {k: list(c.wkv_gate.weight.shape) for k, c in comps.items()}
    REP["compressor_class"] = type(comps["hca"]).__qualname__
    main_method = methods[0]
    fb = types.SimpleNamespace(attn_cp_metadata=None)

    def call(c, x):
        if main_method == "_compute_wkv_gate":
            return c._compute_wkv_gate(x)
        return c.compute_kv_score(x, fb)

    def original_call(c, x):
        fn = getattr(C.Compressor, main_method).__wrapped__
        return fn(c, x) if main_method == "_compute_wkv_gate" else fn(c, x, fb)

    x = torch.randn(M, K, generator=g).bfloat16()

    def enable(router=None):
        os.environ[S.ENABLE_VAR] = "1"
        S.reload()
        decisions.clear()
        return routing.reset_router(router)

    def disable():
        os.environ.pop(S.ENABLE_VAR, None)
        S.reload()
        decisions.clear()
        return routing.reset_router()

    from fakes.fake_backends import ExactFake, make_router

    shapes = [(M, KINDS[k][4], K) for k in KINDS]

    def no_fast_kernel():
        """A router with no row for these shapes: every call takes the plugin's exact fallback."""
        return make_router([], shapes=[])

    # Every layer a hook asks the router to judge against the layer file, with the verdict: once per
    # compressor module (and fused or not) and router; the hook keeps the decision on the module.
    decisions: list = []
    real_caller = routing.Router.caller

    def caller(self, layer):
        got = real_caller(self, layer)
        if layer is not None:
            decisions.append([layer.layer_id, layer.kind, got.selected])
        return got

    routing.Router.caller = caller

    def observe(router, fake=None):
        """What routing saw, in one place: the router's counters, the layers it judged, the fake's runs."""
        obs = {"counters": {f"{a}|{b}": v for (a, b), v in router.counters().items()},
               "layers": sorted(decisions),
               "fake_shapes": [list(s) for s in fake.shapes] if fake is not None else None,
               "violations": list(fake.violations) if fake is not None else []}
        decisions.clear()
        return obs

    # Disabled: SGLang's own result, bit for bit; nothing routed.
    r = disable()
    sglang_outs = {k: call(c, x) for k, c in comps.items()}
    REP["disabled"] = {"equal_original": all(torch.equal(sglang_outs[k], original_call(c, x))
                                             for k, c in comps.items()),
                       "dtype": str(sglang_outs["hca"].dtype), **observe(r)}

    # Enabled, every layer selected, a fake fast backend: each kind routed to it, fp32 exact.
    fake = ExactFake()
    r = enable(make_router([fake], shapes=shapes))
    outs = {k: call(c, x) for k, c in comps.items()}
    REP["all_selected"] = {"rel": {k: rel_err(outs[k], x, comps[k].wkv_gate.weight) for k in comps},
                           **observe(r, fake)}

    # Layer selection: hca is layer 2 (excluded); csa is not a selected kind; indexer (layer 3) is.
    for name, sel in {"kinds_exclude": LayerSelection(kinds=frozenset({"hca", "indexer"}), exclude=frozenset({2})),
                      "layer_2_only": LayerSelection(layers=frozenset({2}))}.items():
        fake = ExactFake()
        r = enable(make_router([fake], shapes=shapes, selection=sel))
        outs = {k: call(c, x) for k, c in comps.items()}
        REP[name] = {"rel": {k: rel_err(outs[k], x, comps[k].wkv_gate.weight) for k in comps},
                     **observe(r, fake)}

    # Enabled, no fast kernel for the call: the exact fallback, equal to SGLang's own CPU path.
    r = enable(no_fast_kernel())
    outs = {k: call(c, x) for k, c in comps.items()}
    REP["enabled_cpu"] = {"equal_original": all(torch.equal(outs[k], sglang_outs[k]) for k in comps),
                          "rel": {k: rel_err(outs[k], x, comps[k].wkv_gate.weight) for k in comps}, **observe(r)}

    # prelaunch_kv_score (0.5.18-0.5.20 on ROCm with prefill context parallel): names the layer too.
    if hasattr(C.Compressor, "prelaunch_kv_score"):
        saved = {n: vars(C)[n] for n in ("_is_hip", "get_parallel", "cp_all_gather_rerange_launch",
                                         "cp_all_gather_rerange_finish") if n in vars(C)}
        C._is_hip = True
        C.get_parallel = lambda: types.SimpleNamespace(attn_cp_size=1)
        C.cp_all_gather_rerange_launch = lambda kv, *a, **k: kv
        C.cp_all_gather_rerange_finish = lambda handle: handle
        C.dsa_use_prefill_cp = lambda *a, **k: True
        fake = ExactFake()
        r = enable(make_router([fake], shapes=shapes, selection=LayerSelection(kinds=frozenset({"csa"}))))
        fbp = types.SimpleNamespace(attn_cp_metadata=None, _cp_prefetch_comm_stream=object())
        got = {}
        for k, c in comps.items():
            c.prelaunch_kv_score(x, fbp)
            got[k] = c.compute_kv_score(x, fbp)
        REP["prelaunch"] = {"rel": {k: rel_err(got[k], x, comps[k].wkv_gate.weight) for k in comps},
                            **observe(r, fake)}
        for n, v in saved.items():
            setattr(C, n, v)
        C.dsa_use_prefill_cp = lambda *a, **k: False

    # -- ROCm with aiter, simulated -----------------------------------------------------------------
    from fakes.fake_aiter import write_fake_aiter

    root = write_fake_aiter(tempfile.mkdtemp(), mode="bf16")
    sys.path.insert(0, str(root))
    from aiter.tuned_gemm import tgemm as fake_tgemm

    set_globals = []
    if "_use_aiter" in vars(G):
        G._use_aiter, G.tgemm = True, fake_tgemm
        set_globals.append(f"{lay.linear_module}._use_aiter/tgemm")
    if "_tgemm" in vars(C):
        C._tgemm = fake_tgemm
        set_globals.append(f"{COMP}._tgemm")
    elif "_use_aiter" in vars(C):
        C._use_aiter, C.tgemm = True, fake_tgemm
        set_globals.append(f"{COMP}._use_aiter/tgemm")
    REP["aiter_globals"] = set_globals
    if set_globals:
        REP["stand_ins"].append("fake aiter (bf16-rounding tgemm.mm) in " + ", ".join(set_globals))

    def aiter_case(v2=None):
        if v2 is not None:
            os.environ["SGLANG_OPT_USE_COMPRESSOR_V2"] = v2
        res = {}
        disable()
        sg = {k: call(c, x) for k, c in comps.items()}
        res["sglang_dtype"] = str(sg["hca"].dtype)
        res["sglang_rel"] = {k: rel_err(sg[k].float(), x, comps[k].wkv_gate.weight) for k in comps}
        r = enable(no_fast_kernel())
        on = {k: call(c, x) for k, c in comps.items()}
        res["on_dtype"] = str(on["hca"].dtype)
        res["on_rel"] = {k: rel_err(on[k], x, comps[k].wkv_gate.weight) for k in comps}
        res["on"] = observe(r)
        fake = ExactFake()
        r = enable(make_router([fake], shapes=shapes, selection=LayerSelection(kinds=frozenset({"indexer"}))))
        sel = {k: call(c, x) for k, c in comps.items()}
        res["selected_rel"] = {k: rel_err(sel[k], x, comps[k].wkv_gate.weight) for k in comps}
        res["selected"] = observe(r, fake)
        # A caller without a layer (DeepSeek's MoE gate, LongCat) through linear_bf16_fp32 itself.
        xw = torch.randn(8, 256, generator=g).bfloat16(), torch.randn(64, 256, generator=g).bfloat16()
        disable()
        res["plain_sglang_rel"] = rel_err(G.linear_bf16_fp32(*xw).float(), *xw)
        enable(no_fast_kernel())
        res["plain_on_rel"] = rel_err(G.linear_bf16_fp32(*xw), *xw)
        if v2 is not None:
            os.environ.pop("SGLANG_OPT_USE_COMPRESSOR_V2", None)
        return res

    if "_tgemm" in vars(C):  # plugin off: SGLang's module global stays aiter's own object
        disable()
        call(comps["hca"], x)
        REP["tgemm_untouched_while_off"] = vars(C)["_tgemm"] is fake_tgemm
    REP["aiter"] = aiter_case()
    if "_tgemm" in vars(C):
        REP["aiter_v2_off"] = aiter_case("0")
    REP["tgemm_proxy_after_calls"] = type(vars(C).get("_tgemm")).__name__ if "_tgemm" in vars(C) else None
    disable()

    # -- the launch flags through SGLang's argument preparation ----------------------------------------
    import contextlib
    import io

    from sglang.srt.server_args import prepare_server_args

    # What `python -m sglang.launch_server --help` does after its load_plugins(): argparse prints the
    # help of the parser prepare_server_args builds, then exits 0.
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        try:
            prepare_server_args(["--help"])
            code = None
        except SystemExit as e:
            code = e.code
    REP["help"] = {"exit": code, "text": text.getvalue()}

    d = tempfile.mkdtemp()
    layers = os.path.join(d, "sel.txt")
    with open(layers, "w") as f:
        f.write("layers = 0-30\nkinds = hca, csa\n")
    sa = prepare_server_args(["--model-path", "dummy", "--enable-flydsl-fp32-gemm", "--flydsl-fp32-gemm-layers",
                              layers])
    r = routing.get_router()
    REP["flags"] = {"model_path": sa.model_path, "layers_path": layers,
                    "env": {k: os.environ.get(k) for k in (S.ENABLE_VAR, S.SOURCE_VAR, S.LAYERS_VAR)},
                    "enabled": r.enabled, "error": r.error, "source": r.config.settings.enabled_source,
                    "selection": r.config.selection.describe()}
    # A bad layer file stops argument preparation: SystemExit with one line naming file:line.
    bad = os.path.join(d, "bad.txt")
    with open(bad, "w") as f:
        f.write("layers = 1\nkinds = hca, mla\n")
    try:
        prepare_server_args(["--model-path", "dummy", "--enable-flydsl-fp32-gemm", "--flydsl-fp32-gemm-layers",
                             bad])
        REP["flags_bad"] = {"raised": None}
    except BaseException as e:  # noqa: BLE001 - SystemExit is the expected one
        REP["flags_bad"] = {"raised": type(e).__name__, "message": str(e), "bad": bad,
                            "chained": e.__cause__ is not None or not e.__suppress_context__}
    for var in (S.ENABLE_VAR, S.SOURCE_VAR, S.LAYERS_VAR):
        os.environ.pop(var, None)
    REP["seconds"] = round(time.time() - T0, 1)


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # report what got this far, and why it stopped
        import traceback

        REP["crash"] = f"{type(e).__name__}: {e}"
        REP["traceback"] = traceback.format_exc()[-4000:]
    print("REPORT " + json.dumps(REP))
