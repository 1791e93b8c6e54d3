// model/arena_plan.h: one device arena carved into 256-byte aligned pieces (the alignment the GEMM, norm and
// cross-entropy kernels assume), or only sized: the same code runs with a base (pointers into it) and without (null
// pointers, the bytes counted), so the memory estimate and the allocation cannot disagree.
//   piece k starts at pad256(end of piece k - 1);  the arena's bytes = pad256(end of the last piece)
// A module keeps some fields for its backward (one copy per activation set and layer, in that layer's block) and
// uses others only while its layer runs (one copy shared by every layer: the shared region is a union over the
// layers). Which is which is the recompute policy's (model/recompute.h); plan_field() takes a field in the pass of
// its kind.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

namespace tb::model {

constexpr std::size_t pad256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

class ArenaPlan {
 public:
  explicit ArenaPlan(std::byte* base = nullptr) : base_(base) {}
  void* take_bytes(std::size_t bytes) {
    used_ = pad256(used_);
    void* p = base_ ? static_cast<void*>(base_ + used_) : nullptr;
    used_ += bytes;
    return p;
  }
  template <class T>
  T* take(std::size_t elems) {
    return static_cast<T*>(take_bytes(elems * sizeof(T)));
  }
  std::size_t end() const { return pad256(used_); }  // the next piece's offset
  void seek(std::size_t offset) { used_ = offset; }

 private:
  std::byte* base_;
  std::size_t used_ = 0;
};

// The pass a module plans in: the fields it keeps, for one activation set (`set`), or the fields it shares with the
// other layers, for every set at once.
struct PlanPass {
  bool kept = true;
  int set = 0;  // kept: the activation set whose fields are taken
};

// Takes a field of `bytes` for the activation sets' structs when its kind matches the pass: a kept field into
// sets[pass.set], a shared one into every set (the same bytes). field(s) names the pointer in a set's struct.
template <class S, class F>
void plan_field_at(ArenaPlan& a, const PlanPass& pass, std::span<S> sets, F field, std::size_t bytes, bool kept) {
  if (kept != pass.kept) return;
  void* p = a.take_bytes(bytes);
  auto assign = [&](S& s) {
    auto& f = field(s);
    f = static_cast<std::remove_reference_t<decltype(f)>>(p);
  };
  if (kept) {
    assign(sets[std::size_t(pass.set)]);
  } else {
    for (S& s : sets) assign(s);
  }
}

// The same for a member pointer of elems elements.
template <class S, class T>
void plan_field(ArenaPlan& a, const PlanPass& pass, std::span<S> sets, T* S::*member, std::size_t elems, bool kept) {
  plan_field_at(a, pass, sets, [member](S& s) -> T*& { return s.*member; }, elems * sizeof(T), kept);
}

}  // namespace tb::model
