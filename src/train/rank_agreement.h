// train/rank_agreement.h: every rank of a job must train the same configuration (a rank started with other
// arguments would deadlock or silently train something else). Before any GPU work the ranks compare their TrainSpec:
//   fields = every TrainSpec field but the node-local GPU index, as (name, value) text, "name=value\n" per field,
//            plus the binary (its version, git describe and build time), the data file's size, and the caller's
//            own fields (`run`: the recipe's name and its file's FNV-1a hash)
//   rank 0's text is broadcast (a few hundred bytes); each rank whose text differs raises Error{config}: "this rank's
//   configuration differs from rank 0's: layers 4 (rank 0: 8); every rank of the job must run the same command"
//   (the CLI prefixes "rank R of N: " and ends the job with MPI_Abort).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "train/trainer.h"

namespace tb::train {

std::vector<std::pair<std::string, std::string>> spec_fields(const TrainSpec& spec);
// FNV-1a (64-bit) of a file's bytes as 16 hex digits; "" when it cannot be read.
std::string file_hash(const std::string& path);
// Collective over `world` (the job's ranks). Raises on the ranks whose configuration differs from rank 0's.
using Fields = std::vector<std::pair<std::string, std::string>>;
void check_ranks_agree(const TrainSpec& spec, comm::Communicator& world, const Fields& extra = {});

}  // namespace tb::train
