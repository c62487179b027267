//===- TcpStore.h - A key-value store over TCP for rendezvous ---*- C++ -*-===//
//
// Part of the Weft project.
//
// What torchrun's launch needs, in its simplest form: rank 0 serves a store
// of keys and values on MASTER_PORT; every rank (rank 0 too) connects to
// MASTER_ADDR:MASTER_PORT, sets keys and waits for others' keys. The CUDA
// program hands rank 0's NCCL unique id over it; the CPU program exchanges
// its collectives' tensors over it (StoreCommunicator).
//
// Wire format, both ways: a one-byte request ('S' set, 'G' get, 'D' delete,
// 'H' hello), then length-prefixed (u64, little-endian) key and value. A get
// answers with a one-byte found flag and the value; a missing key is asked
// again until the deadline. A connection's first request is a hello with
// the job's secret as key and the rank as value; the server drops a client
// that sends anything else first, a wrong secret, a rank already joined,
// or a frame longer than its bounds. The threat model (docs/runtime.md):
// the secret keeps other users and processes out; traffic is not encrypted.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_TCPSTORE_H
#define WEFT_RUNTIME_TCPSTORE_H

#include "weft/runtime/Communicator.h"
#include "weft/runtime/Launch.h"

#include "absl/status/statusor.h"

#include <chrono>
#include <memory>
#include <string>

namespace weft::rt {

class TcpStore {
public:
  /// Rank 0 starts the server, then every rank connects (retrying until
  /// `timeout`, while rank 0 comes up).
  static absl::StatusOr<std::unique_ptr<TcpStore>>
  connect(const LaunchInfo &launch, std::chrono::milliseconds timeout);
  ~TcpStore();

  absl::Status set(const std::string &key, const std::string &value);
  /// The value of `key`, waiting until some rank sets it or `timeout`.
  absl::StatusOr<std::string> get(const std::string &key,
                                  std::chrono::milliseconds timeout);
  /// Whether `key` is set now (no waiting).
  absl::StatusOr<bool> tryGet(const std::string &key, std::string &value);
  absl::Status erase(const std::string &key);

private:
  struct Server;
  TcpStore() = default;
  absl::Status request(char kind, const std::string &key,
                       const std::string &value, std::string *answer,
                       bool *found);

  int socket = -1;
  /// How long one request may wait for its answer.
  std::chrono::milliseconds timeout{0};
  std::unique_ptr<Server> server;
};

/// Ranks as processes that rendezvous through a TcpStore (torchrun): each
/// exchange posts this rank's tensor under a key of the group and the
/// collective's number, and reads the other members' keys, waiting at most
/// the timeout (which then names the ranks that never posted).
class StoreCommunicator : public ExchangeCommunicator {
public:
  StoreCommunicator(TcpStore &store, int worldSize, int rank,
                    std::chrono::milliseconds timeout)
      : ExchangeCommunicator(worldSize), store(store), myRank(rank),
        timeout(timeout) {}

  /// Point-to-point through the store: a send sets the key of the pair's
  /// next message; a receive waits for it (or the job's abort) until the
  /// timeout, then deletes it.
  absl::Status send(int rank, int peer, const HostTensor &input,
                    Codec codec = Codec::None) override;
  absl::StatusOr<HostTensor> recv(int rank, int peer) override;

protected:
  absl::StatusOr<std::vector<HostTensor>>
  exchange(int rank, const std::vector<int> &group, const HostTensor &mine,
           const char *what) override;

private:
  TcpStore &store;
  int myRank;
  std::chrono::milliseconds timeout;
  std::map<std::string, int64_t> sequence;
  /// Messages sent and received so far, by (sender, receiver).
  std::map<std::pair<int, int>, int64_t> sentTo, receivedFrom;
};

/// A tensor as bytes and back (dtype, shape, then the stored values).
std::string serializeTensor(const HostTensor &tensor);
absl::StatusOr<HostTensor> deserializeTensor(const std::string &bytes);

} // namespace weft::rt

#endif // WEFT_RUNTIME_TCPSTORE_H
