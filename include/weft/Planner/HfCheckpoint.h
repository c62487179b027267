//===- HfCheckpoint.h - Weights from Hugging Face safetensors ---*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// The weights of a Hugging Face checkpoint (`model.safetensors`, or the shards
// a `model.safetensors.index.json` lists) for the model its config.json
// describes: `weft import --model DIR --checkpoint DIR` builds the model and
// fills each of its parameters from the checkpoint's tensors, laid out as
// the builder lays them (Q, K and V fused and grouped by KV head, [in, out]
// linears, Gemma's norms as 1 + w), so that `weft run` computes the
// checkpoint's logits and `weft train` fine-tunes it.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_HFCHECKPOINT_H
#define WEFT_PLANNER_HFCHECKPOINT_H

#include "weft/plan.pb.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <memory>
#include <string>
#include <vector>

namespace weft::planner {

/// The tensors of one or more safetensors files, read on demand.
class HfCheckpoint {
public:
  /// A `.safetensors` file, a `model.safetensors.index.json`, or a directory
  /// holding either. Errors name the file and what is wrong in it (a header
  /// that is not JSON, offsets outside the file, a dtype other than F32,
  /// F16, BF16, F64 or an integer or boolean one, a shape whose size
  /// disagrees with its bytes).
  static llvm::Expected<HfCheckpoint> open(llvm::StringRef path);

  bool has(llvm::StringRef name) const { return tensors.count(name); }
  /// Whether the tensor (which must exist) is floating-point: a weight,
  /// not an integer or boolean buffer.
  bool isWeight(llvm::StringRef name) const;
  /// The tensor's shape (it must exist).
  llvm::ArrayRef<int64_t> shape(llvm::StringRef name) const;
  /// The tensor's values, converted to f32 (it must exist).
  std::vector<float> read(llvm::StringRef name) const;
  /// Every tensor's name, sorted.
  std::vector<std::string> names() const;
  /// The index of the tensor's first element among all the checkpoint's,
  /// the tensors laid end to end in names() order.
  int64_t firstIndex(llvm::StringRef name) const;
  /// All the checkpoint's elements, in names() order.
  int64_t totalElements() const { return total; }

  /// Writes `values` (totalElements() of them, in names() order) into
  /// `directory` as this checkpoint is laid out: the same files (and index),
  /// each tensor in its dtype (rounded to nearest even from f32).
  llvm::Error writeLike(llvm::ArrayRef<float> values,
                        llvm::StringRef directory) const;

private:
  struct Tensor {
    unsigned file;
    std::string dtype;
    llvm::SmallVector<int64_t, 4> shape;
    uint64_t begin, end;
    int64_t first = 0;
  };
  std::vector<std::shared_ptr<llvm::MemoryBuffer>> files;
  std::vector<std::string> paths;
  std::string index;
  llvm::StringMap<Tensor> tensors;
  int64_t total = 0;
};

/// The values of the built model's parameter `param` (of `shape`, as
/// buildTransformer names and lays it out) from `checkpoint`, for the model
/// `model` read from a config.json of `model.hf_model_type()`; the names of
/// the checkpoint's tensors it read go into `used`. An error names the
/// parameter and the tensor missing or of the wrong shape.
llvm::Expected<std::vector<float>>
parameterFromCheckpoint(const HfCheckpoint &checkpoint,
                        const plan::ModelSpec &model, llvm::StringRef param,
                        llvm::ArrayRef<int64_t> shape,
                        std::vector<std::string> &used);

/// Where each of the parameter's elements comes from: its index among the
/// checkpoint's elements (HfCheckpoint::firstIndex), by the same layout as
/// parameterFromCheckpoint, so that trained values go back to the tensors
/// they came from (weft export-checkpoint).
llvm::Expected<std::vector<int64_t>>
parameterSources(const HfCheckpoint &checkpoint, const plan::ModelSpec &model,
                 llvm::StringRef param, llvm::ArrayRef<int64_t> shape);

/// Whether the parameter's values are the checkpoint's plus one (Gemma's
/// and Nemotron's norms, which scale by 1 + w).
bool storedAsOnePlus(const plan::ModelSpec &model, llvm::StringRef param);

/// Whether checkpoints of the model's family are read (every family the
/// config reader builds: LLaMA's names and the few each other family
/// differs in; GPT-2's Conv1D; GPT-NeoX's, BLOOM's and Falcon's fused
/// query_key_value), and if not, why.
llvm::Error checkpointFamilySupported(const plan::ModelSpec &model);

} // namespace weft::planner

#endif // WEFT_PLANNER_HFCHECKPOINT_H
