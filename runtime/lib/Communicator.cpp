//===- Communicator.cpp - Collectives among ranks -------------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Communicator.h"

#include "weft/runtime/CpuKernels.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

using namespace weft::rt;

int64_t weft::rt::elementBytes(DType dtype) {
  switch (dtype) {
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::Bool:
    return 1;
  }
  return 4;
}

HostTensor weft::rt::sliceForRank(const HostTensor &input, int64_t dim,
                                  int64_t index, int64_t parts) {
  std::vector<int64_t> starts(input.rank(), 0), limits(input.shape),
      strides(input.rank(), 1);
  int64_t piece = input.shape[dim] / parts;
  starts[dim] = index * piece;
  limits[dim] = (index + 1) * piece;
  return slice(input, starts, limits, strides);
}

HostTensor weft::rt::zigzagSlice(const HostTensor &input, int64_t dim,
                                 int64_t index, int64_t major, int64_t parts) {
  int64_t minor = parts / major;
  int64_t i1 = index / minor, i2 = index % minor;
  HostTensor first = sliceForRank(input, dim, i1, 2 * major);
  HostTensor second = sliceForRank(input, dim, 2 * major - 1 - i1, 2 * major);
  HostTensor pair = concat({&first, &second}, dim);
  return sliceForRank(pair, dim, i2, minor);
}

HostTensor weft::rt::zigzagUnshuffle(const HostTensor &gathered, int64_t dim,
                                     int64_t major, int64_t parts) {
  int64_t minor = parts / major;
  std::vector<HostTensor> chunks(2 * major);
  for (int64_t i1 = 0; i1 < major; ++i1) {
    // The pair of rank i1 of the first axis, from its `minor` blocks.
    std::vector<HostTensor> blocks;
    for (int64_t i2 = 0; i2 < minor; ++i2)
      blocks.push_back(sliceForRank(gathered, dim, i1 * minor + i2, parts));
    std::vector<const HostTensor *> pointers;
    for (const HostTensor &block : blocks)
      pointers.push_back(&block);
    HostTensor pair = concat(pointers, dim);
    chunks[i1] = sliceForRank(pair, dim, 0, 2);
    chunks[2 * major - 1 - i1] = sliceForRank(pair, dim, 1, 2);
  }
  std::vector<const HostTensor *> ordered;
  for (const HostTensor &chunk : chunks)
    ordered.push_back(&chunk);
  return concat(ordered, dim);
}

absl::Status Communicator::send(int, int, const HostTensor &, Codec) {
  return absl::UnimplementedError(
      "this communicator has no point-to-point send (pipeline stages run on "
      "the in-process communicator only)");
}

absl::StatusOr<HostTensor> Communicator::recv(int, int) {
  return absl::UnimplementedError(
      "this communicator has no point-to-point recv (pipeline stages run on "
      "the in-process communicator only)");
}

ExchangeCommunicator::ExchangeCommunicator(int worldSize)
    : size(worldSize), sent(new std::atomic<int64_t>[worldSize]) {
  for (int i = 0; i < worldSize; ++i)
    sent[i] = 0;
}

absl::StatusOr<size_t>
ExchangeCommunicator::indexIn(int rank, const std::vector<int> &group,
                              const char *what, int owner) {
  if (owner >= 0 && rank != owner)
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rank ", rank, " called the communicator of rank ", owner));
  auto position = std::find(group.begin(), group.end(), rank);
  if (position == group.end())
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": rank ", rank, " is not in its group"));
  return size_t(position - group.begin());
}

std::string ExchangeCommunicator::groupKey(const std::vector<int> &group) {
  std::string key;
  for (int member : group)
    absl::StrAppend(&key, member, ",");
  return key;
}

InProcessCommunicator::InProcessCommunicator(int worldSize,
                                             std::chrono::milliseconds timeout)
    : ExchangeCommunicator(worldSize), timeout(timeout) {}

void InProcessCommunicator::abort(const std::string &why) {
  std::lock_guard<std::mutex> lock(mutex);
  if (aborted.empty())
    aborted = why;
  changed.notify_all();
}

absl::StatusOr<std::vector<HostTensor>>
InProcessCommunicator::exchange(int rank, const std::vector<int> &group,
                                const HostTensor &mine, const char *what) {
  absl::StatusOr<size_t> position = indexIn(rank, group, what);
  if (!position.ok())
    return position.status();
  size_t index = *position;
  std::string key = groupKey(group);
  std::unique_lock<std::mutex> lock(mutex);
  if (!aborted.empty())
    return absl::AbortedError(aborted);
  // The n-th collective of this group for this rank meets the n-th of the
  // others: the same order on every rank, as NCCL requires.
  int64_t n = sequence[{rank, key}]++;
  absl::StrAppend(&key, "#", n);
  std::unique_ptr<Slot> &slot = slots[key];
  if (!slot) {
    slot = std::make_unique<Slot>();
    slot->tensors.resize(group.size());
    slot->arrived.assign(group.size(), false);
  }
  Slot *s = slot.get();
  s->tensors[index] = mine;
  s->arrived[index] = true;
  ++s->count;
  changed.notify_all();
  bool done = changed.wait_for(lock, timeout, [&] {
    return s->count == int(group.size()) || !aborted.empty();
  });
  if (!aborted.empty())
    return absl::AbortedError(aborted);
  if (!done) {
    std::string missing;
    for (size_t i = 0; i < group.size(); ++i)
      if (!s->arrived[i])
        absl::StrAppend(&missing, missing.empty() ? "" : ", ", group[i]);
    std::string why =
        absl::StrCat(what, " on rank ", rank, " timed out after ",
                     timeout.count(), " ms waiting for rank(s) ", missing);
    aborted = why;
    changed.notify_all();
    return absl::DeadlineExceededError(why);
  }
  std::vector<HostTensor> all = s->tensors;
  if (++s->leaving == int(group.size()))
    slots.erase(key);
  return all;
}

static absl::Status topKOnlySums(const char *what) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": top-k compresses summing all-reduces only"));
}

static HostTensor combine(const HostTensor &a, const HostTensor &b,
                          ReduceOp op) {
  switch (op) {
  case ReduceOp::Max:
    return binary(BinaryKind::Max, a, b);
  case ReduceOp::Min:
    return binary(BinaryKind::Min, a, b);
  default:
    return binary(BinaryKind::Add, a, b);
  }
}

static HostTensor reduceAll(const std::vector<HostTensor> &all, ReduceOp op) {
  // Every rank sums in group order, so all get bit-identical results.
  HostTensor total = all[0];
  for (size_t i = 1; i < all.size(); ++i)
    total = combine(total, all[i], op);
  if (op == ReduceOp::Avg) {
    HostTensor n(total.dtype, {});
    if (total.isFloat())
      n.floats = {float(all.size())};
    else
      n.ints = {int64_t(all.size())};
    total = binary(BinaryKind::Div, total, n);
  }
  return total;
}

absl::StatusOr<HostTensor>
ExchangeCommunicator::allReduce(int rank, const std::vector<int> &group,
                                const HostTensor &input, ReduceOp op,
                                Codec codec) {
  auto all = exchange(rank, group, roundTrip(input, codec), "all_reduce");
  if (!all.ok())
    return all.status();
  int64_t n = group.size();
  if (isTopK(codec)) {
    // Each rank's kept elements go to every other: an all-gather of the
    // sparse parts, summed where they arrive.
    sent[rank] += (n - 1) * wireBytes(input, codec);
    return reduceAll(*all, op);
  }
  sent[rank] += 2 * (n - 1) * wireBytes(input, codec) / n;
  // The ring's second phase sends the reduced chunks, encoded again.
  return roundTrip(reduceAll(*all, op), codec);
}

absl::StatusOr<HostTensor>
ExchangeCommunicator::allGather(int rank, const std::vector<int> &group,
                                const HostTensor &input, int64_t dim,
                                Codec codec) {
  if (isTopK(codec))
    return topKOnlySums("all_gather");
  auto all = exchange(rank, group, roundTrip(input, codec), "all_gather");
  if (!all.ok())
    return all.status();
  sent[rank] += (int64_t(group.size()) - 1) * wireBytes(input, codec);
  std::vector<const HostTensor *> parts;
  for (const HostTensor &t : *all)
    parts.push_back(&t);
  return concat(parts, dim);
}

absl::StatusOr<HostTensor>
ExchangeCommunicator::reduceScatter(int rank, const std::vector<int> &group,
                                    const HostTensor &input, int64_t dim,
                                    ReduceOp op, Codec codec) {
  if (isTopK(codec))
    return topKOnlySums("reduce_scatter");
  auto all = exchange(rank, group, roundTrip(input, codec), "reduce_scatter");
  if (!all.ok())
    return all.status();
  int64_t n = group.size();
  sent[rank] += (n - 1) * wireBytes(input, codec) / n;
  int64_t index = int64_t(*indexIn(rank, group, ""));
  return sliceForRank(reduceAll(*all, op), dim, index, n);
}

absl::StatusOr<HostTensor>
ExchangeCommunicator::allToAll(int rank, const std::vector<int> &group,
                               const HostTensor &input, int64_t splitDim,
                               int64_t concatDim, Codec codec) {
  if (isTopK(codec))
    return topKOnlySums("all_to_all");
  auto all = exchange(rank, group, roundTrip(input, codec), "all_to_all");
  if (!all.ok())
    return all.status();
  int64_t n = group.size();
  sent[rank] += (n - 1) * wireBytes(input, codec) / n;
  int64_t index = int64_t(*indexIn(rank, group, ""));
  std::vector<HostTensor> pieces;
  for (const HostTensor &t : *all)
    pieces.push_back(sliceForRank(t, splitDim, index, n));
  std::vector<const HostTensor *> parts;
  for (const HostTensor &t : pieces)
    parts.push_back(&t);
  return concat(parts, concatDim);
}

absl::StatusOr<HostTensor>
ExchangeCommunicator::permute(int rank, const std::vector<int> &group,
                              const HostTensor &input, int64_t shift,
                              Codec codec) {
  if (isTopK(codec))
    return topKOnlySums("collective_permute");
  auto all =
      exchange(rank, group, roundTrip(input, codec), "collective_permute");
  if (!all.ok())
    return all.status();
  sent[rank] += wireBytes(input, codec);
  int64_t n = group.size();
  int64_t index = int64_t(*indexIn(rank, group, ""));
  int64_t from = ((index - shift) % n + n) % n;
  return (*all)[from];
}

absl::Status InProcessCommunicator::send(int rank, int peer,
                                         const HostTensor &input, Codec codec) {
  if (peer < 0 || peer >= worldSize() || peer == rank)
    return absl::InvalidArgumentError(
        absl::StrCat("send on rank ", rank, ": no peer rank ", peer));
  std::lock_guard<std::mutex> lock(mutex);
  if (!aborted.empty())
    return absl::AbortedError(aborted);
  mailboxes[{rank, peer}].push_back(roundTrip(input, codec));
  countSent(rank, wireBytes(input, codec));
  changed.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<HostTensor> InProcessCommunicator::recv(int rank, int peer) {
  if (peer < 0 || peer >= worldSize() || peer == rank)
    return absl::InvalidArgumentError(
        absl::StrCat("recv on rank ", rank, ": no peer rank ", peer));
  std::unique_lock<std::mutex> lock(mutex);
  std::deque<HostTensor> &box = mailboxes[{peer, rank}];
  bool done = changed.wait_for(
      lock, timeout, [&] { return !box.empty() || !aborted.empty(); });
  if (!aborted.empty())
    return absl::AbortedError(aborted);
  if (!done) {
    std::string why = absl::StrCat("recv on rank ", rank, " from rank ", peer,
                                   " timed out after ", timeout.count(),
                                   " ms: rank ", peer, " never sent");
    aborted = why;
    changed.notify_all();
    return absl::DeadlineExceededError(why);
  }
  HostTensor tensor = std::move(box.front());
  box.pop_front();
  return tensor;
}
