// report/run_args.h: turning a sweep / scale point (key=value pairs) into `trainbench run` arguments, shared by
// cmd_sweep.cpp and cmd_scale.cpp. Keys: the layout's --set keys (layers seq micro_batch global_batch tp pp cp vp),
// precision (--precision), recompute (--recompute), ref_gpus (--ref-gpus), steps (--steps).
#pragma once

#include <string>
#include <vector>

#include "report/exec.h"
#include "report/sweep.h"

namespace tb::report {

inline const std::vector<std::string>& sweep_keys() {
  static const std::vector<std::string> k{"layers", "seq",       "micro_batch", "global_batch", "tp",   "pp",
                                          "cp",     "vp",        "precision",   "recompute",    "ref_gpus", "steps"};
  return k;
}
void check_sweep_key(const std::string& key);  // Error{config} with "did you mean"
// The key, then its value: precision bf16 | fp8 | fp32, recompute none | selective | full, the others positive
// integers; Error{config} naming key=value otherwise (a typo, not a point to skip).
void check_sweep_value(const std::string& key, const std::string& value);
std::vector<std::string> run_args(const Point& p);  // --set k=v / --precision v / ...

// The last meaningful line of a point's log (the error message of a failed run).
std::string last_line(const std::string& log_tail);
// Runs `<this binary> run <args>` with its output in dir/log.txt.
PointRun run_point(const std::vector<std::string>& args, const std::filesystem::path& dir);

}  // namespace tb::report
