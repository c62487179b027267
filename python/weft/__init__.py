"""Weft from Python: parallelization plans, compiled rank programs and runs on
simulated devices, from a training script.

    import weft
    plans = weft.plan("gpt3-175b", "h100:8x128", global_batch=1536)
    print(plans[0])                     # the best plan, one line
    print(plans[0].to_megatron_args())  # as Megatron-LM launch flags
    outputs = weft.run(model, [ids], devices=4, plan="dp=2,tp=2")

Every function is a thin layer over Weft's C++ driver (the code behind the
`weft` command line), so `weft.plan(...)` answers exactly what `weft plan
--json` writes for the same inputs. Arguments of the wrong type or out of
range raise ValueError; what Weft itself rejects (a model it cannot import, a
cluster it does not know, a plan that does not divide the model) raises
weft.Error with Weft's diagnostic, naming the file and ONNX node.
"""

from __future__ import annotations

import json
import numbers
import os
import re
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _weft

__all__ = [
    "Error",
    "Cluster",
    "Plan",
    "Plans",
    "CompileResult",
    "plan",
    "run",
    "compile",
]

#: What Weft rejects: the message is Weft's diagnostic (file, ONNX node,
#: what to do). A subclass of RuntimeError.
Error = _weft.Error

_BUILDER_KEYS = {
    "model", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn",
    "ffn_kind", "vocab", "tied",
}
_MODEL_SUFFIXES = (".onnx", ".onnxtxt", ".mlir")


def _check_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError("%s must be an int, not %r" % (name, value))
    if value < minimum:
        raise ValueError("%s must be at least %d, not %d" % (name, minimum, value))
    return int(value)


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError("%s must be one of %s, not %r"
                         % (name, ", ".join(repr(c) for c in choices), value))
    return value


def _is_torch_module(obj: Any) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(obj, torch.nn.Module)


def _is_torch_tensor(obj: Any) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(obj, torch.Tensor)


def _export_module(module: Any, example_inputs: Any, directory: str) -> str:
    """Exports a torch.nn.Module to ONNX (opset 17) in `directory`, with the
    first two axes of every input dynamic (batch, sequence), as the planner
    chooses the micro-batch and the sequence length."""
    import torch

    if example_inputs is None:
        raise ValueError(
            "a torch.nn.Module needs example_inputs (a tensor or a tuple of "
            "tensors it is called with) to be exported to ONNX")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if not example_inputs or not all(isinstance(t, torch.Tensor)
                                     for t in example_inputs):
        raise ValueError("example_inputs must be a tensor or a non-empty "
                         "tuple of tensors")
    names = ["input_%d" % i for i in range(len(example_inputs))]
    axes = {}
    for name, tensor in zip(names, example_inputs):
        dims = {}
        if tensor.dim() >= 1:
            dims[0] = "batch"
        if tensor.dim() >= 2:
            dims[1] = "sequence"
        axes[name] = dims
    # Named after the module class: the planner reports the model by it.
    path = os.path.join(directory, type(module).__name__ + ".onnx")
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            torch.onnx.export(module, example_inputs, path, opset_version=17,
                              input_names=names, dynamic_axes=axes,
                              do_constant_folding=True)
    except Exception as error:  # torch's own errors name the module's code
        raise Error("exporting the module to ONNX failed: %s" % error) from error
    finally:
        module.train(was_training)
    return path


class _ModelSource:
    """A model argument resolved into what the driver takes: a file (an
    exported module lives in a temporary directory as long as this does)."""

    def __init__(self, model: Any, example_inputs: Any = None,
                 builder: bool = True):
        self.tempdir = None
        self.fields: Dict[str, Any] = {}
        self.input_shapes: Dict[str, str] = {}
        if _is_torch_module(model):
            self.tempdir = tempfile.TemporaryDirectory(prefix="weft-")
            self.file = _export_module(model, example_inputs, self.tempdir.name)
            # The example's shapes, for what binds them (weft.compile).
            import torch

            examples = (example_inputs,) if isinstance(example_inputs, torch.Tensor) \
                else tuple(example_inputs)
            self.input_shapes = {
                "input_%d" % i: "x".join(str(d) for d in t.shape)
                for i, t in enumerate(examples) if t.dim() > 0}
            return
        if isinstance(model, os.PathLike):
            model = os.fspath(model)
        if isinstance(model, str):
            # A Hugging Face config.json, or a checkpoint directory holding
            # one: the planner reads it as it reads a preset.
            if builder and (model.lower().endswith(".json")
                            or os.path.isdir(model)):
                self.file = None
                self.fields["preset"] = model
            elif model.endswith(_MODEL_SUFFIXES) or os.path.sep in model \
                    or os.path.exists(model):
                self.file = model
            elif builder:
                self.file = None
                self.fields["preset"] = model
            else:
                raise ValueError(
                    "model %r is not a model file (.onnx, .onnxtxt or .mlir)"
                    % model)
            return
        if isinstance(model, dict) and builder:
            unknown = set(model) - _BUILDER_KEYS
            if unknown:
                raise ValueError(
                    "unknown model field(s) %s; a model dict takes %s"
                    % (", ".join(sorted(unknown)),
                       ", ".join(sorted(_BUILDER_KEYS))))
            self.file = None
            self.fields["preset"] = model.get("model", "gpt")
            for key in ("layers", "hidden", "heads", "kv_heads", "head_dim",
                        "ffn", "vocab"):
                if key in model:
                    self.fields[key] = _check_int("model['%s']" % key, model[key])
            if "ffn_kind" in model:
                self.fields["ffn_kind"] = _check_choice(
                    "model['ffn_kind']", model["ffn_kind"],
                    ("gelu", "swiglu", "geglu"))
            if "tied" in model:
                self.fields["tied"] = "yes" if model["tied"] else "no"
            return
        what = ("a preset name, a builder dict, a model file or a "
                "torch.nn.Module" if builder else
                "a model file or a torch.nn.Module")
        raise ValueError("model must be %s, not %s" % (what, type(model).__name__))


class Cluster:
    """A GPU cluster: a shorthand ("h100:8x128": GPU, GPUs per node, nodes),
    a cluster file (.json or protobuf text, as `weft plan --cluster` takes),
    keyword arguments, or a dict of the Cluster message's fields."""

    def __init__(self, spec: Union[str, "os.PathLike[str]", Dict[str, Any], None] = None,
                 *, gpu: Optional[str] = None, gpus_per_node: Optional[int] = None,
                 nodes: Optional[int] = None):
        self._file: Optional[tempfile.TemporaryDirectory] = None
        keywords = (gpu, gpus_per_node, nodes)
        if spec is not None and any(k is not None for k in keywords):
            raise ValueError("give a cluster spec or gpu=/gpus_per_node=/nodes=, "
                             "not both")
        if isinstance(spec, os.PathLike):
            spec = os.fspath(spec)
        if spec is None:
            if gpu is None:
                raise ValueError("a Cluster needs a spec (e.g. 'h100:8x16') or gpu=")
            if not isinstance(gpu, str) or not gpu:
                raise ValueError("gpu must be a GPU name such as 'h100', not %r" % (gpu,))
            spec = "%s:%dx%d" % (gpu, _check_int("gpus_per_node", gpus_per_node or 8),
                                 _check_int("nodes", nodes or 1))
        if isinstance(spec, dict):
            self._file = tempfile.TemporaryDirectory(prefix="weft-cluster-")
            path = os.path.join(self._file.name, "cluster.json")
            with open(path, "w") as f:
                json.dump(spec, f)
            spec = path
        if not isinstance(spec, str) or not spec:
            raise ValueError("a cluster spec is a string such as 'h100:8x16', a "
                             "file or a dict, not %r" % (spec,))
        self.spec = spec
        self._data = json.loads(_weft.cluster(spec))

    def to_dict(self) -> Dict[str, Any]:
        """The Cluster message's fields, as `weft plan --json` writes them."""
        return json.loads(json.dumps(self._data))

    def to_json(self) -> str:
        return json.dumps(self._data, indent=2)

    @property
    def name(self) -> str:
        return self._data.get("name", "")

    @property
    def gpu(self) -> str:
        return self._data.get("gpu", {}).get("name", "")

    @property
    def gpus_per_node(self) -> int:
        return int(self._data.get("gpus_per_node", 0))

    @property
    def nodes(self) -> int:
        return int(self._data.get("nodes", 0))

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def __str__(self) -> str:
        return "%s: %d x %s (%d per node)" % (self.name, self.total_gpus,
                                             self.gpu, self.gpus_per_node)

    def __repr__(self) -> str:
        return "weft.Cluster(%r)" % self.spec


_INT_STRING = re.compile(r"^-?\d+$")


def _plain(value: Any) -> Any:
    """int64 fields, which protobuf's JSON writes as strings, as ints."""
    if isinstance(value, str) and _INT_STRING.match(value):
        return int(value)
    if isinstance(value, dict):
        return _Fields(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class _Fields(dict):
    """A JSON object whose fields are also attributes."""

    def __getattr__(self, name: str) -> Any:
        if name in self:
            return _plain(self[name])
        raise AttributeError(name)


class Plan:
    """One parallelization plan: degrees (dp, tp, pp, cp, ulysses), schedule,
    micro-batching, ZeRO stage and recomputation, with the predicted time and
    memory. Fields are those of `weft plan --json` (plan.tp, plan.time.step_s,
    plan.memory.total_gib, ...)."""

    def __init__(self, data: Dict[str, Any], plans: "Plans", index: int):
        self._data = data
        self._plans = plans
        self._index = index

    def __getattr__(self, name: str) -> Any:
        data = self.__dict__.get("_data", {})
        if name in data:
            return _plain(data[name])
        raise AttributeError("a Plan has no field %r (fields: %s)"
                             % (name, ", ".join(sorted(data))))

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._data))

    @property
    def spec(self) -> str:
        """The short form ("tp=8,pp=4,dp=32,...") that weft.run,
        weft.compile and `weft plan --evaluate` take."""
        return self._plans._session.spec(self._index)

    @property
    def step_time(self) -> float:
        """Predicted seconds per training step."""
        return float(self._data.get("time", {}).get("step_s", 0.0))

    @property
    def memory_gib(self) -> float:
        """Predicted GiB per GPU on the plan's worst stage."""
        return float(self._data.get("memory", {}).get("total_gib", 0.0))

    def to_dict(self) -> Dict[str, Any]:
        """The plan as `weft plan --json` writes it (int64 fields as strings,
        as protobuf's JSON mapping has them)."""
        return json.loads(json.dumps(self._data))

    def to_json(self) -> str:
        return json.dumps(self._data, indent=2)

    def breakdown(self) -> str:
        """Where the step's time and each GPU's memory go."""
        return self._plans._session.breakdown(self._index)

    def explain(self) -> str:
        """The breakdown and, for the best plan, why it wins over the
        others searched."""
        text = self.breakdown()
        if self._index == 0 and len(self._plans) > 1:
            text += self._plans.explain()
        return text

    def pipeline_schedule(self) -> str:
        """The pipeline schedule each pipeline rank runs (F, B, W steps by
        micro-batch; sends and receives by peer)."""
        return self._plans._session.schedule(self._index)

    def rank_ir(self) -> str:
        """The weft IR one rank runs for a micro-batch: what the cost model
        measured."""
        return self._plans._session.rank_ir(self._index)

    def to_megatron_args(self) -> str:
        """Megatron-LM launch arguments for this plan."""
        return self._plans._session.export(self._index, "megatron")

    def to_deepspeed_args(self) -> str:
        """DeepSpeed (Megatron-DeepSpeed) arguments and config for this plan."""
        return self._plans._session.export(self._index, "deepspeed")

    def to_torchtitan_args(self) -> str:
        """torchtitan configuration for this plan."""
        return self._plans._session.export(self._index, "torchtitan")

    def __str__(self) -> str:
        time = self._data.get("time", {})
        line = "%s: step %.3f s" % (self.spec, time.get("step_s", 0.0))
        if "tokens_per_s" in self._data:
            line += ", %.4g tokens/s" % self._data["tokens_per_s"]
        if "mfu" in self._data:
            line += ", MFU %.1f%%" % (100 * self._data["mfu"])
        line += ", %.1f GiB per GPU" % self.memory_gib
        if not self._data.get("fits", False):
            line += " (does not fit)"
        return line

    def __repr__(self) -> str:
        return "<weft.Plan %s>" % self.spec


class Plans(list):
    """The plans `weft.plan` found, best first, with the model, cluster and
    training setup they were costed for."""

    def __init__(self, session: Any, keep: Any = None):
        self._session = session
        self._keep = keep  # the exported model, which the cost model reads
        self._data = json.loads(session.json())
        super().__init__(Plan(p, self, i)
                         for i, p in enumerate(self._data.get("plans", [])))

    @property
    def model(self) -> _Fields:
        return _Fields(self._data.get("model", {}))

    @property
    def cluster(self) -> _Fields:
        return _Fields(self._data.get("cluster", {}))

    @property
    def training(self) -> _Fields:
        return _Fields(self._data.get("training", {}))

    @property
    def header(self) -> str:
        """The model and cluster lines `weft plan` prints first."""
        return self._session.header()

    def table(self) -> str:
        """The table `weft plan` prints."""
        return self._session.table()

    def explain(self) -> str:
        """Why the first plan wins over the others."""
        return self._session.explain()

    def to_dict(self) -> Dict[str, Any]:
        """Everything `weft plan --json` writes."""
        return json.loads(json.dumps(self._data))

    def to_json(self) -> str:
        return self._session.json()

    def save(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes the JSON that `weft plan --json` writes (for `weft run
        --plan`, `weft compile --plan` or `--evaluate-json`)."""
        with open(os.fspath(path), "w") as f:
            f.write(self.to_json())

    def report(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes the self-contained HTML report `weft plan --report` writes."""
        with open(os.fspath(path), "w") as f:
            f.write(self._session.report())

    def __repr__(self) -> str:
        return "<weft.Plans: %d plans for %s on %s>" % (
            len(self), self._data.get("model", {}).get("name", "?"),
            self._data.get("cluster", {}).get("name", "?"))


def plan(model: Any, cluster: Union[str, Cluster, Dict[str, Any], "os.PathLike[str]"], *,
         global_batch: int, seq_len: Optional[int] = None, dtype: Optional[str] = None,
         example_inputs: Any = None, input_shapes: Optional[Dict[str, str]] = None,
         top: int = 5, memory_reserve_gib: float = 2.0, flash_attention: Optional[bool] = None,
         dropout: bool = False, grad_reduce_16bit: bool = False,
         launch_blocking: bool = False, tp_across_nodes: bool = False, framework: Optional[str] = None,
         evaluate: Union[str, Plan, None] = None, allow_oom: bool = False) -> Plans:
    """Chooses parallelization plans for training `model` on `cluster`, as
    `weft plan` does, and returns them best first.

    model: a preset name ("gpt3-175b", "llama3-70b", ...), a Hugging Face
    config.json (or a checkpoint directory holding one), a builder dict
    ({"model": "gpt" or "llama" or a preset, "layers": 48, "hidden": 6144,
    "heads": 48, ...}), an ONNX or .mlir file, or a torch.nn.Module with
    `example_inputs` (exported to ONNX with dynamic batch and sequence).
    cluster: a Cluster, or what Cluster() takes. global_batch: sequences per
    step. framework: search only what megatron, deepspeed or torchtitan runs.
    launch_blocking: the runs launch kernels synchronously
    (CUDA_LAUNCH_BLOCKING=1), as `weft plan --launch-blocking`.
    evaluate: cost this plan (short form or a Plan) instead of searching; a
    plan that does not fit raises weft.Error unless allow_oom.
    """
    source = _ModelSource(model, example_inputs)
    if not isinstance(cluster, Cluster):
        cluster = Cluster(cluster)
    request: Dict[str, Any] = dict(source.fields)
    if source.file is not None:
        request["model_file"] = source.file
    request["cluster"] = cluster.spec
    request["global_batch"] = _check_int("global_batch", global_batch)
    if seq_len is not None:
        request["seq_len"] = _check_int("seq_len", seq_len)
    if dtype is not None:
        request["dtype"] = _check_choice("dtype", dtype, ("bf16", "fp16"))
    if input_shapes:
        if source.file is None:
            raise ValueError("input_shapes binds the inputs of an ONNX model")
        request["input_shapes"] = ["%s=%s" % (k, v) for k, v in input_shapes.items()]
    request["top"] = _check_int("top", top)
    if not isinstance(memory_reserve_gib, numbers.Real) or memory_reserve_gib < 0:
        raise ValueError("memory_reserve_gib must be a number of GiB >= 0")
    request["memory_reserve_gib"] = float(memory_reserve_gib)
    if flash_attention is not None:
        request["flash_attention"] = bool(flash_attention)
    request["dropout"] = bool(dropout)
    request["grad_reduce_16bit"] = bool(grad_reduce_16bit)
    request["launch_blocking"] = bool(launch_blocking)
    request["tp_across_nodes"] = bool(tp_across_nodes)
    if framework is not None:
        request["framework"] = _check_choice(
            "framework", framework, ("megatron", "deepspeed", "torchtitan"))
    keep = [source.tempdir, cluster]
    if isinstance(evaluate, Plan):
        directory = tempfile.TemporaryDirectory(prefix="weft-plan-")
        path = os.path.join(directory.name, "plan.json")
        with open(path, "w") as f:
            json.dump({"plans": [evaluate.to_dict()]}, f)
        request["evaluate_json"] = path
        keep.append(directory)
    elif isinstance(evaluate, str):
        request["evaluate"] = evaluate
    elif evaluate is not None:
        raise ValueError("evaluate must be a plan's short form or a weft.Plan")
    request["allow_oom"] = bool(allow_oom)
    session = _weft.PlanSession(request)
    return Plans(session, keep)


def _plan_request(plan: Any) -> Dict[str, Any]:
    if isinstance(plan, Plan):
        return {"plan_json": plan.to_json(), "plan_origin": plan.spec}
    if isinstance(plan, Plans):
        if not plan:
            raise ValueError("the Plans hold no plan")
        return {"plan_json": plan[0].to_json(), "plan_origin": plan[0].spec}
    if isinstance(plan, dict):
        return {"plan_json": json.dumps(plan), "plan_origin": "a plan dict"}
    if isinstance(plan, os.PathLike):
        plan = os.fspath(plan)
    if isinstance(plan, str):
        if plan.endswith(".json") or os.path.exists(plan):
            return {"plan_file": plan, "plan_origin": plan}
        return {"plan_spec": plan, "plan_origin": plan}
    raise ValueError("plan must be a weft.Plan, a short form such as "
                     "'dp=2,tp=2', a plan JSON file or dict, not %s"
                     % type(plan).__name__)


def _to_numpy(value: Any, index: int) -> Any:
    import numpy as np

    if _is_torch_tensor(value):
        import torch

        tensor = value.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return tensor.numpy()
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind not in "fiub":
        raise ValueError("input #%d has dtype %s; give float, integer or boolean "
                         "arrays or tensors" % (index, array.dtype))
    return array


def _import_numpy() -> None:
    try:
        import numpy  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "weft.run needs numpy (Debian: apt-get install python3-numpy)") from error


def _model_keywords(dtype: str, loss: bool, input_shapes: Optional[Dict[str, str]],
                    batch_size: Optional[int], seq_len: Optional[int]) -> Dict[str, Any]:
    keywords: Dict[str, Any] = {
        "dtype": _check_choice("dtype", dtype, ("f32", "bf16", "f16")),
        "loss": bool(loss),
    }
    if input_shapes:
        keywords["input_shapes"] = ["%s=%s" % (k, v) for k, v in input_shapes.items()]
    if batch_size is not None:
        keywords["batch_size"] = _check_int("batch_size", batch_size)
    if seq_len is not None:
        keywords["seq_len"] = _check_int("seq_len", seq_len)
    return keywords


def run(model: Any, inputs: Sequence[Any], *, devices: Optional[int] = None,
        plan: Any = None, dtype: str = "f32", loss: bool = False,
        input_shapes: Optional[Dict[str, str]] = None,
        collective_timeout: float = 300.0, as_torch: Optional[bool] = None,
        return_bytes: bool = False) -> Any:
    """Runs `model`'s forward on `inputs`, as `weft run` does: unpartitioned,
    or partitioned under `plan` on `devices` simulated devices (threads).

    model: an ONNX or .mlir file, or a torch.nn.Module (exported with
    `inputs` as its example inputs). inputs: numpy arrays or torch tensors
    in the model's argument order. plan: a weft.Plan, a short form such as
    "dp=2,tp=2", or a plan JSON file. Returns the outputs as numpy arrays,
    or as torch tensors when the model or an input was torch's (as_torch
    overrides); with return_bytes, also the bytes each rank sent.
    """
    _import_numpy()
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        if _is_torch_tensor(inputs) or hasattr(inputs, "__array__"):
            inputs = [inputs]
        else:
            raise ValueError("inputs must be a list of arrays or tensors")
    inputs = list(inputs)
    torch_given = _is_torch_module(model) or any(_is_torch_tensor(t) for t in inputs)
    example = None
    if _is_torch_module(model):
        import torch

        example = tuple(t if _is_torch_tensor(t) else torch.as_tensor(t)
                        for t in inputs)
    source = _ModelSource(model, example, builder=False)
    arrays = [_to_numpy(value, i) for i, value in enumerate(inputs)]
    request = _model_keywords(dtype, loss, input_shapes, None, None)
    if devices is not None:
        request["devices"] = _check_int("devices", devices)
        if plan is None:
            raise ValueError("devices=%d needs a plan to partition under "
                             "(e.g. plan='dp=%d')" % (devices, devices))
    if plan is not None:
        request.update(_plan_request(plan))
    if not isinstance(collective_timeout, numbers.Real) or not collective_timeout > 0:
        raise ValueError("collective_timeout must be a positive number of seconds")
    request["collective_timeout"] = float(collective_timeout)
    outputs, sent = _weft.run(source.file, arrays, request)
    if as_torch if as_torch is not None else torch_given:
        import torch

        outputs = [torch.from_numpy(o) for o in outputs]
    return (outputs, list(sent)) if return_bytes else outputs


class CompileResult:
    """What weft.compile wrote: the project directory, the built program (with
    build=True) and the summary `weft compile` prints."""

    def __init__(self, out: str, summary: str, program: str):
        self.out = out
        self.summary = summary
        self.program = program or None

    def __repr__(self) -> str:
        return "<weft.CompileResult %s%s>" % (
            self.out, ", program %s" % self.program if self.program else "")


def compile(model: Any, plan: Any, *, out: Union[str, "os.PathLike[str]"],
            target: str = "cpu", example_inputs: Any = None, dtype: str = "f32",
            loss: bool = False, input_shapes: Optional[Dict[str, str]] = None,
            batch_size: Optional[int] = None, seq_len: Optional[int] = None,
            force: bool = False, build: bool = False,
            runtime_prefix: Optional[str] = None) -> CompileResult:
    """Partitions `model` under `plan` and writes the per-rank program as a
    CMake project in `out`, as `weft compile` does: C++ on the CPU runtime
    (target="cpu") or CUDA C++ over cuBLASLt and NCCL (target="cuda").
    With build=True, also configures and builds it."""
    source = _ModelSource(model, example_inputs, builder=False)
    if plan is None:
        raise ValueError("weft.compile needs a plan")
    if input_shapes is None and batch_size is None and seq_len is None:
        input_shapes = source.input_shapes or None
    request = _model_keywords(dtype, loss, input_shapes, batch_size, seq_len)
    request.update(_plan_request(plan))
    request["target"] = _check_choice("target", target, ("cpu", "cuda"))
    if isinstance(out, os.PathLike):
        out = os.fspath(out)
    if not isinstance(out, str) or not out:
        raise ValueError("out must be a directory path")
    request["out"] = out
    request["force"] = bool(force)
    request["build"] = bool(build)
    if runtime_prefix is not None:
        request["runtime_prefix"] = os.fspath(runtime_prefix)
    summary, program = _weft.compile(source.file, request)
    return CompileResult(out, summary, program)
