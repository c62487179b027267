//===- Plan.h - Plans as text and files -------------------------*- C++ -*-===//
//
// Part of the Weft project.
//
// The one reader of each way a plan is written: the short form
// "tp=8,pp=8,dp=16,mbs=1,v=3,schedule=interleaved" that `weft plan
// --evaluate`, `weft run --plan-spec`, `weft compile --plan-spec` and the
// `-weft-apply-plan` pass take, and the JSON that `weft plan --json` writes
// (a PlanSet, whose first plan is used, or a single Plan).
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLAN_PLAN_H
#define WEFT_PLAN_PLAN_H

#include "weft/plan.pb.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace weft {

/// A plan written out, with which fields the text gave (the others keep the
/// defaults below, or are filled in by whoever knows the cluster and batch).
struct PlanSpec {
  /// dp, tp, pp, cp and ulysses default to 1, mbs to 1, schedule to 1F1B,
  /// v to 1, zero to 0, recompute to none.
  plan::Plan plan;
  bool dpGiven = false, mbsGiven = false, microBatchesGiven = false,
       virtualStagesGiven = false, scheduleGiven = false;
};

/// Parses "tp=8,pp=8,dp=16,mbs=1,m=32,v=3,schedule=interleaved,zero=1,
/// recompute=full,sp=1,cp=2,ulysses=2,tp-overlap=1,stages=12/12/11/13,
/// compress=dp:int8,tp:bf16,tp3d=2x2x2" (the items after compress= that
/// have no '=' continue its policy; tp3d is Gx x Gy x Gz).
/// Errors start with `origin` (the option the text came from) and the text,
/// name the key and say what it takes; a key given twice is an error.
llvm::Expected<PlanSpec> parsePlanSpec(llvm::StringRef text,
                                       llvm::StringRef origin = "plan");

/// The short form of `plan`'s degrees and choices (the inverse of
/// parsePlanSpec for the fields it takes).
std::string formatPlanSpec(const plan::Plan &plan);

/// Reads a plan from a JSON file: the first plan of a PlanSet (what `weft
/// plan --json` writes) or a single Plan.
llvm::Expected<plan::Plan> readPlanFile(llvm::StringRef path);

/// The fields of `plan` that a forward program built by
/// the partition pipeline does not apply, each as "field=value: why; what to
/// do". Empty when the program applies the whole plan. `perRankBatch` (the
/// model's batch over dp), when given, must be the plan's mbs x m. With
/// `pipelined` (a runner that executes pipeline stages, `weft run`), pp > 1
/// and its schedule, chunks, stage boundaries and micro-batches apply, and
/// `perRankBatch` is one micro-batch's (mbs).
std::vector<std::string>
unappliedPlanFields(const plan::Plan &plan,
                    std::optional<int64_t> perRankBatch = std::nullopt,
                    bool pipelined = false);

/// The layers of each virtual stage (chunk c of pipeline rank s is virtual
/// stage c * pp + s, pp = perRank.size()) when rank s holds perRank[s]
/// layers in `chunks` chunks: as even as possible, with the first rank's
/// extra layers in its last chunks and every other rank's in its first, so
/// that the embedding's chunk (first rank, chunk 0) and the output layer's
/// (last rank, last chunk) are the lighter ones. With one layer fewer than
/// chunks on the first and last rank this is Llama 3's layout: those two
/// chunks hold no layer, only the embedding and the output layer. The one
/// definition of interleaved chunks for the cost model and
/// -weft-split-stages.
std::vector<int64_t> chunkLayers(llvm::ArrayRef<int64_t> perRank,
                                 int64_t chunks);
/// One entry of chunkLayers: the layers of chunk `chunk` of pipeline rank
/// `rank` of `ranks`, which holds `rankLayers` in `chunks` chunks (without
/// building the vector, for the planner's inner loop).
int64_t chunkLayerCount(int64_t rankLayers, int64_t chunks, int64_t rank,
                        int64_t ranks, int64_t chunk);

/// Empty when every virtual stage of chunkLayers(perRank, chunks) holds a
/// layer, except possibly the first and the last; else why not, with what
/// to do.
std::string checkChunkLayers(llvm::ArrayRef<int64_t> perRank, int64_t chunks);

/// `message` as indented JSON with the proto field names.
std::string toJson(const google::protobuf::Message &message);
/// Parses `text` into `message`; the error names `what` (a file).
llvm::Error fromJson(llvm::StringRef text, google::protobuf::Message &message,
                     llvm::StringRef what);

/// A compression policy: the codec ("bf16", "fp8", "int8", and for dp
/// "topk" or "topk_noef") of each mesh axis it names, as
/// plan::Plan::compress writes it ("dp:int8,tp:bf16").
using CompressPolicy = std::vector<std::pair<std::string, std::string>>;

/// Parses "dp:int8,tp:bf16" (items also separated by '/' or ';'); errors
/// name the item and say what is allowed. Axes are dp, tp, pp (the
/// pipeline's sends of activations and their gradients), cp, ulysses and
/// the 3-D grid's gx, gy and gz.
llvm::Expected<CompressPolicy> parseCompressPolicy(llvm::StringRef text);
/// The canonical text of a policy: axes in mesh order (pp, dp, gz, cp,
/// ulysses, gy, gx, tp),
/// separated by ','.
std::string formatCompressPolicy(const CompressPolicy &policy);
/// The codec of a collective over `axes` under `policy`: the mildest of the
/// axes' codecs (bf16 milder than fp8, fp8 than int8), "none" if an axis has
/// none.
std::string codecForAxes(const CompressPolicy &policy,
                         llvm::ArrayRef<std::string> axes);

/// Whether `plan` uses AxoNN's 3-D tensor parallelism (gx, gy or gz > 1).
bool uses3dTensorParallel(const plan::Plan &plan);
/// gx x gy x gz (unset axes count 1): the GPUs of one model replica's 3-D
/// tensor-parallel grid.
int64_t tensor3dSize(const plan::Plan &plan);

/// The micro-batches of one block of ZeroPP's blockwise schedule (its
/// stored weights gathered, and their gradients reduced, once per block):
/// min(pp, micro-batches); 1 under any other schedule.
int64_t zeroPPBlock(const plan::Plan &plan);

/// "1F1B", "GPipe", "interleaved", "ZB-H1", "ZeroPP".
const char *scheduleName(plan::Schedule schedule);
/// A schedule by name as plan specs write it (gpipe, 1f1b, interleaved,
/// zb-h1, zeropp; any case), or nullopt.
std::optional<plan::Schedule> parseScheduleName(llvm::StringRef name);
/// How context parallelism exchanges K and V, by name (ring or p2p;
/// all-gather, all_gather or allgather; any case), or nullopt.
std::optional<plan::CpComm> parseCpCommName(llvm::StringRef name);
/// "none", "selective", "full", "op".
const char *recomputeName(plan::Recompute recompute);

} // namespace weft

#endif // WEFT_PLAN_PLAN_H
