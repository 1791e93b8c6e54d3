// core/record_keys.h: reading measured values from result records, including the keys of records written before
// the units were made one (CHANGELOG, docs/METRICS.md "Older records"). Records now hold times in milliseconds
// under `<name>_ms`; older `run`, `sweep.point` and `scale.point` records held some in seconds under `<name>_s`:
//   ms_value(j, "step") = j["step_ms"], else 1e3 × j["step_s"], else fallback
// and older `train` records held the layout as a string ("dp1 cp1 pp1 tp2 vp1 sp"), now an object (layout_object).
// A `run` record holds its per-GPU figures (tokens_per_s_per_gpu, step_ms, se) under `measured` (a distributed run of
// the recipe's layout) or `extrapolated` (the one-device proxy): run_figures.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tb {

// The value of `<stem>_ms` (a number), else of `<stem>_s` times 1e3, else fallback.
double ms_value(const nlohmann::json& j, std::string_view stem, double fallback = 0);

// A train record's `layout` as an object {dp, cp, pp, tp, vp, sequence_parallel}: the object as it is, or the
// older string form parsed ("dp1 cp1 pp1 tp2 vp1 sp"); an empty object when absent. Error{config} naming `where`
// for a word that is not like tp2.
nlohmann::json layout_object(const nlohmann::json& layout, const std::string& where);

// A run record's figures: its `measured` object, else its `extrapolated` one, else an empty object.
const nlohmann::json& run_figures(const nlohmann::json& run);

}  // namespace tb
