"""The plugin's own host time per routed call, on the CPU (no GPU needed): the routed path through
``hooks.around_linear`` and ``Router.call`` around a kernel that returns at once, against calling that
kernel directly. Grad mode is off, as SGLang serves. Minimum of 9 repeats of 50,000 calls, us per call.

    .venv/bin/python scripts/route_overhead.py

The routing, probe and counters are the real ones (tests/fakes' router builder routes CPU tensors); the
numbers are this machine's (the H200 machine's CPU gave about the same, run 16e); on CUDA tensors the same
path costs more: scripts/eager_overhead_gpu.py measures it there.
"""
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402

from fakes.fake_backends import FAKE_KERNEL, FakeCfg, fake_table, make_router  # noqa: E402
from sglang_fp32gemm import hooks, routing  # noqa: E402
from sglang_fp32gemm.backends.base import OK, Backend  # noqa: E402

M, N, K = 1, 64, 256
x = torch.randn(M, K).bfloat16()
w = torch.randn(N, K).bfloat16()
out = (x.double() @ w.double().t()).float()


class Instant(Backend):
    """Exact on the probe's inputs; on the timed ``x`` it returns the product computed once."""

    name, libtype = "instant", "triton"

    def available(self):
        return OK

    def parse(self, name):
        return FakeCfg(name)

    def deterministic(self, cfg):
        return True

    def supports(self, cfg, m, n, k):
        return OK

    def kernel_name(self, cfg):
        return cfg.name

    def bind(self, cfg, device, n, k):
        return lambda a, b: out if a is x else (a.double() @ b.double().t()).float()


def per_call(fn) -> float:
    return min(timeit.repeat(fn, number=50_000, repeat=9)) / 50_000 * 1e6


def main() -> None:
    # With a serial table, as shipped: the calls (outside SGLang's multi-stream region) take its routes.
    r = routing.reset_router(make_router([Instant()], shapes=[(M, N, K, FAKE_KERNEL)],
                                         serial_table=fake_table([(M, N, K, FAKE_KERNEL)], name="fake_serial.csv")))
    r.call(x, w)  # resolve, bind and probe once
    assert r.counters() == {("instant", FAKE_KERNEL): 1}, r.counters()
    torch.set_grad_enabled(False)
    kernel = r.kernels.all()[0].fn
    bare = per_call(lambda: kernel(x, w))
    print(f"kernel called directly        {bare:.2f} us")
    print(f"Router.call                   {per_call(lambda: r.call(x, w)):.2f} us")
    print(f"hooks.around_linear (the hook) {per_call(lambda: hooks.around_linear(lambda a, b: out, x, w)):.2f} us")


if __name__ == "__main__":
    main()
