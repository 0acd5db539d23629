#pragma once
// A node's GPU ids, immutable and shared between copies. Every node of a uniform job sees the same
// list, and the node tables hold one row per node (16,384 at the largest): copies of one list share
// one allocation instead of one each, as the published plan already shares them by index.
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace ddprun::core {

class GpuList {
 public:
  using value_type = std::string;
  using const_iterator = std::vector<std::string>::const_iterator;
  using iterator = const_iterator;

  GpuList() = default;
  // Implicit: a list is its ids. An empty list holds nothing.
  GpuList(std::vector<std::string> ids)  // NOLINT(google-explicit-constructor)
      : ids_(ids.empty() ? nullptr : std::make_shared<const std::vector<std::string>>(std::move(ids))) {}
  GpuList(std::initializer_list<std::string> ids) : GpuList(std::vector<std::string>(ids)) {}

  const std::vector<std::string>& ids() const { return ids_ ? *ids_ : none(); }
  operator const std::vector<std::string>&() const { return ids(); }  // NOLINT(google-explicit-constructor)

  std::size_t size() const { return ids().size(); }
  bool empty() const { return ids().empty(); }
  const_iterator begin() const { return ids().begin(); }
  const_iterator end() const { return ids().end(); }
  const std::string& operator[](std::size_t i) const { return ids()[i]; }
  const std::string& front() const { return ids().front(); }

  // Two lists are equal when their ids are, shared or not.
  bool operator==(const GpuList& o) const { return ids_ == o.ids_ || ids() == o.ids(); }
  bool operator==(const std::vector<std::string>& o) const { return ids() == o; }

  // Whether two lists share one allocation (for tests; an empty list shares with none).
  bool shares_with(const GpuList& o) const { return ids_ != nullptr && ids_ == o.ids_; }

 private:
  static const std::vector<std::string>& none() {
    static const std::vector<std::string> kNone;
    return kNone;
  }
  std::shared_ptr<const std::vector<std::string>> ids_;
};

}  // namespace ddprun::core
