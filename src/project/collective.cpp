// project/collective.cpp: see collective.h.
#include "project/collective.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace tb::project {

std::string_view coll_name(Coll c) {
  switch (c) {
    case Coll::all_reduce:
      return "all_reduce";
    case Coll::all_gather:
      return "all_gather";
    case Coll::reduce_scatter:
      return "reduce_scatter";
    case Coll::send_recv:
      return "sendrecv";
    case Coll::all_to_all:
      return "all_to_all";
  }
  return "?";
}

double LinkLevel::busbw_gbps(Coll c) const {
  switch (c) {
    case Coll::all_reduce:
      return all_reduce_gbps;
    case Coll::all_gather:
      return all_gather_gbps;
    case Coll::reduce_scatter:
      return reduce_scatter_gbps;
    case Coll::send_recv:
      return send_recv_gbps;
    case Coll::all_to_all:
      return all_to_all_gbps;
  }
  return 0;
}

Network Network::scaled(double nvlink_factor, double scaleout_factor) const {
  Network n = *this;
  for (auto* level : {&n.nvlink}) {
    level->all_reduce_gbps *= nvlink_factor, level->all_gather_gbps *= nvlink_factor;
    level->reduce_scatter_gbps *= nvlink_factor, level->send_recv_gbps *= nvlink_factor;
    level->all_to_all_gbps *= nvlink_factor;
  }
  n.scaleout.all_reduce_gbps *= scaleout_factor, n.scaleout.all_gather_gbps *= scaleout_factor;
  n.scaleout.reduce_scatter_gbps *= scaleout_factor, n.scaleout.send_recv_gbps *= scaleout_factor;
  n.scaleout.all_to_all_gbps *= scaleout_factor;
  return n;
}

Network network_of(const recipe::SystemRef& s) {
  TB_REQUIRE(s.network.present, fmt::format("{}: no [network] section: `trainbench project` needs the NVLink domain "
                                            "and the scale-out network of the system (docs/PROJECTION.md)",
                                            s.file));
  const recipe::NetworkRef& r = s.network;
  Network n;
  n.domain_gpus = r.nvlink_domain_gpus;
  n.nvlink = {r.nvlink_all_reduce_gbps, r.nvlink_all_gather_gbps, r.nvlink_reduce_scatter_gbps, r.nvlink_sendrecv_gbps,
              r.nvlink_latency_us,      r.nvlink_all_to_all_gbps};
  const double net = r.scaleout_gbps * r.scaleout_efficiency;
  n.scaleout = {net, net, net, net, r.scaleout_latency_us, net};
  n.description = r.description;
  return n;
}

double ring_time_s(Coll c, double bytes, int n, double busbw_gbps, double latency_us) {
  TB_REQUIRE(busbw_gbps > 0, "ring_time_s: bus bandwidth must be positive");
  const double alpha = latency_us * 1e-6, b = busbw_gbps * 1e9;
  if (c == Coll::send_recv) return bytes / b + alpha;
  if (n <= 1) return 0;
  if (c == Coll::all_to_all) return double(n - 1) / n * bytes / b + alpha;
  const double steps = n - 1, frac = double(n - 1) / n;
  if (c == Coll::all_reduce) return 2 * frac * bytes / b + 2 * steps * alpha;
  return frac * bytes / b + steps * alpha;
}

double group_time_s(Coll c, double bytes, int n, int local, const Network& net) {
  if (n <= 1 && c != Coll::send_recv) return 0;
  local = std::clamp(local, 1, std::max(n, 1));
  TB_REQUIRE(n % local == 0, fmt::format("group_time_s: {} ranks are not a multiple of {} per domain", n, local));
  const int k = n / local;
  if (c == Coll::send_recv)  // one hop: inside a domain when the whole group is, else across
    return k > 1 ? ring_time_s(c, bytes, 2, net.scaleout.busbw_gbps(c), net.scaleout.latency_us)
                 : ring_time_s(c, bytes, 2, net.nvlink.busbw_gbps(c), net.nvlink.latency_us);
  if (c == Coll::all_to_all && k > 1) {  // the own domain's part over NVLink, the rest through the NIC, at once
    const double intra = local > 1 ? double(local - 1) / n * bytes / (net.nvlink.busbw_gbps(c) * 1e9) : 0;
    const double inter = double(n - local) / n * bytes / (net.scaleout.busbw_gbps(c) * 1e9);
    return std::max(intra, inter) + net.scaleout.latency_us * 1e-6;
  }
  if (c == Coll::all_reduce && local > 1 && k > 1)  // two levels: reduce-scatter then all-gather, each hierarchical
    return group_time_s(Coll::reduce_scatter, bytes, n, local, net) +
           group_time_s(Coll::all_gather, bytes, n, local, net);
  double t = 0;
  if (local > 1) t += ring_time_s(c, bytes, local, net.nvlink.busbw_gbps(c), net.nvlink.latency_us);
  if (k > 1) t += ring_time_s(c, bytes / local, k, net.scaleout.busbw_gbps(c), net.scaleout.latency_us);
  return t;
}

}  // namespace tb::project
