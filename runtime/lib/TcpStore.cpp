//===- TcpStore.cpp - A key-value store over TCP for rendezvous -----------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/TcpStore.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

using namespace weft::rt;

namespace {

using Clock = std::chrono::steady_clock;

/// Bounds on what a frame may declare, checked before anything is summed or
/// allocated: before a client has said hello, a hello's worth; after, keys
/// of a few KiB and values up to kMaxValueBytes (a tensor exchange).
constexpr uint64_t kMaxHelloBytes = 512;
constexpr uint64_t kMaxKeyBytes = 4096;
constexpr uint64_t kMaxValueBytes = uint64_t(1) << 31;
/// Connections that have not said hello: at most this many at once (the
/// oldest is dropped for a new one) and for at most kHelloDeadline.
constexpr size_t kMaxPendingConnections = 32;
constexpr auto kHelloDeadline = std::chrono::seconds(10);

void putU64(std::string &out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(char((v >> (8 * i)) & 0xff));
}

uint64_t getU64(const char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | uint8_t(p[i]);
  return v;
}

std::string frame(char kind, const std::string &key, const std::string &value) {
  std::string message(1, kind);
  putU64(message, key.size());
  message += key;
  putU64(message, value.size());
  message += value;
  return message;
}

/// Waits until `fd` is ready for `events` or the deadline passes.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - Clock::now())
                    .count();
    if (left <= 0)
      return false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, int(std::min<int64_t>(left, 1000)));
    if (n > 0)
      return true;
    if (n < 0 && errno != EINTR)
      return false;
  }
}

/// Sends all of `bytes` before the deadline.
bool sendAll(int fd, const char *data, size_t size,
             Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < size) {
    if (!waitFor(fd, POLLOUT, deadline))
      return false;
    ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n <= 0)
      return false;
    sent += size_t(n);
  }
  return true;
}

/// Receives exactly `size` bytes before the deadline.
bool receiveAll(int fd, char *data, size_t size, Clock::time_point deadline) {
  size_t got = 0;
  while (got < size) {
    if (!waitFor(fd, POLLIN, deadline))
      return false;
    ssize_t n = ::recv(fd, data + got, size - got, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n <= 0)
      return false;
    got += size_t(n);
  }
  return true;
}

/// Compares without stopping at the first difference.
bool sameSecret(const std::string &a, const std::string &b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0);
  return diff == 0;
}

bool isLoopback(const sockaddr_in &address) {
  return (ntohl(address.sin_addr.s_addr) >> 24) == 127;
}

} // namespace

/// Rank 0's server: one thread polling the listening socket and the
/// clients' non-blocking sockets; a client's requests are answered in order.
/// A client must first say hello with the job's secret and its rank; until
/// then it may send only that, briefly. No client can block the server: what
/// a client does not read is buffered up to a bound, then it is dropped.
struct TcpStore::Server {
  struct Client {
    int fd = -1;
    std::string in, out;
    bool authenticated = false;
    int rank = -1;
    Clock::time_point since;
  };

  int listener = -1;
  int worldSize = 1;
  std::string secret;
  std::atomic<bool> stopping{false};
  std::thread thread;
  std::map<std::string, std::string> data;
  std::vector<Client> clients;

  void run() {
    while (!stopping) {
      std::vector<pollfd> fds{{listener, POLLIN, 0}};
      for (const Client &c : clients)
        fds.push_back({c.fd, short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      int ready = ::poll(fds.data(), fds.size(), 100);
      dropLateHellos();
      if (ready <= 0)
        continue;
      if (fds[0].revents & POLLIN)
        accept();
      // Clients accepted just now are not in `fds`: the indices match.
      for (size_t i = 1; i < fds.size(); ++i) {
        Client &c = clients[i - 1];
        if (c.fd < 0)
          continue;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
          receive(c);
        if (c.fd >= 0 && !c.out.empty())
          flush(c);
      }
      clients.erase(std::remove_if(clients.begin(), clients.end(),
                                   [](const Client &c) { return c.fd < 0; }),
                    clients.end());
    }
    for (Client &c : clients)
      ::close(c.fd);
  }

  void accept() {
    int fd =
        ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    size_t pending = 0;
    Client *oldest = nullptr;
    for (Client &c : clients)
      if (c.fd >= 0 && !c.authenticated) {
        ++pending;
        if (!oldest || c.since < oldest->since)
          oldest = &c;
      }
    if (pending >= kMaxPendingConnections && oldest)
      drop(*oldest);
    Client client;
    client.fd = fd;
    client.since = Clock::now();
    clients.push_back(std::move(client));
  }

  void dropLateHellos() {
    auto now = Clock::now();
    for (Client &c : clients)
      if (c.fd >= 0 && !c.authenticated && now - c.since > kHelloDeadline)
        drop(c);
  }

  /// Closes a client's connection. A rank whose connection closes before it
  /// said it was done has died (killed, or its node lost): the job is
  /// aborted at once, so that the others stop waiting for it.
  void drop(Client &c) {
    ::close(c.fd);
    c.fd = -1;
    if (!c.authenticated || stopping)
      return;
    if (data.count(absl::StrCat("done/", c.rank)) || data.count("abort"))
      return;
    bool stillConnected = false;
    for (const Client &other : clients)
      if (&other != &c && other.fd >= 0 && other.authenticated &&
          other.rank == c.rank)
        stillConnected = true;
    if (!stillConnected)
      data["abort"] = absl::StrCat(
          "rank ", c.rank,
          " lost its connection to the store before it finished (the "
          "process died or was killed, or its node was lost)");
  }

  void receive(Client &c) {
    char buffer[65536];
    ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      return;
    if (n <= 0) {
      drop(c);
      return;
    }
    c.in.append(buffer, size_t(n));
    serve(c);
  }

  void flush(Client &c) {
    ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0)
      c.out.erase(0, size_t(n));
    else if (n < 0 && errno != EAGAIN && errno != EINTR)
      drop(c);
  }

  /// Answers every complete request in the client's buffer; drops a client
  /// whose frame declares more than it may send.
  void serve(Client &c) {
    while (c.fd >= 0 && c.in.size() >= 9) {
      uint64_t keyLimit = c.authenticated ? kMaxKeyBytes : kMaxHelloBytes;
      uint64_t valueLimit = c.authenticated ? kMaxValueBytes : kMaxHelloBytes;
      uint64_t keyLength = getU64(c.in.data() + 1);
      if (keyLength > keyLimit)
        return drop(c);
      if (c.in.size() < 17 + keyLength)
        return;
      uint64_t valueLength = getU64(c.in.data() + 9 + keyLength);
      if (valueLength > valueLimit)
        return drop(c);
      size_t total = size_t(17 + keyLength + valueLength);
      if (c.in.size() < total)
        return;
      char kind = c.in[0];
      std::string key = c.in.substr(9, size_t(keyLength));
      std::string value =
          c.in.substr(size_t(17 + keyLength), size_t(valueLength));
      c.in.erase(0, total);
      if (!c.authenticated) {
        int rank = -1;
        if (kind != 'H' || !sameSecret(key, secret) ||
            !absl::SimpleAtoi(value, &rank) || rank < 0 || rank >= worldSize)
          return drop(c);
        for (const Client &other : clients)
          if (other.fd >= 0 && other.authenticated && other.rank == rank)
            return drop(c);
        c.authenticated = true;
        c.rank = rank;
        c.out += "K";
        continue;
      }
      if (kind == 'S') {
        data[key] = std::move(value);
        c.out += "K";
      } else if (kind == 'D') {
        data.erase(key);
        c.out += "K";
      } else if (kind == 'G') {
        auto it = data.find(key);
        c.out.push_back(it != data.end() ? 1 : 0);
        putU64(c.out, it != data.end() ? it->second.size() : 0);
        if (it != data.end())
          c.out += it->second;
      } else {
        return drop(c);
      }
      // A client that asks and never reads is not served without bound.
      if (c.out.size() > kMaxValueBytes + 64)
        return drop(c);
    }
  }
};

absl::StatusOr<std::unique_ptr<TcpStore>>
TcpStore::connect(const LaunchInfo &launch, std::chrono::milliseconds timeout) {
  if (launch.masterPort <= 0 || launch.masterPort > 65535)
    return absl::InvalidArgumentError(absl::StrCat(
        "MASTER_PORT must be set to a TCP port for the store (got ",
        launch.masterPort, ")"));
  std::string host = launch.masterAddr.empty() ? "127.0.0.1"
                                               : launch.masterAddr;
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (int code =
          ::getaddrinfo(host.c_str(), std::to_string(launch.masterPort).c_str(),
                        &hints, &found);
      code != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "MASTER_ADDR '", host, "' does not resolve: ", gai_strerror(code)));
  sockaddr_in address;
  std::memcpy(&address, found->ai_addr, sizeof(address));
  ::freeaddrinfo(found);
  if (launch.storeSecret.empty() && !isLoopback(address))
    return absl::FailedPreconditionError(absl::StrCat(
        "MASTER_ADDR '", host,
        "' is not a loopback address, and the store needs a per-job secret "
        "there: set WEFT_STORE_SECRET to the same random value for every "
        "rank (e.g. export WEFT_STORE_SECRET=$(od -An -tx1 -N16 "
        "/dev/urandom | tr -d ' \\n')) so that only the job's ranks can use "
        "it; see docs/runtime.md"));
  std::unique_ptr<TcpStore> store(new TcpStore());
  store->timeout = timeout;
  if (launch.rank == 0) {
    auto server = std::make_unique<Server>();
    server->worldSize = launch.worldSize;
    server->secret = launch.storeSecret;
    // MASTER_ADDR's interface only: 127.0.0.1 is not served to the network.
    server->listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(server->listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(server->listener, reinterpret_cast<sockaddr *>(&address),
               sizeof(address)) != 0 ||
        ::listen(server->listener, 128) != 0) {
      std::string why = std::strerror(errno);
      ::close(server->listener);
      return absl::UnavailableError(absl::StrCat(
          "rank 0 cannot serve the store on ", host, ":", launch.masterPort,
          ": ", why,
          " (MASTER_ADDR must be an address of rank 0's node; if the port is "
          "taken, set WEFT_STORE_PORT to a free one for every rank)"));
    }
    Server *raw = server.get();
    server->thread = std::thread([raw] { raw->run(); });
    store->server = std::move(server);
  }
  auto deadline = Clock::now() + timeout;
  while (true) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr *>(&address),
                             sizeof(address)) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      store->socket = fd;
      break;
    }
    if (fd >= 0)
      ::close(fd);
    if (Clock::now() > deadline)
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", launch.rank, " could not reach the store at ", host, ":",
          launch.masterPort, " within ", timeout.count(), " ms"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!store
           ->request('H', launch.storeSecret, std::to_string(launch.rank),
                     nullptr, nullptr)
           .ok())
    return absl::PermissionDeniedError(absl::StrCat(
        "the store at ", host, ":", launch.masterPort, " refused rank ",
        launch.rank,
        ": its WEFT_STORE_SECRET (or TORCHELASTIC_RUN_ID) differs from rank "
        "0's, another process already joined as this rank, or it is not "
        "this job's store"));
  return store;
}

TcpStore::~TcpStore() {
  if (socket >= 0)
    ::close(socket);
  if (server) {
    server->stopping = true;
    server->thread.join();
    ::close(server->listener);
  }
}

absl::Status TcpStore::request(char kind, const std::string &key,
                               const std::string &value, std::string *answer,
                               bool *found) {
  // Every request has a deadline: a store that stops answering (its rank
  // hung, its node gone) is an error, not a hang.
  auto deadline = Clock::now() + timeout;
  auto gone = [&] {
    return absl::UnavailableError(
        absl::StrCat("the store did not answer within ", timeout.count(),
                     " ms (rank 0 ended, hung, or dropped this rank)"));
  };
  std::string message = frame(kind, key, value);
  if (!sendAll(socket, message.data(), message.size(), deadline))
    return gone();
  if (kind != 'G') {
    char ack;
    if (!receiveAll(socket, &ack, 1, deadline) || ack != 'K')
      return gone();
    return absl::OkStatus();
  }
  char head[9];
  if (!receiveAll(socket, head, 9, deadline))
    return gone();
  uint64_t length = getU64(head + 1);
  if (length > kMaxValueBytes)
    return absl::DataLossError(absl::StrCat(
        "the store answered with a value of ", length,
        " bytes, more than any tensor exchange (is MASTER_ADDR:MASTER_PORT "
        "this job's store?)"));
  *found = head[0] != 0;
  answer->resize(size_t(length));
  if (!receiveAll(socket, answer->data(), answer->size(), deadline))
    return gone();
  return absl::OkStatus();
}

absl::Status TcpStore::set(const std::string &key, const std::string &value) {
  if (key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes)
    return absl::InvalidArgumentError(
        absl::StrCat("a store value of ", value.size(),
                     " bytes is more than the store "
                     "takes (",
                     kMaxValueBytes,
                     "); run with ranks as MPI processes for "
                     "larger exchanges"));
  return request('S', key, value, nullptr, nullptr);
}

absl::Status TcpStore::erase(const std::string &key) {
  return request('D', key, "", nullptr, nullptr);
}

absl::StatusOr<bool> TcpStore::tryGet(const std::string &key,
                                      std::string &value) {
  bool found = false;
  absl::Status status = request('G', key, "", &value, &found);
  if (!status.ok())
    return status;
  return found;
}

absl::StatusOr<std::string> TcpStore::get(const std::string &key,
                                          std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (int attempt = 0;; ++attempt) {
    std::string value;
    absl::StatusOr<bool> found = tryGet(key, value);
    if (!found.ok())
      return found.status();
    if (*found)
      return value;
    if (key != "abort") {
      std::string why;
      absl::StatusOr<bool> aborted = tryGet("abort", why);
      if (aborted.ok() && *aborted)
        return absl::AbortedError(why);
    }
    if (Clock::now() > deadline)
      return absl::DeadlineExceededError(absl::StrCat(
          "the store has no '", key, "' after ", timeout.count(), " ms"));
    std::this_thread::sleep_for(std::chrono::milliseconds(attempt < 20 ? 1 : 10));
  }
}

std::string weft::rt::serializeTensor(const HostTensor &tensor) {
  std::string bytes(1, char(tensor.dtype));
  putU64(bytes, tensor.shape.size());
  for (int64_t d : tensor.shape)
    putU64(bytes, uint64_t(d));
  if (tensor.isFloat())
    bytes.append(reinterpret_cast<const char *>(tensor.floats.data()),
                 tensor.floats.size() * sizeof(float));
  else
    bytes.append(reinterpret_cast<const char *>(tensor.ints.data()),
                 tensor.ints.size() * sizeof(int64_t));
  return bytes;
}

absl::StatusOr<HostTensor> weft::rt::deserializeTensor(const std::string &bytes) {
  auto bad = [] { return absl::DataLossError("a malformed tensor message"); };
  if (bytes.size() < 9 || uint8_t(bytes[0]) > uint8_t(DType::F64))
    return bad();
  size_t rank = getU64(bytes.data() + 1);
  if (rank > 16 || bytes.size() < 9 + 8 * rank)
    return bad();
  Shape shape;
  for (size_t d = 0; d < rank; ++d)
    shape.push_back(int64_t(getU64(bytes.data() + 9 + 8 * d)));
  // The declared size is checked against the bytes before allocating.
  DType dtype = DType(bytes[0]);
  size_t offset = 9 + 8 * rank;
  int64_t payloadBytes = checkedBytes(
      checkedNumElements(shape),
      isFloat(dtype) ? int64_t(sizeof(float)) : int64_t(sizeof(int64_t)));
  if (payloadBytes < 0 || bytes.size() - offset != uint64_t(payloadBytes))
    return bad();
  size_t payload = size_t(payloadBytes);
  HostTensor tensor(dtype, shape);
  if (tensor.isFloat())
    std::memcpy(tensor.floats.data(), bytes.data() + offset, payload);
  else
    std::memcpy(tensor.ints.data(), bytes.data() + offset, payload);
  return tensor;
}

absl::StatusOr<std::vector<HostTensor>>
StoreCommunicator::exchange(int rank, const std::vector<int> &group,
                            const HostTensor &mine, const char *what) {
  absl::StatusOr<size_t> position = indexIn(rank, group, what, myRank);
  if (!position.ok())
    return position.status();
  size_t index = *position;
  std::string name = groupKey(group);
  int64_t n = sequence[name]++;
  auto key = [&](int64_t number, size_t member) {
    return absl::StrCat("x/", name, "/", number, "/", member);
  };
  if (absl::Status status = store.set(key(n, index), serializeTensor(mine));
      !status.ok())
    return status;
  // Every member finished collective n - 2 before anyone posted n - 1, so
  // nobody reads this rank's n - 2 any more.
  if (n >= 2)
    if (absl::Status status = store.erase(key(n - 2, index)); !status.ok())
      return status;
  std::vector<HostTensor> all(group.size());
  all[index] = mine;
  std::vector<size_t> waiting;
  for (size_t j = 0; j < group.size(); ++j)
    if (j != index)
      waiting.push_back(j);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int attempt = 0; !waiting.empty(); ++attempt) {
    for (auto it = waiting.begin(); it != waiting.end();) {
      std::string bytes;
      absl::StatusOr<bool> found = store.tryGet(key(n, *it), bytes);
      if (!found.ok())
        return found.status();
      if (!*found) {
        ++it;
        continue;
      }
      absl::StatusOr<HostTensor> tensor = deserializeTensor(bytes);
      if (!tensor.ok())
        return tensor.status();
      // Every member of a collective holds a block of the same type: a peer
      // tensor of another is refused before any kernel touches it.
      if (tensor->dtype != mine.dtype || tensor->shape != mine.shape)
        return absl::DataLossError(absl::StrCat(
            what, " on rank ", rank, ": rank ", group[*it], " sent ",
            dtypeName(tensor->dtype), shapeString(tensor->shape),
            " where every member holds ", dtypeName(mine.dtype),
            shapeString(mine.shape)));
      all[*it] = std::move(*tensor);
      it = waiting.erase(it);
    }
    if (waiting.empty())
      break;
    std::string why;
    absl::StatusOr<bool> aborted = store.tryGet("abort", why);
    if (aborted.ok() && *aborted)
      return absl::AbortedError(why);
    if (std::chrono::steady_clock::now() > deadline) {
      std::string missing;
      for (size_t j : waiting)
        absl::StrAppend(&missing, missing.empty() ? "" : ", ", group[j]);
      return absl::DeadlineExceededError(
          absl::StrCat(what, " on rank ", rank, " timed out after ",
                       timeout.count(), " ms waiting for rank(s) ", missing));
    }
    std::this_thread::sleep_for(
        std::chrono::microseconds(attempt < 50 ? 200 : 5000));
  }
  return all;
}

absl::Status StoreCommunicator::send(int rank, int peer,
                                     const HostTensor &input, Codec codec) {
  if (rank != myRank || peer < 0 || peer >= worldSize() || peer == rank)
    return absl::InvalidArgumentError(absl::StrCat("send on rank ", rank,
                                                   " (process rank ", myRank,
                                                   "): no peer rank ", peer));
  int64_t n = sentTo[{rank, peer}]++;
  if (absl::Status status =
          store.set(absl::StrCat("p/", rank, "/", peer, "/", n),
                    serializeTensor(roundTrip(input, codec)));
      !status.ok())
    return status;
  countSent(rank, wireBytes(input, codec));
  return absl::OkStatus();
}

absl::StatusOr<HostTensor> StoreCommunicator::recv(int rank, int peer) {
  if (rank != myRank || peer < 0 || peer >= worldSize() || peer == rank)
    return absl::InvalidArgumentError(absl::StrCat("recv on rank ", rank,
                                                   " (process rank ", myRank,
                                                   "): no peer rank ", peer));
  std::string key =
      absl::StrCat("p/", peer, "/", rank, "/", receivedFrom[{peer, rank}]);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int attempt = 0;; ++attempt) {
    std::string bytes;
    absl::StatusOr<bool> found = store.tryGet(key, bytes);
    if (!found.ok())
      return found.status();
    if (*found) {
      ++receivedFrom[{peer, rank}];
      if (absl::Status status = store.erase(key); !status.ok())
        return status;
      return deserializeTensor(bytes);
    }
    std::string why;
    absl::StatusOr<bool> aborted = store.tryGet("abort", why);
    if (aborted.ok() && *aborted)
      return absl::AbortedError(why);
    if (std::chrono::steady_clock::now() > deadline)
      return absl::DeadlineExceededError(absl::StrCat(
          "recv on rank ", rank, " from rank ", peer, " timed out after ",
          timeout.count(), " ms: rank ", peer, " never sent"));
    std::this_thread::sleep_for(
        std::chrono::microseconds(attempt < 50 ? 200 : 5000));
  }
}
