// core/output_path.h: where a command writes, refused before any work when it cannot be right: empty, the root
// folder, a file where a folder is wanted (or the reverse), a place that cannot be written. The messages name the
// flag the user gave.
#pragma once

#include <filesystem>
#include <string_view>

namespace tb {

// A results folder (--out DIR): created if missing; raises Error{config} "<flag> '<dir>': ..." otherwise.
void require_output_dir(const std::filesystem::path& dir, std::string_view flag = "--out");
// An output file (report -o FILE, k8s render -o FILE): not a folder, its folder exists (or can be made) and is
// writable.
void require_output_file(const std::filesystem::path& file, std::string_view flag = "-o");

}  // namespace tb
