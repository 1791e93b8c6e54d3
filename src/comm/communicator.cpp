// comm/communicator.cpp: the one-rank communicator (comm/communicator.h): collectives copy send to recv; the
// all-to-all's argument check.
#include "comm/communicator.h"

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace tb::comm {
namespace {

class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator() : Communicator(0, 1) {}
  std::string_view backend() const override { return "self"; }
  void all_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp) override {
    copy(send, recv, count, t);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType t) override {
    copy(send, recv, recv_count, t);
  }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType t) override {
    copy(send, recv, send_count, t);
  }
  void broadcast(void*, std::size_t, DType, int root) override {
    TB_REQUIRE(root == 0, "broadcast: root must be 0 on a one-rank communicator");
  }
  void all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                    std::span<const std::size_t> recv_counts, DType t) override {
    TB_REQUIRE(send_counts.size() == 1 && recv_counts.size() == 1 && send_counts[0] == recv_counts[0],
               "all_to_all_v on a one-rank communicator: one count on each side, and they must be equal");
    copy(send, recv, send_counts[0], t);
  }
  void exchange(std::span<const P2P> ops, DType t) override {
    std::vector<const P2P*> sends, recvs;
    for (const P2P& p : ops) {
      TB_REQUIRE(p.peer == 0, "exchange: peer must be 0 on a one-rank communicator");
      (p.kind == P2P::Kind::send ? sends : recvs).push_back(&p);
    }
    TB_REQUIRE(sends.size() == recvs.size(), "exchange with itself: every send needs a matching receive");
    for (std::size_t i = 0; i < sends.size(); ++i) {
      TB_REQUIRE(sends[i]->count == recvs[i]->count, "exchange with itself: send and receive sizes differ");
      copy(sends[i]->buf, recvs[i]->buf, sends[i]->count, t);
    }
  }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return make_self_communicator(); }

 private:
  static void copy(const void* from, void* to, std::size_t count, DType t) {
    if (from != to) std::memmove(to, from, count * dtype_size(t));
  }
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator() { return std::make_unique<SelfCommunicator>(); }

void Communicator::check_all_to_all(std::size_t send_size, std::span<const std::size_t> send_counts,
                                    std::size_t recv_size, std::span<const std::size_t> recv_counts) const {
  TB_REQUIRE(send_counts.size() == std::size_t(size_) && recv_counts.size() == std::size_t(size_),
             "all_to_all_v: " + std::to_string(send_counts.size()) + " send and " + std::to_string(recv_counts.size()) +
                 " receive counts, the communicator has " + std::to_string(size_) + " ranks (one count per rank)");
  const std::size_t ns = std::accumulate(send_counts.begin(), send_counts.end(), std::size_t(0));
  const std::size_t nr = std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t(0));
  TB_REQUIRE(ns <= send_size && nr <= recv_size,
             "all_to_all_v: the counts send " + std::to_string(ns) + " and receive " + std::to_string(nr) +
                 " elements, the buffers hold " + std::to_string(send_size) + " and " + std::to_string(recv_size));
}

std::string Communicator::broadcast_text(const std::string& text, int root) {
  int len = rank() == root ? int(text.size()) : 0;
  broadcast(&len, 1, DType::i32, root);
  std::vector<std::int32_t> words((std::size_t(len) + 3) / 4, 0);
  if (rank() == root) std::memcpy(words.data(), text.data(), text.size());
  broadcast(words.data(), words.size(), DType::i32, root);
  return std::string(reinterpret_cast<const char*>(words.data()), std::size_t(len));
}

}  // namespace tb::comm
