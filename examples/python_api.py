"""Weft from a training script, cell by cell (run it whole, or paste the
cells into a notebook):

    /usr/bin/python3 examples/python_api.py

It plans a preset for a large cluster, plans and runs a small GPT written in
PyTorch on 4 simulated devices, checks the result against PyTorch, and
compiles the plan into a per-rank C++ program. `scripts/build.sh` puts the
package on python3's path; without it, set PYTHONPATH=build/python.
"""

# %% A plan for GPT-3 175B on 128 nodes of 8 H100s
import tempfile

import weft

plans = weft.plan("gpt3-175b", "h100:8x128", global_batch=1536)
print(plans.header, end="")
print(plans.table(), end="")
best = plans[0]
print("best:", best)
print("pipeline stages hold", best.stage_layers, "layers; ZeRO stage", best.zero_stage)
print("why it wins:")
print(plans.explain())

# %% The same plan as launch flags for Megatron-LM (searched among what it runs)
megatron = weft.plan("gpt3-175b", "h100:8x128", global_batch=1536,
                     framework="megatron")
print(megatron[0].to_megatron_args())

# %% A cluster described field by field, and a model by its shape
cluster = weft.Cluster({"name": "my-cluster", "gpu": {"name": "a100-80g"},
                        "gpus_per_node": 8, "nodes": 4, "nics_per_node": 8,
                        "nic_gbits": 200})
llama = {"model": "llama", "layers": 32, "hidden": 4096, "heads": 32,
         "kv_heads": 8, "ffn": 14336, "vocab": 128256}
print(weft.plan(llama, cluster, global_batch=256, seq_len=8192, top=1)[0])

# %% A GPT written in PyTorch: planned, then run on 4 simulated devices
import math

import torch


class Block(torch.nn.Module):
    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.proj = torch.nn.Linear(hidden, hidden)
        self.ln2 = torch.nn.LayerNorm(hidden)
        self.fc = torch.nn.Linear(hidden, 4 * hidden)
        self.out = torch.nn.Linear(4 * hidden, hidden)
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2)
                   for t in self.qkv(self.ln1(x)).split(h, dim=2))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.heads)
        scores = scores.masked_fill(self.causal[:, :, :s, :s] == 0, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(y)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, vocab=256, hidden=64, heads=4, layers=2, seq=32):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, hidden)
        self.wpe = torch.nn.Embedding(seq, hidden)
        self.blocks = torch.nn.ModuleList(Block(hidden, heads, seq) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


torch.manual_seed(0)
model = GPT()
ids = torch.randint(0, 256, (4, 16))
small = weft.plan(model, "a100-80g:4x1", global_batch=4, seq_len=16,
                  example_inputs=ids)
print(small.header, end="")
print("best:", small[0])

for spec in ["dp=2,tp=2", "tp=2,cp=2", "dp=2,ulysses=2"]:
    (logits,), sent = weft.run(model, [ids], devices=4, plan=spec, return_bytes=True)
    with torch.no_grad():
        expected = model(ids)
    error = float((logits - expected).abs().max() / expected.abs().max())
    print("%-16s max relative difference from torch %.2e; bytes sent per rank %s"
          % (spec, error, sent))
    assert error < 1e-4

# %% The plan compiled into a per-rank C++ program (CMake project)
with tempfile.TemporaryDirectory() as out:
    result = weft.compile(model, "dp=2,tp=2", out=out, example_inputs=ids)
    print(result.summary, end="")

# %% What Weft rejects raises weft.Error with its diagnostic
try:
    weft.plan("gpt3-175b", "a100-80g:8x1", global_batch=8, evaluate="tp=8")
except weft.Error as error:
    print("weft.Error:", str(error).splitlines()[0])
