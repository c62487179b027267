//===- Cuda.h - The CUDA backend of the runtime -----------------*- C++ -*-===//
//
// Part of the Weft project.
//
// What a generated CUDA rank program calls: device tensors in one arena per
// rank (offsets assigned by `weft compile`), kernels for everything that is
// not a generated elementwise kernel (GEMMs through cuBLASLt with fused bias
// and GELU epilogues, flash attention, norms, softmax, reductions, data
// movement), collectives on a communication stream ordered by events, and a
// driver that runs ranks either as processes over NCCL (mpirun, srun,
// torchrun) or as threads sharing one GPU over the in-process communicator.
// Errors throw std::runtime_error naming the rank and the op.
//
// Two libraries implement it: Weft::WeftRuntimeCuda (the GPU) and
// Weft::WeftRuntimeCudaEmulation, which runs the same generated program on
// the CPU (device memory is host memory, kernels are the CPU kernels, events
// are null), so that CI executes the CUDA emitter's programs: their arena,
// fusion, epilogues and collectives.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_CUDA_CUDA_H
#define WEFT_RUNTIME_CUDA_CUDA_H

#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/Pipeline.h"
#include "weft/runtime/Program.h"
#include "weft/runtime/Training.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace weft::rt::cuda {

/// A tensor in device memory (not owned: it lives in the rank's arena).
struct DeviceTensor {
  void *data = nullptr;
  DType dtype = DType::F32;
  Shape shape;
  int64_t numel() const { return numElements(shape); }
  int64_t bytes() const { return numel() * dtypeBytes(dtype); }
};

class DeviceCommunicator;

/// One rank's state: its place on the mesh, its streams, cuBLASLt and its
/// arena. `op` names the op being issued, for error messages.
/// A communicator every rank of a program creates at start-up: the group of
/// its collectives over `axes`, or with `members` the sub-group of its one
/// axis at those coordinates (weft.all_reduce ... members [...]).
struct CommunicatorGroup {
  std::vector<std::string> axes;
  std::vector<int64_t> members = {};
};

struct Context {
  int rank = 0;
  Mesh mesh;
  std::string weightsDir;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
  void *blasLt = nullptr;          // cublasLtHandle_t
  void *blasWorkspace = nullptr;
  size_t blasWorkspaceBytes = 0;
  char *arena = nullptr;
  DeviceCommunicator *communicator = nullptr;
  /// The host emulation's collectives (not used on a GPU).
  Communicator *hostCommunicator = nullptr;
  const char *op = "";
  /// In a pipelined step (set from RankContext by onDevice): the running
  /// step's micro-batch (-1 outside one) and how many pipelined steps the
  /// rank has begun, which date what heldAllGather keeps.
  int microBatch = -1;
  int64_t pipelineSteps = 0;
  /// What heldAllGather keeps, by gather: a device copy of the gathered
  /// value, the step and block it was gathered in.
  struct HeldGather {
    int64_t step = -1, block = -1;
    std::shared_ptr<void> data;
    int64_t bytes = 0;
  };
  std::map<int64_t, HeldGather> held = {};
};

/// Throws "OP: what" (a CUDA, cuBLASLt or NCCL failure); the driver
/// reports it as "rank R: OP: what".
[[noreturn]] void fail(const Context &ctx, const std::string &what);
/// Checks a CUDA call; the error names the rank, the op and `call`.
void check(const Context &ctx, cudaError_t error, const char *call);
/// Checks the launch of the kernel just issued.
void checkLaunch(const Context &ctx);

/// A view of `arena + offset`.
inline DeviceTensor at(Context &ctx, int64_t offset, DType dtype, Shape shape) {
  return DeviceTensor{ctx.arena + offset, dtype, std::move(shape)};
}
/// The same memory with another shape (reshape is free).
inline DeviceTensor view(const DeviceTensor &t, Shape shape) {
  return DeviceTensor{t.data, t.dtype, std::move(shape)};
}

// Host <-> device.
void upload(Context &ctx, const HostTensor &host, const DeviceTensor &out);
HostTensor download(Context &ctx, const DeviceTensor &t);
/// A weight from `<weightsDir>/<name>` into `out` (its dtype converted).
void loadWeight(Context &ctx, const std::string &name, const DeviceTensor &out);
/// This rank's block of a weight along `dim` over mesh `axes`, reading only
/// that block from the file.
void loadWeightShard(Context &ctx, const std::string &name,
                     const std::vector<std::string> &axes, int64_t dim,
                     const DeviceTensor &out);
/// This rank's block along `dim` over mesh `axes` of `host` (a whole tensor
/// in host memory, such as a held parameter) into `out`.
void uploadShard(Context &ctx, const HostTensor &host,
                 const std::vector<std::string> &axes, int64_t dim,
                 const DeviceTensor &out);

// Kernels. Float tensors may be f32, bf16 or f16 (computed in f32).
enum class Epilogue { None, Bias, GeluBias, Gelu };
/// out[..., N] = x[..., K] · w (w is [K, N], or [N, K] with transposeWeight)
/// + bias, then GELU (tanh) with the GELU epilogues: one cuBLASLt call.
void linear(Context &ctx, const DeviceTensor &x, const DeviceTensor &w,
            const DeviceTensor *bias, bool transposeWeight, Epilogue epilogue,
            const DeviceTensor &out);
/// Batched matmul over equal leading dimensions.
void matmul(Context &ctx, const DeviceTensor &a, const DeviceTensor &b,
            bool transposeA, bool transposeB, const DeviceTensor &out);
/// Flash attention: tiles of K and V through shared memory, an online
/// softmax per query row, no S x S matrix; causal, explicit masks
/// (broadcast, boolean or additive) and grouped KV heads. A positive
/// `softcap` caps the scaled scores before the mask (softcap·tanh(s /
/// softcap)); a positive `window` (with `causal`) is a sliding window,
/// keys i - window + 1 to i. `alibi`, if given, holds one f32 slope m_h per
/// query head: ALiBi's bias -m_h |i - j| on the (capped) scaled scores.
/// Such attention takes the CUDA-core kernels.
void attention(Context &ctx, const DeviceTensor &q, const DeviceTensor &k,
               const DeviceTensor &v, const DeviceTensor *mask, float scale,
               bool causal, const DeviceTensor &out, float softcap = 0.0f,
               int64_t window = 0, const DeviceTensor *alibi = nullptr);
/// One block of keys (weft.attention_block): as attention, with a causal
/// mask by explicit positions when given (key j hidden from query i when
/// kPositions[j] > qPositions[i]), and each row's log-sum-exp in `lse` (f32;
/// -1e30 and a zero output for a row whose keys are all masked).
void attentionBlock(Context &ctx, const DeviceTensor &q, const DeviceTensor &k,
                    const DeviceTensor &v, const DeviceTensor *mask,
                    const DeviceTensor *qPositions,
                    const DeviceTensor *kPositions, float scale, bool causal,
                    const DeviceTensor &out, const DeviceTensor &lse,
                    float softcap = 0.0f, int64_t window = 0,
                    const DeviceTensor *alibi = nullptr);
/// Attention's gradients (weft.attention_grad): dq, dk and dv from the
/// output's gradient `dout`, masks and positions as in attentionBlock; one
/// pass over the query rows (their log-sum-exps, D = rowsum(P dP) and dq)
/// and one over the key rows (dk and dv summed over the group's query heads),
/// no S x S matrix. With the forward's `out` and `lse` (both or neither),
/// the rows' log-sum-exps and D = rowsum(dO out) are the whole attention's:
/// the gradients of one block of its keys (ring attention's backward step).
void attentionGrad(Context &ctx, const DeviceTensor &q, const DeviceTensor &k,
                   const DeviceTensor &v, const DeviceTensor &dout,
                   const DeviceTensor *mask, const DeviceTensor *qPositions,
                   const DeviceTensor *kPositions, const DeviceTensor *out,
                   const DeviceTensor *lse, float scale, bool causal,
                   const DeviceTensor &dq, const DeviceTensor &dk,
                   const DeviceTensor &dv, float softcap = 0.0f,
                   int64_t window = 0, const DeviceTensor *alibi = nullptr);
/// Layer or RMS norm over dimensions [axis, rank).
void normalize(Context &ctx, const DeviceTensor &x, const DeviceTensor &scale,
               const DeviceTensor *bias, int64_t axis, float epsilon, bool rms,
               const DeviceTensor &out);
/// Softmax (or its log) of `scale · x` along `axis`; with `causal`, entries
/// past the diagonal of the last two dimensions are masked first.
void softmax(Context &ctx, const DeviceTensor &x, int64_t axis, bool log,
             float scale, bool causal, const DeviceTensor &out);
void reduce(Context &ctx, ReduceKind kind, const DeviceTensor &x,
            const std::vector<int64_t> &axes, const DeviceTensor &out);
void transpose(Context &ctx, const DeviceTensor &x,
               const std::vector<int64_t> &perm, const DeviceTensor &out);
void slice(Context &ctx, const DeviceTensor &x,
           const std::vector<int64_t> &starts,
           const std::vector<int64_t> &strides, const DeviceTensor &out);
/// Copies `x` into `out` at `offset` along `axis` (concat, one input).
void insert(Context &ctx, const DeviceTensor &x, int64_t axis, int64_t offset,
            const DeviceTensor &out);
void gather(Context &ctx, const DeviceTensor &x, const DeviceTensor &indices,
            int64_t axis, const DeviceTensor &out);
/// Per-token cross-entropy of `logits` (classes last) against i64
/// `labels`, reduced as `reduction`; a label outside the classes is an
/// error (the stream is synchronized to find out).
void crossEntropy(Context &ctx, const DeviceTensor &logits,
                  const DeviceTensor &labels, LossReduction reduction,
                  std::optional<int64_t> ignoreIndex, const DeviceTensor &out);
void trilu(Context &ctx, const DeviceTensor &x, bool upper, int64_t diagonal,
           const DeviceTensor &out);
/// The running sum along `axis` (floats in f32, integers in 64 bits).
void cumsum(Context &ctx, const DeviceTensor &x, int64_t axis, bool exclusive,
            bool reverse, const DeviceTensor &out);

// Collectives by mesh axes, on the communication stream: each waits for the
// compute stream's work so far and returns the event that marks its end,
// which the consumers wait for (waitFor) before their kernels. Under a
// `codec` (bf16, fp8 or int8; Codec.h) a collective sends encoded segments
// (CodecElements.h), encoded and decoded by kernels on the communication
// stream: an all-gather, permute or all-to-all encodes what it sends and
// decodes what arrives; a reduce-scatter sends each rank its encoded block
// and sums the decoded blocks in group order; an all-reduce is that
// reduce-scatter over blocks of whole 128-element codec blocks, its sums
// encoded again and all-gathered. Top-k runs on the CPU targets only.
cudaEvent_t allReduce(Context &ctx, const DeviceTensor &x, ReduceOp op,
                      const std::vector<std::string> &axes,
                      const DeviceTensor &out, Codec codec = Codec::None);
/// With `members`, over the sub-group of the one axis in `axes` at those
/// coordinates (weft.all_reduce ... members [...]).
cudaEvent_t allReduce(Context &ctx, const DeviceTensor &x, ReduceOp op,
                      const std::vector<std::string> &axes,
                      const std::vector<int64_t> &members,
                      const DeviceTensor &out, Codec codec = Codec::None);
cudaEvent_t allGather(Context &ctx, const DeviceTensor &x,
                      const std::vector<std::string> &axes, int64_t dim,
                      bool zigzag, const DeviceTensor &out,
                      Codec codec = Codec::None);
/// allGather held over blocks of `block` micro-batches (weft.all_gather ...
/// hold N, ZeroPP): the first call of a pipelined step in a block gathers
/// into `out` and keeps a device copy under `key`; the block's later calls
/// copy that into `out` (on the communication stream, no communication).
/// Outside a pipelined step it gathers.
cudaEvent_t heldAllGather(Context &ctx, int64_t key, int64_t block,
                          const DeviceTensor &x,
                          const std::vector<std::string> &axes, int64_t dim,
                          bool zigzag, const DeviceTensor &out,
                          Codec codec = Codec::None);
cudaEvent_t reduceScatter(Context &ctx, const DeviceTensor &x, ReduceOp op,
                          const std::vector<std::string> &axes, int64_t dim,
                          bool zigzag, const DeviceTensor &out,
                          Codec codec = Codec::None);
cudaEvent_t allToAll(Context &ctx, const DeviceTensor &x,
                     const std::vector<std::string> &axes, int64_t splitDim,
                     int64_t concatDim, const DeviceTensor &out,
                     Codec codec = Codec::None);
cudaEvent_t permute(Context &ctx, const DeviceTensor &x,
                    const std::vector<std::string> &axes, int64_t shift,
                    const DeviceTensor &out, Codec codec = Codec::None);
/// This rank's block of `x` along `dim` (no communication).
void allSlice(Context &ctx, const DeviceTensor &x,
              const std::vector<std::string> &axes, int64_t dim, bool zigzag,
              const DeviceTensor &out);
/// The compute stream waits for a collective's end.
void waitFor(Context &ctx, cudaEvent_t done);

/// How the device communicator moves a collective's bytes.
class DeviceCommunicator {
public:
  virtual ~DeviceCommunicator() = default;
  /// Issues the collective on `ctx.comm`. `group` lists global ranks.
  virtual void allReduce(Context &ctx, const std::vector<int> &group,
                         const DeviceTensor &x, ReduceOp op,
                         const DeviceTensor &out) = 0;
  /// Gathers along dimension 0 of `out` (contiguous blocks, group order).
  virtual void allGather0(Context &ctx, const std::vector<int> &group,
                          const DeviceTensor &x, const DeviceTensor &out) = 0;
  /// Reduces, then scatters along dimension 0 of `x`.
  virtual void reduceScatter0(Context &ctx, const std::vector<int> &group,
                              const DeviceTensor &x, ReduceOp op,
                              const DeviceTensor &out) = 0;
  /// Block i of `x` (dimension 0) goes to group rank i; block j of `out`
  /// comes from group rank j.
  virtual void allToAll0(Context &ctx, const std::vector<int> &group,
                         const DeviceTensor &x, const DeviceTensor &out) = 0;
  virtual void permute(Context &ctx, const std::vector<int> &group,
                       const DeviceTensor &x, int64_t shift,
                       const DeviceTensor &out) = 0;
  virtual int64_t bytesSent() const = 0;
};

/// A generated CUDA program.
struct CudaProgramSpec {
  std::function<std::vector<HostTensor>(Context &,
                                        const std::vector<HostTensor> &)>
      function;
  Mesh mesh;
  std::vector<Layout> inputs;
  std::vector<Layout> outputs;
  /// Bytes of the rank's arena (buffer assignment by liveness).
  int64_t arenaBytes = 0;
  /// The mesh-axis sets the program's collectives run over, in one order
  /// for every rank: over NCCL, each rank's group communicator for each set
  /// is created at start-up, before the program runs (a split is a
  /// collective over the world: every rank must reach it, whatever its
  /// program does next).
  std::vector<CommunicatorGroup> communicators;
  /// The argument types it was compiled for (checked against the inputs).
  std::vector<TensorType> inputTypes;
};

/// The `main` of a generated CUDA program (the CPU program's options):
/// alone, the ranks run as threads sharing device 0 over the in-process
/// communicator (device memory staged through the host); under mpirun,
/// srun or torchrun, one process per rank on device LOCAL_RANK over NCCL,
/// with a watchdog that aborts the communicators and exits non-zero when a
/// collective fails or outlives --collective-timeout.
int programMain(int argc, char **argv, const CudaProgramSpec &spec);

/// A rank's device in a pipelined program: its context (streams, cuBLASLt,
/// arena, communicators), set up before the rank's first step and kept for
/// all its steps.
class DeviceRank : public RankBackend {
public:
  virtual Context &context() = 0;
  /// Frees heldAllGather's device copies when the pipelined step ends: they
  /// are held over blocks of one step's micro-batches, not for the run.
  void endPipelinedStep() noexcept override {
    Context &ctx = context();
    ctx.microBatch = -1;
    ctx.held.clear();
  }
};

/// A stage function of a generated pipelined CUDA program: its inputs
/// uploaded into the arena, its results downloaded.
using DeviceFunction =
    std::vector<HostTensor> (*)(Context &, const std::vector<HostTensor> &);
/// `function` as the pipeline executor calls it (Pipeline.h): on the device
/// its rank set up (RankContext::backend).
RankFunction onDevice(DeviceFunction function);

/// A training step's function on the device (Training.h's
/// TrainingStepFunction): the rank's parameter blocks are its third input.
using DeviceTrainingStepFunction =
    std::vector<HostTensor> (*)(Context &, const std::vector<HostTensor> &,
                                const std::vector<HostTensor> &);
TrainingStepFunction onDevice(DeviceTrainingStepFunction function);

/// What every rank of a pipelined or training CUDA program sets up: one
/// arena for all its functions (a rank runs one at a time), and the
/// communicators of all their collectives, created at start-up as in
/// programMain.
struct DeviceRankSpec {
  int64_t arenaBytes = 0;
  std::vector<CommunicatorGroup> communicators;
};

/// Each rank's device state as PipelineProgram::rankSetup and
/// TrainingProgram::rankSetup make it: on the GPU, its streams, cuBLASLt,
/// arena and, as a process (mpirun, srun, torchrun: `localRank` given), its
/// NCCL communicators on device `localRank`, or as a thread the in-process
/// collectives on device 0; in the host emulation, the arena in host memory.
std::function<std::shared_ptr<RankBackend>(RankContext &)>
deviceRankSetup(const DeviceRankSpec &spec, std::optional<int> localRank);

/// The `main` of a generated pipelined CUDA program: the executor of the
/// CPU's pipelined programs (its schedule, command line, faults and
/// outputs) with `program`'s stage functions on the device. Alone, the
/// ranks run as threads sharing device 0; under mpirun, srun or torchrun,
/// one process per rank on device LOCAL_RANK with its collectives over
/// NCCL. The stages' activations travel through the host communicator.
int pipelineProgramMain(int argc, char **argv, PipelineProgram program,
                        const DeviceRankSpec &spec);

/// The `main` of a generated CUDA training program: the CPU training
/// programs' driver (data, learning rate, checkpoints, outputs;
/// Training.h) with the training step, its gradient reduction and the
/// optimizer step on the device. The parameters and the optimizer state
/// stay in host memory between the calls: each call uploads its inputs and
/// downloads its results.
int trainingProgramMain(int argc, char **argv, TrainingProgram program,
                        const DeviceRankSpec &spec);

} // namespace weft::rt::cuda

#endif // WEFT_RUNTIME_CUDA_CUDA_H
