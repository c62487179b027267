"""The weft Python package against the weft command line and PyTorch.

Run by ctest (python-package) with WEFT_BINARY (the CLI) and WEFT_SOURCE_DIR
(the checkout) set and build/python on PYTHONPATH; or by hand:

    PYTHONPATH=build/python WEFT_BINARY=build/bin/weft WEFT_SOURCE_DIR=. \
        /usr/bin/python3 -m pytest python/tests
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import weft

WEFT = os.environ.get("WEFT_BINARY", "weft")
SOURCE = os.environ.get("WEFT_SOURCE_DIR",
                        os.path.join(os.path.dirname(__file__), "..", ".."))
GPT2 = os.path.join(SOURCE, "test", "models", "gpt2", "gpt2-opset17-dynamic.onnx")
GPT2_STATIC = os.path.join(SOURCE, "test", "models", "gpt2", "gpt2-opset17.onnx")
CLUSTER_FILE = os.path.join(SOURCE, "examples", "clusters", "dgx-a100-8-nodes.json")


def cli(*args, check=True):
    result = subprocess.run([WEFT, *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError("weft %s failed:\n%s" % (" ".join(args), result.stderr))
    return result


def cli_plan_json(tmp_path, *args):
    path = tmp_path / "cli.json"
    cli("plan", *args, "--json", str(path))
    return json.loads(path.read_text())


def without_timing(plan_set):
    """A plan set without the seconds the search took (the only field that
    differs between two runs of the same search)."""
    plan_set = dict(plan_set)
    plan_set.pop("search_seconds", None)
    return plan_set


# ---------------------------------------------------------------------------
# weft.plan against weft plan --json
# ---------------------------------------------------------------------------

def test_preset_plan_equals_cli(tmp_path):
    plans = weft.plan("gpt3-175b", "h100:8x128", global_batch=1536)
    expected = cli_plan_json(tmp_path, "--model", "gpt3-175b", "--cluster",
                             "h100:8x128", "--global-batch", "1536")
    assert without_timing(plans.to_dict()) == without_timing(expected)
    assert len(plans) == 5
    best = plans[0]
    assert best.tp * best.pp * best.dp * best.cp * best.ulysses == 1024
    assert best.gpus_used == 1024  # an int64 field, a string in the JSON
    assert best.to_dict()["gpus_used"] == "1024"
    assert best.time.step_s == pytest.approx(best.step_time)
    line = str(best)
    assert line.startswith(best.spec) and "tokens/s" in line and "GiB" in line


def test_hf_config_plan_equals_cli(tmp_path):
    config = os.path.join(SOURCE, "test", "Planner", "Inputs", "hf",
                          "llama-3.1-8b.json")
    expected = cli_plan_json(tmp_path, "--model", config, "--cluster",
                             "h100:8x4", "--global-batch", "256")
    plans = weft.plan(config, "h100:8x4", global_batch=256)
    assert without_timing(plans.to_dict()) == without_timing(expected)
    assert plans.to_dict()["model"]["hidden"] == "4096"
    # A checkpoint directory (save_pretrained's layout) is read the same way.
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(open(config).read())
    plans = weft.plan(str(tmp_path / "ckpt"), "h100:8x4", global_batch=256)
    assert without_timing(plans.to_dict())["plans"] == expected["plans"]


def test_builder_dict_equals_cli_flags(tmp_path):
    model = {"model": "llama", "layers": 8, "hidden": 2048, "heads": 16,
             "kv_heads": 4, "ffn": 5632, "vocab": 32000}
    plans = weft.plan(model, weft.Cluster(gpu="a100-80g", gpus_per_node=8, nodes=2),
                      global_batch=64, seq_len=4096, top=3, grad_reduce_16bit=True)
    expected = cli_plan_json(
        tmp_path, "--model", "llama", "--layers", "8", "--hidden", "2048",
        "--heads", "16", "--kv-heads", "4", "--ffn", "5632", "--vocab", "32000",
        "--cluster", "a100-80g:8x2", "--global-batch", "64", "--seq-len", "4096",
        "--top", "3", "--grad-reduce-16bit")
    assert without_timing(plans.to_dict()) == without_timing(expected)
    assert plans.model.kv_heads == 4
    assert plans.cluster.nodes == 2


def test_builder_head_dim_equals_cli_flag(tmp_path):
    # Gemma-style heads wider than hidden / heads, gated by GELU.
    model = {"model": "llama", "layers": 4, "hidden": 1536, "heads": 8,
             "kv_heads": 4, "head_dim": 256, "ffn": 6144, "ffn_kind": "geglu",
             "vocab": 32000, "tied": True}
    plans = weft.plan(model, "h100:8x1", global_batch=16, seq_len=2048, top=2)
    expected = cli_plan_json(
        tmp_path, "--model", "llama", "--layers", "4", "--hidden", "1536",
        "--heads", "8", "--kv-heads", "4", "--head-dim", "256", "--ffn", "6144",
        "--ffn-kind", "geglu", "--vocab", "32000", "--tied", "yes",
        "--cluster", "h100:8x1", "--global-batch", "16", "--seq-len", "2048",
        "--top", "2")
    assert without_timing(plans.to_dict()) == without_timing(expected)
    assert plans.model.head_dim == 256
    with pytest.raises(ValueError, match="head_dim"):
        weft.plan(dict(model, head_dim=0), "h100:8x1", global_batch=16)


def test_onnx_file_and_cluster_file_equal_cli(tmp_path):
    plans = weft.plan(GPT2, CLUSTER_FILE, global_batch=8, seq_len=8, top=4)
    expected = cli_plan_json(tmp_path, GPT2, "--cluster", CLUSTER_FILE,
                             "--global-batch", "8", "--seq-len", "8", "--top", "4")
    assert without_timing(plans.to_dict()) == without_timing(expected)
    assert "costed from its own IR" in plans.header


def test_evaluate_equals_cli(tmp_path):
    spec = "tp=8,pp=8,dp=16,mbs=1,v=3,schedule=interleaved,recompute=full"
    plans = weft.plan("gpt3-175b", "a100-80g:8x128", global_batch=1536,
                      evaluate=spec)
    expected = cli_plan_json(tmp_path, "--model", "gpt3-175b", "--cluster",
                             "a100-80g:8x128", "--global-batch", "1536",
                             "--evaluate", spec)
    assert plans.to_dict() == expected
    assert len(plans) == 1 and plans[0].virtual_stages == 3
    # Blocking launches, as --launch-blocking: slower, and recorded.
    blocking = weft.plan("gpt3-175b", "a100-80g:8x128", global_batch=1536,
                         evaluate=spec, launch_blocking=True)
    assert blocking.to_dict() == cli_plan_json(
        tmp_path, "--model", "gpt3-175b", "--cluster", "a100-80g:8x128",
        "--global-batch", "1536", "--evaluate", spec, "--launch-blocking")
    assert blocking[0].step_time > plans[0].step_time
    assert blocking.to_dict()["training"]["launch_blocking"] is True
    # A Plan evaluates again to itself.
    again = weft.plan("gpt3-175b", "a100-80g:8x128", global_batch=1536,
                      evaluate=plans[0])
    assert again[0].to_dict() == plans[0].to_dict()


def test_plan_views_equal_cli(tmp_path):
    args = ["--model", "llama3-8b", "--cluster", "h100:8x4", "--global-batch", "256"]
    plans = weft.plan("llama3-8b", "h100:8x4", global_batch=256)
    best = plans[0]
    assert plans.table() in cli("plan", *args).stdout
    assert plans.explain() and plans.explain() in cli("plan", *args, "--explain").stdout
    assert best.breakdown() and best.breakdown() in best.explain()
    megatron = cli("plan", *args, "--export", "megatron").stdout
    exported = weft.plan("llama3-8b", "h100:8x4", global_batch=256,
                         framework="megatron")
    assert exported[0].to_megatron_args() in megatron
    assert "--tensor-model-parallel-size" in exported[0].to_megatron_args()
    # The plan Megatron runs (tp with SP) is one DeepSpeed cannot express; a
    # search for DeepSpeed gives one it can.
    if getattr(exported[0], "sequence_parallel", False):
        with pytest.raises(weft.Error, match="DeepSpeed"):
            exported[0].to_deepspeed_args()
    deepspeed = weft.plan("llama3-8b", "h100:8x4", global_batch=256,
                          framework="deepspeed")
    assert '"train_batch_size": 256' in deepspeed[0].to_deepspeed_args()
    assert deepspeed[0].to_deepspeed_args() in cli("plan", *args, "--export",
                                                   "deepspeed").stdout
    titan = weft.plan("llama3-8b", "h100:8x4", global_batch=256, framework="torchtitan")
    assert titan[0].to_torchtitan_args() in cli("plan", *args, "--export",
                                                "torchtitan").stdout
    if best.zero_stage not in (0, 3):
        with pytest.raises(weft.Error, match="torchtitan"):
            best.to_torchtitan_args()
    schedule = cli("plan", *args, "--print-schedule").stdout
    assert best.pipeline_schedule() in schedule
    assert "weft.layer" in best.rank_ir() or "func.func" in best.rank_ir()
    plans.report(tmp_path / "report.html")
    assert (tmp_path / "report.html").read_text().lstrip().lower().startswith("<!doctype html")
    plans.save(tmp_path / "plans.json")
    rerun = cli("plan", *args, "--evaluate-json", str(tmp_path / "plans.json"))
    assert "%.3f" % best.step_time in rerun.stdout


def test_cluster_forms():
    shorthand = weft.Cluster("h100:8x16")
    assert (shorthand.gpu, shorthand.gpus_per_node, shorthand.nodes) == ("h100", 8, 16)
    assert shorthand.total_gpus == 128
    assert weft.Cluster(gpu="h100", gpus_per_node=8, nodes=16).to_dict() == \
        shorthand.to_dict()
    from_file = weft.Cluster(CLUSTER_FILE)
    assert from_file.name == "dgx-a100-8-nodes" and from_file.total_gpus == 64
    from_dict = weft.Cluster(from_file.to_dict())
    assert from_dict.to_dict() == from_file.to_dict()


# ---------------------------------------------------------------------------
# Errors: ValueError for bad arguments, weft.Error with Weft's message
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(global_batch=0), "global_batch must be at least 1"),
    (dict(global_batch="8"), "global_batch must be an int"),
    (dict(global_batch=8, dtype="fp8"), "dtype must be one of"),
    (dict(global_batch=8, top=0), "top must be at least 1"),
    (dict(global_batch=8, framework="jax"), "framework must be one of"),
    (dict(global_batch=8, evaluate=3), "evaluate must be"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        weft.plan("gpt3-1.3b", "h100:8x1", **kwargs)


def test_bad_model_arguments_raise_value_error():
    with pytest.raises(ValueError, match="model must be"):
        weft.plan(42, "h100:8x1", global_batch=8)
    with pytest.raises(ValueError, match="unknown model field"):
        weft.plan({"model": "gpt", "layer": 2}, "h100:8x1", global_batch=8)
    with pytest.raises(ValueError, match="example_inputs"):
        weft.plan(torch.nn.Linear(2, 2), "h100:8x1", global_batch=8)
    with pytest.raises(ValueError, match="gpu="):
        weft.Cluster()
    with pytest.raises(ValueError, match="not both"):
        weft.Cluster("h100:8x1", nodes=2)


def cli_error(*args):
    result = cli(*args, check=False)
    assert result.returncode != 0
    return result.stderr


def test_weft_errors_carry_the_cli_message(tmp_path):
    stderr = cli_error("plan", "--model", "gpt9", "--cluster", "h100:8x1",
                       "--global-batch", "8")
    with pytest.raises(weft.Error) as error:
        weft.plan("gpt9", "h100:8x1", global_batch=8)
    assert str(error.value) and str(error.value) in stderr

    with pytest.raises(weft.Error) as error:
        weft.Cluster("x100:8x1")
    assert "x100" in str(error.value)

    # No plan fits: the smallest-memory plan's breakdown comes with it.
    stderr = cli_error("plan", "--model", "gpt3-175b", "--cluster", "a100-80g:1x1",
                       "--global-batch", "1")
    with pytest.raises(weft.Error) as error:
        weft.plan("gpt3-175b", "a100-80g:1x1", global_batch=1)
    assert str(error.value).startswith("no plan fits in 78.0 GiB per GPU")
    assert str(error.value) in stderr

    with pytest.raises(weft.Error, match="does not fit"):
        weft.plan("gpt3-175b", "a100-80g:8x1", global_batch=8, evaluate="tp=8")
    fits = weft.plan("gpt3-175b", "a100-80g:8x1", global_batch=8, evaluate="tp=8",
                     allow_oom=True)
    assert not fits[0].fits


def test_malformed_model_names_the_file(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x08\x07this is not a model")
    with pytest.raises(weft.Error) as error:
        weft.plan(str(bad), "h100:8x1", global_batch=8)
    assert "broken.onnx" in str(error.value)
    with pytest.raises(weft.Error) as error:
        weft.run(str(bad), [np.zeros((1, 8), np.int64)])
    assert "broken.onnx" in str(error.value)


def test_run_errors(tmp_path):
    ids = np.zeros((2, 8), np.int64)
    with pytest.raises(ValueError, match="needs a plan"):
        weft.run(GPT2, [ids], devices=4)
    with pytest.raises(ValueError, match="devices must be at least 1"):
        weft.run(GPT2, [ids], devices=0, plan="dp=2")
    with pytest.raises(weft.Error, match="runs on 2 devices, but --devices is 4"):
        weft.run(GPT2, [ids], devices=4, plan="dp=2")
    with pytest.raises(weft.Error, match="unknown key|tq"):
        weft.run(GPT2, [ids], plan="tq=2")
    with pytest.raises(weft.Error, match="token id 999999"):
        weft.run(GPT2, [np.full((2, 8), 999999, np.int64)])
    with pytest.raises(ValueError, match="dtype"):
        weft.run(GPT2, [np.array(["a"])])


# ---------------------------------------------------------------------------
# weft.run against weft run and PyTorch
# ---------------------------------------------------------------------------

def test_run_equals_cli(tmp_path):
    ids = np.random.default_rng(1).integers(0, 50, (2, 8)).astype(np.int64)
    np.save(tmp_path / "ids.npy", ids)
    cli("run", GPT2, "-i", str(tmp_path / "ids.npy"), "--plan-spec", "dp=2,tp=2",
        "-o", str(tmp_path / "out"), "--output-format", "npy")
    expected = np.load(tmp_path / "out" / "output_0.npy")
    outputs, sent = weft.run(GPT2, [ids], devices=4, plan="dp=2,tp=2",
                             return_bytes=True)
    assert isinstance(outputs[0], np.ndarray) and outputs[0].dtype == np.float32
    np.testing.assert_array_equal(outputs[0], expected)
    assert len(sent) == 4 and all(b > 0 for b in sent)
    unpartitioned = weft.run(GPT2, [ids])[0]
    np.testing.assert_allclose(outputs[0], unpartitioned, rtol=1e-4, atol=1e-5)


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
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q = q.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        k = k.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        v = v.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.heads)
        scores = scores.masked_fill(self.causal[:, :, :s, :s] == 0, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, h))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class SmallGPT(torch.nn.Module):
    """A GPT as people write it (nanoGPT's shape): token and position
    embeddings, pre-norm blocks with a causal buffer, tied head."""

    def __init__(self, vocab=96, hidden=32, heads=4, layers=2, seq=16):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, hidden)
        self.wpe = torch.nn.Embedding(seq, hidden)
        self.blocks = torch.nn.ModuleList(Block(hidden, heads, seq) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def small_gpt():
    torch.manual_seed(0)
    model = SmallGPT()
    ids = torch.randint(0, 96, (4, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = model(ids)
    return model, ids, expected


@pytest.mark.parametrize("plan", ["dp=2,tp=2", "tp=2,cp=2", "dp=2,ulysses=2",
                                  "tp=4,sp=1"])
def test_torch_module_runs_on_4_devices_equal_to_torch(plan):
    model, ids, expected = small_gpt()
    outputs = weft.run(model, [ids], devices=4, plan=plan)
    assert isinstance(outputs[0], torch.Tensor)
    torch.testing.assert_close(outputs[0], expected, rtol=1e-4, atol=1e-4)
    assert model.training  # the export restores the module's mode
    numpy_out = weft.run(model, [ids.numpy()], devices=4, plan=plan, as_torch=False)
    assert isinstance(numpy_out[0], np.ndarray)


def test_torch_module_plans_and_runs_its_plan():
    model, ids, expected = small_gpt()
    plans = weft.plan(model, "a100-80g:4x1", global_batch=4, seq_len=8,
                      example_inputs=ids, top=20)
    assert plans.model.layers == 2 and plans.model.hidden == 32
    assert "costed from its own IR" in plans.header
    assert all(p.gpus_used <= 4 for p in plans)
    # A plan costed for the module (as a user would fix one), then run.
    chosen = weft.plan(model, "a100-80g:4x1", global_batch=4, seq_len=8,
                       example_inputs=ids, evaluate="dp=2,tp=2,mbs=2")[0]
    assert (chosen.dp, chosen.tp, chosen.micro_batch) == (2, 2, 2)
    outputs = weft.run(model, [ids], devices=4, plan=chosen)
    torch.testing.assert_close(outputs[0], expected, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------
# weft.compile against weft compile
# ---------------------------------------------------------------------------

def test_compile_equals_cli(tmp_path):
    cli("compile", GPT2, "--batch-size", "2", "--seq-len", "8", "--plan-spec",
        "tp=2", "-o", str(tmp_path / "cli"))
    result = weft.compile(GPT2, "tp=2", out=tmp_path / "py", batch_size=2, seq_len=8)
    assert result.program is None and "program.cpp" in result.summary
    cli_source = (tmp_path / "cli" / "program.cpp").read_text()
    py_source = (tmp_path / "py" / "program.cpp").read_text()
    assert py_source == cli_source.replace(str(tmp_path / "cli"), str(tmp_path / "py"))
    assert sorted(os.listdir(tmp_path / "py" / "weights")) == \
        sorted(os.listdir(tmp_path / "cli" / "weights"))
    cuda = weft.compile(GPT2, "tp=2", out=tmp_path / "cuda", target="cuda",
                        batch_size=2, seq_len=8)
    assert "program.cu" in cuda.summary and (tmp_path / "cuda" / "program.cu").exists()
    with pytest.raises(weft.Error, match="not empty"):
        weft.compile(GPT2, "tp=2", out=tmp_path,
                     batch_size=2, seq_len=8)
    with pytest.raises(ValueError, match="target"):
        weft.compile(GPT2, "tp=2", out=tmp_path / "x", target="tpu")


def test_compile_torch_module(tmp_path):
    model, ids, _ = small_gpt()
    result = weft.compile(model, "dp=2,tp=2", out=tmp_path / "project",
                          example_inputs=ids)
    assert (tmp_path / "project" / "program.cpp").exists()
    assert os.listdir(tmp_path / "project" / "weights")
    assert "wrote" in result.summary


def test_type_stubs_cover_the_api():
    stub = os.path.join(os.path.dirname(weft.__file__), "__init__.pyi")
    text = open(stub).read()
    for name in weft.__all__:
        assert name in text, name
