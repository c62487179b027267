#!/usr/bin/python3
"""The forward of a model `weft import --model` built, in PyTorch, from its
weights file: the logits of tokens.npy, written as a .npy.

    built-model-torch.py MODEL.mlir TOKENS.npy OUT.npy --heads=N
        [--theta=BASE] [--rotary-share=S] [--parallel] [--no-rotary] [--no-positions]
        [--head-dim=D] [--eps=E] [--geglu] [--embedding-scale=S]
        [--attention-scale=S] [--softcap=C] [--logit-softcap=C] [--no-qk-norm]
        [--residual-scale=S] [--logit-divisor=D] [--interleaved] [--alibi]
        [--layer-norm] [--logit-scale=S] [--clip-qkv=C] [--post-norms]
        [--qk-norm=whole|per-head] [--gelu=exact]

The weights are read from the module (each weft.parameter's name, shape and
range of MODEL.weights), the norm's kind, the MLP's, the biases and a tied
output from which parameters exist; the heads, the rotary base and share and
a parallel block are given. The reference is written as Hugging Face writes LLaMA and GPT-NeoX:
learned positions (GPT-2's wpe) where the module has a position table,
RMSNorm or LayerNorm, grouped-query attention, the rotary embedding on the
first `rotary` features of each head as halves (rotate_half), cos and sin of
positions times base^(-2i / rotary), SwiGLU or GELU (tanh), causal softmax
attention at 1 / sqrt(head_dim).

--no-rotary and --no-positions compute the same model without the rotary
embedding or the learned positions: what the builder made before it built
them (the test checks that weft's logits are not these).

Gemma 2 as transformers' Gemma2Model computes it: heads of --head-dim,
RMSNorm at --eps, GeGLU (--geglu: gelu_pytorch_tanh of the gate times the
up projection), the embeddings times --embedding-scale, the scores at
--attention-scale soft-capped at --softcap, a norm after each branch where
the module has one (post_attention_layernorm, post_feedforward_layernorm),
the logits soft-capped at --logit-softcap; each head's queries and keys
RMS-normed before they turn where the module has q_norm and k_norm (Qwen3,
Gemma 3). Granite's multipliers: --embedding-scale, --attention-scale, each
branch times --residual-scale before the residual adds it, the logits
divided by --logit-divisor. --interleaved: GPT-J's rotary embedding on
pairs of adjacent features (rotate_every_two, duplicate_interleave).
--alibi: BLOOM's positions as transformers' BloomModel computes them
(build_alibi_tensor: each head's slope times each key's position, added to
the scaled product by baddbmm before the causal mask), and its norm of the
embeddings where the module has one (word_embeddings_layernorm); without
--alibi, the same model without the biases. --layer-norm: every norm is a
LayerNorm, with the scale and the bias the module has (Cohere's and MPT's a
scale alone, OLMo's neither); without it a norm without a bias is RMSNorm.
--logit-scale: the logits times it (Cohere's logit_scale). --clip-qkv: the
QKV projection clamped to [-C, C] (OLMo's and MPT's clip_qkv).
--gelu=exact: an ungated MLP's GELU is the exact (erf) one, transformers'
"gelu" (GPT-NeoX's, Falcon's, MPT's), not tanh's. --post-norms: OLMo 2's block as transformers' Olmo2DecoderLayer writes it,
x + post_attention_layernorm(attn(x)) and then h + post_feedforward_layernorm
(mlp(h)), no norm before either branch. --qk-norm=whole: OLMo 2's
Olmo2Attention, q_norm(q_proj(x)) and k_norm(k_proj(x)) over every head's
features at once, before the heads are viewed; --qk-norm=per-head: Cohere's
q_norm and k_norm (CohereLayerNorm of [heads, head_dim]) and StableLM's
StableLmLayerNormPerHead, each head's features layer-normed without a bias
and times that head's weight. (Gemma's RMSNorm multiplies by 1
+ w where its weights are stored; the built model's are w, its own
parametrization of the same function.)
"""

import math
import os
import re
import sys

import numpy as np
import torch

args = [a for a in sys.argv[1:] if not a.startswith("--")]
flags = [a for a in sys.argv[1:] if a.startswith("--")]
module_path, tokens_path, out_path = args[:3]
rotary_off = "--no-rotary" in flags
theta = 10000.0
for flag in flags:
    if flag.startswith("--theta="):
        theta = float(flag.split("=", 1)[1])
rotary_share = 1.0
for flag in flags:
    if flag.startswith("--rotary-share="):
        rotary_share = float(flag.split("=", 1)[1])

text = open(module_path).read()
weights_file = re.search(r'external <"([^"]+)"', text).group(1)
blob = np.fromfile(os.path.join(os.path.dirname(module_path), weights_file), np.float32)
params = {}
for name, offset, length, shape in re.findall(
        r'weft\.parameter "([^"]+)" external <"[^"]+", offset = (\d+), length = (\d+)> '
        r': tensor<([0-9x]+)xf32>', text):
    dims = [int(d) for d in shape.split("x")]
    start = int(offset) // 4
    params[name] = torch.from_numpy(
        blob[start:start + int(length) // 4].reshape(dims).copy()).double()
def option(name, default):
    for flag in flags:
        if flag.startswith("--" + name + "="):
            return float(flag.split("=", 1)[1])
    return default


eps = option("eps", 1e-5)
heads = int(next(f for f in flags if f.startswith("--heads=")).split("=", 1)[1])

tokens = torch.from_numpy(np.load(tokens_path))
batch, seq = tokens.shape
x = params["embedding.weight"][tokens] * option("embedding-scale", 1.0)
if "position_embedding.weight" in params and "--no-positions" not in flags:
    x = x + params["position_embedding.weight"][:seq]
hidden = x.shape[-1]
gated = "layers.0.mlp_gate.weight" in params


def bloom_slopes(n):
    """BLOOM's build_alibi_tensor: for the largest power of two p <= n,
    base^1 .. base^p with base = 2^(-2^-(log2 p - 3)); then, where n is no
    power of two, the odd powers of the next power's base."""
    p = 2 ** math.floor(math.log2(n))
    base = 2 ** (-(2 ** -(math.log2(p) - 3)))
    slopes = [base ** i for i in range(1, p + 1)]
    if p != n:
        extra = 2 ** (-(2 ** -(math.log2(2 * p) - 3)))
        slopes += [extra ** i for i in range(1, 1 + 2 * min(p, n - p), 2)]
    return torch.tensor(slopes, dtype=torch.float64)


def norm(v, name):
    if "--layer-norm" in flags:
        return torch.nn.functional.layer_norm(
            v, (v.shape[-1],), params.get(name + ".weight"), params.get(name + ".bias"), eps)
    if name + ".bias" in params:
        return torch.nn.functional.layer_norm(
            v, (hidden,), params[name + ".weight"], params[name + ".bias"], eps)
    return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * params[name + ".weight"]


if "embedding_norm.weight" in params:
    x = norm(x, "embedding_norm")


def linear(v, name):
    out = v @ params[name + ".weight"]
    if name + ".bias" in params:
        out = out + params[name + ".bias"]
    return out


def rope(v, rotated):
    inv = 1.0 / theta ** (torch.arange(0, rotated, 2, dtype=torch.float64) / rotated)
    freqs = torch.arange(seq, dtype=torch.float64)[:, None] * inv[None, :]
    part, rest = v[..., :rotated], v[..., rotated:]
    if "--interleaved" in flags:
        emb = torch.repeat_interleave(freqs, 2, dim=-1)
        turned = torch.stack((-part[..., 1::2], part[..., ::2]), dim=-1).flatten(-2)
    else:
        emb = torch.cat([freqs, freqs], -1)
        half = rotated // 2
        turned = torch.cat([-part[..., half:], part[..., :half]], -1)
    return torch.cat([part * emb.cos() + turned * emb.sin(), rest], -1)


layer = 0
while f"layers.{layer}.qkv.weight" in params:
    p = f"layers.{layer}"
    post_norms = "--post-norms" in flags
    qk_norm = next((f.split("=", 1)[1] for f in flags if f.startswith("--qk-norm=")), "")
    qkv = linear(x if post_norms else norm(x, p + ".attn_norm"), p + ".qkv")
    clip = option("clip-qkv", 0)
    if clip:
        qkv = qkv.clamp(-clip, clip)
    d = int(option("head-dim", hidden // heads))
    # Columns grouped by KV head: [kv_heads, group + 2, d].
    width = qkv.shape[-1] // d  # heads + 2 kv_heads
    kv_heads = (width - heads) // 2
    group = heads // kv_heads
    grouped = qkv.reshape(batch, seq, kv_heads, group + 2, d)
    q = grouped[:, :, :, :group].reshape(batch, seq, heads, d)
    k = grouped[:, :, :, group]
    if qk_norm == "whole":
        # The projections' outputs, head after head, as q_proj writes them.
        q = norm(q.reshape(batch, seq, heads * d), p + ".q_norm").reshape(batch, seq, heads, d)
        k = norm(k.reshape(batch, seq, kv_heads * d), p + ".k_norm").reshape(batch, seq, kv_heads, d)
    elif qk_norm == "per-head":
        def per_head(t, name):
            w = params[name + ".weight"].reshape(t.shape[2], d)
            return torch.nn.functional.layer_norm(t, (d,), None, None, eps) * w
        q, k = per_head(q, p + ".q_norm"), per_head(k, p + ".k_norm")
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = grouped[:, :, :, group + 1].transpose(1, 2)
    if p + ".q_norm.weight" in params and "--no-qk-norm" not in flags and not qk_norm:
        # Qwen3's and Gemma 3's QK norm: each head's query and key, before
        # the rotary embedding.
        q, k = norm(q, p + ".q_norm"), norm(k, p + ".k_norm")
    if not rotary_off:
        rotated = int(d * rotary_share)
        rotated -= rotated % 2
        q, k = rope(q, rotated), rope(k, rotated)
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) * option("attention-scale", 1 / math.sqrt(d))
    cap = option("softcap", 0)
    if cap:
        scores = cap * torch.tanh(scores / cap)
    if "--alibi" in flags:
        # [heads, 1, keys]: the same bias for every query of a head.
        positions = torch.arange(seq, dtype=torch.float64)
        scores = scores + bloom_slopes(heads)[:, None, None] * positions[None, None, :]
    causal = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    probs = scores.masked_fill(causal, float("-inf")).softmax(-1)
    attended = (probs @ v).transpose(1, 2).reshape(batch, seq, heads * d)
    branch = linear(attended, p + ".attn_out")
    if post_norms or p + ".attn_post_norm.weight" in params:
        branch = norm(branch, p + ".attn_post_norm")
    residual = x + branch * option("residual-scale", 1.0)
    parallel = "--parallel" in flags
    # One norm for both branches where the module has no MLP norm of its own
    # (GPT-J's, Falcon-7B's, Cohere's input_layernorm).
    mlp_norm = p + ".mlp_norm"
    if parallel and not any(n.startswith(mlp_norm + ".") for n in params):
        mlp_norm = p + ".attn_norm"
    mlp_in = x if parallel else residual
    if not post_norms:
        mlp_in = norm(mlp_in, mlp_norm)
    if gated and "--geglu" in flags:
        act = torch.nn.functional.gelu(linear(mlp_in, p + ".mlp_gate"), approximate="tanh") * linear(mlp_in, p + ".mlp_up")
    elif gated:
        act = torch.nn.functional.silu(linear(mlp_in, p + ".mlp_gate")) * linear(mlp_in, p + ".mlp_up")
    else:
        # transformers' "gelu" (GPT-NeoX, Falcon, MPT) is the exact one;
        # gelu_new and gelu_pytorch_tanh (GPT-2, GPT-J, BLOOM) tanh's.
        exact = "--gelu=exact" in flags
        act = torch.nn.functional.gelu(linear(mlp_in, p + ".mlp_up"),
                                       approximate="none" if exact else "tanh")
    branch = linear(act, p + ".mlp_down")
    if post_norms or p + ".mlp_post_norm.weight" in params:
        branch = norm(branch, p + ".mlp_post_norm")
    x = residual + branch * option("residual-scale", 1.0)
    layer += 1

x = norm(x, "final_norm")
if "output.weight" in params:
    logits = x @ params["output.weight"]
else:
    logits = x @ params["embedding.weight"].T
if "output.bias" in params:
    # GPT-J's and Phi's lm_head (bias=True).
    logits = logits + params["output.bias"]
logits = logits / option("logit-divisor", 1.0) * option("logit-scale", 1.0)
cap = option("logit-softcap", 0)
if cap:
    logits = cap * torch.tanh(logits / cap)
np.save(out_path, logits.float().numpy())
