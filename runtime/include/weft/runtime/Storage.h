//===- Storage.h - A tensor's elements, owned or borrowed -------*- C++ -*-===//
//
// Part of the Weft project.
//
// What a HostTensor's elements live in: a std::vector-like array that either
// owns its elements or borrows memory that something else keeps alive (a
// weight file mapped into memory, an imported module's weights), so that a
// weight is read once and never copied to be used. Copying a Storage copies
// its elements (as std::vector does); moving it moves them, borrowed or not.
// A new owned array is not zero-filled unless asked: kernels that write every
// element do not pay for a pass over memory they are about to overwrite.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_STORAGE_H
#define WEFT_RUNTIME_STORAGE_H

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <vector>

namespace weft::rt {

template <typename T> class Storage {
public:
  using value_type = T;
  using iterator = T *;
  using const_iterator = const T *;

  Storage() = default;
  /// `n` elements, zero (as std::vector's).
  explicit Storage(size_t n) { assign(n, T()); }
  Storage(std::initializer_list<T> values) {
    assign(values.begin(), values.end());
  }
  Storage(const std::vector<T> &values) {
    assign(values.begin(), values.end());
  }
  Storage(const Storage &other) { assign(other.begin(), other.end()); }
  Storage(Storage &&other) noexcept { take(other); }
  Storage &operator=(const Storage &other) {
    if (this != &other)
      assign(other.begin(), other.end());
    return *this;
  }
  Storage &operator=(Storage &&other) noexcept {
    if (this != &other)
      take(other);
    return *this;
  }
  Storage &operator=(std::initializer_list<T> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  Storage &operator=(const std::vector<T> &values) {
    assign(values.begin(), values.end());
    return *this;
  }

  /// `n` elements at `data`, which `keeper` keeps alive (nullptr: memory
  /// that outlives every tensor, such as an MLIR context's). The elements
  /// may be written only where the memory is writable (a private mapping).
  static Storage borrow(T *data, size_t n, std::shared_ptr<const void> keeper) {
    Storage storage;
    storage.ptr = data;
    storage.count = n;
    storage.keeper = std::move(keeper);
    return storage;
  }
  /// `n` owned elements, not initialized.
  static Storage uninitialized(size_t n) {
    Storage storage;
    storage.allocate(n);
    return storage;
  }

  T *data() { return ptr; }
  const T *data() const { return ptr; }
  size_t size() const { return count; }
  bool empty() const { return count == 0; }
  /// True when the elements are borrowed (see borrow()).
  bool borrowed() const { return count && !owned; }
  T &operator[](size_t i) { return ptr[i]; }
  const T &operator[](size_t i) const { return ptr[i]; }
  T *begin() { return ptr; }
  T *end() { return ptr + count; }
  const T *begin() const { return ptr; }
  const T *end() const { return ptr + count; }
  T &front() { return ptr[0]; }
  const T &front() const { return ptr[0]; }
  T &back() { return ptr[count - 1]; }
  const T &back() const { return ptr[count - 1]; }

  void assign(size_t n, T value) {
    allocate(n);
    std::fill(ptr, ptr + n, value);
  }
  template <typename It> void assign(It first, It last) {
    size_t n = static_cast<size_t>(std::distance(first, last));
    if (n && ptr && owned && n == count &&
        !(std::addressof(*first) >= ptr && std::addressof(*first) < ptr + n)) {
      std::copy(first, last, ptr);
      return;
    }
    std::unique_ptr<T[]> fresh(n ? new T[n] : nullptr);
    std::copy(first, last, fresh.get());
    owned = std::move(fresh);
    keeper.reset();
    ptr = owned.get();
    count = n;
  }
  /// Keeps the first min(n, size()) elements; new ones are zero.
  void resize(size_t n) {
    if (n == count)
      return;
    std::unique_ptr<T[]> fresh(n ? new T[n]() : nullptr);
    std::copy(ptr, ptr + std::min(n, count), fresh.get());
    owned = std::move(fresh);
    keeper.reset();
    ptr = owned.get();
    count = n;
  }
  void clear() {
    owned.reset();
    keeper.reset();
    ptr = nullptr;
    count = 0;
  }
  std::vector<T> toVector() const { return std::vector<T>(begin(), end()); }

  friend bool operator==(const Storage &a, const Storage &b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator!=(const Storage &a, const Storage &b) {
    return !(a == b);
  }
  friend bool operator==(const Storage &a, const std::vector<T> &b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const std::vector<T> &a, const Storage &b) {
    return b == a;
  }

private:
  /// Makes room for `n` owned elements (contents unspecified).
  void allocate(size_t n) {
    if (owned && n == count)
      return;
    owned.reset(n ? new T[n] : nullptr);
    keeper.reset();
    ptr = owned.get();
    count = n;
  }
  void take(Storage &other) {
    owned = std::move(other.owned);
    keeper = std::move(other.keeper);
    ptr = other.ptr;
    count = other.count;
    other.ptr = nullptr;
    other.count = 0;
  }

  T *ptr = nullptr;
  size_t count = 0;
  std::unique_ptr<T[]> owned;
  std::shared_ptr<const void> keeper;
};

} // namespace weft::rt

#endif // WEFT_RUNTIME_STORAGE_H
