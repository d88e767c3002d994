// A vector of trivially copyable values that keeps up to N of them inside itself and goes to the
// heap only beyond that. Tensor shapes and strides (hlo::Dims) are such vectors: nearly all have
// six dimensions or fewer, and every recorded or executed op builds several of them (its views,
// its slots' types, its outputs' types), so as std::vector they were a large share of the host's
// allocations per op. The interface is std::vector's (the parts this code base uses), with
// pointers as iterators; it converts to and from std::vector.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace tpu::common {

template <typename T, size_t N>
class InlineVector {
  static_assert(std::is_trivially_copyable_v<T>, "InlineVector holds trivially copyable values only");
  static_assert(N > 0, "InlineVector needs room for at least one value");

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  InlineVector() noexcept : data_(inline_), size_(0), capacity_(N) {}
  explicit InlineVector(size_t n) : InlineVector() { resize(n); }
  InlineVector(size_t n, const T& value) : InlineVector() { assign(n, value); }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  InlineVector(It first, It last) : InlineVector() {
    assign(first, last);
  }
  InlineVector(std::initializer_list<T> values) : InlineVector() { assign(values.begin(), values.end()); }
  InlineVector(const std::vector<T>& v) : InlineVector() { assign(v.begin(), v.end()); }  // NOLINT: implicit
  InlineVector(const InlineVector& o) : InlineVector() { assign(o.begin(), o.end()); }
  InlineVector(InlineVector&& o) noexcept : InlineVector() { take(o); }
  ~InlineVector() { release(); }

  InlineVector& operator=(const InlineVector& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  InlineVector& operator=(InlineVector&& o) noexcept {
    if (this != &o) {
      release();
      data_ = inline_;
      size_ = 0;
      capacity_ = N;
      take(o);
    }
    return *this;
  }
  InlineVector& operator=(std::initializer_list<T> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  InlineVector& operator=(const std::vector<T>& v) {
    assign(v.begin(), v.end());
    return *this;
  }
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT: implicit

  void assign(size_t n, const T& value) {
    const T copy = value;  // `value` may live in this vector
    clear();
    reserve(n);
    std::fill_n(data_, n, copy);
    size_ = n;
  }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  void assign(It first, It last) {
    clear();
    append(first, last);
  }
  void assign(std::initializer_list<T> values) { assign(values.begin(), values.end()); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return capacity_; }

  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& at(size_t i) {
    if (i >= size_) throw std::out_of_range("InlineVector::at");
    return data_[i];
  }
  const T& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("InlineVector::at");
    return data_[i];
  }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  void reserve(size_t n) {
    if (n > capacity_) grow_to(n);
  }
  void clear() noexcept { size_ = 0; }
  void resize(size_t n) { resize(n, T()); }
  void resize(size_t n, const T& value) {
    if (n > size_) {
      const T copy = value;
      reserve(n);
      std::fill(data_ + size_, data_ + n, copy);
    }
    size_ = n;
  }
  void push_back(const T& value) {
    if (size_ == capacity_) {
      const T copy = value;  // `value` may live in this vector
      grow_to(capacity_ * 2);
      data_[size_++] = copy;
      return;
    }
    data_[size_++] = value;
  }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    push_back(T(std::forward<Args>(args)...));
    return back();
  }
  void pop_back() { --size_; }

  iterator insert(const_iterator pos, const T& value) { return insert(pos, size_t{1}, value); }
  iterator insert(const_iterator pos, size_t n, const T& value) {
    const T copy = value;
    const size_t at = static_cast<size_t>(pos - data_);
    open_gap(at, n);
    std::fill_n(data_ + at, n, copy);
    return data_ + at;
  }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - data_);
    const InlineVector values(first, last);  // the range may be part of this vector
    open_gap(at, values.size());
    std::copy(values.begin(), values.end(), data_ + at);
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> values) {
    return insert(pos, values.begin(), values.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - data_);
    const size_t n = static_cast<size_t>(last - first);
    std::memmove(data_ + at, data_ + at + n, (size_ - at - n) * sizeof(T));
    size_ -= n;
    return data_ + at;
  }
  void swap(InlineVector& o) noexcept {
    InlineVector tmp(std::move(o));
    o = std::move(*this);
    *this = std::move(tmp);
  }

  friend bool operator==(const InlineVector& a, const InlineVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const InlineVector& a, const InlineVector& b) { return !(a == b); }
  friend bool operator<(const InlineVector& a, const InlineVector& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const InlineVector& a, const std::vector<T>& b) {
    return a.size_ == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const std::vector<T>& a, const InlineVector& b) { return b == a; }
  friend bool operator!=(const InlineVector& a, const std::vector<T>& b) { return !(a == b); }
  friend bool operator!=(const std::vector<T>& a, const InlineVector& b) { return !(b == a); }

 private:
  template <typename It>
  void append(It first, It last) {
    if constexpr (std::is_base_of_v<std::forward_iterator_tag, typename std::iterator_traits<It>::iterator_category>) {
      const size_t n = static_cast<size_t>(std::distance(first, last));
      reserve(size_ + n);
      std::copy(first, last, data_ + size_);
      size_ += n;
    } else {
      for (; first != last; ++first) push_back(*first);
    }
  }
  // Makes room for n values at index `at`, moving the ones after it up.
  void open_gap(size_t at, size_t n) {
    reserve(size_ + n);
    std::memmove(data_ + at + n, data_ + at, (size_ - at) * sizeof(T));
    size_ += n;
  }
  void grow_to(size_t n) {
    const size_t cap = std::max(n, capacity_ * 2);
    T* heap = static_cast<T*>(::operator new(cap * sizeof(T)));
    std::memcpy(heap, data_, size_ * sizeof(T));
    release();
    data_ = heap;
    capacity_ = cap;
  }
  void release() noexcept {
    if (data_ != inline_) ::operator delete(data_);
  }
  // Moves o's values here (this is empty and inline); o is left empty and inline.
  void take(InlineVector& o) noexcept {
    if (o.data_ == o.inline_) {
      std::memcpy(inline_, o.inline_, o.size_ * sizeof(T));
    } else {
      data_ = o.data_;
      capacity_ = o.capacity_;
      o.data_ = o.inline_;
      o.capacity_ = N;
    }
    size_ = o.size_;
    o.size_ = 0;
  }

  T* data_;
  size_t size_;
  size_t capacity_;
  T inline_[N];
};

}  // namespace tpu::common
