//===- Plan.cpp - Plans as text and files ---------------------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Plan/Plan.h"

#include "google/protobuf/util/json_util.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>

using namespace weft;

const char *weft::scheduleName(plan::Schedule schedule) {
  switch (schedule) {
  case plan::SCHEDULE_GPIPE:
    return "GPipe";
  case plan::SCHEDULE_INTERLEAVED:
    return "interleaved";
  case plan::SCHEDULE_ZB_H1:
    return "ZB-H1";
  case plan::SCHEDULE_ZEROPP:
    return "ZeroPP";
  default:
    return "1F1B";
  }
}

std::optional<plan::Schedule> weft::parseScheduleName(llvm::StringRef name) {
  std::string lower = name.lower();
  if (lower == "1f1b")
    return plan::SCHEDULE_1F1B;
  if (lower == "gpipe")
    return plan::SCHEDULE_GPIPE;
  if (lower == "interleaved" || lower == "interleaved-1f1b")
    return plan::SCHEDULE_INTERLEAVED;
  if (lower == "zb-h1" || lower == "zb" || lower == "zbh1")
    return plan::SCHEDULE_ZB_H1;
  if (lower == "zeropp")
    return plan::SCHEDULE_ZEROPP;
  return std::nullopt;
}

std::optional<plan::CpComm> weft::parseCpCommName(llvm::StringRef name) {
  std::string lower = name.lower();
  if (lower == "ring" || lower == "p2p")
    return plan::CP_COMM_RING;
  if (lower == "all-gather" || lower == "all_gather" || lower == "allgather")
    return plan::CP_COMM_ALL_GATHER;
  return std::nullopt;
}

const char *weft::recomputeName(plan::Recompute recompute) {
  switch (recompute) {
  case plan::RECOMPUTE_SELECTIVE:
    return "selective";
  case plan::RECOMPUTE_FULL:
    return "full";
  case plan::RECOMPUTE_OP:
    return "op";
  default:
    return "none";
  }
}

// In mesh order (the 3-D grid's axes where they stand in its mesh; pp, the
// pipeline's sends, first).
static const char *const kCompressAxes[] = {"pp",      "dp", "gz", "cp",
                                            "ulysses", "gy", "gx", "tp"};
// Mildest first: a group takes the first of its axes' codecs in this order.
static const char *const kCodecs[] = {"none", "bf16", "fp8",
                                      "int8", "topk", "topk_noef"};

llvm::Expected<CompressPolicy> weft::parseCompressPolicy(llvm::StringRef text) {
  CompressPolicy policy;
  llvm::SmallVector<llvm::StringRef> items;
  text.split(items, ',', -1, false);
  llvm::SmallVector<llvm::StringRef> all;
  for (llvm::StringRef item : items) {
    llvm::SmallVector<llvm::StringRef> parts;
    item.split(parts, '/', -1, false);
    for (llvm::StringRef part : parts) {
      llvm::SmallVector<llvm::StringRef> pieces;
      part.split(pieces, ';', -1, false);
      all.append(pieces.begin(), pieces.end());
    }
  }
  for (llvm::StringRef item : all) {
    auto [axisText, codecText] = item.trim().split(':');
    std::string axis = axisText.trim().lower(),
                codec = codecText.trim().lower();
    auto bad = [&](const llvm::Twine &why) {
      return llvm::createStringError("compression policy \"" + text.str() +
                                     "\": " + why.str());
    };
    if (!llvm::is_contained(kCompressAxes, axis))
      return bad("'" + item.trim() +
                 "' names no mesh axis; use axis:codec with axis dp, tp, pp, "
                 "cp, ulysses, or the 3-D grid's gx, gy, gz");
    if (!llvm::is_contained(kCodecs, codec))
      return bad("unknown codec '" + codecText.trim() + "' for " + axis +
                 "; use bf16, fp8, int8, topk, topk_noef or none");
    if (codec.rfind("topk", 0) == 0 && axis != "dp")
      return bad("top-k sends a summed gradient's largest elements: it "
                 "compresses data-parallel gradients (dp) only, not " +
                 axis);
    for (auto &[seenAxis, seenCodec] : policy)
      if (seenAxis == axis)
        return bad("axis " + axis + " is given twice");
    policy.emplace_back(axis, codec);
  }
  return policy;
}

std::string weft::formatCompressPolicy(const CompressPolicy &policy) {
  std::string text;
  for (const char *axis : kCompressAxes)
    for (auto &[name, codec] : policy)
      if (name == axis && codec != "none")
        text += (text.empty() ? "" : ",") + name + ":" + codec;
  return text;
}

std::string weft::codecForAxes(const CompressPolicy &policy,
                               llvm::ArrayRef<std::string> axes) {
  int mildest = -1;
  for (const std::string &axis : axes) {
    int level = 0;
    for (auto &[name, codec] : policy)
      if (name == axis)
        level = int(std::find(std::begin(kCodecs), std::end(kCodecs), codec) -
                    std::begin(kCodecs));
    mildest = mildest < 0 ? level : std::min(mildest, level);
  }
  return kCodecs[std::max(mildest, 0)];
}

bool weft::uses3dTensorParallel(const plan::Plan &plan) {
  return plan.gx() > 1 || plan.gy() > 1 || plan.gz() > 1;
}

int64_t weft::tensor3dSize(const plan::Plan &plan) {
  return int64_t(std::max(1, plan.gx())) * std::max(1, plan.gy()) *
         std::max(1, plan.gz());
}

int64_t weft::zeroPPBlock(const plan::Plan &plan) {
  if (plan.schedule() != plan::SCHEDULE_ZEROPP)
    return 1;
  return std::max<int64_t>(
      1, std::min<int64_t>(plan.pp(), std::max(1, plan.num_micro_batches())));
}

static bool isTrue(llvm::StringRef value) {
  std::string lower = value.lower();
  return lower == "1" || lower == "on" || lower == "true" || lower == "yes";
}

static bool isBoolean(llvm::StringRef value) {
  std::string lower = value.lower();
  return isTrue(value) || lower == "0" || lower == "off" || lower == "false" ||
         lower == "no";
}

llvm::Expected<PlanSpec> weft::parsePlanSpec(llvm::StringRef text,
                                             llvm::StringRef origin) {
  PlanSpec spec;
  plan::Plan &plan = spec.plan;
  plan.set_dp(1);
  plan.set_tp(1);
  plan.set_pp(1);
  plan.set_cp(1);
  plan.set_ulysses(1);
  plan.set_micro_batch(1);
  plan.set_virtual_stages(1);
  auto bad = [&](const llvm::Twine &why) {
    return llvm::createStringError(origin.str() + " \"" + text.str() +
                                   "\": " + why.str());
  };
  llvm::SmallVector<llvm::StringRef> pieces;
  text.split(pieces, ',', -1, false);
  // "compress=dp:int8,tp:bf16": the items after compress= without '=' are
  // more of its policy.
  llvm::SmallVector<std::string> items;
  for (llvm::StringRef piece : pieces) {
    if (!items.empty() && !piece.contains('=') && piece.contains(':') &&
        llvm::StringRef(items.back()).trim().starts_with("compress="))
      items.back() += "," + piece.str();
    else
      items.push_back(piece.str());
  }
  llvm::StringSet<> seen;
  for (llvm::StringRef item : items) {
    std::pair<llvm::StringRef, llvm::StringRef> keyValue =
        item.trim().split('=');
    llvm::StringRef key = keyValue.first.trim();
    llvm::StringRef value = keyValue.second.trim();
    if (key == "ring")
      key = "cp";
    if (key == "tpoverlap")
      key = "tp-overlap";
    if (!seen.insert(key).second)
      return bad("'" + key + "' is given twice");
    std::string lower = value.lower();
    int64_t number = 0;
    bool isNumber = !value.getAsInteger(10, number);
    auto count = [&](int64_t least) -> llvm::Expected<int> {
      if (!isNumber || number < least || number > (1 << 24))
        return bad("'" + key + "' needs a count of at least " +
                   llvm::Twine(least) + ", got '" + value + "'");
      return int(number);
    };
    auto flag = [&]() -> llvm::Expected<bool> {
      if (!isBoolean(value))
        return bad("'" + key + "' is 1 or 0 (on/off, true/false), got '" +
                   value + "'");
      return isTrue(value);
    };
    if (key == "dp" || key == "tp" || key == "pp" || key == "cp" ||
        key == "ulysses" || key == "mbs" || key == "m" || key == "v") {
      llvm::Expected<int> n = count(1);
      if (!n)
        return n.takeError();
      if (key == "dp") {
        plan.set_dp(*n);
        spec.dpGiven = true;
      } else if (key == "tp") {
        plan.set_tp(*n);
      } else if (key == "pp") {
        plan.set_pp(*n);
      } else if (key == "cp") {
        plan.set_cp(*n);
      } else if (key == "ulysses") {
        plan.set_ulysses(*n);
      } else if (key == "mbs") {
        plan.set_micro_batch(*n);
        spec.mbsGiven = true;
      } else if (key == "m") {
        plan.set_num_micro_batches(*n);
        spec.microBatchesGiven = true;
      } else {
        plan.set_virtual_stages(*n);
        spec.virtualStagesGiven = true;
      }
    } else if (key == "zero") {
      llvm::Expected<int> n = count(0);
      if (!n)
        return n.takeError();
      if (*n > 3)
        return bad("'zero' is a ZeRO stage: 0, 1, 2 or 3, got '" + value + "'");
      plan.set_zero_stage(*n);
    } else if (key == "sp" || key == "tp-overlap") {
      llvm::Expected<bool> on = flag();
      if (!on)
        return on.takeError();
      if (key == "sp")
        plan.set_sequence_parallel(*on);
      else
        plan.set_tp_comm_overlap(*on);
    } else if (key == "schedule") {
      spec.scheduleGiven = true;
      std::optional<plan::Schedule> schedule = parseScheduleName(lower);
      if (!schedule)
        return bad("unknown schedule '" + value +
                   "'; use gpipe, 1f1b, interleaved, zb-h1 or zeropp");
      plan.set_schedule(*schedule);
    } else if (key == "recompute") {
      if (lower == "none" || lower == "off")
        plan.set_recompute(plan::RECOMPUTE_NONE);
      else if (lower == "selective")
        plan.set_recompute(plan::RECOMPUTE_SELECTIVE);
      else if (lower == "full")
        plan.set_recompute(plan::RECOMPUTE_FULL);
      else if (lower == "op")
        plan.set_recompute(plan::RECOMPUTE_OP);
      else
        return bad("unknown recompute '" + value +
                   "'; use none, selective, op or full");
    } else if (key == "cp-comm") {
      std::optional<plan::CpComm> comm = parseCpCommName(value);
      if (!comm)
        return bad("unknown cp-comm '" + value +
                   "'; use ring (K/V blocks passed around, overlapped) or "
                   "all-gather (K/V gathered before the attention)");
      plan.set_cp_comm(*comm);
    } else if (key == "compress") {
      llvm::Expected<CompressPolicy> policy = parseCompressPolicy(value);
      if (!policy)
        return bad(llvm::toString(policy.takeError()));
      plan.set_compress(formatCompressPolicy(*policy));
    } else if (key == "tp3d") {
      llvm::SmallVector<llvm::StringRef> parts;
      llvm::StringRef(lower).split(parts, 'x');
      int64_t g[3] = {0, 0, 0};
      bool good = parts.size() == 3;
      for (size_t i = 0; good && i < 3; ++i)
        good = !parts[i].trim().getAsInteger(10, g[i]) && g[i] >= 1 &&
               g[i] <= (1 << 12);
      if (!good)
        return bad("'tp3d' is AxoNN's 3-D tensor-parallel grid Gx x Gy x Gz, "
                   "three counts joined by 'x' (tp3d=2x2x2), got '" +
                   value + "'");
      plan.set_gx(int(g[0]));
      plan.set_gy(int(g[1]));
      plan.set_gz(int(g[2]));
    } else if (key == "stages") {
      llvm::SmallVector<llvm::StringRef> parts;
      value.split(parts, '/');
      for (llvm::StringRef part : parts) {
        int64_t n = 0;
        if (part.getAsInteger(10, n) || n < 1 || n > (1 << 24))
          return bad("stages must be layer counts separated by '/', got '" +
                     value + "'");
        plan.add_stage_layers(int(n));
      }
    } else {
      return bad("unknown key '" + key +
                 "'; keys are dp, tp, pp, cp, cp-comm, ulysses, sp, "
                 "tp-overlap, mbs, m, v, schedule, zero, recompute, stages, "
                 "compress, tp3d");
    }
  }
  // v > 1 alone means the interleaved schedule.
  if (!spec.scheduleGiven && plan.virtual_stages() > 1)
    plan.set_schedule(plan::SCHEDULE_INTERLEAVED);
  return spec;
}

std::string weft::formatPlanSpec(const plan::Plan &plan) {
  std::string text =
      "dp=" + std::to_string(plan.dp()) + ",tp=" + std::to_string(plan.tp()) +
      ",pp=" + std::to_string(plan.pp()) + ",cp=" + std::to_string(plan.cp()) +
      (plan.cp_comm() == plan::CP_COMM_ALL_GATHER ? ",cp-comm=all-gather"
                                                  : "") +
      ",ulysses=" + std::to_string(plan.ulysses()) +
      ",sp=" + (plan.sequence_parallel() ? "1" : "0") +
      ",mbs=" + std::to_string(plan.micro_batch());
  if (plan.num_micro_batches())
    text += ",m=" + std::to_string(plan.num_micro_batches());
  if (uses3dTensorParallel(plan))
    text += ",tp3d=" + std::to_string(std::max(1, plan.gx())) + "x" +
            std::to_string(std::max(1, plan.gy())) + "x" +
            std::to_string(std::max(1, plan.gz()));
  text += std::string(",schedule=") + scheduleName(plan.schedule());
  if (plan.virtual_stages() > 1)
    text += ",v=" + std::to_string(plan.virtual_stages());
  text += ",zero=" + std::to_string(plan.zero_stage()) +
          ",recompute=" + recomputeName(plan.recompute());
  if (plan.tp_comm_overlap())
    text += ",tp-overlap=1";
  if (!plan.compress().empty())
    text += ",compress=" + plan.compress();
  if (plan.stage_layers_size()) {
    text += ",stages=";
    for (int i = 0; i < plan.stage_layers_size(); ++i)
      text += (i ? "/" : "") + std::to_string(plan.stage_layers(i));
  }
  return text;
}

std::string weft::toJson(const google::protobuf::Message &message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

llvm::Error weft::fromJson(llvm::StringRef text,
                           google::protobuf::Message &message,
                           llvm::StringRef what) {
  auto status =
      google::protobuf::util::JsonStringToMessage(std::string(text), &message);
  if (!status.ok())
    return llvm::createStringError(
        what.str() + ": not a valid " + message.GetTypeName() +
        " in JSON: " + std::string(status.message()));
  return llvm::Error::success();
}

llvm::Expected<plan::Plan> weft::readPlanFile(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return llvm::createStringError("cannot read plan file '" + path.str() +
                                   "': " + buffer.getError().message());
  llvm::StringRef text = (*buffer)->getBuffer();
  plan::PlanSet set;
  if (llvm::Error error = fromJson(text, set, path))
    llvm::consumeError(std::move(error));
  else if (set.plans_size())
    return set.plans(0);
  plan::Plan single;
  if (llvm::Error error = fromJson(text, single, path)) {
    llvm::consumeError(std::move(error));
    return llvm::createStringError(
        "'" + path.str() +
        "' is not a weft plan (a PlanSet from weft plan --json, or a Plan) in "
        "JSON");
  }
  return single;
}

int64_t weft::chunkLayerCount(int64_t rankLayers, int64_t chunks, int64_t rank,
                              int64_t ranks, int64_t chunk) {
  const int64_t v = std::max<int64_t>(1, chunks);
  int64_t base = rankLayers / v, extra = rankLayers % v;
  // The first rank's extras go to its last chunks, the others' to their
  // first.
  bool more = rank == 0 && ranks > 1 ? chunk >= v - extra : chunk < extra;
  return base + (more ? 1 : 0);
}

std::vector<int64_t> weft::chunkLayers(llvm::ArrayRef<int64_t> perRank,
                                       int64_t chunks) {
  const int64_t p = perRank.size(), v = std::max<int64_t>(1, chunks);
  std::vector<int64_t> layers(p * v, 0);
  for (int64_t s = 0; s < p; ++s)
    for (int64_t c = 0; c < v; ++c)
      layers[c * p + s] = chunkLayerCount(perRank[s], v, s, p, c);
  return layers;
}

std::string weft::checkChunkLayers(llvm::ArrayRef<int64_t> perRank,
                                   int64_t chunks) {
  std::vector<int64_t> layers = chunkLayers(perRank, chunks);
  const int64_t p = perRank.size(), k = layers.size();
  for (int64_t vs = 1; vs + 1 < k; ++vs)
    if (layers[vs] == 0) {
      int64_t s = vs % p;
      int64_t need = chunks - (s == 0 || s == p - 1 ? 1 : 0);
      return "pipeline rank " + std::to_string(s) + " holds " +
             std::to_string(perRank[s]) + " layers for its " +
             std::to_string(chunks) + " chunks, so chunk " +
             std::to_string(vs / p) +
             " has none; a rank needs at least one layer per chunk (the "
             "first and last rank one fewer: their edge chunk may hold only "
             "the embedding or the output layer), so give it " +
             std::to_string(need) + " or more, or use a smaller v";
    }
  return "";
}

std::vector<std::string>
weft::unappliedPlanFields(const plan::Plan &plan,
                          std::optional<int64_t> perRankBatch, bool pipelined) {
  std::vector<std::string> fields;
  auto refuse = [&](const std::string &field, const std::string &why) {
    fields.push_back(field + ": " + why);
  };
  const bool staged = pipelined && plan.pp() > 1;
  if (plan.pp() > 1 && !pipelined)
    refuse("pp=" + std::to_string(plan.pp()),
           "pipeline stages are cut by a pipelined partition (weft run "
           "--plan and weft compile make one); this one is not (use pp=1)");
  if (staged && plan.schedule() == plan::SCHEDULE_ZEROPP && plan.tp() > 1)
    refuse("schedule=ZeroPP", "ZeroPP is a TP-free pipeline; use tp=1");
  if (plan.pp() <= 1 && plan.schedule() != plan::SCHEDULE_1F1B)
    refuse(std::string("schedule=") + scheduleName(plan.schedule()),
           "a pipeline schedule needs pipeline stages; leave it out with pp=1");
  if (plan.virtual_stages() > 1 && !staged)
    refuse("v=" + std::to_string(plan.virtual_stages()),
           "interleaved chunks need pipeline stages; use v=1");
  if (plan.stage_layers_size() > 1 && !staged)
    refuse("stages", "stage boundaries need pipeline stages (pp > 1)");
  if (plan.zero_stage() > 0)
    refuse("zero=" + std::to_string(plan.zero_stage()),
           "ZeRO shards optimizer state and gradients, which a forward "
           "program does not have; use zero=0");
  if (plan.recompute() != plan::RECOMPUTE_NONE)
    refuse(std::string("recompute=") + recomputeName(plan.recompute()),
           "recomputation is part of a training step, which a forward program "
           "does not have; use recompute=none");
  if (plan.tp_comm_overlap())
    refuse("tp-overlap=1", "generated programs do not overlap tensor-parallel "
                           "communication with GEMMs; use tp-overlap=0");
  if (plan.num_micro_batches() > 1 && !staged)
    refuse("m=" + std::to_string(plan.num_micro_batches()),
           "a forward program without pipeline stages runs its per-rank batch "
           "at once; use m=1 and mbs = the batch over dp");
  if (perRankBatch && plan.micro_batch() > 0) {
    int64_t planned = int64_t(plan.micro_batch()) *
                      (staged ? 1 : std::max(1, plan.num_micro_batches()));
    if (planned != *perRankBatch)
      refuse("mbs=" + std::to_string(plan.micro_batch()),
             "the model's batch over dp=" + std::to_string(plan.dp()) + " is " +
                 std::to_string(*perRankBatch) +
                 " per rank, not mbs x m = " + std::to_string(planned) +
                 "; bind the batch on import (--batch-size) or change mbs");
  }
  return fields;
}
