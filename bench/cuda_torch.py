"""Times PyTorch on the shapes bench/cuda_kernels.cpp times Weft's runtime on.

Needs a GPU and PyTorch >= 2.3. bf16, random inputs, the median of 10 runs after
2 warm-ups, timed with CUDA events:
  - causal attention through scaled_dot_product_attention, flash backend
    (grouped KV heads expanded first where the flash backend needs it);
  - causal attention's backward alone (attention-grad; not run by default);
  - the GEMMs of a GPT-3 and a LLaMA-3 70B layer (x @ w);
  - a GPT-3 175B layer forward (pre-LN, tanh GELU) in eager mode and through
    torch.compile, at micro-batch 1 and 4 of 2048 tokens.

    python3 bench/cuda_torch.py
"""

import math
import sys

import torch
import torch.nn.functional as F

PEAK = 989.0  # dense bf16 TFLOP/s of an H100 SXM
DEV = "cuda"
DT = torch.bfloat16


def median_ms(run):
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    for _ in range(2):
        run()
    times = []
    for _ in range(10):
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return (times[4] + times[5]) / 2


def report(what, ms, flops, extra=""):
    tflops = flops / (ms * 1e-3) / 1e12
    print("torch %-44s %9.3f ms %7.1f TFLOP/s  MFU %5.1f%%%s"
          % (what, ms, tflops, 100 * tflops / PEAK, extra), flush=True)


def attention(name, b, h, kv, s, d):
    q = torch.randn(b, h, s, d, device=DEV, dtype=DT)
    k = torch.randn(b, kv, s, d, device=DEV, dtype=DT)
    v = torch.randn(b, kv, s, d, device=DEV, dtype=DT)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run():
        kk, vv = k, v
        if kv != h:
            kk = k.repeat_interleave(h // kv, dim=1)
            vv = v.repeat_interleave(h // kv, dim=1)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
    report("attention " + name, median_ms(run), 2 * 2 * b * h * s * s * d / 2)


def attention_grad(name, b, h, kv, s, d):
    """The backward of causal attention alone (torch.autograd.grad on a kept
    graph), flash backend; FLOPs counted as FlashAttention counts them, 2.5
    times the forward's."""
    q = torch.randn(b, h, s, d, device=DEV, dtype=DT, requires_grad=True)
    k = torch.randn(b, kv, s, d, device=DEV, dtype=DT, requires_grad=True)
    v = torch.randn(b, kv, s, d, device=DEV, dtype=DT, requires_grad=True)
    dout = torch.randn(b, h, s, d, device=DEV, dtype=DT)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # Grouped KV heads expanded first, as for the forward: their gradient
    # then includes the expansion's sum.
    kk = k.repeat_interleave(h // kv, dim=1) if kv != h else k
    vv = v.repeat_interleave(h // kv, dim=1) if kv != h else v
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
    report("attention_grad " + name,
           median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)),
           2.5 * 2 * 2 * b * h * s * s * d / 2)


def linear(name, m, k, n):
    x = torch.randn(m, k, device=DEV, dtype=DT)
    w = torch.randn(k, n, device=DEV, dtype=DT)
    report("linear " + name, median_ms(lambda: x @ w), 2 * m * k * n)


class Gpt3Layer(torch.nn.Module):
    def __init__(self, hidden=12288, heads=96):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.proj = torch.nn.Linear(hidden, hidden)
        self.ln2 = torch.nn.LayerNorm(hidden)
        self.fc1 = torch.nn.Linear(hidden, 4 * hidden)
        self.fc2 = torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, s, hidden = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(hidden, dim=2)
        split = lambda t: t.view(b, s, self.heads, -1).transpose(1, 2)
        o = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
        x = x + self.proj(o.transpose(1, 2).reshape(b, s, hidden))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def layer(b, s=2048, hidden=12288, heads=96):
    model = Gpt3Layer(hidden, heads).to(DEV, DT).eval()
    x = torch.randn(b, s, hidden, device=DEV, dtype=DT)
    flops = 2 * b * s * 12 * hidden * hidden + 2 * 2 * b * s * s * hidden / 2
    with torch.no_grad():
        torch.cuda.reset_peak_memory_stats()
        ms = median_ms(lambda: model(x))
        mem = torch.cuda.max_memory_allocated() / 2**30
        report("gpt3 layer forward b=%d eager" % b, ms, flops, "  peak %.1f GiB" % mem)
        compiled = torch.compile(model)
        torch.cuda.reset_peak_memory_stats()
        ms = median_ms(lambda: compiled(x))
        mem = torch.cuda.max_memory_allocated() / 2**30
        report("gpt3 layer forward b=%d torch.compile" % b, ms, flops, "  peak %.1f GiB" % mem)
    del model, compiled
    torch.cuda.empty_cache()


def main():
    print("# torch %s on %s" % (torch.__version__, torch.cuda.get_device_name()))
    what = sys.argv[1:] or ["attention", "gemm", "layer"]
    if "attention" in what:
        attention("gpt3 b=1 h=96 s=2048 d=128", 1, 96, 96, 2048, 128)
        attention("gpt3 b=4 h=96 s=2048 d=128", 4, 96, 96, 2048, 128)
        attention("llama70b b=1 h=64/8 s=8192 d=128", 1, 64, 8, 8192, 128)
    if "attention-grad" in what:
        attention_grad("gpt3 b=1 h=96 s=2048 d=128", 1, 96, 96, 2048, 128)
        attention_grad("gpt3 b=4 h=96 s=2048 d=128", 4, 96, 96, 2048, 128)
        attention_grad("llama70b b=1 h=64/8 s=8192 d=128", 1, 64, 8, 8192, 128)
    if "gemm" in what:
        for tokens in (2048, 8192):
            t = "m=%d" % tokens
            linear("gpt3 qkv " + t, tokens, 12288, 3 * 12288)
            linear("gpt3 proj " + t, tokens, 12288, 12288)
            linear("gpt3 fc1 " + t, tokens, 12288, 4 * 12288)
            linear("gpt3 fc2 " + t, tokens, 4 * 12288, 12288)
        linear("llama70b up m=8192", 8192, 8192, 28672)
    if "layer" in what:
        layer(1)
        layer(4)


if __name__ == "__main__":
    main()
