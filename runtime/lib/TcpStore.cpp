//===- TcpStore.cpp - A key-value store over TCP for rendezvous -----------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/TcpStore.h"

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

using namespace weft::rt;

namespace {

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

bool sendAll(int fd, const std::string &bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent,
                       MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    sent += size_t(n);
  }
  return true;
}

bool receiveAll(int fd, char *data, size_t size) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::recv(fd, data + got, size - got, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    got += size_t(n);
  }
  return true;
}

} // namespace

/// Rank 0's server: one thread polling the listening socket and the
/// clients; a client's requests are answered in order.
struct TcpStore::Server {
  int listener = -1;
  std::atomic<bool> stopping{false};
  std::thread thread;
  std::map<std::string, std::string> data;

  void run() {
    std::vector<pollfd> fds{{listener, POLLIN, 0}};
    std::map<int, std::string> pending;
    while (!stopping) {
      if (::poll(fds.data(), fds.size(), 100) <= 0)
        continue;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
          continue;
        if (fds[i].fd == listener) {
          int client = ::accept(listener, nullptr, nullptr);
          if (client >= 0) {
            int one = 1;
            ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            fds.push_back({client, POLLIN, 0});
          }
          continue;
        }
        char buffer[65536];
        ssize_t n = ::recv(fds[i].fd, buffer, sizeof(buffer), 0);
        if (n <= 0) {
          ::close(fds[i].fd);
          pending.erase(fds[i].fd);
          fds[i].fd = -1;
          continue;
        }
        std::string &in = pending[fds[i].fd];
        in.append(buffer, size_t(n));
        serve(fds[i].fd, in);
      }
      fds.erase(std::remove_if(fds.begin(), fds.end(),
                               [](const pollfd &p) { return p.fd < 0; }),
                fds.end());
    }
    for (const pollfd &p : fds)
      ::close(p.fd);
  }

  /// Answers every complete request in `in`.
  void serve(int fd, std::string &in) {
    while (in.size() >= 17) {
      uint64_t keyLength = getU64(in.data() + 1);
      if (in.size() < 17 + keyLength)
        return;
      uint64_t valueLength = getU64(in.data() + 9 + keyLength);
      size_t total = 17 + keyLength + valueLength;
      if (in.size() < total)
        return;
      char kind = in[0];
      std::string key = in.substr(9, keyLength);
      std::string answer;
      if (kind == 'S') {
        data[key] = in.substr(17 + keyLength, valueLength);
        answer = "K";
      } else if (kind == 'D') {
        data.erase(key);
        answer = "K";
      } else {
        auto it = data.find(key);
        answer.push_back(it != data.end() ? 1 : 0);
        putU64(answer, it != data.end() ? it->second.size() : 0);
        if (it != data.end())
          answer += it->second;
      }
      in.erase(0, total);
      sendAll(fd, answer);
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
  std::unique_ptr<TcpStore> store(new TcpStore());
  if (launch.rank == 0) {
    auto server = std::make_unique<Server>();
    server->listener = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(server->listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(uint16_t(launch.masterPort));
    if (::bind(server->listener, reinterpret_cast<sockaddr *>(&address),
               sizeof(address)) != 0 ||
        ::listen(server->listener, 128) != 0) {
      std::string why = std::strerror(errno);
      ::close(server->listener);
      return absl::UnavailableError(absl::StrCat(
          "rank 0 cannot serve the store on port ", launch.masterPort, ": ",
          why));
    }
    Server *raw = server.get();
    server->thread = std::thread([raw] { raw->run(); });
    store->server = std::move(server);
  }
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (int code = ::getaddrinfo(host.c_str(),
                               std::to_string(launch.masterPort).c_str(),
                               &hints, &found);
      code != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "MASTER_ADDR '", host, "' does not resolve: ", gai_strerror(code)));
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int fd = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
    if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      store->socket = fd;
      break;
    }
    if (fd >= 0)
      ::close(fd);
    if (std::chrono::steady_clock::now() > deadline) {
      ::freeaddrinfo(found);
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", launch.rank, " could not reach the store at ", host, ":",
          launch.masterPort, " within ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::freeaddrinfo(found);
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
  std::string message(1, kind);
  putU64(message, key.size());
  message += key;
  putU64(message, value.size());
  message += value;
  if (!sendAll(socket, message))
    return absl::UnavailableError("the store went away (rank 0 ended?)");
  if (kind != 'G') {
    char ack;
    if (!receiveAll(socket, &ack, 1))
      return absl::UnavailableError("the store went away (rank 0 ended?)");
    return absl::OkStatus();
  }
  char head[9];
  if (!receiveAll(socket, head, 9))
    return absl::UnavailableError("the store went away (rank 0 ended?)");
  *found = head[0] != 0;
  answer->resize(getU64(head + 1));
  if (!receiveAll(socket, answer->data(), answer->size()))
    return absl::UnavailableError("the store went away (rank 0 ended?)");
  return absl::OkStatus();
}

absl::Status TcpStore::set(const std::string &key, const std::string &value) {
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
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int attempt = 0;; ++attempt) {
    std::string value;
    absl::StatusOr<bool> found = tryGet(key, value);
    if (!found.ok())
      return found.status();
    if (*found)
      return value;
    if (std::chrono::steady_clock::now() > deadline)
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
  HostTensor tensor(DType(bytes[0]), shape);
  size_t offset = 9 + 8 * rank;
  size_t payload = tensor.isFloat() ? tensor.floats.size() * sizeof(float)
                                    : tensor.ints.size() * sizeof(int64_t);
  if (bytes.size() != offset + payload)
    return bad();
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
