// cli/common.cpp: see common.h.
#include "cli/common.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdio>

#include "bench/sysinfo.h"
#include "comm/nccl.h"
#include "core/error.h"
#include "core/log.h"
#include "core/provenance.h"
#include "core/suggest.h"
#include "ops/cuda/library_versions.h"

namespace tb::cli {

std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    if (const auto* extras = dynamic_cast<const CLI::ExtrasError*>(&e)) {
      (void)extras;
      std::vector<std::string> names;
      for (const auto* o : app.get_options()) {
        for (const auto& l : o->get_lnames()) names.push_back("--" + l);
        for (const auto& s : o->get_snames()) names.push_back("-" + s);
      }
      for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (!a.starts_with("-")) continue;
        a = a.substr(0, a.find('='));
        if (std::find(names.begin(), names.end(), a) == names.end()) {
          msg = fmt::format("unknown option '{}'{}", a, did_you_mean(a, names));
          break;
        }
      }
    }
    std::fprintf(stderr, "%s: %s (see %s --help)\n", app.get_name().c_str(), msg.c_str(), app.get_name().c_str());
    return kUsage;
  }
}

void CommonOptions::add_to(CLI::App& app, bool with_out) {
  app.add_option("-g,--gpus", gpus, "use the first N visible GPUs (default: all)")->check(CLI::PositiveNumber);
  app.add_option("-d,--devices", devices, "CUDA device indices to use, e.g. 0,2 (overrides --gpus)")->delimiter(',');
  app.add_option("--references", references, "references folder (default: the one next to the binary)");
  if (with_out) app.add_option("-o,--out", out, "results folder (default: results/<run id>)");
}

Devices select_devices(std::string_view command, const CommonOptions& opt, int min_gpus) {
  Devices d;
  const int visible = bench::visible_gpu_count();
  if (visible == 0) {
    std::fprintf(stderr, "trainbench %.*s: needs a GPU: %s\n", int(command.size()), command.data(),
                 bench::no_gpu_reason().c_str());
    d.exit = kUsage;
    return d;
  }
  if (!opt.devices.empty()) {
    for (int i : opt.devices)
      if (i < 0 || i >= visible) {
        std::fprintf(stderr, "trainbench %.*s: GPU %d does not exist: %d visible (0..%d)\n", int(command.size()),
                     command.data(), i, visible, visible - 1);
        d.exit = kUsage;
        return d;
      }
    d.list = opt.devices;
  } else {
    const int n = opt.gpus > 0 ? opt.gpus : visible;
    if (n > visible) {
      std::fprintf(stderr, "trainbench %.*s: asked for %d GPUs, %d visible (check CUDA_VISIBLE_DEVICES)\n",
                   int(command.size()), command.data(), n, visible);
      d.exit = kUsage;
      return d;
    }
    for (int i = 0; i < n; ++i) d.list.push_back(i);
  }
  if (int(d.list.size()) < min_gpus) {
    std::fprintf(stderr, "trainbench %.*s: needs %d GPUs, %zu selected\n", int(command.size()), command.data(),
                 min_gpus, d.list.size());
    d.exit = kUsage;
  }
  return d;
}

nlohmann::json library_versions() {
  nlohmann::json v = ops::library_versions();
  v["nccl"] = nccl_version();
  int rt = 0, drv = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) v["cuda_runtime"] = fmt::format("{}.{}", rt / 1000, rt % 1000 / 10);
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) v["cuda_driver"] = fmt::format("{}.{}", drv / 1000, drv % 1000 / 10);
  cudaGetLastError();
  return v;
}

RunOutput open_run(const CommonOptions& opt, int argc, char** argv) {
  RunOutput run;
  run.run_id = make_run_id();
  run.dir = opt.out ? *opt.out : std::filesystem::path("results") / run.run_id;
  nlohmann::json prov = host_provenance(argc, argv, run.run_id);
  prov["system"] = bench::gpu_info();
  prov["versions"] = library_versions();
  write_json_file(run.dir / "run.json", prov);
  run.sink = std::make_unique<JsonlSink>(run.dir / "results.jsonl", run.run_id);
  return run;
}

void print_results_location(const RunOutput& run) {
  std::printf("\nresults: %s (%d records), provenance: %s\n", (run.dir / "results.jsonl").c_str(), run.sink->count(),
              (run.dir / "run.json").c_str());
}

Systems load_systems_for(const CommonOptions& opt, int dev) {
  Systems s;
  s.all = recipe::load_systems(recipe::find_references_dir(opt.references) / "systems");
  cudaDeviceProp prop{};
  TB_CHECK(cudaGetDeviceProperties(&prop, dev));
  s.match = recipe::match_system(s.all, prop.name);
  if (!s.match) log::warn("no references/systems/*.toml matches '{}': no datasheet peaks or expectations", prop.name);
  return s;
}

double peak_tflops_or_warn(const CommonOptions& opt, int dev, std::string_view precision) {
  try {
    const Systems sys = load_systems_for(opt, dev);
    return sys.match ? sys.match->peak_tflops(precision) : 0.0;
  } catch (const Error& e) {
    log::warn("no MFU: {}", e.what());
    return 0.0;
  }
}

}  // namespace tb::cli
