//===- Communicator.h - Collectives among ranks -----------------*- C++ -*-===//
//
// Part of the Weft project.
//
// Collectives with NCCL's semantics over groups of ranks. The in-process
// communicator runs N ranks as threads of one process: each collective is a
// rendezvous of its group, every member gets every member's tensor and keeps
// what NCCL would give it. It counts the bytes each rank sends under NCCL's
// ring algorithms (all-reduce 2(n-1)/n of the buffer, all-gather and
// reduce-scatter (n-1)/n of the full buffer, all-to-all (n-1)/n, a ring
// shift the whole buffer), which is what the cost model counts.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_COMMUNICATOR_H
#define WEFT_RUNTIME_COMMUNICATOR_H

#include "weft/runtime/Codec.h"
#include "weft/runtime/HostTensor.h"

#include "absl/status/statusor.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace weft::rt {

enum class ReduceOp { Sum, Max, Min, Avg };

/// Bytes of one element of `dtype` as stored (bf16 2, f32 4, i64 8, ...).
int64_t elementBytes(DType dtype);
/// Bytes of a tensor.
inline int64_t tensorBytes(const HostTensor &t) {
  return t.numel() * elementBytes(t.dtype);
}

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int worldSize() const = 0;

  /// `group` lists the global ranks of the caller's group in group order;
  /// `rank` is the caller's global rank, a member of `group`. With a
  /// `codec`, what each rank sends is encoded (Codec.h): every member
  /// reconstructs the same values, an all-reduce encodes both its phases
  /// (each rank's summand, then the sum), and the bytes counted are the
  /// encoded ones.
  virtual absl::StatusOr<HostTensor>
  allReduce(int rank, const std::vector<int> &group, const HostTensor &input,
            ReduceOp op, Codec codec = Codec::None) = 0;
  virtual absl::StatusOr<HostTensor>
  allGather(int rank, const std::vector<int> &group, const HostTensor &input,
            int64_t dim, Codec codec = Codec::None) = 0;
  virtual absl::StatusOr<HostTensor>
  reduceScatter(int rank, const std::vector<int> &group,
                const HostTensor &input, int64_t dim, ReduceOp op,
                Codec codec = Codec::None) = 0;
  virtual absl::StatusOr<HostTensor>
  allToAll(int rank, const std::vector<int> &group, const HostTensor &input,
           int64_t splitDim, int64_t concatDim, Codec codec = Codec::None) = 0;
  /// Group rank i sends to (i + shift) mod n and receives from (i - shift).
  virtual absl::StatusOr<HostTensor>
  permute(int rank, const std::vector<int> &group, const HostTensor &input,
          int64_t shift, Codec codec = Codec::None) = 0;
  /// Point-to-point, as a pipeline's stages pass activations: `send`
  /// returns once `input` is posted for `peer` (the receiver need not be
  /// waiting); `recv` waits for the next tensor that `peer` sent to `rank`.
  /// Tensors between two ranks arrive in the order they were sent. With a
  /// `codec`, the receiver gets what the encoded floats decode to and the
  /// bytes counted are the encoded ones. The default says the communicator
  /// has none.
  virtual absl::Status send(int rank, int peer, const HostTensor &input,
                            Codec codec = Codec::None);
  virtual absl::StatusOr<HostTensor> recv(int rank, int peer);
  /// Bytes `rank` has sent so far.
  virtual int64_t bytesSent(int rank) const = 0;
};

/// Rank i's slice of `input` along `dim` in a group of n (no communication).
HostTensor sliceForRank(const HostTensor &input, int64_t dim, int64_t index,
                        int64_t parts);

/// Load-balanced sequence layout (ring attention): the first axis of a group
/// (size `major`) splits `dim` into 2 x major chunks and its rank i keeps
/// chunks i and 2 major - 1 - i; the other axes split that pair contiguously.
/// `index` is the rank's index in the group (first axis major).
HostTensor zigzagSlice(const HostTensor &input, int64_t dim, int64_t index,
                       int64_t major, int64_t parts);
/// From the group's blocks concatenated in group order along `dim` back to the
/// natural order: the inverse of zigzagSlice over all ranks.
HostTensor zigzagUnshuffle(const HostTensor &gathered, int64_t dim,
                           int64_t major, int64_t parts);

/// The collectives computed from one exchange: every member of the group
/// gets every member's tensor, in group order, and keeps what NCCL would
/// give it. Backends provide the exchange; bytes are counted as NCCL's ring
/// algorithms send them, whatever the exchange moved.
class ExchangeCommunicator : public Communicator {
public:
  explicit ExchangeCommunicator(int worldSize);

  int worldSize() const override { return size; }
  absl::StatusOr<HostTensor> allReduce(int rank, const std::vector<int> &group,
                                       const HostTensor &input, ReduceOp op,
                                       Codec codec = Codec::None) override;
  absl::StatusOr<HostTensor> allGather(int rank, const std::vector<int> &group,
                                       const HostTensor &input, int64_t dim,
                                       Codec codec = Codec::None) override;
  absl::StatusOr<HostTensor> reduceScatter(int rank,
                                           const std::vector<int> &group,
                                           const HostTensor &input, int64_t dim,
                                           ReduceOp op,
                                           Codec codec = Codec::None) override;
  absl::StatusOr<HostTensor> allToAll(int rank, const std::vector<int> &group,
                                      const HostTensor &input, int64_t splitDim,
                                      int64_t concatDim,
                                      Codec codec = Codec::None) override;
  absl::StatusOr<HostTensor> permute(int rank, const std::vector<int> &group,
                                     const HostTensor &input, int64_t shift,
                                     Codec codec = Codec::None) override;
  int64_t bytesSent(int rank) const override { return sent[rank].load(); }

protected:
  /// Counts a point-to-point send's bytes.
  void countSent(int rank, int64_t bytes) { sent[rank] += bytes; }

  /// `rank`'s index in `group`, or an error naming the collective; with
  /// `owner` (a communicator of one rank per process), also an error if
  /// `rank` is another rank.
  static absl::StatusOr<size_t> indexIn(int rank, const std::vector<int> &group,
                                        const char *what, int owner = -1);
  /// The group as a key ("0,2,"): a collective's name among its group's.
  static std::string groupKey(const std::vector<int> &group);

  /// Every member's tensor, in group order, once all have arrived. `what`
  /// names the collective for errors (a timeout names it and the ranks that
  /// never joined).
  virtual absl::StatusOr<std::vector<HostTensor>>
  exchange(int rank, const std::vector<int> &group, const HostTensor &mine,
           const char *what) = 0;

private:
  int size;
  std::unique_ptr<std::atomic<int64_t>[]> sent;
};

/// N ranks as threads of one process.
class InProcessCommunicator : public ExchangeCommunicator {
public:
  explicit InProcessCommunicator(
      int worldSize,
      std::chrono::milliseconds timeout = std::chrono::seconds(60));

  /// Makes every waiting and future collective fail (a rank gave up).
  void abort(const std::string &why);

  absl::Status send(int rank, int peer, const HostTensor &input,
                    Codec codec = Codec::None) override;
  absl::StatusOr<HostTensor> recv(int rank, int peer) override;

protected:
  absl::StatusOr<std::vector<HostTensor>>
  exchange(int rank, const std::vector<int> &group, const HostTensor &mine,
           const char *what) override;

private:
  struct Slot {
    std::vector<HostTensor> tensors;
    std::vector<bool> arrived;
    int count = 0;
    int leaving = 0;
  };
  std::chrono::milliseconds timeout;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::unique_ptr<Slot>> slots;
  std::map<std::pair<int, std::string>, int64_t> sequence;
  /// Posted point-to-point tensors by (sender, receiver), oldest first.
  std::map<std::pair<int, int>, std::deque<HostTensor>> mailboxes;
  std::string aborted;
};

} // namespace weft::rt

#endif // WEFT_RUNTIME_COMMUNICATOR_H
