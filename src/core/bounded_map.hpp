// A map of at most `capacity` entries, for caches keyed by problem shapes: a caller whose shapes
// never repeat (a decode loop over a growing dense KV sequence makes a new seqlen_k per token)
// must not grow it without bound.
#pragma once

#include <cstddef>
#include <map>
#include <utility>

namespace fa {

template <class Key, class Value>
class BoundedMap {
 public:
  explicit BoundedMap(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The entry for `key`, or null. The pointer is valid until the next insert().
  Value const* find(Key const& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }

  // Adds `key` unless present. A full map is emptied first: every entry can be recomputed (a
  // kernel choice takes microseconds), and the ones in use come back on their next lookup,
  // without the bookkeeping an LRU order would add to every hit.
  void insert(Key const& key, Value value) {
    if (entries_.count(key) != 0) return;
    if (entries_.size() >= capacity_) entries_.clear();
    entries_.emplace(key, std::move(value));
  }

  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::map<Key, Value> entries_;
};

}  // namespace fa
